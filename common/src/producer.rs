//! A Kafka producer for batches that must go whole, shared by the ingest (events) and the
//! consumer (dead letters). Two invariants:
//! - a batch is enqueued whole or not at all: it first reserves room for all its messages
//!   in the producer's queue (waiting for room up to a deadline), so a batch that cannot
//!   be taken leaves nothing behind in Kafka;
//! - a producer that cannot send again is replaced: when librdkafka declares a fatal
//!   error, or when the broker refuses its producer id or epoch (fenced, unknown, out of
//!   sequence; seen with Tansu after an outage). Keeping it would fail every send forever.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rdkafka::ClientConfig;
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::OwnedHeaders;
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// librdkafka's default `queue.buffering.max.messages`.
const DEFAULT_QUEUE_MESSAGES: usize = 100_000;

/// One message of a batch.
pub struct Outgoing<'a> {
    pub key: Option<&'a [u8]>,
    pub payload: &'a [u8],
    pub headers: Option<OwnedHeaders>,
}

/// Why a batch was not enqueued.
#[derive(Debug, thiserror::Error)]
pub enum EnqueueError {
    /// The queue had no room for the whole batch before the deadline; nothing was enqueued.
    #[error("the producer queue had no room for {0} messages in time")]
    NoRoom(usize),
    /// librdkafka refused a message (too large, unknown topic, …).
    #[error("the producer refused a message: {0}")]
    Refused(KafkaError),
}

/// The enqueued batch: its deliveries, and its room in the queue, held until they end.
pub struct Enqueued {
    pub deliveries: Vec<DeliveryFuture>,
    pub room: OwnedSemaphorePermit,
}

pub struct BatchProducer {
    current: ArcSwap<FutureProducer>,
    config: ClientConfig,
    room: Arc<Semaphore>,
    capacity: usize,
    /// Counter of replacements, named for the service.
    replacements: &'static str,
}

impl BatchProducer {
    /// The queue's size is the config's `queue.buffering.max.messages`.
    pub fn new(config: ClientConfig, replacements: &'static str) -> KafkaResult<Self> {
        let capacity = config
            .get("queue.buffering.max.messages")
            .and_then(|v| v.parse().ok())
            .unwrap_or(DEFAULT_QUEUE_MESSAGES);
        let producer: FutureProducer = config.create()?;
        Ok(Self {
            current: ArcSwap::from_pointee(producer),
            config,
            room: Arc::new(Semaphore::new(capacity)),
            capacity,
            replacements,
        })
    }

    pub fn get(&self) -> Arc<FutureProducer> {
        self.current.load_full()
    }

    /// Enqueues `messages` on `topic`, whole: room for all of them is reserved first,
    /// waiting up to `within`; librdkafka's own byte bound is waited for the same way.
    pub async fn enqueue_all(
        &self,
        topic: &str,
        messages: Vec<Outgoing<'_>>,
        within: Duration,
    ) -> Result<Enqueued, EnqueueError> {
        let deadline = Instant::now() + within;
        let n = messages.len();
        let wanted = u32::try_from(n).ok().filter(|_| n <= self.capacity);
        let room = match wanted {
            Some(wanted) => {
                tokio::time::timeout_at(deadline, self.room.clone().acquire_many_owned(wanted))
                    .await
                    .ok()
                    .and_then(Result::ok)
            }
            None => None,
        }
        .ok_or(EnqueueError::NoRoom(n))?;
        let producer = self.get();
        let mut deliveries = Vec::with_capacity(n);
        for message in messages {
            let mut record = FutureRecord::to(topic).payload(message.payload);
            if let Some(key) = message.key {
                record = record.key(key);
            }
            if let Some(headers) = message.headers {
                record = record.headers(headers);
            }
            loop {
                match producer.send_result(record) {
                    Ok(delivery) => break deliveries.push(delivery),
                    // Room in messages was reserved; the queue's bytes may still be full.
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back))
                        if Instant::now() < deadline =>
                    {
                        record = back;
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    Err((e, _)) => {
                        self.replace_if_broken(Some(&e));
                        return Err(EnqueueError::Refused(e));
                    }
                }
            }
        }
        Ok(Enqueued { deliveries, room })
    }

    /// Creates a new producer if the current one has a fatal error or `error` says the
    /// broker refuses its identity. Messages of the old one fail, so their senders retry.
    pub fn replace_if_broken(&self, error: Option<&KafkaError>) {
        let current = self.current.load();
        let reason = match (current.client().fatal_error(), error) {
            (Some((code, reason)), _) => format!("fatal error {code}: {reason}"),
            (None, Some(e)) if refuses_identity(e) => e.to_string(),
            _ => return,
        };
        match self.config.create::<FutureProducer>() {
            Ok(fresh) => {
                // Only one caller replaces a given failed producer.
                let previous = self.current.compare_and_swap(&*current, Arc::new(fresh));
                if Arc::ptr_eq(&previous, &*current) {
                    tracing::error!(%reason, "Kafka producer cannot send again; replaced it.");
                    metrics::counter!(self.replacements).increment(1);
                }
            }
            Err(e) => tracing::error!(error = %e, "Cannot create a new Kafka producer."),
        }
    }
}

fn refuses_identity(error: &KafkaError) -> bool {
    matches!(
        error.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::ProducerFenced
                | RDKafkaErrorCode::InvalidProducerEpoch
                | RDKafkaErrorCode::UnknownProducerId
                | RDKafkaErrorCode::InvalidProducerIdMapping
                | RDKafkaErrorCode::OutOfOrderSequenceNumber
        )
    )
}
