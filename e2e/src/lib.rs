//! The test kit: where the test broker and ClickHouse are, unique names so tests never
//! share a topic, group or database, and the three services started through the same
//! `Application::build` path as production, on port 0.
//!
//! This file only lists the rooms and re-exports what they hold, so that every test
//! names a helper as `e2e::name` whichever room it lives in:
//!
//! - `fixtures`: test data (snapshots, client batches, event messages) and unique names;
//! - `wait`: waiting for a condition with a deadline (`eventually`, `until_ready`);
//! - `services`: the ingest, config-api and consumer in this process, and their settings;
//! - `kafka`, `clickhouse`: the shared test broker and ClickHouse from a test's side;
//! - one room per process a test runs itself: `process` (children, signals, ports),
//!   `private_broker`, `delay_proxy`, `private_clickhouse`, `front` (nginx).

mod clickhouse;
mod delay_proxy;
mod fixtures;
mod front;
mod kafka;
mod private_broker;
mod private_clickhouse;
mod process;
mod raw;
mod services;
mod steps;
mod wait;

// `self::`: the room, not the `clickhouse` crate of the same name.
pub use self::clickhouse::{
    clickhouse, clickhouse_at, clickhouse_url, drop_database, wait_for_events,
};
pub use delay_proxy::DelayProxy;
pub use fixtures::{
    ConsumerNames, SnapshotFile, client_batch, event_message, one_experiment_snapshot, unique,
};
pub use front::{Front, container_server, render_front};
pub use kafka::{
    event_ids, kafka_brokers, produce, produce_all, produce_events_to, read_topic, read_topic_at,
};
pub use private_broker::PrivateBroker;
pub use private_clickhouse::PrivateClickHouse;
pub use process::{
    ChildProcess, Paused, ScriptedClickHouse, compose_cluster_config, free_port, repo, resume,
    send_signal, workspace_binary,
};
pub use raw::{RawAnswer, raw_exchange};
pub use services::{
    Running, STOP_TIMEOUT, consumer_config, ingest_config, metric, metrics_text, start_config_api,
    start_config_api_with, start_consumer, start_consumer_counted, start_ingest,
    start_ingest_unready,
};
pub use steps::Steps;
pub use wait::{eventually, until_ready};
