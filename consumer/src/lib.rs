//! The consumer: reads analytics events from Kafka and inserts them into ClickHouse in
//! large batches, committing Kafka offsets only after ClickHouse acknowledged every row
//! they cover.

mod app;
mod config;
pub mod definitions;
mod liveness;
mod replay;
pub mod results;
pub mod schema;
mod sink;
pub mod topology;

pub use app::{Application, FETCH_WAIT_MAX_MS, Stats};
pub use config::{ClickHouseArgs, Config};
pub use replay::{ReplayConfig, replay};
pub use sink::EventRow;
