//! The Kafka producer, replaced when it cannot send again: when librdkafka declares a
//! fatal error, or when the broker refuses its producer id or epoch (fenced, unknown,
//! out of sequence; seen with Tansu after an outage). A service that kept such a producer
//! would answer 503 forever.

use std::sync::Arc;

use arc_swap::ArcSwap;
use rdkafka::ClientConfig;
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::producer::{FutureProducer, Producer};
use rdkafka::types::RDKafkaErrorCode;

pub(crate) struct EventProducer {
    current: ArcSwap<FutureProducer>,
    config: ClientConfig,
}

impl EventProducer {
    pub fn new(config: ClientConfig) -> KafkaResult<Self> {
        let producer: FutureProducer = config.create()?;
        Ok(Self {
            current: ArcSwap::from_pointee(producer),
            config,
        })
    }

    pub fn get(&self) -> Arc<FutureProducer> {
        self.current.load_full()
    }

    /// Creates a new producer if the current one has a fatal error or `error` says the
    /// broker refuses its identity. Messages of the old one fail, so their requests are
    /// answered 503 and retried by the clients.
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
                    metrics::counter!("ingest_producer_replacements_total").increment(1);
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
