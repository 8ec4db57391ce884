//! Where accepted events go: the [`EventSink`] seam between the handler and Kafka. A sink
//! takes a batch whole or not at all, and answers only once every message of it is
//! acknowledged. Kafka is the production sink ([`kafka::KafkaSink`]); the router's unit
//! tests use a memory one (`memory::MemorySink`), so that they need no broker.

use std::future::Future;
use std::pin::Pin;

pub mod kafka;
#[cfg(test)]
pub(crate) mod memory;

/// One message of a batch: its key (which picks the partition) and its payload, both
/// borrowed from the handler's buffers.
#[derive(Clone, Copy, Debug)]
pub struct Message<'a> {
    pub key: &'a [u8],
    pub payload: &'a [u8],
}

/// Why a batch was not acknowledged. Each is answered 503 with this sentence, and the
/// client retries; `event_id` lets analysts count a retried event once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SinkError {
    /// No room for the whole batch in time (or the producer refused a message): nothing of
    /// it was enqueued.
    #[error("The event queue is full; retry later.")]
    QueueFull,
    /// Enqueued, but not acknowledged within the delivery timeout.
    #[error("Kafka did not acknowledge the events in time; retry later.")]
    TimedOut,
    /// The producer stopped (or lost the messages) before their delivery reports.
    #[error("The producer is shutting down; retry later.")]
    ShuttingDown,
    /// Kafka answered that it did not take them.
    #[error("Kafka did not take the events; retry later.")]
    Failed,
    /// The broker has no events topic (deleted, or not created yet): nothing was taken.
    #[error("Kafka has no events topic (deleted, or not created yet); retry later.")]
    TopicMissing,
}

/// The future of [`EventSink::publish`]: one allocation per request, none per event.
pub type Publishing<'a> = Pin<Box<dyn Future<Output = Result<(), SinkError>> + Send + 'a>>;

/// What the handler needs from Kafka.
pub trait EventSink: Send + Sync + 'static {
    /// Publishes `messages` whole (or none of them) and resolves once all of them are
    /// acknowledged, or with why not, within the sink's own bound.
    fn publish<'a>(&'a self, messages: &'a [Message<'a>]) -> Publishing<'a>;
}
