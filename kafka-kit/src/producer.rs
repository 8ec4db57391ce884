//! A Kafka producer for batches that must go whole, shared by the ingest (events) and the
//! consumer (dead letters). Three invariants:
//! - a batch is enqueued whole or not at all: it first reserves room for all its messages
//!   in the producer's queue (waiting for room up to a deadline), so a batch that cannot
//!   be taken leaves nothing behind in Kafka;
//! - a batch is acknowledged once, when the last of its messages' delivery reports comes:
//!   its messages share one counter (no channel and no allocation per message);
//! - a producer that cannot send again is replaced: when librdkafka declares a fatal
//!   error, or when the broker refuses its producer id or epoch (fenced, unknown, out of
//!   sequence; seen with Tansu after an outage). Keeping it would fail every send forever.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use arc_swap::ArcSwap;
use rdkafka::ClientConfig;
use rdkafka::client::ClientContext;
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::OwnedHeaders;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};
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

/// The enqueued batch: its acknowledgement, and its room in the queue, held until it ends.
pub struct Enqueued {
    pub delivered: Delivered,
    pub room: OwnedSemaphorePermit,
}

/// Resolves when every message of a batch has its delivery report: `Ok` when all were
/// delivered, else the first failure.
pub struct Delivered(oneshot::Receiver<KafkaResult<()>>);

impl Future for Delivered {
    type Output = KafkaResult<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // The sender goes only with the batch's last report; gone without one, the
        // producer lost the messages.
        Pin::new(&mut self.0)
            .poll(cx)
            .map(|result| result.unwrap_or(Err(KafkaError::Canceled)))
    }
}

/// A batch's count of messages without a delivery report, shared by its messages.
pub struct BatchAck {
    remaining: AtomicUsize,
    outcome: Mutex<Outcome>,
}

/// The first failure, and where the batch's result goes once the count is out.
struct Outcome {
    failure: Option<KafkaError>,
    done: Option<oneshot::Sender<KafkaResult<()>>>,
}

impl BatchAck {
    fn new(messages: usize) -> (Arc<Self>, Delivered) {
        let (done, delivered) = oneshot::channel();
        let done = if messages == 0 {
            let _ = done.send(Ok(()));
            None
        } else {
            Some(done)
        };
        let ack = Self {
            remaining: AtomicUsize::new(messages),
            outcome: Mutex::new(Outcome {
                failure: None,
                done,
            }),
        };
        (Arc::new(ack), Delivered(delivered))
    }

    fn report(&self, result: Result<(), &KafkaError>) {
        let outcome = || self.outcome.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = result {
            outcome().failure.get_or_insert_with(|| e.clone());
        }
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            let Outcome { failure, done } = &mut *outcome();
            if let Some(done) = done.take() {
                // The batch's sender may have stopped waiting.
                let _ = done.send(failure.take().map_or(Ok(()), Err));
            }
        }
    }
}

/// Hands each delivery report to its batch's counter.
pub struct AckContext;

impl ClientContext for AckContext {}

impl ProducerContext for AckContext {
    type DeliveryOpaque = Arc<BatchAck>;

    fn delivery(&self, result: &DeliveryResult<'_>, ack: Arc<BatchAck>) {
        ack.report(result.as_ref().map(|_| ()).map_err(|(e, _)| e));
    }
}

/// The producer's type.
pub type AckProducer = ThreadedProducer<AckContext>;

pub struct BatchProducer {
    current: ArcSwap<AckProducer>,
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
        let producer = config.create_with_context(AckContext)?;
        Ok(Self {
            current: ArcSwap::from_pointee(producer),
            config,
            room: Arc::new(Semaphore::new(capacity)),
            capacity,
            replacements,
        })
    }

    pub fn get(&self) -> Arc<AckProducer> {
        self.current.load_full()
    }

    /// Enqueues `messages` on `topic`, whole: room for all of them is reserved first,
    /// waiting up to `within`; librdkafka's own byte bound is waited for the same way.
    /// Any exactly sized iterator will do, so that a caller need not collect its messages.
    pub async fn enqueue_all<'m, M>(
        &self,
        topic: &str,
        messages: M,
        within: Duration,
    ) -> Result<Enqueued, EnqueueError>
    where
        M: IntoIterator<Item = Outgoing<'m>>,
        M::IntoIter: ExactSizeIterator,
    {
        let deadline = Instant::now() + within;
        let messages = messages.into_iter();
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
        let (ack, delivered) = BatchAck::new(n);
        for message in messages {
            let mut record =
                BaseRecord::with_opaque_to(topic, Arc::clone(&ack)).payload(message.payload);
            if let Some(key) = message.key {
                record = record.key(key);
            }
            if let Some(headers) = message.headers {
                record = record.headers(headers);
            }
            loop {
                match producer.send(record) {
                    Ok(()) => break,
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
        Ok(Enqueued { delivered, room })
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
        match self.config.create_with_context(AckContext) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn failure() -> KafkaError {
        KafkaError::MessageProduction(RDKafkaErrorCode::MessageTimedOut)
    }

    #[tokio::test]
    async fn a_batch_is_acknowledged_with_its_last_report_and_its_first_failure() {
        let (ack, mut delivered) = BatchAck::new(3);
        ack.report(Ok(()));
        ack.report(Err(&failure()));
        let other = KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge);
        assert!(
            poll_once(&mut delivered).is_none(),
            "acknowledged before its last report"
        );
        ack.report(Err(&other));
        assert_eq!(delivered.await, Err(failure()));

        let (ack, delivered) = BatchAck::new(2);
        ack.report(Ok(()));
        ack.report(Ok(()));
        assert_eq!(delivered.await, Ok(()));
    }

    #[tokio::test]
    async fn an_empty_batch_is_acknowledged_and_a_lost_one_is_canceled() {
        let (_ack, delivered) = BatchAck::new(0);
        assert_eq!(delivered.await, Ok(()));

        // The producer dropped a message without its report.
        let (ack, delivered) = BatchAck::new(2);
        ack.report(Ok(()));
        drop(ack);
        assert_eq!(delivered.await, Err(KafkaError::Canceled));
    }

    /// Polls once: `None` while pending.
    fn poll_once(delivered: &mut Delivered) -> Option<KafkaResult<()>> {
        let waker = std::task::Waker::noop();
        match Pin::new(delivered).poll(&mut Context::from_waker(waker)) {
            Poll::Ready(result) => Some(result),
            Poll::Pending => None,
        }
    }
}
