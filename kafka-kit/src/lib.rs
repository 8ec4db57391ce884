//! The Kafka side shared by the ingest, the consumer, the tools and the tests: the topics,
//! the client settings and their flags, the batch producer, and the events' producer
//! settings (the ingest's, which the benchmark's reference producer reuses).

pub mod client;
pub mod producer;
