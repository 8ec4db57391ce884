//! The production sink: each batch enqueued whole on the events topic through a
//! [`BatchProducer`], then waited for until Kafka acknowledged every message of it; the
//! broker watch behind readiness; the flush at shutdown. Only end-to-end tests reach it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use http_kit::ops::Dependency;
use kafka_kit::producer::{BatchProducer, Enqueued, Outgoing};
use rdkafka::ClientConfig;
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::producer::Producer;

use super::{EventSink, Message, Publishing, SinkError};

/// The ingest's Kafka `client.id`.
pub(crate) const CLIENT_ID: &str = kafka_kit::client::INGEST_CLIENT_ID;

pub struct KafkaSink {
    producer: BatchProducer,
    topic: String,
    /// How long a batch may wait for room in the producer, and for its acknowledgements.
    delivery_timeout: Duration,
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
        })
    }

    /// Every few seconds: is the broker reachable (readiness), and how many messages wait
    /// in the producer (a gauge).
    pub async fn watch_broker(self: Arc<Self>, broker: Dependency) {
        let mut ticker = tokio::time::interval(Duration::from_secs(2));
        loop {
            ticker.tick().await;
            self.producer.replace_if_broken(None);
            let probe = self.producer.get();
            metrics::gauge!("ingest_producer_queue_depth").set(f64::from(probe.in_flight_count()));
            let sink = self.clone();
            let reachable = tokio::task::spawn_blocking(move || {
                probe
                    .client()
                    .fetch_metadata(Some(&sink.topic), Duration::from_secs(2))
                    .is_ok()
            })
            .await
            .unwrap_or(false);
            if !reachable {
                tracing::warn!("Kafka is not reachable; /readyz answers 503.");
            }
            broker.set_ok(reachable);
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
                SinkError::QueueFull
            })?;
        // librdkafka times messages out after message.timeout.ms; this bound is a backstop.
        let result =
            tokio::time::timeout(self.delivery_timeout + Duration::from_secs(1), delivered)
                .await
                .map_err(|_| {
                    metrics::counter!("ingest_delivery_errors_total", "reason" => "timeout")
                        .increment(1);
                    SinkError::TimedOut
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
                Err(SinkError::Failed)
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
