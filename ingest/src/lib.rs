//! The analytics ingest: `POST /api/v1/analytics` validates a batch of events and answers
//! 202 only once Kafka has acknowledged every accepted event.

mod app;
mod batch;
mod body;
mod budget;
mod config;
pub mod error;
mod limits;
mod routes;
pub mod sink;
mod state;

#[cfg(test)]
mod router_tests;

pub use app::Application;
pub use config::Config;
