//! The results: the views against independent implementations and simulations, the
//! metrics, the refresh, the plans and the definitions, on a real ClickHouse. One test
//! binary, a module per concern.

mod definitions;
mod metric_refresh;
mod metrics;
mod plan;
mod simulation;
mod statistics;
#[path = "../stats/mod.rs"]
mod stats;
mod views;
