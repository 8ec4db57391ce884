//! The SDK and the demo in a real Chromium. One test binary: they take turns with the
//! browser (`.config/nextest.toml`).

mod demo;
mod sdk;
#[path = "../stats/mod.rs"]
mod stats;
