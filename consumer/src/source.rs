//! The Kafka side of the consumer: its librdkafka settings, the client that reads the
//! events topic in the group, the probe that looks at the group, and the client context
//! that reports lag and membership from librdkafka's statistics. Offsets are never
//! committed automatically: only the worker commits, once a batch is stored.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use kafka_kit::client::FETCH_WAIT_MAX_MS;
use rdkafka::consumer::{Consumer, ConsumerContext, StreamConsumer};
use rdkafka::{ClientConfig, ClientContext, Statistics};

use crate::config::{CLIENT_ID, Config};
use crate::liveness::{GroupProbe, Membership};

/// librdkafka's `fetch.queue.backoff.ms`: how long the client waits before fetching again
/// once its queue of prefetched messages is full. Its default of 1 s stalled a backlog's
/// drain: while a batch is inserted the queue fills, and the next batch, read from it in a
/// fraction of a second, then waited the rest of that second for messages (docs/benchmarks.md).
const FETCH_QUEUE_BACKOFF_MS: &str = "10";

/// How often a consumer looks at its share of the group, and librdkafka reports its
/// statistics: every 5 s, or a quarter of the session timeout when that is shorter.
pub(crate) fn look_every(session_timeout: Duration) -> Duration {
    Duration::from_secs(5).min(session_timeout / 4)
}

/// The consumer's client context: publishes the partitions' lag and records whether the
/// client has settled in its group, from librdkafka's statistics.
pub(crate) struct StatsContext(Arc<Membership>);

impl ClientContext for StatsContext {
    fn stats(&self, statistics: Statistics) {
        if let Some(group) = &statistics.cgrp {
            self.0.record(group);
        }
        for (topic, t) in statistics.topics {
            for (partition, p) in t.partitions {
                if partition >= 0 {
                    metrics::gauge!("consumer_lag_messages", "topic" => topic.clone(),
                        "partition" => partition.to_string())
                    .set(owned_lag(&p.fetch_state, p.consumer_lag));
                }
            }
        }
    }
}

impl ConsumerContext for StatsContext {}

/// A partition's lag as this consumer reports it: 0 for one it does not fetch (revoked at
/// a rebalance, or not yet known), so that the sum over the group counts each partition
/// at its owner only.
fn owned_lag(fetch_state: &str, consumer_lag: i64) -> f64 {
    match fetch_state {
        "none" | "stopping" | "stopped" => 0.0,
        _ => consumer_lag.max(0) as f64,
    }
}

/// The consumer's librdkafka settings: ours, then `KAFKA_PROPERTIES`, then what the
/// commit-after-insert design and the liveness check need.
fn consumer_config(config: &Config) -> ClientConfig {
    let mut kafka = config.kafka.client_config(CLIENT_ID);
    kafka
        .set("fetch.wait.max.ms", FETCH_WAIT_MAX_MS)
        .set("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS)
        .set(
            "session.timeout.ms",
            config.kafka_session_timeout_ms.to_string(),
        )
        .set(
            "max.poll.interval.ms",
            config.kafka_max_poll_interval_ms.to_string(),
        );
    config.kafka.apply_properties(&mut kafka);
    kafka
        .set(
            "statistics.interval.ms",
            look_every(Duration::from_millis(config.kafka_session_timeout_ms))
                .as_millis()
                .to_string(),
        )
        .set("group.id", &config.group_id)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "false");
    kafka
}

/// The consumer's place in its group: the client subscribed to the events topic, what it
/// needs to be made again, and the probe that looks at the group from outside.
pub(crate) struct Source {
    pub consumer: StreamConsumer<StatsContext>,
    pub membership: Arc<Membership>,
    pub probe: Arc<GroupProbe>,
    /// The consumer's settings, to create it again when the group stalls.
    kafka: ClientConfig,
    topic: String,
}

impl Source {
    /// Creates the consumer, subscribed to the events topic, and the group's probe.
    pub(crate) fn join(config: &Config) -> anyhow::Result<Self> {
        let kafka = consumer_config(config);
        let membership = Arc::new(Membership::default());
        let consumer = client(&kafka, &membership)?;
        consumer
            .subscribe(&[&config.kafka.topic])
            .with_context(|| format!("cannot subscribe to {}", config.kafka.topic))?;
        // The probe is never polled for messages: it must not produce statistics.
        let probe = GroupProbe::new(
            kafka
                .clone()
                .set("statistics.interval.ms", "0")
                .create()
                .context("cannot create Kafka group probe")?,
            &config.group_id,
            &config.kafka.topic,
        );
        Ok(Self {
            consumer,
            membership,
            probe: Arc::new(probe),
            kafka,
            topic: config.kafka.topic.clone(),
        })
    }

    /// Leaves the group with a clean close and joins it again with a new client.
    pub(crate) async fn rejoin(&mut self) -> anyhow::Result<()> {
        let fresh = client(&self.kafka, &self.membership)?;
        let old = std::mem::replace(&mut self.consumer, fresh);
        // Closing waits for librdkafka to leave the group: off the async threads, and
        // before the new member joins, so that the group sees one member at a time.
        let _ = tokio::task::spawn_blocking(move || drop(old)).await;
        // After the close, which may still report the old client's statistics.
        self.membership.forget();
        self.consumer
            .subscribe(&[&self.topic])
            .with_context(|| format!("cannot subscribe to {}", self.topic))
    }
}

/// A consumer client that reports to `membership`, not subscribed yet.
fn client(
    kafka: &ClientConfig,
    membership: &Arc<Membership>,
) -> anyhow::Result<StreamConsumer<StatsContext>> {
    kafka
        .create_with_context(StatsContext(membership.clone()))
        .context("cannot create Kafka consumer")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// After a rebalance the former owner reports 0 for the partitions it gave up (their
    /// lag is the new owner's), and no owner a negative lag.
    #[test]
    fn a_partition_not_fetched_reports_no_lag() {
        assert_eq!(owned_lag("active", 1200), 1200.0);
        assert_eq!(owned_lag("offset-query", 7), 7.0);
        for gone in ["none", "stopping", "stopped"] {
            assert_eq!(owned_lag(gone, 1200), 0.0, "{gone}");
        }
        assert_eq!(owned_lag("active", -1), 0.0);
    }

    #[test]
    fn the_fetch_backoff_is_short_and_the_operator_may_change_it() {
        let kafka = |args: &[&str]| {
            let args = ["consumer"].iter().chain(args);
            consumer_config(&Config::parse_from(args))
        };
        let ours = kafka(&[]);
        assert_eq!(ours.get("fetch.queue.backoff.ms"), Some("10"));
        assert_eq!(ours.get("fetch.wait.max.ms"), Some(FETCH_WAIT_MAX_MS));
        let theirs = kafka(&["--kafka-properties=fetch.queue.backoff.ms=500;group.id=other"]);
        assert_eq!(theirs.get("fetch.queue.backoff.ms"), Some("500"));
        // What the design needs stays over the operator's word.
        assert_eq!(theirs.get("group.id"), ours.get("group.id"));
        assert_eq!(theirs.get("enable.auto.commit"), Some("false"));
    }
}
