//! The services (ingest, config-api, consumer, the front, loadgen) against a real broker,
//! ClickHouse and each other: one test binary, a module per service or concern.

mod config_api;
mod consumer;
mod event_fields;
mod front;
mod imports;
mod ingest;
mod ingest_bounds;
mod ingest_durability;
mod loadgen;
mod pipeline;
mod service_user;
mod slow_clients;
mod slow_dependencies;
mod topics;
