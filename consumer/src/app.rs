//! The consume loop: collect a batch (max rows, bytes or wait), set poison messages aside
//! in the dead-letter topic, insert the rows, then commit the offsets the batch covers.
//! A batch is stored by a task of its own while the next one is collected and decoded;
//! the next is handed over only once the one before is stored and committed, so commits
//! keep the order of the messages and at most two batches are held. While an insert is
//! being retried nothing more is read once the next batch is full, so memory stays
//! bounded. Rows that ClickHouse refuses are bisected until the refused ones are found and
//! set aside.

use std::borrow::Cow;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use arc_swap::ArcSwap;
use axum::Router;
use common::event::{EventMessage, JsonStr, MESSAGE_VERSION};
use common::ops::{Dependency, Readiness};
use common::producer::{BatchProducer, Enqueued, Outgoing};
use common::reload::{Build, load_and_watch};
use common::snapshot::Snapshot;
use rdkafka::consumer::{CommitMode, Consumer, ConsumerContext, StreamConsumer};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::{ClientConfig, ClientContext, Statistics};
use rdkafka::{Message, Offset, TopicPartitionList};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::config::Config;
use crate::definitions;
use crate::liveness::{GroupProbe, Membership, StallDetector, Verdict};
use crate::schema;
use crate::sink::{EventRow, Outcome, Sink, Span};
use crate::topology::Topology;

/// librdkafka's `fetch.wait.max.ms`. Apache Kafka answers a fetch once it has data; Tansu
/// holds every fetch this long, data or not, so on Tansu it sets how fast a backlog drains
/// (about 100 000 messages/s at 100 ms, 880 000 at 5 ms with memory storage) against the
/// empty fetches of an idle consumer (Tansu's SQLite storage: 6% of a core at 100 ms, 28%
/// at 10 ms). `KAFKA_PROPERTIES=fetch.wait.max.ms=…` changes it (BENCHMARKS.md).
pub const FETCH_WAIT_MAX_MS: &str = "100";

/// librdkafka's `fetch.queue.backoff.ms`: how long the client waits before fetching again
/// once its queue of prefetched messages is full. Its default of 1 s stalled a backlog's
/// drain: while a batch is inserted the queue fills, and the next batch, read from it in a
/// fraction of a second, then waited the rest of that second for messages (BENCHMARKS.md).
const FETCH_QUEUE_BACKOFF_MS: &str = "10";

/// How long a batch's dead letters may wait for room in the producer, and for the
/// broker's acknowledgement, before they are retried.
const DEAD_LETTER_TIMEOUT: Duration = Duration::from_secs(30);

/// How often a consumer looks at its share of the group, and librdkafka reports its
/// statistics: every 5 s, or a quarter of the session timeout when that is shorter.
fn look_every(session_timeout: Duration) -> Duration {
    Duration::from_secs(5).min(session_timeout / 4)
}

/// Why the collecting of a batch ended.
enum Next {
    Flush,
    Look,
    Stop,
    /// The batch before was not stored (shutdown came first, or its task failed):
    /// nothing after it may be committed.
    Unstored,
}

/// A batch being stored by its task; `None` when shutdown came first.
type Storing = JoinHandle<Option<Stored>>;

/// A stored batch: the offsets to commit, and the batch emptied, to be filled again.
struct Stored {
    offsets: TopicPartitionList,
    spare: Batch,
}

pub struct Application {
    listener: TcpListener,
    worker: Worker,
    /// The experiments snapshot, kept current by the task, when one is mirrored.
    snapshot: Option<(Arc<ArcSwap<Snapshot>>, JoinHandle<()>)>,
}

/// Counts of one consumer, for tests and diagnostics (metrics are process-wide).
#[derive(Debug, Default)]
pub struct Stats {
    /// Inserts ClickHouse took, and their rows.
    pub inserts: AtomicU64,
    pub rows_inserted: AtomicU64,
    pub dead_letters: AtomicU64,
    /// Batches made: a consumer needs two (one filled while the other is stored), whose
    /// buffers it then uses again.
    pub batches_made: AtomicU64,
    /// Messages taken into batches, counted when a batch's collecting ends.
    pub messages_read: AtomicU64,
}

/// The consumer's client context: publishes the partitions' lag and records whether the
/// client has settled in its group, from librdkafka's statistics.
struct StatsContext(Arc<Membership>);

impl ClientContext for StatsContext {
    fn stats(&self, statistics: Statistics) {
        if let Some(group) = &statistics.cgrp {
            self.0.record(group);
        }
        for (topic, t) in statistics.topics {
            for (partition, p) in t.partitions {
                if partition >= 0 && p.consumer_lag >= 0 {
                    metrics::gauge!("consumer_lag_messages", "topic" => topic.clone(),
                        "partition" => partition.to_string())
                    .set(p.consumer_lag as f64);
                }
            }
        }
    }
}

impl ConsumerContext for StatsContext {}

/// The consuming half, apart from the HTTP listener.
struct Worker {
    readiness: Readiness,
    /// Not ready while the group is stalled (see [`crate::liveness`]).
    group: Dependency,
    consumer: StreamConsumer<StatsContext>,
    membership: Arc<Membership>,
    /// The consumer's settings, to create it again when the group stalls.
    kafka: ClientConfig,
    probe: Arc<GroupProbe>,
    store: Arc<Store>,
    config: Config,
}

/// What stores a batch, shared with the tasks that do it.
struct Store {
    sink: Sink,
    dlq: BatchProducer,
    dlq_topic: String,
    stats: Arc<Stats>,
}

/// Where a message came from, kept until its batch is stored so that it can be set
/// aside with its original bytes: ranges of the batch's one buffer of kept bytes, not
/// copies of their own (an allocation or three per message, for dead letters that are
/// rare).
struct Origin {
    payload: Range<usize>,
    key: Option<Range<usize>>,
    topic: usize,
    partition: i32,
    offset: i64,
}

/// A message to set aside, as it was read.
struct Letter<'a> {
    payload: &'a [u8],
    key: Option<&'a [u8]>,
    topic: &'a str,
    partition: i32,
    offset: i64,
}

/// What one batch holds: rows (with their origins) to insert, dead letters to publish
/// first, and the next offset to commit per partition. A stored batch's buffers are used
/// again for a later batch: filling fresh memory (page faults, and copies as the buffers
/// grow) was a third of the consumer's CPU while it drained a backlog.
#[derive(Default)]
struct Batch {
    /// Rows, or payload bytes, that make the batch full.
    max_rows: usize,
    max_bytes: usize,
    /// Their texts are spans of `kept`: of the message's bytes, or of the unescaped copy
    /// kept after them when the JSON escaped a character.
    rows: Vec<EventRow<Span>>,
    origins: Vec<Origin>,
    dead: Vec<(Origin, String)>,
    /// Payload bytes read, for the batch's size bound.
    bytes: usize,
    /// The payloads and keys of the batch's messages, one after another.
    kept: Vec<u8>,
    topics: Vec<String>,
    /// By (index in `topics`, partition).
    next_offsets: HashMap<(usize, i32), i64>,
}

impl Batch {
    fn new(max_rows: usize, max_bytes: usize) -> Self {
        Self {
            max_rows,
            max_bytes,
            ..Self::default()
        }
    }

    fn is_empty(&self) -> bool {
        self.next_offsets.is_empty()
    }

    fn is_full(&self) -> bool {
        self.rows.len() >= self.max_rows || self.bytes >= self.max_bytes
    }

    /// Empties the batch, keeping of its buffers' capacity at most twice what it used:
    /// as much as the next batch needs when the rate holds, and little once it falls.
    fn clear(&mut self) {
        fn empty<T>(buffer: &mut Vec<T>) {
            let used = buffer.len();
            buffer.clear();
            buffer.shrink_to(2 * used);
        }
        empty(&mut self.rows);
        empty(&mut self.origins);
        empty(&mut self.dead);
        empty(&mut self.kept);
        self.topics.clear();
        self.next_offsets.clear();
        self.bytes = 0;
    }

    fn add(&mut self, message: &impl Message) {
        let payload = message.payload().unwrap_or_default();
        self.bytes += payload.len();
        let topic = match self.topics.iter().position(|t| t == message.topic()) {
            Some(index) => index,
            None => {
                self.topics.push(message.topic().to_owned());
                self.topics.len() - 1
            }
        };
        self.next_offsets
            .insert((topic, message.partition()), message.offset() + 1);
        let mut keep = |bytes: &[u8]| {
            let start = self.kept.len();
            self.kept.extend_from_slice(bytes);
            start..self.kept.len()
        };
        let origin = Origin {
            payload: keep(payload),
            key: message.key().map(&mut keep),
            topic,
            partition: message.partition(),
            offset: message.offset(),
        };
        match decode(payload) {
            Ok(event) => {
                let kept = &mut self.kept;
                let row = EventRow::from(event).map(|text| {
                    // A text the JSON did not escape is where the message's copy has it.
                    if let Cow::Borrowed(s) = &text.0
                        && let Some(at) =
                            (s.as_ptr() as usize).checked_sub(payload.as_ptr() as usize)
                        && at + s.len() <= payload.len()
                    {
                        let at = origin.payload.start + at;
                        return at..at + s.len();
                    }
                    let at = kept.len();
                    kept.extend_from_slice(text.0.as_bytes());
                    at..kept.len()
                });
                self.rows.push(row);
                self.origins.push(origin);
            }
            Err(reason) => self.dead.push((origin, reason)),
        }
    }

    fn letter(&self, origin: &Origin) -> Letter<'_> {
        Letter {
            payload: &self.kept[origin.payload.clone()],
            key: origin.key.clone().map(|key| &self.kept[key]),
            topic: &self.topics[origin.topic],
            partition: origin.partition,
            offset: origin.offset,
        }
    }
}

/// A message is stored when it is a v1 event message; anything else is a dead letter.
fn decode(payload: &[u8]) -> Result<EventMessage<JsonStr<'_>>, String> {
    let event: EventMessage<JsonStr<'_>> =
        serde_json::from_slice(payload).map_err(|e| format!("not an event message: {e}"))?;
    if event.v != MESSAGE_VERSION {
        return Err(format!("unsupported message version {}", event.v));
    }
    Ok(event)
}

/// The consumer's librdkafka settings: ours, then `KAFKA_PROPERTIES`, then what the
/// commit-after-insert design and the liveness check need.
fn consumer_config(config: &Config) -> ClientConfig {
    let mut kafka = config.kafka.client_config();
    kafka
        .set("fetch.wait.max.ms", FETCH_WAIT_MAX_MS)
        .set("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS)
        .set(
            "session.timeout.ms",
            config.kafka_session_timeout_ms.to_string(),
        )
        .set(
            "max.poll.interval.ms",
            config.kafka_max_poll_interval_ms.to_string(),
        );
    config.kafka.apply_properties(&mut kafka);
    kafka
        .set(
            "statistics.interval.ms",
            look_every(Duration::from_millis(config.kafka_session_timeout_ms))
                .as_millis()
                .to_string(),
        )
        .set("group.id", &config.group_id)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "false");
    kafka
}

impl Application {
    pub async fn build(config: Config) -> anyhow::Result<Self> {
        common::telemetry::metrics_handle();
        let topology = Topology::from_args(&config.clickhouse)?;
        topology.check().await?;
        schema::migrate_topology(&topology, &config.clickhouse.clickhouse_database, u32::MAX)
            .await?;
        let snapshot = match &config.experiments_snapshot {
            None => None,
            Some(source) => {
                let args = common::reload::SnapshotArgs {
                    snapshot: source.clone(),
                    snapshot_poll_interval_ms: config.snapshot_poll_interval_ms,
                    snapshot_cache: None,
                };
                let build: Build<Snapshot> = Arc::new(|snapshot| snapshot);
                Some(load_and_watch(args.watch_options("consumer"), build).await?)
            }
        };

        if let Err(e) = config
            .kafka
            .ensure_topics(&[&config.kafka.topic, &config.dlq_topic])
            .await
        {
            tracing::warn!(error = %format!("{e:#}"), "Topics not ensured.");
        }
        let kafka = consumer_config(&config);
        let membership = Arc::new(Membership::default());
        let consumer: StreamConsumer<StatsContext> = kafka
            .create_with_context(StatsContext(membership.clone()))
            .context("cannot create Kafka consumer")?;
        consumer
            .subscribe(&[&config.kafka.topic])
            .with_context(|| format!("cannot subscribe to {}", config.kafka.topic))?;
        // The probe is never polled for messages: it must not produce statistics.
        let probe = GroupProbe::new(
            kafka
                .clone()
                .set("statistics.interval.ms", "0")
                .create()
                .context("cannot create Kafka group probe")?,
            &config.group_id,
            &config.kafka.topic,
        );
        let mut dlq = config.kafka.client_config();
        dlq.set("acks", "all")
            .set("enable.idempotence", "true")
            .set(
                "message.timeout.ms",
                DEAD_LETTER_TIMEOUT.as_millis().to_string(),
            );
        config.kafka.apply_properties(&mut dlq);
        let dlq = BatchProducer::new(dlq, "consumer_dlq_producer_replacements_total")
            .context("cannot create dead-letter producer")?;
        let listener = TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("cannot listen on {}", config.listen))?;
        let readiness = Readiness::default();
        let sink = Sink::new(
            topology,
            Duration::from_millis(config.insert_timeout_ms),
            readiness.dependency(),
        );
        Ok(Self {
            listener,
            snapshot,
            worker: Worker {
                group: readiness.dependency(),
                readiness,
                consumer,
                membership,
                kafka,
                probe: Arc::new(probe),
                store: Arc::new(Store {
                    sink,
                    dlq,
                    dlq_topic: config.dlq_topic.clone(),
                    stats: Arc::default(),
                }),
                config,
            },
        })
    }

    /// This consumer's counts.
    pub fn stats(&self) -> Arc<Stats> {
        self.worker.store.stats.clone()
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
        let ops: Router = common::ops::ops_router(self.worker.readiness.clone());
        let mut http_stop = stop.clone();
        let limits = self.worker.config.http.clone();
        let http = tokio::spawn(async move {
            common::serve::serve(self.listener, ops, &limits, async move {
                stopped(&mut http_stop).await;
            })
            .await;
        });
        let mirror = self.snapshot.map(|(current, watcher)| {
            let servers = self.worker.store.sink.topology.servers().cloned().collect();
            (
                tokio::spawn(definitions::mirror(servers, current, stop.clone())),
                watcher,
            )
        });
        let result = self.worker.consume(stop).await;
        let _ = http.await;
        if let Some((mirror, watcher)) = mirror {
            let _ = mirror.await;
            watcher.abort();
        }
        result
    }
}

impl Worker {
    async fn consume(mut self, mut stop: watch::Receiver<bool>) -> anyhow::Result<()> {
        self.readiness.set(true);
        let max_wait = Duration::from_millis(self.config.batch_max_wait_ms);
        let session_timeout = Duration::from_millis(self.config.kafka_session_timeout_ms);
        // Three quarters of a session timeout: a stall is reported before the dead
        // member's session ends; the rejoin waits until librdkafka has settled in the
        // group (see crate::liveness and the README).
        let mut detector = StallDetector::new(session_timeout * 3 / 4);
        let mut look = tokio::time::interval(look_every(session_timeout));
        look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut storing: Option<Storing> = None;
        // Batches whose buffers wait to be used again.
        let mut spares: Vec<Batch> = Vec::new();
        let clean = loop {
            let mut batch = spares.pop().unwrap_or_else(|| {
                self.store
                    .stats
                    .batches_made
                    .fetch_add(1, Ordering::Relaxed);
                Batch::new(self.config.batch_max_rows, self.config.batch_max_bytes)
            });
            let mut deadline: Option<Instant> = None;
            let next = loop {
                let wait = async {
                    match deadline {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    biased;
                    () = stopped(&mut stop) => break Next::Stop,
                    stored = async { storing.as_mut().expect("guarded").await }, if storing.is_some() => {
                        storing = None;
                        if !self.commit(stored, &stop, &mut spares) {
                            break Next::Unstored;
                        }
                    }
                    // A batch whose wait is over while the one before is still being
                    // stored could not be stored sooner: it keeps taking rows until then.
                    () = wait, if storing.is_none() => break Next::Flush,
                    _ = look.tick(), if batch.is_empty() => break Next::Look,
                    received = self.consumer.recv() => match received {
                        Ok(message) => {
                            batch.add(&message);
                            deadline.get_or_insert_with(|| Instant::now() + max_wait);
                            if batch.is_full() {
                                break Next::Flush;
                            }
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "Kafka consume error.");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    },
                }
            };
            self.store.stats.messages_read.fetch_add(
                (batch.rows.len() + batch.dead.len()) as u64,
                Ordering::Relaxed,
            );
            if matches!(next, Next::Unstored) {
                break false;
            }
            if batch.is_empty() {
                // Nothing to hand over: the batch being stored, if any, goes on (a look
                // must not hold the reading of the next batch behind an insert).
                spares.push(batch);
            } else {
                // One batch stored at a time: the one before must be committed first.
                if !self.finish_storing(&mut storing, &stop, &mut spares).await {
                    break false;
                }
                let store = self.store.clone();
                storing = Some(tokio::spawn(store.store(batch, stop.clone())));
            }
            match next {
                Next::Stop => break self.finish_storing(&mut storing, &stop, &mut spares).await,
                Next::Look => {
                    if self.look_at_group(&mut detector).await {
                        // The batch being stored is committed by this client before it
                        // leaves the group.
                        if !self.finish_storing(&mut storing, &stop, &mut spares).await {
                            break false;
                        }
                        self.rejoin_group(&mut detector).await;
                    }
                }
                Next::Flush | Next::Unstored => {}
            }
        };

        self.readiness.set(false);
        self.consumer.unsubscribe();
        if clean {
            tracing::info!("Consumer stopped cleanly.");
            Ok(())
        } else {
            anyhow::bail!("stopped with a batch not stored; it will be consumed again")
        }
    }

    /// Publishes this consumer's share of the partitions and, while it owns none, asks
    /// the broker whether work waits that nobody consumes; reports the stall. Returns
    /// whether to rejoin: stalled, and the broker is not still rebalancing the group.
    async fn look_at_group(&mut self, detector: &mut StallDetector) -> bool {
        self.probe.drain_events();
        let own = self.consumer.assignment().map_or(0, |a| a.count());
        metrics::gauge!("consumer_assigned_partitions").set(own as f64);
        let group = if own > 0 {
            Vec::new()
        } else {
            let probe = self.probe.clone();
            match tokio::task::spawn_blocking(move || probe.look()).await {
                Ok(Ok(group)) => group,
                // An unreachable broker is no evidence either way.
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "Cannot look at the consumer group.");
                    return false;
                }
                Err(_) => return false,
            }
        };
        let settled = self.membership.settled();
        let verdict = detector.observe(Instant::now(), own, settled, &group);
        tracing::debug!(
            own,
            settled,
            ?group,
            ?verdict,
            "Looked at the consumer group."
        );
        match verdict {
            Verdict::Healthy => {
                self.group.set_ok(true);
                metrics::gauge!("consumer_group_stalled").set(0.0);
                false
            }
            Verdict::Suspect => false,
            Verdict::Rebalancing => {
                self.group.set_ok(false);
                metrics::gauge!("consumer_group_stalled").set(1.0);
                tracing::warn!(?group, group_id = %self.config.group_id,
                    "This consumer owns no partitions while work waits that nobody consumes, and the broker has not finished rebalancing the group; waiting for it to end (a broker that never does needs a restart).");
                false
            }
            Verdict::Stalled => {
                self.group.set_ok(false);
                metrics::gauge!("consumer_group_stalled").set(1.0);
                tracing::warn!(?group, group_id = %self.config.group_id,
                    "This consumer owns no partitions while work waits that nobody consumes; rejoining the group.");
                true
            }
        }
    }

    /// Rejoins after a stall, counting it; a new stall is then timed from now.
    async fn rejoin_group(&mut self, detector: &mut StallDetector) {
        match self.rejoin().await {
            Ok(()) => {
                metrics::counter!("consumer_group_rejoins_total").increment(1);
                detector.reset();
            }
            Err(e) => tracing::error!(error = %format!("{e:#}"), "Cannot rejoin the group."),
        }
    }

    /// Leaves the group with a clean close and joins it again with a new client.
    async fn rejoin(&mut self) -> anyhow::Result<()> {
        let fresh: StreamConsumer<StatsContext> = self
            .kafka
            .create_with_context(StatsContext(self.membership.clone()))
            .context("cannot create Kafka consumer")?;
        let old = std::mem::replace(&mut self.consumer, fresh);
        // Closing waits for librdkafka to leave the group: off the async threads, and
        // before the new member joins, so that the group sees one member at a time.
        let _ = tokio::task::spawn_blocking(move || drop(old)).await;
        // After the close, which may still report the old client's statistics.
        self.membership.forget();
        self.consumer
            .subscribe(&[&self.config.kafka.topic])
            .with_context(|| format!("cannot subscribe to {}", self.config.kafka.topic))
    }

    /// Waits for the batch being stored, if any, and commits it. Returns `false` when it
    /// was not stored.
    async fn finish_storing(
        &self,
        storing: &mut Option<Storing>,
        stop: &watch::Receiver<bool>,
        spares: &mut Vec<Batch>,
    ) -> bool {
        match storing.take() {
            Some(task) => self.commit(task.await, stop, spares),
            None => true,
        }
    }

    /// Commits what a batch's task stored and keeps its buffers in `spares`. Returns
    /// `false` when it was not stored.
    fn commit(
        &self,
        stored: Result<Option<Stored>, tokio::task::JoinError>,
        stop: &watch::Receiver<bool>,
        spares: &mut Vec<Batch>,
    ) -> bool {
        let offsets = match stored {
            Ok(Some(stored)) => {
                spares.push(stored.spare);
                stored.offsets
            }
            Ok(None) => return false,
            Err(e) => {
                tracing::error!(error = %e, "The task storing a batch failed.");
                return false;
            }
        };
        // A failed commit (say, after a rebalance) only means redelivery, which the
        // ReplacingMergeTree collapses.
        let mode = if *stop.borrow() {
            CommitMode::Sync
        } else {
            CommitMode::Async
        };
        if let Err(e) = self.consumer.commit(&offsets, mode) {
            tracing::warn!(error = %e, "Offset commit failed; the batch may be read again.");
        }
        true
    }
}

impl Store {
    /// Rows, then dead letters; `None` if shutdown came first.
    async fn store(
        self: Arc<Self>,
        mut batch: Batch,
        mut stop: watch::Receiver<bool>,
    ) -> Option<Stored> {
        let stop = &mut stop;
        let mut dead: Vec<(Letter<'_>, String)> = batch
            .dead
            .iter()
            .map(|(o, r)| (batch.letter(o), r.clone()))
            .collect();
        // Refused rows are found by halving: a refused single row is set aside.
        let mut pending = Vec::new();
        pending.push(0..batch.rows.len());
        while let Some(range) = pending.pop() {
            match self
                .sink
                .insert(&batch.rows[range.clone()], &batch.kept, stop)
                .await
            {
                Outcome::Inserted => {
                    self.stats.inserts.fetch_add(1, Ordering::Relaxed);
                    self.stats
                        .rows_inserted
                        .fetch_add(range.len() as u64, Ordering::Relaxed);
                }
                Outcome::Stopped => return None,
                Outcome::Rejected(reason) if range.len() == 1 => {
                    let reason = format!("refused by ClickHouse: {reason}");
                    dead.push((batch.letter(&batch.origins[range.start]), reason));
                }
                Outcome::Rejected(_) => {
                    let middle = range.start + range.len() / 2;
                    pending.push(middle..range.end);
                    pending.push(range.start..middle);
                }
            }
        }
        if !self.publish_dead_letters(&dead, stop).await {
            return None;
        }
        let mut offsets = TopicPartitionList::new();
        for (&(topic, partition), next) in &batch.next_offsets {
            let topic = &batch.topics[topic];
            if let Err(e) = offsets.add_partition_offset(topic, partition, Offset::Offset(*next)) {
                tracing::warn!(error = %e, "Cannot list an offset to commit.");
            }
        }
        batch.clear();
        Some(Stored {
            offsets,
            spare: batch,
        })
    }

    /// Publishes the batch's dead letters, each a batch of its own so that one that
    /// failed is sent again alone, retrying until all are acknowledged. Returns `false` if
    /// shutdown came first.
    async fn publish_dead_letters(
        &self,
        letters: &[(Letter<'_>, String)],
        stop: &mut watch::Receiver<bool>,
    ) -> bool {
        let mut pending: Vec<&(Letter<'_>, String)> = letters.iter().collect();
        let mut backoff = common::backoff::Backoff::standard();
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
                    .dlq
                    .enqueue_all(&self.dlq_topic, outgoing, DEAD_LETTER_TIMEOUT)
                    .await
                {
                    Ok(enqueued) => sent.push((item, enqueued)),
                    Err(e) => {
                        tracing::warn!(error = %e, "Dead letter not enqueued; retrying.");
                        failed.push(item);
                    }
                }
            }
            for (
                item,
                Enqueued {
                    delivered,
                    room: _room,
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
                        self.dlq.replace_if_broken(Some(&e));
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

/// Where a dead letter came from and why it was set aside.
fn dead_letter_headers(letter: &Letter<'_>, reason: &str) -> OwnedHeaders {
    let partition = letter.partition.to_string();
    let offset = letter.offset.to_string();
    OwnedHeaders::new()
        .insert(Header {
            key: "dlq.reason",
            value: Some(reason),
        })
        .insert(Header {
            key: "dlq.source.topic",
            value: Some(letter.topic),
        })
        .insert(Header {
            key: "dlq.source.partition",
            value: Some(partition.as_str()),
        })
        .insert(Header {
            key: "dlq.source.offset",
            value: Some(offset.as_str()),
        })
}

/// Resolves once shutdown was asked for (or its sender is gone).
pub(crate) async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn the_fetch_backoff_is_short_and_the_operator_may_change_it() {
        let kafka = |args: &[&str]| {
            let args = ["consumer"].iter().chain(args);
            consumer_config(&Config::parse_from(args))
        };
        let ours = kafka(&[]);
        assert_eq!(ours.get("fetch.queue.backoff.ms"), Some("10"));
        assert_eq!(ours.get("fetch.wait.max.ms"), Some(FETCH_WAIT_MAX_MS));
        let theirs = kafka(&["--kafka-properties=fetch.queue.backoff.ms=500;group.id=other"]);
        assert_eq!(theirs.get("fetch.queue.backoff.ms"), Some("500"));
        // What the design needs stays over the operator's word.
        assert_eq!(theirs.get("group.id"), ours.get("group.id"));
        assert_eq!(theirs.get("enable.auto.commit"), Some("false"));
    }

    fn row() -> EventRow<Span> {
        let message = serde_json::json!({
            "v": MESSAGE_VERSION, "event_id": uuid::Uuid::now_v7(), "received_at": 1_700_000_000_000i64,
            "public_key": "pk_test", "event_name": "click", "experiment_id": "exp_1",
            "session_id": "s1",
        });
        EventRow::from(serde_json::from_value::<EventMessage>(message).expect("a message"))
            .map(|_| 0..0)
    }

    /// Fills `batch` with `n` rows of 100 payload bytes each, as `add` would.
    fn fill(batch: &mut Batch, n: usize) {
        for offset in 0..n {
            let start = batch.kept.len();
            batch.kept.extend_from_slice(&[b'x'; 100]);
            batch.rows.push(row());
            batch.origins.push(Origin {
                payload: start..batch.kept.len(),
                key: None,
                topic: 0,
                partition: 0,
                offset: offset as i64,
            });
        }
        batch.next_offsets.insert((0, 0), n as i64);
    }

    fn message(payload: &[u8], offset: i64) -> rdkafka::message::OwnedMessage {
        rdkafka::message::OwnedMessage::new(
            Some(payload.to_vec()),
            Some(b"key".to_vec()),
            "events".to_owned(),
            rdkafka::Timestamp::NotAvailable,
            0,
            offset,
            None,
        )
    }

    /// The texts of a batch's row, as the batch's bytes hold them.
    fn texts(batch: &Batch, index: usize) -> EventRow {
        batch.rows[index]
            .map(|span| String::from_utf8(batch.kept[span.clone()].to_vec()).expect("UTF-8"))
    }

    #[test]
    fn a_row_reads_its_texts_where_the_message_has_them_and_unescaped_where_it_escaped_them() {
        let plain = serde_json::json!({
            "v": MESSAGE_VERSION, "event_id": uuid::Uuid::now_v7(), "received_at": 1_700_000_000_000i64,
            "public_key": "pk_test", "user_agent": "Mozilla/5.0", "event_name": "click",
            "experiment_id": "exp_1", "session_id": "s1", "variant_id": "var_a",
            "click_target": "#buy", "pathname": "/p", "utm_source": "news",
        });
        let mut escaped = plain.clone();
        escaped["click_target"] = "say \"hi\"\n".into();
        escaped["referrer"] = "https://exemple.fr/caf\u{e9}?q=a\\b".into();
        escaped["utm_term"] = "\u{1F600} tab\t".into();
        let mut batch = Batch::new(10, usize::MAX);
        for (offset, json) in [&plain, &escaped].into_iter().enumerate() {
            let payload = serde_json::to_vec(json).expect("JSON");
            batch.add(&message(&payload, offset as i64));
            let want = EventRow::from(
                serde_json::from_value::<EventMessage>(json.clone()).expect("a message"),
            );
            assert_eq!(texts(&batch, offset), want, "{json}");
        }
        // The plain message's texts are not copied again.
        let first = batch.origins[0].payload.clone();
        assert!(
            batch.rows[0]
                .map(|span| first.contains(&span.start))
                .session_id
        );
        assert_eq!(
            batch.letter(&batch.origins[1]).payload,
            serde_json::to_vec(&escaped).expect("JSON")
        );
        assert_eq!(batch.letter(&batch.origins[1]).key, Some(&b"key"[..]));

        batch.add(&message(b"{not json", 2));
        assert_eq!((batch.rows.len(), batch.dead.len()), (2, 1));
        assert_eq!(batch.next_offsets[&(0, 0)], 3);
    }

    #[test]
    fn a_stored_batch_keeps_room_for_the_next_at_the_same_rate_and_gives_it_back_when_it_falls() {
        let mut batch = Batch::new(10_000, usize::MAX);
        fill(&mut batch, 10_000);
        batch.clear();
        assert!(batch.is_empty() && batch.rows.is_empty() && batch.kept.is_empty());
        assert!(batch.rows.capacity() >= 10_000 && batch.kept.capacity() >= 1_000_000);

        fill(&mut batch, 10);
        batch.clear();
        assert!(batch.rows.capacity() <= 20, "{}", batch.rows.capacity());
        assert!(batch.origins.capacity() <= 20);
        assert!(batch.kept.capacity() <= 2_000, "{}", batch.kept.capacity());
    }
}
