//! What the three services share: the analytics event contract and its Kafka message
//! format, the experiments snapshot (model, validation, live gate, hot reload), the JSON
//! error shape, Kafka topic helpers and telemetry set-up.

pub mod backoff;
pub mod error;
pub mod event;
pub mod http;
pub mod kafka;
pub mod key;
pub mod producer;
pub mod reload;
pub mod serve;
pub mod snapshot;
pub mod telemetry;
