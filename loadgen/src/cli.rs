//! The command line: the commands, their arguments, and the label that names a figure.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::watch::Watch;
use crate::{chaos, demo, wrk};
use loadgen::stats::{Figure, Tally};

#[derive(Parser)]
#[command(about = "Load generator and reference tools for scripts/bench")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Browser-like analytics traffic against the ingest: sessions sending batches of five
    /// events, then a page-unload beacon. Units: accepted events.
    Ingest(IngestArgs),
    /// GETs of one URL with fixed headers. Units: 200 answers.
    Get(GetArgs),
    /// Publishes enriched event messages with the ingest's producer settings as fast as
    /// librdkafka takes them (generated before the clock starts). Units: acknowledged events.
    Produce(ProduceArgs),
    /// Reads N event messages from the start of a topic with a fresh consumer group
    /// (librdkafka, decoding each). Units: messages.
    Consume(ConsumeArgs),
    /// Inserts event rows into a fresh database of the consumer's schema with
    /// `INSERT … FORMAT JSONEachRow`, one batch at a time. Units: rows.
    ClickhouseInsert(InsertArgs),
    /// Waits until a table holds N rows and reports the rate at which they arrived.
    WaitRows(WaitArgs),
    /// ClickHouse's Kafka table engine as the consumer's peer (docs/benchmarks.md, Peers).
    KafkaEngine {
        #[command(subcommand)]
        action: KafkaEngineAction,
    },
    /// Waits until `database.events` holds at least N distinct event ids or the timeout
    /// passes, then prints its rows and its distinct event ids (more rows than ids: copies
    /// of a message delivered again, not yet merged away).
    Rows(RowsArgs),
    /// Exits non-zero unless two databases hold the same rows in each table named (row
    /// count and an order-free checksum of every row).
    SameRows(SameRowsArgs),
    /// Waits until a consumer group has committed everything a topic holds.
    Settle(SettleArgs),
    /// Creates the topics that do not exist yet (for a peer that does not create its own).
    CreateTopics(CreateTopicsArgs),
    /// Peak resident memory (VmHWM) of a process.
    Rss(RssArgs),
    /// Compressed bytes on disk per event of a database (its active parts, every table:
    /// `events` and the views' tables), after a run; as `--subject`, name the database.
    ClickhouseDisk(DiskArgs),
    /// Runs Debian's `wrk` with the arguments after `--` (a warm-up run, then the measured
    /// one with `--latency`) and reports its figure, with the CPU of the watched processes
    /// and of wrk itself over the measured run. Units: answers below 400, times
    /// `--units-per-request`.
    Wrk(WrkArgs),
    /// Writes N of `loadgen ingest`'s batches of five events (beacons left out) for
    /// `loadgen/wrk/ingest.lua`: key, user agent and body, tab-separated, one a line.
    WrkBatches(WrkBatchesArgs),
    /// Prints Unleash's feature document (Unleash Edge's offline bootstrap file) of a
    /// config-api answer (FILE): the same experiments, variants, weights and parts.
    UnleashFeatures { answer: PathBuf },
    /// Prints the first public key of a snapshot file.
    SnapshotKey {
        #[arg(long)]
        snapshot: PathBuf,
    },
    /// The clients of scripts/chaos: SDK-like traffic that retries through faults, then
    /// the count of acknowledged events lost or duplicated in ClickHouse. Exits 1 if any.
    Chaos(chaos::ChaosArgs),
    /// The demo's history for scripts/demo: visitors of the demo site over several
    /// sessions and hours, with an effect planted in one experiment and none in the others,
    /// through the front as the SDK sends it; waits until ClickHouse holds every event.
    Demo(demo::DemoArgs),
    /// The whole pipeline on one machine: browser traffic through the front at rising
    /// rates, open loop; per rate, the events accepted, the time from POST to queryable
    /// row (sampled by event id), the CPU of each process and of the machine, whether it
    /// was sustained; then the sustainable rate and what saturated first (a table).
    Pipeline(crate::pipeline::PipelineArgs),
}

#[derive(Args)]
pub struct Label {
    /// Which comparison the figure belongs to.
    #[arg(long)]
    pub bench: String,
    /// What was measured (ours or the reference).
    #[arg(long)]
    pub subject: String,
    /// A process whose CPU use during the measurement to report, `name=pid` (`self` for
    /// this one); repeatable.
    #[arg(long = "watch")]
    pub watch: Vec<String>,
}

impl Label {
    pub fn watch(&self) -> anyhow::Result<Watch> {
        Watch::parse(&self.watch)
    }

    /// A figure of `count` units done at `rate` per second.
    pub fn figure(&self, unit: &str, rate: f64, count: u64, cpu: BTreeMap<String, f64>) -> Figure {
        Figure {
            bench: self.bench.clone(),
            subject: self.subject.clone(),
            unit: unit.to_owned(),
            rate,
            requests: count,
            cpu_percent: cpu,
            ..Figure::default()
        }
    }

    /// The figure of a load's tally.
    pub fn load_figure(&self, tally: &Tally, unit: &str, cpu: BTreeMap<String, f64>) -> Figure {
        Figure {
            cpu_percent: cpu,
            ..tally.figure(&self.bench, &self.subject, unit)
        }
    }
}

#[derive(Args)]
pub struct LoadArgs {
    /// Concurrent keep-alive connections, one request in flight on each.
    #[arg(long, default_value_t = 64)]
    pub connections: usize,
    /// Seconds of load before the measured window.
    #[arg(long, default_value_t = 2.0)]
    pub warmup: f64,
    /// Seconds measured.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Open loop at this many requests per second; closed loop at full speed without it.
    #[arg(long)]
    pub rate: Option<f64>,
}

#[derive(Args)]
pub struct IngestArgs {
    #[command(flatten)]
    pub label: Label,
    #[command(flatten)]
    pub load: LoadArgs,
    /// Base URL of the ingest (or of the front).
    #[arg(long, default_value = "http://127.0.0.1:8081")]
    pub url: String,
    /// The snapshot whose keys, experiments and variants the traffic uses.
    #[arg(long, default_value = "deploy/experiments.json")]
    pub snapshot: PathBuf,
    /// Run id, the prefix of every session id (letters and digits); random by default.
    #[arg(long)]
    pub run: Option<String>,
    /// After the load, wait until every accepted event is in this ClickHouse.
    #[arg(long)]
    pub verify_clickhouse: Option<String>,
    #[arg(long, default_value = "analytics")]
    pub database: String,
    /// Seconds to wait for the accepted events to land.
    #[arg(long, default_value_t = 120)]
    pub verify_timeout: u64,
}

#[derive(Args)]
pub struct GetArgs {
    #[command(flatten)]
    pub label: Label,
    #[command(flatten)]
    pub load: LoadArgs,
    #[arg(long)]
    pub url: String,
    /// A request header, `Name: value`; repeatable.
    #[arg(short = 'H', long = "header")]
    pub headers: Vec<String>,
}

/// The broker, topic and extra client properties of the Kafka tools.
#[derive(Args, Clone)]
pub struct KafkaArgs {
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub brokers: String,
    #[arg(long)]
    pub topic: String,
    /// A librdkafka property, `name=value`, over the tool's settings; repeatable.
    #[arg(short = 'X')]
    pub properties: Vec<String>,
}

#[derive(Args)]
pub struct ProduceArgs {
    #[command(flatten)]
    pub label: Label,
    #[command(flatten)]
    pub kafka: KafkaArgs,
    /// Partitions of the topic when it has to be created.
    #[arg(long, default_value_t = 3)]
    pub partitions: i32,
    #[arg(long, default_value_t = 200_000)]
    pub events: u64,
    /// librdkafka linger.ms, as the ingest's KAFKA_LINGER_MS.
    #[arg(long, default_value_t = 5)]
    pub linger_ms: u64,
    #[arg(long, default_value = "deploy/experiments.json")]
    pub snapshot: PathBuf,
    #[arg(long, default_value = "produce")]
    pub run: String,
    /// Send only what the topic lacks to hold `events` messages (a backlog kept between
    /// benchmark runs).
    #[arg(long)]
    pub top_up: bool,
    /// One message that is not an event (not JSON) before the message of this index.
    #[arg(long)]
    pub poison_at: Option<usize>,
}

#[derive(Args)]
pub struct ConsumeArgs {
    #[command(flatten)]
    pub label: Label,
    #[command(flatten)]
    pub kafka: KafkaArgs,
    /// Consumer group, new for each read of the whole backlog.
    #[arg(long)]
    pub group: String,
    #[arg(long)]
    pub events: u64,
}

#[derive(Args)]
pub struct InsertArgs {
    #[command(flatten)]
    pub label: Label,
    #[arg(long, default_value = "http://127.0.0.1:8123")]
    pub clickhouse: String,
    /// Dropped and created anew with the consumer's schema.
    #[arg(long)]
    pub database: String,
    #[arg(long, default_value_t = 1_000_000)]
    pub rows: u64,
    /// Rows per INSERT, as the consumer's BATCH_MAX_ROWS.
    #[arg(long, default_value_t = 100_000)]
    pub batch: usize,
    #[arg(long, default_value = "deploy/experiments.json")]
    pub snapshot: PathBuf,
    #[arg(long, default_value = "insert")]
    pub run: String,
}

#[derive(Args)]
pub struct WaitArgs {
    #[command(flatten)]
    pub label: Label,
    #[arg(long, default_value = "http://127.0.0.1:8123")]
    pub clickhouse: String,
    /// `database.table`.
    #[arg(long)]
    pub table: String,
    #[arg(long)]
    pub rows: u64,
    #[arg(long, default_value_t = 900)]
    pub timeout: u64,
    /// The inserting process, for its peak RSS.
    #[arg(long)]
    pub pid: Option<u32>,
}

#[derive(Subcommand)]
pub enum KafkaEngineAction {
    /// A fresh database of the consumer's schema, filled from the topic by a Kafka table and
    /// materialized views from the moment this returns.
    Start(KafkaEngineArgs),
    /// Stops the engine of a database for good (its rows stay).
    Stop {
        #[arg(long, default_value = "http://127.0.0.1:8123")]
        clickhouse: String,
        #[arg(long)]
        database: String,
    },
}

#[derive(Args)]
pub struct KafkaEngineArgs {
    #[arg(long, default_value = "http://127.0.0.1:8123")]
    pub clickhouse: String,
    #[arg(long)]
    pub database: String,
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub brokers: String,
    #[arg(long)]
    pub topic: String,
    /// A group that has not read the topic yet: the engine reads it from the start when
    /// the server's `<kafka>` configuration says `auto_offset_reset` = `smallest`.
    #[arg(long)]
    pub group: String,
    /// Rows per insert, as the consumer's BATCH_MAX_ROWS.
    #[arg(long, default_value_t = 100_000)]
    pub block_rows: u64,
    /// The engine's consumers (`kafka_num_consumers`), at most the topic's partitions.
    #[arg(long, default_value_t = 1)]
    pub consumers: u32,
}

#[derive(Args)]
pub struct WrkArgs {
    #[command(flatten)]
    pub label: Label,
    /// Seconds of a wrk run before the measured one (none if 0).
    #[arg(long, default_value_t = 2.0)]
    pub warmup: f64,
    /// Seconds measured (whole seconds: wrk's `-d`).
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// What one answer stands for (5 for the ingest's batches of five events).
    #[arg(long, default_value_t = 1.0)]
    pub units_per_request: f64,
    #[arg(long, default_value = "requests")]
    pub unit: String,
    /// wrk's own arguments (connections, threads, headers, script, URL), after `--`.
    #[arg(last = true, required = true)]
    pub wrk: Vec<String>,
}

#[derive(Args)]
pub struct RssArgs {
    #[command(flatten)]
    pub label: Label,
    #[arg(long)]
    pub pid: u32,
}

#[derive(Args)]
pub struct RowsArgs {
    #[arg(long, default_value = "http://127.0.0.1:8123")]
    pub clickhouse: String,
    #[arg(long)]
    pub database: String,
    /// Distinct event ids.
    #[arg(long)]
    pub ids: u64,
    /// Seconds.
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
}

#[derive(Args)]
pub struct SameRowsArgs {
    #[arg(long, default_value = "http://127.0.0.1:8123")]
    pub clickhouse: String,
    #[arg(long)]
    pub expected: String,
    #[arg(long)]
    pub actual: String,
    #[arg(required = true)]
    pub tables: Vec<String>,
}

#[derive(Args)]
pub struct SettleArgs {
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub brokers: String,
    #[arg(long, default_value = kafka_kit::client::EVENTS_TOPIC)]
    pub topic: String,
    #[arg(long, default_value = "analytics-consumer")]
    pub group: String,
    /// Seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
}

#[derive(Args)]
pub struct CreateTopicsArgs {
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub brokers: String,
    /// As the services' KAFKA_TOPIC_PARTITIONS.
    #[arg(long, default_value_t = 3)]
    pub partitions: i32,
    #[arg(required = true)]
    pub topics: Vec<String>,
}

#[derive(Args)]
pub struct DiskArgs {
    #[command(flatten)]
    pub label: Label,
    #[arg(long, default_value = "http://127.0.0.1:8123")]
    pub clickhouse: String,
    #[arg(long)]
    pub database: String,
}

#[derive(Args)]
pub struct WrkBatchesArgs {
    #[arg(long, default_value = "deploy/experiments.json")]
    pub snapshot: PathBuf,
    #[arg(long, default_value_t = 20_000)]
    pub count: usize,
    /// Run id, the prefix of every session id.
    #[arg(long, default_value = "wrk")]
    pub run: String,
    #[arg(long, value_enum, default_value = "contract")]
    pub format: wrk::BatchFormat,
}
