//! The config-api: `GET /api/v1/experiments` answers from responses prepared when the
//! snapshot is loaded, so serving is a lookup, a live-gate check and a byte copy.

mod app;
mod config;
pub mod error;
mod prepared;
mod routes;
mod state;

pub use app::Application;
pub use config::Config;
