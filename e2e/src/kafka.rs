//! The test broker from a test's side: where it is, publishing messages and reading a
//! topic back. Reads use no consumer group and publishes wait for every acknowledgement,
//! so what a test asserts is what the broker holds.

use std::time::Duration;

use crate::fixtures::unique;

/// Kafka of the tests: `TEST_KAFKA_BROKERS`, default the one `scripts/test` starts.
pub fn kafka_brokers() -> String {
    std::env::var("TEST_KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:19092".into())
}

/// Reads `topic` from the beginning of every partition, without a consumer group (a
/// group join takes seconds on Tansu), until `want` messages arrived or `timeout` passed.
pub async fn read_topic(
    topic: &str,
    want: usize,
    timeout: Duration,
) -> Vec<rdkafka::message::OwnedMessage> {
    read_topic_at(&kafka_brokers(), topic, want, timeout).await
}

/// [`read_topic`] from the broker at `brokers`.
pub async fn read_topic_at(
    brokers: &str,
    topic: &str,
    want: usize,
    timeout: Duration,
) -> Vec<rdkafka::message::OwnedMessage> {
    use rdkafka::consumer::{Consumer, StreamConsumer};
    use rdkafka::{Message, Offset, TopicPartitionList};

    let consumer: StreamConsumer = kafka_kit::client::client_config(brokers, "e2e")
        .set("group.id", unique("reader-"))
        .set("enable.auto.commit", "false")
        .create()
        .expect("test reader");
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .expect("topic metadata");
    let mut partitions = TopicPartitionList::new();
    for t in metadata.topics() {
        for p in t.partitions() {
            partitions
                .add_partition_offset(topic, p.id(), Offset::Beginning)
                .expect("partition listed");
        }
    }
    consumer.assign(&partitions).expect("partitions assigned");
    let mut messages = Vec::new();
    let deadline = tokio::time::Instant::now() + timeout;
    while messages.len() < want {
        match tokio::time::timeout_at(deadline, consumer.recv()).await {
            Ok(Ok(m)) => messages.push(m.detach()),
            Ok(Err(e)) => panic!("reading {topic}: {e}"),
            Err(_) => break,
        }
    }
    messages.sort_by_key(|m| (m.partition(), m.offset()));
    messages
}

/// The event ids of event messages read from Kafka.
pub fn event_ids(messages: &[rdkafka::message::OwnedMessage]) -> Vec<uuid::Uuid> {
    use rdkafka::Message;
    messages
        .iter()
        .map(|m| {
            let payload = m.payload().expect("payload");
            let event: contract::event::EventMessage =
                serde_json::from_slice(payload).expect("event message");
            event.event_id
        })
        .collect()
}

/// Publishes event messages keyed by session, as the ingest does, in order.
pub async fn produce_events_to(
    brokers: &str,
    topic: &str,
    events: &[contract::event::EventMessage],
) {
    let payloads: Vec<Vec<u8>> = events
        .iter()
        .map(|e| serde_json::to_vec(e).expect("serialized"))
        .collect();
    let messages: Vec<(Option<&[u8]>, &[u8])> = events
        .iter()
        .zip(&payloads)
        .map(|(e, p)| (Some(e.session_id.as_bytes()), p.as_slice()))
        .collect();
    produce_all(brokers, topic, &messages).await;
}

/// Publishes one message and waits for the broker's acknowledgement.
pub async fn produce(brokers: &str, topic: &str, key: Option<&[u8]>, payload: &[u8]) {
    produce_all(brokers, topic, &[(key, payload)]).await;
}

/// Publishes `(key, payload)` messages in order and waits for every acknowledgement.
/// One message per record batch: Tansu 0.6 serves nothing to a fetch that starts inside
/// a batch, so a consumer resuming from an offset committed mid-batch would stall there.
pub async fn produce_all(brokers: &str, topic: &str, messages: &[(Option<&[u8]>, &[u8])]) {
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let producer: FutureProducer = kafka_kit::client::client_config(brokers, "e2e")
        .set("acks", "all")
        .set("batch.num.messages", "1")
        .set("message.timeout.ms", "30000")
        .create()
        .expect("test producer");
    let mut deliveries = Vec::with_capacity(messages.len());
    for (key, payload) in messages {
        let mut record = FutureRecord::to(topic).payload(*payload);
        if let Some(key) = key {
            record = record.key(*key);
        }
        deliveries.push(
            producer
                .send_result(record)
                .map_err(|(e, _)| e)
                .expect("enqueued"),
        );
    }
    for delivery in deliveries {
        delivery
            .await
            .expect("producer alive")
            .map_err(|(e, _)| e)
            .expect("message acknowledged");
    }
}
