//! Re-publishes dead letters to the events topic, after the cause was fixed, so that the
//! consumer stores them. It reads the dead-letter topic up to its end as of the start,
//! under a consumer group of its own whose committed offsets remember what was replayed:
//! running it twice does not replay a letter twice.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Context;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Message, Offset, TopicPartitionList};

/// Re-publishes the dead letters of the analytics consumer to its events topic.
#[derive(clap::Parser, Clone, Debug)]
#[command(
    version,
    about = "Re-publishes the dead letters of the analytics consumer to its events topic."
)]
pub struct ReplayConfig {
    // Its events topic (`--topic`) is where the dead letters are published again.
    #[command(flatten)]
    pub kafka: kafka_kit::client::KafkaArgs,

    /// Topic the dead letters are read from.
    #[arg(long, env = "KAFKA_DLQ_TOPIC", default_value = kafka_kit::client::DEAD_LETTER_TOPIC)]
    pub dlq_topic: String,

    /// Consumer group remembering what was replayed.
    #[arg(
        long,
        env = "KAFKA_REPLAY_GROUP_ID",
        default_value = "analytics-dlq-replay"
    )]
    pub group_id: String,
}

/// The Kafka `client.id` of the replay's consumer and producer.
const CLIENT_ID: &str = "dlq-replay";

const TIMEOUT: Duration = Duration::from_secs(10);

/// Replays every dead letter not replayed yet; returns how many were replayed.
///
/// A letter is replayed if it was in the topic when the replay started: below the end the
/// broker reported then or, past it, written before the start (a broker may report an end
/// that falls short: Tansu 0.6 answers the first offset of the last record batch). Letters
/// set aside while it runs wait for the next run, so a letter that is still poison cannot
/// go round in circles.
pub async fn replay(config: &ReplayConfig) -> anyhow::Result<u64> {
    let started = contract::event::now_millis();
    let consumer: StreamConsumer = config
        .kafka
        .client_config(CLIENT_ID)
        .set("group.id", &config.group_id)
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .create()
        .context("cannot create Kafka consumer")?;
    let producer: FutureProducer = config
        .kafka
        .producer_config(CLIENT_ID, true, &[])
        .create()
        .context("cannot create Kafka producer")?;

    // Where to start (committed offsets) and the end the broker reports now.
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
    let mut ends = HashMap::new();
    for element in committed.elements() {
        let partition = element.partition();
        let (low, high) = consumer
            .fetch_watermarks(&config.dlq_topic, partition, TIMEOUT)
            .context("cannot read the dead-letter topic's end")?;
        let start = match element.offset() {
            Offset::Offset(o) => o.max(low),
            _ => low,
        };
        assignment.add_partition_offset(&config.dlq_topic, partition, Offset::Offset(start))?;
        ends.insert(partition, high);
    }
    consumer
        .assign(&assignment)
        .context("cannot assign partitions")?;

    // Each partition is read up to its end (the consumer says so) or its first letter
    // written after the start.
    let mut replayed = 0u64;
    while !ends.is_empty() {
        let message = match tokio::time::timeout(TIMEOUT * 3, consumer.recv())
            .await
            .context("the dead-letter topic stopped answering")?
        {
            Ok(message) => message,
            Err(KafkaError::PartitionEOF(partition)) => {
                ends.remove(&partition);
                continue;
            }
            Err(e) => return Err(e).context("cannot read a dead letter"),
        };
        let Some(&end) = ends.get(&message.partition()) else {
            continue;
        };
        let written_before_start =
            matches!(message.timestamp().to_millis(), Some(t) if t <= started);
        if message.offset() >= end && !written_before_start {
            ends.remove(&message.partition());
            continue;
        }
        let mut record =
            FutureRecord::to(&config.kafka.topic).payload(message.payload().unwrap_or_default());
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
    }
    Ok(replayed)
}
