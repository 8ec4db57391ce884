//! What the three services share: the analytics event contract and its Kafka message
//! format, the experiments snapshot (model, validation, live gate, hot reload), the JSON
//! error shape, the operational routes, CORS, Kafka topic helpers and telemetry set-up.

pub mod backoff;
pub mod cors;
pub mod error;
pub mod event;
pub mod kafka;
pub mod key;
pub mod ops;
pub mod producer;
pub mod reload;
pub mod serve;
pub mod snapshot;
pub mod telemetry;
