//! The contract between the SDK, the services and the tables: the analytics event (its
//! client form, validation and Kafka message, format v1), the experiments snapshot (model,
//! validation, live gate, metric definitions) and the public key. Data and rules only: no
//! I/O, no runtime, so every crate may depend on it and none pays for what it does not use.

pub mod event;
pub mod key;
pub mod metric;
pub mod snapshot;
