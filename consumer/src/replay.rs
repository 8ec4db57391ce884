//! Re-publishes dead letters to the events topic, after the cause was fixed, so that the
//! consumer stores them. It reads the dead-letter topic up to its end as of the start,
//! under a consumer group of its own whose committed offsets remember what was replayed:
//! running it twice does not replay a letter twice.

use std::time::Duration;

use anyhow::Context;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Message, Offset, TopicPartitionList};

/// Re-publishes the dead letters of the analytics consumer to its events topic.
#[derive(clap::Parser, Clone, Debug)]
#[command(version, about)]
pub struct ReplayConfig {
    /// Kafka bootstrap servers, comma-separated.
    #[arg(long, env = "KAFKA_BROKERS", default_value = "127.0.0.1:9092")]
    pub kafka_brokers: String,

    /// Topic the dead letters are read from.
    #[arg(long, env = "KAFKA_DLQ_TOPIC", default_value = common::kafka::DEAD_LETTER_TOPIC)]
    pub dlq_topic: String,

    /// Topic they are published to again.
    #[arg(long, env = "KAFKA_TOPIC", default_value = common::kafka::EVENTS_TOPIC)]
    pub topic: String,

    /// Consumer group remembering what was replayed.
    #[arg(
        long,
        env = "KAFKA_REPLAY_GROUP_ID",
        default_value = "analytics-dlq-replay"
    )]
    pub group_id: String,
}

const TIMEOUT: Duration = Duration::from_secs(10);

/// Replays every dead letter not replayed yet; returns how many were replayed.
pub async fn replay(config: &ReplayConfig) -> anyhow::Result<u64> {
    let consumer: StreamConsumer = common::kafka::client_config(&config.kafka_brokers)
        .set("group.id", &config.group_id)
        .set("enable.auto.commit", "false")
        .create()
        .context("cannot create Kafka consumer")?;
    let producer: FutureProducer = common::kafka::client_config(&config.kafka_brokers)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .create()
        .context("cannot create Kafka producer")?;

    // Where to start (committed offsets) and where to stop (the end, as of now).
    let metadata = consumer
        .fetch_metadata(Some(&config.dlq_topic), TIMEOUT)
        .context("cannot read the dead-letter topic's metadata")?;
    let mut wanted = TopicPartitionList::new();
    for topic in metadata.topics() {
        for p in topic.partitions() {
            wanted.add_partition(&config.dlq_topic, p.id());
        }
    }
    let committed = consumer
        .committed_offsets(wanted, TIMEOUT)
        .context("cannot read the replay group's offsets")?;
    let mut assignment = TopicPartitionList::new();
    let mut remaining = 0usize;
    let mut ends = std::collections::HashMap::new();
    for element in committed.elements() {
        let partition = element.partition();
        let (low, high) = consumer
            .fetch_watermarks(&config.dlq_topic, partition, TIMEOUT)
            .context("cannot read the dead-letter topic's end")?;
        let start = match element.offset() {
            Offset::Offset(o) => o.max(low),
            _ => low,
        };
        if start < high {
            assignment.add_partition_offset(&config.dlq_topic, partition, Offset::Offset(start))?;
            ends.insert(partition, high);
            remaining += 1;
        }
    }
    if remaining == 0 {
        return Ok(0);
    }
    consumer
        .assign(&assignment)
        .context("cannot assign partitions")?;

    let mut replayed = 0u64;
    while remaining > 0 {
        let message = tokio::time::timeout(TIMEOUT * 3, consumer.recv())
            .await
            .context("the dead-letter topic stopped answering")?
            .context("cannot read a dead letter")?;
        let end = ends.get(&message.partition()).copied().unwrap_or(0);
        if message.offset() >= end {
            continue;
        }
        let mut record =
            FutureRecord::to(&config.topic).payload(message.payload().unwrap_or_default());
        if let Some(key) = message.key() {
            record = record.key(key);
        }
        producer
            .send(record, TIMEOUT)
            .await
            .map_err(|(e, _)| e)
            .context("cannot publish a dead letter again")?;
        let mut offsets = TopicPartitionList::new();
        offsets.add_partition_offset(
            message.topic(),
            message.partition(),
            Offset::Offset(message.offset() + 1),
        )?;
        consumer
            .commit(&offsets, CommitMode::Sync)
            .context("cannot record the replay")?;
        replayed += 1;
        if message.offset() + 1 >= end {
            remaining -= 1;
        }
    }
    Ok(replayed)
}
