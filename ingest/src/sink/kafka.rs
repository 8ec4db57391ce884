//! The production sink: each batch enqueued whole on the events topic through a
//! [`BatchProducer`], then waited for until Kafka acknowledged every message of it; the
//! watch of the broker and the topic behind readiness (which also creates the topic, at
//! start and whenever it disappears, unless topic creation is off); the flush at shutdown.
//! Only end-to-end tests reach it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use http_kit::ops::Dependency;
use kafka_kit::client::KafkaArgs;
use kafka_kit::producer::{BatchProducer, EnqueueError, Enqueued, Outgoing};
use rdkafka::ClientConfig;
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::metadata::Metadata;
use rdkafka::producer::Producer;

use super::{EventSink, Message, Publishing, SinkError};

/// The ingest's Kafka `client.id`.
pub(crate) const CLIENT_ID: &str = kafka_kit::client::INGEST_CLIENT_ID;

pub struct KafkaSink {
    producer: BatchProducer,
    topic: String,
    /// How long a batch may wait for room in the producer, and for its acknowledgements.
    delivery_timeout: Duration,
    /// The broker's last metadata said the topic does not exist (or has no partition):
    /// what a failed batch is then answered with.
    topic_missing: AtomicBool,
}

/// What the watch found of the broker and the topic.
#[derive(Debug, PartialEq, Eq)]
enum TopicState {
    Present,
    /// The broker answered, without the topic or with no partition of it.
    Missing,
    Unreachable,
}

impl TopicState {
    fn of(metadata: Option<&Metadata>, topic: &str) -> Self {
        let Some(metadata) = metadata else {
            return Self::Unreachable;
        };
        let present = metadata
            .topics()
            .iter()
            .any(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty());
        if present {
            Self::Present
        } else {
            Self::Missing
        }
    }
}

impl KafkaSink {
    pub fn new(
        config: ClientConfig,
        topic: String,
        delivery_timeout: Duration,
    ) -> KafkaResult<Self> {
        Ok(Self {
            producer: BatchProducer::new(config, "ingest_producer_replacements_total")?,
            topic,
            delivery_timeout,
            topic_missing: AtomicBool::new(false),
        })
    }

    /// Every two seconds: is the broker reachable and does it have the topic (readiness,
    /// with the cause), and how many messages wait in the producer (a gauge). With topic
    /// creation on, the topic is ensured at the first answer of the broker (an existing one
    /// is only checked) and created again whenever it is missing. Nothing here holds up the
    /// start: the service listens while the broker is down.
    pub async fn watch_broker(self: Arc<Self>, kafka: KafkaArgs, broker: Dependency) {
        let mut ticker = tokio::time::interval(Duration::from_secs(2));
        let mut ensured = !kafka.create_topics;
        loop {
            ticker.tick().await;
            self.producer.replace_if_broken(None);
            let probe = self.producer.get();
            metrics::gauge!("ingest_producer_queue_depth").set(f64::from(probe.in_flight_count()));
            let topic = self.topic.clone();
            let state = tokio::task::spawn_blocking(move || {
                let metadata = probe
                    .client()
                    .fetch_metadata(Some(&topic), Duration::from_secs(2));
                TopicState::of(metadata.as_ref().ok(), &topic)
            })
            .await
            .unwrap_or(TopicState::Unreachable);
            self.topic_missing
                .store(state == TopicState::Missing, Ordering::Relaxed);
            match state {
                TopicState::Present => broker.pass(),
                TopicState::Unreachable => {
                    tracing::warn!(brokers = %kafka.kafka_brokers, "Kafka is not reachable; /readyz answers 503.");
                    broker.fail(&format!(
                        "Kafka is not reachable at {}.",
                        kafka.kafka_brokers
                    ));
                }
                TopicState::Missing => {
                    let cause = if kafka.create_topics {
                        format!("Kafka has no topic {}; the ingest creates it.", self.topic)
                    } else {
                        format!(
                            "Kafka has no topic {}, and topic creation is off \
                             (KAFKA_CREATE_TOPICS=false): create it.",
                            self.topic
                        )
                    };
                    tracing::warn!(topic = %self.topic, "{cause}");
                    broker.fail(&cause);
                    ensured = !kafka.create_topics;
                }
            }
            if !ensured && state != TopicState::Unreachable {
                let topics = [self.topic.as_str()];
                let ensuring = kafka.ensure_topics(CLIENT_ID, &topics);
                match tokio::time::timeout(Duration::from_secs(15), ensuring).await {
                    Ok(Ok(_)) => ensured = true,
                    Ok(Err(e)) => {
                        tracing::warn!(error = %format!("{e:#}"), topic = %self.topic, "Topic not created.");
                    }
                    Err(_) => tracing::warn!(topic = %self.topic, "Topic creation timed out."),
                }
            }
        }
    }

    /// Why a batch failed: the missing topic when Kafka says so, or when the watch last
    /// found it missing, else `otherwise`.
    fn cause(&self, error: Option<&KafkaError>, otherwise: SinkError) -> SinkError {
        let unknown_topic = matches!(
            error.and_then(KafkaError::rdkafka_error_code),
            Some(RDKafkaErrorCode::UnknownTopic | RDKafkaErrorCode::UnknownTopicOrPartition)
        );
        if unknown_topic || self.topic_missing.load(Ordering::Relaxed) {
            SinkError::TopicMissing
        } else {
            otherwise
        }
    }

    /// Waits, up to the delivery timeout, for what the producer still holds to be sent.
    pub async fn flush(&self) -> anyhow::Result<()> {
        let producer = self.producer.get();
        let timeout = self.delivery_timeout;
        tokio::task::spawn_blocking(move || producer.flush(timeout))
            .await
            .context("flush task failed")?
            .context("producer flush did not complete")
    }

    /// Enqueues the batch whole (or nothing of it), then waits for all acknowledgements
    /// within the delivery timeout.
    async fn publish_batch(&self, messages: &[Message<'_>]) -> Result<(), SinkError> {
        let started = Instant::now();
        let outgoing = messages.iter().map(outgoing);
        // The events keep their room in the producer's queue (`_queue_permit`) until
        // their delivery reports came.
        let Enqueued {
            delivered,
            room: _queue_permit,
        } = self
            .producer
            .enqueue_all(&self.topic, outgoing, self.delivery_timeout)
            .await
            .map_err(|e| {
                tracing::warn!(error = %e, "Events not enqueued.");
                metrics::counter!("ingest_delivery_errors_total", "reason" => "enqueue")
                    .increment(1);
                let error = match &e {
                    EnqueueError::Refused(error) => Some(error),
                    EnqueueError::NoRoom(_) => None,
                };
                self.cause(error, SinkError::QueueFull)
            })?;
        // librdkafka times messages out after message.timeout.ms; this bound is a backstop.
        let result =
            tokio::time::timeout(self.delivery_timeout + Duration::from_secs(1), delivered)
                .await
                .map_err(|_| {
                    metrics::counter!("ingest_delivery_errors_total", "reason" => "timeout")
                        .increment(1);
                    self.cause(None, SinkError::TimedOut)
                })?;
        metrics::histogram!("ingest_delivery_seconds").record(started.elapsed().as_secs_f64());
        match result {
            Ok(()) => Ok(()),
            Err(KafkaError::Canceled) => Err(SinkError::ShuttingDown),
            Err(e) => {
                tracing::warn!(error = %e, "Delivery failed.");
                self.producer.replace_if_broken(Some(&e));
                metrics::counter!("ingest_delivery_errors_total", "reason" => "delivery")
                    .increment(1);
                Err(self.cause(Some(&e), SinkError::Failed))
            }
        }
    }
}

impl EventSink for KafkaSink {
    fn publish<'a>(&'a self, messages: &'a [Message<'a>]) -> Publishing<'a> {
        Box::pin(self.publish_batch(messages))
    }
}

/// A message as the producer takes it. A function, not a closure: with a closure the
/// compiler fails to prove the publishing future `Send` ("implementation of `FnOnce` is
/// not general enough").
fn outgoing<'m>(message: &Message<'m>) -> Outgoing<'m> {
    Outgoing {
        key: Some(message.key),
        payload: message.payload,
        headers: None,
    }
}
