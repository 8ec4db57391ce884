//! The consumer: reads analytics events from Kafka and inserts them into ClickHouse in
//! large batches, committing Kafka offsets only after ClickHouse acknowledged every row
//! they cover.

mod app;
mod backoff;
mod batch;
mod config;
mod dead_letters;
pub mod definitions;
mod liveness;
pub mod retention;
mod row;
pub mod schema;
mod shutdown;
mod sink;
mod source;
mod stats;
mod store;
pub mod topology;
mod worker;

pub use app::Application;
pub use config::{ClickHouseArgs, Config};
pub use row::EventRow;
pub use source::FETCH_WAIT_MAX_MS;
pub use stats::Stats;
