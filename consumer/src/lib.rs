//! The consumer: reads analytics events from Kafka and inserts them into ClickHouse in
//! large batches, committing Kafka offsets only after ClickHouse acknowledged every row
//! they cover.

mod app;
mod batch;
mod config;
mod dead_letters;
pub mod definitions;
mod liveness;
pub mod refresh;
pub mod retention;
mod shutdown;
mod sink;
mod source;
mod stats;
mod store;
mod worker;

pub use app::Application;
pub use config::Config;
pub use stats::Stats;
