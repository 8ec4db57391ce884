//! Dead letters: the messages that cannot be stored, published to the dead-letter topic
//! with their original key and payload and headers that say where they came from and why.
//! A batch's dead letters are all acknowledged by the broker before its offsets may be
//! committed: a letter is retried until it is, or until shutdown.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use kafka_kit::producer::{BatchProducer, Enqueued, Outgoing};
use rdkafka::message::{Header, OwnedHeaders};
use tokio::sync::watch;

use crate::batch::Letter;
use crate::config::{CLIENT_ID, Config};
use crate::shutdown::stopped;
use crate::stats::Stats;

/// How long a batch's dead letters may wait for room in the producer, and for the
/// broker's acknowledgement, before they are retried.
const DEAD_LETTER_TIMEOUT: Duration = Duration::from_secs(30);

/// The dead-letter topic and its producer.
pub(crate) struct DeadLetters {
    producer: BatchProducer,
    topic: String,
    stats: Arc<Stats>,
}

impl DeadLetters {
    /// An idempotent producer to `KAFKA_DLQ_TOPIC` that waits for every replica.
    pub(crate) fn new(config: &Config, stats: Arc<Stats>) -> anyhow::Result<Self> {
        let dlq = config.kafka.producer_config(
            CLIENT_ID,
            true,
            &[(
                "message.timeout.ms",
                DEAD_LETTER_TIMEOUT.as_millis().to_string(),
            )],
        );
        let producer = BatchProducer::new(dlq, "consumer_dlq_producer_replacements_total")
            .context("cannot create dead-letter producer")?;
        Ok(Self {
            producer,
            topic: config.dlq_topic.clone(),
            stats,
        })
    }

    /// Publishes the batch's dead letters, each a batch of its own so that one that
    /// failed is sent again alone, retrying until all are acknowledged. Returns `false` if
    /// shutdown came first.
    pub(crate) async fn publish(
        &self,
        letters: &[(Letter<'_>, String)],
        stop: &mut watch::Receiver<bool>,
    ) -> bool {
        let mut pending: Vec<&(Letter<'_>, String)> = letters.iter().collect();
        let mut backoff = clickhouse_kit::backoff::Backoff::standard();
        while !pending.is_empty() {
            let mut failed = Vec::new();
            let mut sent = Vec::with_capacity(pending.len());
            for item in pending {
                let (letter, reason) = item;
                // A full queue stays full for the rest of this round.
                if !failed.is_empty() {
                    failed.push(item);
                    continue;
                }
                let outgoing = vec![Outgoing {
                    key: letter.key,
                    payload: letter.payload,
                    headers: Some(dead_letter_headers(letter, reason)),
                }];
                match self
                    .producer
                    .enqueue_all(&self.topic, outgoing, DEAD_LETTER_TIMEOUT)
                    .await
                {
                    Ok(enqueued) => sent.push((item, enqueued)),
                    Err(e) => {
                        tracing::warn!(error = %e, "Dead letter not enqueued; retrying.");
                        failed.push(item);
                    }
                }
            }
            // Each letter keeps its room in the producer's queue (`queue_permit`) until
            // its delivery report came.
            for (
                item,
                Enqueued {
                    delivered,
                    room: _queue_permit,
                },
            ) in sent
            {
                let (letter, reason) = item;
                match delivered.await {
                    Ok(()) => {
                        metrics::counter!("consumer_dead_letters_total").increment(1);
                        self.stats.dead_letters.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(%reason, topic = %letter.topic,
                            partition = letter.partition, offset = letter.offset,
                            "Message set aside in the dead-letter topic.");
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "Dead-letter publish failed; retrying.");
                        self.producer.replace_if_broken(Some(&e));
                        failed.push(item);
                    }
                }
            }
            pending = failed;
            if pending.is_empty() {
                break;
            }
            tokio::select! {
                () = tokio::time::sleep(backoff.next_wait()) => {}
                () = stopped(stop) => return false,
            }
        }
        true
    }
}

/// The headers of a dead letter: why it was set aside, and the topic, partition and
/// offset it was read from.
pub(crate) const REASON_HEADER: &str = "dlq.reason";
pub(crate) const SOURCE_TOPIC_HEADER: &str = "dlq.source.topic";
pub(crate) const SOURCE_PARTITION_HEADER: &str = "dlq.source.partition";
pub(crate) const SOURCE_OFFSET_HEADER: &str = "dlq.source.offset";

/// Where a dead letter came from and why it was set aside.
fn dead_letter_headers(letter: &Letter<'_>, reason: &str) -> OwnedHeaders {
    let partition = letter.partition.to_string();
    let offset = letter.offset.to_string();
    OwnedHeaders::new()
        .insert(Header {
            key: REASON_HEADER,
            value: Some(reason),
        })
        .insert(Header {
            key: SOURCE_TOPIC_HEADER,
            value: Some(letter.topic),
        })
        .insert(Header {
            key: SOURCE_PARTITION_HEADER,
            value: Some(partition.as_str()),
        })
        .insert(Header {
            key: SOURCE_OFFSET_HEADER,
            value: Some(offset.as_str()),
        })
}
