//! The raw producer: publishes enriched event messages, exactly as the ingest writes them
//! and with the ingest's producer settings, as fast as librdkafka takes them. It measures
//! the broker-and-client ceiling that the ingest is compared with, and it fills the
//! backlog that the consumer benchmark drains. The raw consumer reads that backlog back.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use contract::event::EventMessage;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientConfig, ClientContext, Message, Offset, TopicPartitionList};

use crate::cli::KafkaArgs;
use crate::traffic::Traffic;

#[derive(Default)]
struct Deliveries {
    ok: AtomicU64,
    failed: AtomicU64,
}

struct Counter(Arc<Deliveries>);

impl ClientContext for Counter {}

impl ProducerContext for Counter {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        let slot = if result.is_ok() {
            &self.0.ok
        } else {
            &self.0.failed
        };
        slot.fetch_add(1, Ordering::Relaxed);
    }
}

pub struct ProduceOutcome {
    pub delivered: u64,
    pub failed: u64,
    pub elapsed: Duration,
}

/// The Kafka key and JSON payload of `count` messages, generated before the clock starts.
pub fn messages(traffic: &mut Traffic, count: u64) -> Vec<(String, Vec<u8>)> {
    let now = contract::event::now_millis();
    let mut out = Vec::with_capacity(count as usize);
    while (out.len() as u64) < count {
        for message in traffic.next_messages(now) {
            let payload = serde_json::to_vec(&message).unwrap_or_default();
            out.push((message.session_id, payload));
        }
    }
    out.truncate(count as usize);
    out
}

/// Sets librdkafka `name=value` properties over a configuration.
fn set_properties(config: &mut ClientConfig, properties: &[String]) -> anyhow::Result<()> {
    for property in properties {
        let (name, value) = property
            .split_once('=')
            .context("a property is name=value")?;
        config.set(name, value);
    }
    Ok(())
}

/// Sends every message and waits until each is acknowledged or failed.
pub fn produce(
    target: &KafkaArgs,
    linger_ms: u64,
    messages: &[(String, Vec<u8>)],
) -> anyhow::Result<ProduceOutcome> {
    let deliveries = Arc::new(Deliveries::default());
    let mut config = kafka_kit::client::KafkaArgs::for_brokers(&target.brokers)
        .events_producer_config(linger_ms, 30_000, 100_000);
    set_properties(&mut config, &target.properties)?;
    let producer: ThreadedProducer<Counter> = config
        .create_with_context(Counter(Arc::clone(&deliveries)))
        .context("cannot create the Kafka producer")?;
    let started = Instant::now();
    for (key, payload) in messages {
        let mut record = BaseRecord::to(&target.topic).key(key).payload(payload);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err((e, _)) => return Err(e).context("the producer refused a message"),
            }
        }
    }
    producer
        .flush(Duration::from_secs(120))
        .context("not every message was acknowledged within 120 s")?;
    Ok(ProduceOutcome {
        delivered: deliveries.ok.load(Ordering::Relaxed),
        failed: deliveries.failed.load(Ordering::Relaxed),
        elapsed: started.elapsed(),
    })
}

/// Reads `count` messages of the topic from the start with a fresh group and the consumer
/// service's fetch wait (then the extra properties), decoding each as an event message:
/// how fast the broker hands a backlog out, the ceiling of the consumer service. Returns the time from the
/// first message to the last.
pub fn consume(target: &KafkaArgs, group: &str, count: u64) -> anyhow::Result<Duration> {
    let mut config = kafka_kit::client::client_config(&target.brokers, "loadgen");
    config
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", kafka_kit::client::FETCH_WAIT_MAX_MS);
    set_properties(&mut config, &target.properties)?;
    let consumer: BaseConsumer = config
        .create()
        .context("cannot create the Kafka consumer")?;
    consumer.subscribe(&[&target.topic])?;
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut first = None;
    let mut seen = 0;
    while seen < count {
        anyhow::ensure!(
            Instant::now() < deadline,
            "read {seen} of {count} messages in 600 s"
        );
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(message)) => {
                first.get_or_insert_with(Instant::now);
                let payload = message.payload().unwrap_or_default();
                serde_json::from_slice::<EventMessage>(payload)
                    .context("a message is not an event message")?;
                seen += 1;
            }
            Some(Err(e)) => anyhow::bail!("consume error: {e}"),
            None => {}
        }
    }
    Ok(first.map(|t| t.elapsed()).unwrap_or_default())
}

/// The number of messages the topic holds (high minus low watermark, over its partitions).
pub fn held(target: &KafkaArgs) -> anyhow::Result<u64> {
    let (brokers, topic) = (target.brokers.as_str(), target.topic.as_str());
    let mut config = kafka_kit::client::client_config(brokers, "loadgen");
    set_properties(&mut config, &target.properties)?;
    let client: BaseConsumer = config.create()?;
    let timeout = Duration::from_secs(10);
    let metadata = client.fetch_metadata(Some(topic), timeout)?;
    let mut total = 0;
    for t in metadata.topics() {
        for p in t.partitions() {
            let (low, high) = client.fetch_watermarks(topic, p.id(), timeout)?;
            total += u64::try_from(high - low).unwrap_or(0);
        }
    }
    Ok(total)
}

/// Waits until `group` has committed, on every partition of `topic`, the offset after the
/// last message: the consumer has stored everything, and a measurement that starts now
/// does not share the machine with the tail of the previous one.
pub fn settle(brokers: &str, topic: &str, group: &str, timeout: Duration) -> anyhow::Result<()> {
    let client: BaseConsumer = kafka_kit::client::client_config(brokers, "loadgen")
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()?;
    let deadline = Instant::now() + timeout;
    let wait = Duration::from_secs(10);
    loop {
        let metadata = client.fetch_metadata(Some(topic), wait)?;
        let mut partitions = TopicPartitionList::new();
        for t in metadata.topics() {
            for p in t.partitions() {
                partitions.add_partition(topic, p.id());
            }
        }
        let committed = client.committed_offsets(partitions, wait)?;
        let mut behind = 0;
        for element in committed.elements() {
            let (_, high) = client.fetch_watermarks(topic, element.partition(), wait)?;
            let done = match element.offset() {
                Offset::Offset(o) => o,
                _ => 0,
            };
            behind += (high - done).max(0);
        }
        if behind == 0 {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "group {group} is still {behind} messages behind on {topic} after {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}
