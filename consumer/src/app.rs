//! The consume loop: collect a batch (max rows, bytes or wait), set poison messages aside
//! in the dead-letter topic, insert the rows, then commit the offsets the batch covers.
//! While an insert is being retried nothing more is read, so memory stays bounded.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use clickhouse::Client;
use common::event::{EventMessage, MESSAGE_VERSION};
use common::http::Readiness;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::message::{BorrowedMessage, Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Message, Offset, TopicPartitionList};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::Config;
use crate::schema;
use crate::sink::{EventRow, Sink};

pub struct Application {
    listener: TcpListener,
    worker: Worker,
}

/// The consuming half, apart from the HTTP listener.
struct Worker {
    readiness: Readiness,
    consumer: StreamConsumer,
    dlq: FutureProducer,
    sink: Sink,
    config: Config,
}

/// What one batch holds: rows to insert, dead letters to publish first, and the next
/// offset to commit per partition.
#[derive(Default)]
struct Batch {
    rows: Vec<EventRow>,
    dead: Vec<DeadLetter>,
    bytes: usize,
    next_offsets: HashMap<(String, i32), i64>,
}

struct DeadLetter {
    payload: Vec<u8>,
    key: Option<Vec<u8>>,
    reason: String,
    topic: String,
    partition: i32,
    offset: i64,
}

impl Batch {
    fn is_empty(&self) -> bool {
        self.next_offsets.is_empty()
    }

    fn add(&mut self, message: &BorrowedMessage<'_>) {
        let payload = message.payload().unwrap_or_default();
        self.bytes += payload.len();
        self.next_offsets.insert(
            (message.topic().to_owned(), message.partition()),
            message.offset() + 1,
        );
        match decode(payload) {
            Ok(event) => self.rows.push(EventRow::from(event)),
            Err(reason) => self.dead.push(DeadLetter {
                payload: payload.to_vec(),
                key: message.key().map(<[u8]>::to_vec),
                reason,
                topic: message.topic().to_owned(),
                partition: message.partition(),
                offset: message.offset(),
            }),
        }
    }
}

/// A message is stored when it is a v1 event message; anything else is a dead letter.
fn decode(payload: &[u8]) -> Result<EventMessage, String> {
    let event: EventMessage =
        serde_json::from_slice(payload).map_err(|e| format!("not an event message: {e}"))?;
    if event.v != MESSAGE_VERSION {
        return Err(format!("unsupported message version {}", event.v));
    }
    Ok(event)
}

impl Application {
    pub async fn build(config: Config) -> anyhow::Result<Self> {
        common::telemetry::metrics_handle();
        let client = Client::default()
            .with_url(&config.clickhouse_url)
            .with_user(&config.clickhouse_user)
            .with_password(&config.clickhouse_password)
            .with_database(&config.clickhouse_database)
            // Validation asks the server for a setting that ClickHouse 18.16 lacks.
            .with_validation(false);
        schema::migrate(&client, &config.clickhouse_database).await?;

        if let Err(e) = common::kafka::ensure_topics(
            &config.kafka_brokers,
            &[&config.topic, &config.dlq_topic],
            config.topic_partitions,
        )
        .await
        {
            tracing::warn!(error = %format!("{e:#}"), "Topics not ensured.");
        }
        let consumer: StreamConsumer = common::kafka::client_config(&config.kafka_brokers)
            .set("group.id", &config.group_id)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .set("enable.partition.eof", "false")
            .create()
            .context("cannot create Kafka consumer")?;
        consumer
            .subscribe(&[&config.topic])
            .with_context(|| format!("cannot subscribe to {}", config.topic))?;
        let dlq: FutureProducer = common::kafka::client_config(&config.kafka_brokers)
            .set("acks", "all")
            .set("enable.idempotence", "true")
            .create()
            .context("cannot create dead-letter producer")?;
        let listener = TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("cannot listen on {}", config.listen))?;
        let sink = Sink {
            client,
            insert_timeout: Duration::from_millis(config.insert_timeout_ms),
        };
        Ok(Self {
            listener,
            worker: Worker {
                readiness: Readiness::default(),
                consumer,
                dlq,
                sink,
                config,
            },
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// Consumes until `shutdown` resolves, then inserts the batch in hand, commits it and
    /// leaves the group. Fails when the last batch could not be stored (it will be read
    /// again by whoever gets its partitions).
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let (stop_tx, stop) = watch::channel(false);
        tokio::spawn(async move {
            shutdown.await;
            let _ = stop_tx.send(true);
        });
        let ops: Router = common::http::ops_router(self.worker.readiness.clone());
        let mut http_stop = stop.clone();
        let http = tokio::spawn(
            axum::serve(self.listener, ops)
                .with_graceful_shutdown(async move {
                    stopped(&mut http_stop).await;
                })
                .into_future(),
        );
        let result = self.worker.consume(stop).await;
        let _ = http.await;
        result
    }
}

impl Worker {
    async fn consume(self, mut stop: watch::Receiver<bool>) -> anyhow::Result<()> {
        self.readiness.set(true);
        let max_wait = Duration::from_millis(self.config.batch_max_wait_ms);
        let mut clean = true;
        loop {
            let mut batch = Batch::default();
            let mut deadline: Option<Instant> = None;
            let stopping = loop {
                let wait = async {
                    match deadline {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    biased;
                    () = stopped(&mut stop) => break true,
                    () = wait => break false,
                    received = self.consumer.recv() => match received {
                        Ok(message) => {
                            batch.add(&message);
                            deadline.get_or_insert_with(|| Instant::now() + max_wait);
                            if batch.rows.len() >= self.config.batch_max_rows
                                || batch.bytes >= self.config.batch_max_bytes
                            {
                                break false;
                            }
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "Kafka consume error.");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    },
                }
            };
            if !batch.is_empty() && !self.flush(batch, &mut stop).await {
                clean = false;
                break;
            }
            if stopping {
                break;
            }
        }

        self.readiness.set(false);
        self.consumer.unsubscribe();
        if clean {
            tracing::info!("Consumer stopped cleanly.");
            Ok(())
        } else {
            anyhow::bail!("stopped with a batch not stored; it will be consumed again")
        }
    }

    /// Dead letters, then rows, then the commit. Returns `false` if shutdown came first.
    async fn flush(&self, batch: Batch, stop: &mut watch::Receiver<bool>) -> bool {
        for letter in &batch.dead {
            if !self.publish_dead_letter(letter, stop).await {
                return false;
            }
        }
        if !self.sink.insert(&batch.rows, stop).await {
            return false;
        }
        let mut offsets = TopicPartitionList::new();
        for ((topic, partition), next) in &batch.next_offsets {
            if let Err(e) = offsets.add_partition_offset(topic, *partition, Offset::Offset(*next)) {
                tracing::warn!(error = %e, "Cannot list an offset to commit.");
            }
        }
        // A failed commit (say, after a rebalance) only means redelivery, which the
        // ReplacingMergeTree collapses.
        let stopping = *stop.borrow();
        let mode = if stopping {
            CommitMode::Sync
        } else {
            CommitMode::Async
        };
        if let Err(e) = self.consumer.commit(&offsets, mode) {
            tracing::warn!(error = %e, "Offset commit failed; the batch may be read again.");
        }
        true
    }

    async fn publish_dead_letter(
        &self,
        letter: &DeadLetter,
        stop: &mut watch::Receiver<bool>,
    ) -> bool {
        let partition = letter.partition.to_string();
        let offset = letter.offset.to_string();
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: "dlq.reason",
                value: Some(letter.reason.as_str()),
            })
            .insert(Header {
                key: "dlq.source.topic",
                value: Some(letter.topic.as_str()),
            })
            .insert(Header {
                key: "dlq.source.partition",
                value: Some(partition.as_str()),
            })
            .insert(Header {
                key: "dlq.source.offset",
                value: Some(offset.as_str()),
            });
        let mut backoff = Duration::from_millis(100);
        loop {
            let mut record = FutureRecord::to(&self.config.dlq_topic)
                .payload(&letter.payload)
                .headers(headers.clone());
            if let Some(key) = &letter.key {
                record = record.key(key);
            }
            match self.dlq.send(record, Duration::from_secs(5)).await {
                Ok(_) => {
                    metrics::counter!("consumer_dead_letters_total").increment(1);
                    tracing::warn!(reason = %letter.reason, topic = %letter.topic,
                        partition = letter.partition, offset = letter.offset,
                        "Message set aside in the dead-letter topic.");
                    return true;
                }
                Err((e, _)) => {
                    tracing::warn!(error = %e, "Dead-letter publish failed; retrying.");
                }
            }
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                () = stopped(stop) => return false,
            }
            backoff = (backoff * 2).min(Duration::from_secs(10));
        }
    }
}

/// Resolves once shutdown was asked for (or its sender is gone).
pub(crate) async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}
