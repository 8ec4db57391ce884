//! `loadgen`: the benchmark's load generator and reference tools. Every measuring command
//! prints one JSON line (a `Figure`) on stdout and a readable summary on stderr;
//! `loadgen report FILE` turns the collected lines into the comparison table.

#![cfg_attr(test, allow(clippy::unwrap_used))]

mod chaos;
mod clickhouse;
mod demo;
mod kafka;
mod kafka_engine;
mod load;
mod peers;
mod report;
mod stats;
mod traffic;
mod watch;
mod wrk;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use clap::{Args, Parser, Subcommand};
use http_body_util::Full;
use hyper::{Request, StatusCode, Uri, header};

use crate::clickhouse::ClickHouse;
use crate::load::{Get, LoadOptions, Workload};
use crate::stats::{Figure, Tally};
use crate::traffic::{Sites, Traffic};
use crate::watch::Watch;

#[derive(Parser)]
#[command(about = "Load generator and reference tools for scripts/bench")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
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
    Rows {
        #[arg(long, default_value = "http://127.0.0.1:8123")]
        clickhouse: String,
        #[arg(long)]
        database: String,
        /// Distinct event ids.
        #[arg(long)]
        ids: u64,
        /// Seconds.
        #[arg(long, default_value_t = 60)]
        timeout: u64,
    },
    /// Exits non-zero unless two databases hold the same rows in each table named (row
    /// count and an order-free checksum of every row).
    SameRows {
        #[arg(long, default_value = "http://127.0.0.1:8123")]
        clickhouse: String,
        #[arg(long)]
        expected: String,
        #[arg(long)]
        actual: String,
        #[arg(required = true)]
        tables: Vec<String>,
    },
    /// Waits until a consumer group has committed everything a topic holds.
    Settle {
        #[arg(long, default_value = "127.0.0.1:9092")]
        brokers: String,
        #[arg(long, default_value = kafka_kit::client::EVENTS_TOPIC)]
        topic: String,
        #[arg(long, default_value = "analytics-consumer")]
        group: String,
        /// Seconds.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
    },
    /// Creates the topics that do not exist yet (for a peer that does not create its own).
    CreateTopics {
        #[arg(long, default_value = "127.0.0.1:9092")]
        brokers: String,
        /// As the services' KAFKA_TOPIC_PARTITIONS.
        #[arg(long, default_value_t = 3)]
        partitions: i32,
        #[arg(required = true)]
        topics: Vec<String>,
    },
    /// Peak resident memory (VmHWM) of a process.
    Rss(RssArgs),
    /// Compressed bytes on disk per event of a database (its active parts, every table:
    /// `events` and the views' tables), after a run; as `--subject`, name the database.
    ClickhouseDisk {
        #[command(flatten)]
        label: Label,
        #[arg(long, default_value = "http://127.0.0.1:8123")]
        clickhouse: String,
        #[arg(long)]
        database: String,
    },
    /// Runs Debian's `wrk` with the arguments after `--` (a warm-up run, then the measured
    /// one with `--latency`) and reports its figure, with the CPU of the watched processes
    /// and of wrk itself over the measured run. Units: answers below 400, times
    /// `--units-per-request`.
    Wrk(WrkArgs),
    /// Writes N of `loadgen ingest`'s batches of five events (beacons left out) for
    /// `loadgen/wrk/ingest.lua`: key, user agent and body, tab-separated, one a line.
    WrkBatches {
        #[arg(long, default_value = "deploy/experiments.json")]
        snapshot: PathBuf,
        #[arg(long, default_value_t = 20_000)]
        count: usize,
        /// Run id, the prefix of every session id.
        #[arg(long, default_value = "wrk")]
        run: String,
        #[arg(long, value_enum, default_value = "contract")]
        format: wrk::BatchFormat,
    },
    /// Prints Unleash's feature document (Unleash Edge's offline bootstrap file) of a
    /// config-api answer (FILE): the same experiments, variants, weights and parts.
    UnleashFeatures { answer: PathBuf },
    /// Prints the comparison table of the JSON lines in FILE.
    Report { file: PathBuf },
    /// The clients of scripts/chaos: SDK-like traffic that retries through faults, then
    /// the count of acknowledged events lost or duplicated in ClickHouse. Exits 1 if any.
    Chaos(chaos::ChaosArgs),
    /// The demo's history for scripts/demo: visitors of the demo site over several
    /// sessions and hours, with an effect planted in one experiment and none in the others,
    /// through the front as the SDK sends it; waits until ClickHouse holds every event.
    Demo(demo::DemoArgs),
}

#[derive(Args)]
struct Label {
    /// Which comparison the figure belongs to.
    #[arg(long)]
    bench: String,
    /// What was measured (ours or the reference).
    #[arg(long)]
    subject: String,
    /// A process whose CPU use during the measurement to report, `name=pid` (`self` for
    /// this one); repeatable.
    #[arg(long = "watch")]
    watch: Vec<String>,
}

impl Label {
    fn watch(&self) -> anyhow::Result<Watch> {
        Watch::parse(&self.watch)
    }

    /// A figure of `count` units done at `rate` per second.
    fn figure(&self, unit: &str, rate: f64, count: u64, cpu: BTreeMap<String, f64>) -> Figure {
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
    fn load_figure(&self, tally: &Tally, unit: &str, cpu: BTreeMap<String, f64>) -> Figure {
        Figure {
            cpu_percent: cpu,
            ..tally.figure(&self.bench, &self.subject, unit)
        }
    }
}

/// A load with the CPU of the watched processes over its measured window.
async fn run_load<W: Workload>(
    label: &Label,
    load: &LoadArgs,
    addr: SocketAddr,
    make: impl FnMut(usize) -> W,
) -> anyhow::Result<(Tally, BTreeMap<String, f64>)> {
    let options = options(load, addr);
    let cpu = watch::window(label.watch()?, options.warmup, options.duration);
    let tally = load::run(&options, make).await?;
    Ok((tally, cpu.await?))
}

/// Runs `work` and reports the CPU the watched processes used meanwhile.
async fn watched<T>(
    label: &Label,
    work: impl Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<(T, BTreeMap<String, f64>)> {
    let watch = label.watch()?;
    let before = watch.sample();
    let value = work.await?;
    Ok((value, watch.usage(&before, &watch.sample())))
}

#[derive(Args)]
struct LoadArgs {
    /// Concurrent keep-alive connections, one request in flight on each.
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// Seconds of load before the measured window.
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Seconds measured.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Open loop at this many requests per second; closed loop at full speed without it.
    #[arg(long)]
    rate: Option<f64>,
}

#[derive(Args)]
struct IngestArgs {
    #[command(flatten)]
    label: Label,
    #[command(flatten)]
    load: LoadArgs,
    /// Base URL of the ingest (or of the front).
    #[arg(long, default_value = "http://127.0.0.1:8081")]
    url: String,
    /// The snapshot whose keys, experiments and variants the traffic uses.
    #[arg(long, default_value = "deploy/experiments.json")]
    snapshot: PathBuf,
    /// Run id, the prefix of every session id (letters and digits); random by default.
    #[arg(long)]
    run: Option<String>,
    /// After the load, wait until every accepted event is in this ClickHouse.
    #[arg(long)]
    verify_clickhouse: Option<String>,
    #[arg(long, default_value = "analytics")]
    database: String,
    /// Seconds to wait for the accepted events to land.
    #[arg(long, default_value_t = 120)]
    verify_timeout: u64,
}

#[derive(Args)]
struct GetArgs {
    #[command(flatten)]
    label: Label,
    #[command(flatten)]
    load: LoadArgs,
    #[arg(long)]
    url: String,
    /// A request header, `Name: value`; repeatable.
    #[arg(short = 'H', long = "header")]
    headers: Vec<String>,
}

/// The broker, topic and extra client properties of the Kafka tools.
#[derive(Args, Clone)]
struct KafkaArgs {
    #[arg(long, default_value = "127.0.0.1:9092")]
    brokers: String,
    #[arg(long)]
    topic: String,
    /// A librdkafka property, `name=value`, over the tool's settings; repeatable.
    #[arg(short = 'X')]
    properties: Vec<String>,
}

#[derive(Args)]
struct ProduceArgs {
    #[command(flatten)]
    label: Label,
    #[command(flatten)]
    kafka: KafkaArgs,
    /// Partitions of the topic when it has to be created.
    #[arg(long, default_value_t = 3)]
    partitions: i32,
    #[arg(long, default_value_t = 200_000)]
    events: u64,
    /// librdkafka linger.ms, as the ingest's KAFKA_LINGER_MS.
    #[arg(long, default_value_t = 5)]
    linger_ms: u64,
    #[arg(long, default_value = "deploy/experiments.json")]
    snapshot: PathBuf,
    #[arg(long, default_value = "produce")]
    run: String,
    /// Send only what the topic lacks to hold `events` messages (a backlog kept between
    /// benchmark runs).
    #[arg(long)]
    top_up: bool,
    /// One message that is not an event (not JSON) before the message of this index.
    #[arg(long)]
    poison_at: Option<usize>,
}

#[derive(Args)]
struct ConsumeArgs {
    #[command(flatten)]
    label: Label,
    #[command(flatten)]
    kafka: KafkaArgs,
    /// Consumer group, new for each read of the whole backlog.
    #[arg(long)]
    group: String,
    #[arg(long)]
    events: u64,
}

#[derive(Args)]
struct InsertArgs {
    #[command(flatten)]
    label: Label,
    #[arg(long, default_value = "http://127.0.0.1:8123")]
    clickhouse: String,
    /// Dropped and created anew with the consumer's schema.
    #[arg(long)]
    database: String,
    #[arg(long, default_value_t = 1_000_000)]
    rows: u64,
    /// Rows per INSERT, as the consumer's BATCH_MAX_ROWS.
    #[arg(long, default_value_t = 100_000)]
    batch: usize,
    #[arg(long, default_value = "deploy/experiments.json")]
    snapshot: PathBuf,
    #[arg(long, default_value = "insert")]
    run: String,
}

#[derive(Args)]
struct WaitArgs {
    #[command(flatten)]
    label: Label,
    #[arg(long, default_value = "http://127.0.0.1:8123")]
    clickhouse: String,
    /// `database.table`.
    #[arg(long)]
    table: String,
    #[arg(long)]
    rows: u64,
    #[arg(long, default_value_t = 900)]
    timeout: u64,
    /// The inserting process, for its peak RSS.
    #[arg(long)]
    pid: Option<u32>,
}

#[derive(Subcommand)]
enum KafkaEngineAction {
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
struct KafkaEngineArgs {
    #[arg(long, default_value = "http://127.0.0.1:8123")]
    clickhouse: String,
    #[arg(long)]
    database: String,
    #[arg(long, default_value = "127.0.0.1:9092")]
    brokers: String,
    #[arg(long)]
    topic: String,
    /// A group that has not read the topic yet: the engine reads it from the start when
    /// the server's `<kafka>` configuration says `auto_offset_reset` = `smallest`.
    #[arg(long)]
    group: String,
    /// Rows per insert, as the consumer's BATCH_MAX_ROWS.
    #[arg(long, default_value_t = 100_000)]
    block_rows: u64,
    /// The engine's consumers (`kafka_num_consumers`), at most the topic's partitions.
    #[arg(long, default_value_t = 1)]
    consumers: u32,
}

#[derive(Args)]
struct WrkArgs {
    #[command(flatten)]
    label: Label,
    /// Seconds of a wrk run before the measured one (none if 0).
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Seconds measured (whole seconds: wrk's `-d`).
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// What one answer stands for (5 for the ingest's batches of five events).
    #[arg(long, default_value_t = 1.0)]
    units_per_request: f64,
    #[arg(long, default_value = "requests")]
    unit: String,
    /// wrk's own arguments (connections, threads, headers, script, URL), after `--`.
    #[arg(last = true, required = true)]
    wrk: Vec<String>,
}

#[derive(Args)]
struct RssArgs {
    #[command(flatten)]
    label: Label,
    #[arg(long)]
    pid: u32,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let figure = match Cli::parse().command {
        Command::Ingest(args) => ingest(args).await?,
        Command::Get(args) => get(args).await?,
        Command::Produce(args) => produce(args).await?,
        Command::Consume(args) => {
            let ConsumeArgs {
                label,
                kafka,
                group,
                events,
            } = args;
            let read = tokio::task::spawn_blocking(move || kafka::consume(&kafka, &group, events));
            let (elapsed, cpu) = watched(&label, async { read.await? }).await?;
            let rate = events as f64 / elapsed.as_secs_f64().max(1e-9);
            label.figure("messages", rate, events, cpu)
        }
        Command::ClickhouseInsert(args) => insert(args).await?,
        Command::WaitRows(args) => wait_rows(args).await?,
        Command::KafkaEngine { action } => {
            match action {
                KafkaEngineAction::Start(args) => {
                    let source = kafka_engine::Source {
                        brokers: &args.brokers,
                        topic: &args.topic,
                        group: &args.group,
                        block_rows: args.block_rows,
                        consumers: args.consumers,
                    };
                    let clickhouse = ClickHouse::new(&args.clickhouse);
                    kafka_engine::create(&clickhouse, &args.database, &source).await?;
                }
                KafkaEngineAction::Stop {
                    clickhouse,
                    database,
                } => kafka_engine::stop(&ClickHouse::new(&clickhouse), &database).await?,
            }
            return Ok(());
        }
        Command::Rows {
            clickhouse,
            database,
            ids,
            timeout,
        } => {
            let clickhouse = ClickHouse::new(&clickhouse);
            let timeout = Duration::from_secs(timeout);
            let stored = clickhouse::wait_ids(&clickhouse, &database, ids, timeout).await?;
            println!("{stored}");
            return Ok(());
        }
        Command::SameRows {
            clickhouse,
            expected,
            actual,
            tables,
        } => {
            let clickhouse = ClickHouse::new(&clickhouse);
            for table in &tables {
                let want = clickhouse::checksum(&clickhouse, &expected, table).await?;
                let got = clickhouse::checksum(&clickhouse, &actual, table).await?;
                anyhow::ensure!(
                    want == got,
                    "{actual}.{table} differs from {expected}.{table}: rows and checksum {got} against {want}"
                );
                eprintln!("   {actual}.{table} = {expected}.{table}: rows and checksum {got}");
            }
            return Ok(());
        }
        Command::Wrk(args) => {
            if args.warmup > 0.0 {
                wrk::run(&args.wrk, args.warmup, None)?;
            }
            let watch = args.label.watch()?;
            let (report, cpu) = wrk::run(&args.wrk, args.duration, Some(&watch))?;
            let label = &args.label;
            report.figure(
                &label.bench,
                &label.subject,
                &args.unit,
                args.units_per_request,
                cpu,
            )
        }
        Command::WrkBatches {
            snapshot,
            count,
            run,
            format,
        } => {
            clickhouse::check_run_id(&run)?;
            let sites = Arc::new(Sites::from_file(&snapshot)?);
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            wrk::write_batches(&mut Traffic::new(sites, &run, 1), count, format, &mut out)?;
            std::io::Write::flush(&mut out)?;
            return Ok(());
        }
        Command::CreateTopics {
            brokers,
            partitions,
            topics,
        } => {
            let topics: Vec<&str> = topics.iter().map(String::as_str).collect();
            kafka_kit::client::ensure_topics(
                kafka_kit::client::client_config(&brokers, "loadgen"),
                &topics,
                partitions,
            )
            .await?;
            return Ok(());
        }
        Command::UnleashFeatures { answer } => {
            let bytes = std::fs::read(&answer)
                .with_context(|| format!("cannot read {}", answer.display()))?;
            let answer: serde_json::Value = serde_json::from_slice(&bytes)
                .with_context(|| format!("{} is not JSON", answer.display()))?;
            println!("{}", peers::unleash_features(&answer)?);
            return Ok(());
        }
        Command::ClickhouseDisk {
            label,
            clickhouse,
            database,
        } => {
            let (rows, bytes) =
                clickhouse::disk_bytes(&ClickHouse::new(&clickhouse), &database).await?;
            anyhow::ensure!(rows > 0, "{database}.events holds no row");
            Figure {
                bytes_per_unit: Some(bytes as f64 / rows as f64),
                ..label.figure("events", 0.0, rows, BTreeMap::new())
            }
        }
        Command::Rss(args) => Figure {
            rss_kib: Some(peak_rss_kib(args.pid)?),
            ..args.label.figure("KiB", 0.0, 0, BTreeMap::new())
        },
        Command::Settle {
            brokers,
            topic,
            group,
            timeout,
        } => {
            let timeout = Duration::from_secs(timeout);
            tokio::task::spawn_blocking(move || kafka::settle(&brokers, &topic, &group, timeout))
                .await??;
            return Ok(());
        }
        Command::Demo(args) => return demo::run(args).await,
        Command::Chaos(args) => {
            if !chaos::run(args).await? {
                std::process::exit(1);
            }
            return Ok(());
        }
        Command::Report { file } => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            let figures = text
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(serde_json::from_str)
                .collect::<Result<Vec<Figure>, _>>()
                .context("not a file of figures")?;
            print!("{}", report::render(&figures));
            return Ok(());
        }
    };
    eprintln!("{}", figure.summary());
    println!("{}", serde_json::to_string(&figure)?);
    Ok(())
}

/// The socket address and path of an `http://` URL.
async fn target(url: &str) -> anyhow::Result<(SocketAddr, String)> {
    let uri: Uri = url.parse().with_context(|| format!("not a URL: {url}"))?;
    anyhow::ensure!(uri.scheme_str() == Some("http"), "only http:// URLs: {url}");
    let host = uri.host().context("URL without host")?;
    let port = uri.port_u16().unwrap_or(80);
    let addr = tokio::net::lookup_host((host, port))
        .await?
        .next()
        .with_context(|| format!("{host} has no address"))?;
    let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
    Ok((addr, path))
}

fn options(load: &LoadArgs, addr: SocketAddr) -> LoadOptions {
    LoadOptions {
        addr,
        connections: load.connections,
        warmup: Duration::from_secs_f64(load.warmup),
        duration: Duration::from_secs_f64(load.duration),
        rate: load.rate,
    }
}

/// One browser after another on a connection; a 2xx counts the events it accepted.
struct Browser {
    traffic: Traffic,
    path: String,
}

impl Workload for Browser {
    fn request(&mut self) -> Request<Full<Bytes>> {
        let batch = self.traffic.next_batch();
        let mut builder = Request::post(&self.path).header(header::USER_AGENT, batch.user_agent);
        builder = if batch.beacon {
            // navigator.sendBeacon with a string: text/plain, no custom headers.
            builder.header(header::CONTENT_TYPE, "text/plain;charset=UTF-8")
        } else {
            builder
                .header(header::CONTENT_TYPE, "application/json")
                .header(header::ACCEPT, "application/json")
                .header(contract::key::PUBLIC_KEY_HEADER, &batch.key)
        };
        builder
            .body(Full::new(Bytes::from(batch.body())))
            .unwrap_or_else(|_| Request::new(Full::new(Bytes::new())))
    }

    fn units(&mut self, status: StatusCode, body: &[u8]) -> u64 {
        if !status.is_success() {
            return 0;
        }
        serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|v| v["accepted"].as_u64())
            .unwrap_or(0)
    }
}

async fn ingest(args: IngestArgs) -> anyhow::Result<Figure> {
    let (addr, base) = target(&args.url).await?;
    let path = format!("{}/api/v1/analytics", base.trim_end_matches('/'));
    let sites = Arc::new(Sites::from_file(&args.snapshot)?);
    let run = args
        .run
        .unwrap_or_else(|| format!("lg{:08x}", rand::random::<u32>()));
    clickhouse::check_run_id(&run)?;
    let (tally, cpu) = run_load(&args.label, &args.load, addr, |worker| Browser {
        traffic: Traffic::new(Arc::clone(&sites), &run, worker as u64),
        path: path.clone(),
    })
    .await?;
    if let Some(url) = &args.verify_clickhouse {
        let accepted = tally.units_all();
        eprintln!("run {run}: waiting for {accepted} accepted events in ClickHouse");
        let timeout = Duration::from_secs(args.verify_timeout);
        clickhouse::verify_landed(
            &ClickHouse::new(url),
            &args.database,
            &run,
            accepted,
            timeout,
        )
        .await?;
        eprintln!("run {run}: all {accepted} accepted events are in ClickHouse");
    }
    Ok(args.label.load_figure(&tally, "events", cpu))
}

async fn get(args: GetArgs) -> anyhow::Result<Figure> {
    let (addr, path) = target(&args.url).await?;
    let get = Get::new(&path, &args.headers)?;
    let (tally, cpu) = run_load(&args.label, &args.load, addr, |_| Get {
        uri: get.uri.clone(),
        headers: get.headers.clone(),
    })
    .await?;
    Ok(args.label.load_figure(&tally, "requests", cpu))
}

async fn produce(args: ProduceArgs) -> anyhow::Result<Figure> {
    let target = args.kafka.clone();
    kafka_kit::client::ensure_topics(
        kafka_kit::client::client_config(&target.brokers, "loadgen"),
        &[&target.topic],
        args.partitions,
    )
    .await?;
    let sites = Arc::new(Sites::from_file(&args.snapshot)?);
    let count = if args.top_up {
        let kafka = target.clone();
        let held = tokio::task::spawn_blocking(move || kafka::held(&kafka)).await??;
        eprintln!("{} holds {held} messages", target.topic);
        args.events.saturating_sub(held)
    } else {
        args.events
    };
    let mut messages = kafka::messages(&mut Traffic::new(sites, &args.run, 1), count);
    if let Some(at) = args.poison_at {
        messages.insert(
            at.min(messages.len()),
            ("poison".into(), b"not an event".to_vec()),
        );
    }
    let bytes: usize = messages.iter().map(|(k, v)| k.len() + v.len()).sum();
    let bytes_per_unit = (count > 0).then(|| bytes as f64 / count as f64);
    let linger_ms = args.linger_ms;
    let send = tokio::task::spawn_blocking(move || kafka::produce(&target, linger_ms, &messages));
    let (outcome, cpu) = watched(&args.label, async { send.await? }).await?;
    anyhow::ensure!(
        outcome.failed == 0,
        "{} of {count} messages failed",
        outcome.failed
    );
    let rate = outcome.delivered as f64 / outcome.elapsed.as_secs_f64().max(1e-9);
    Ok(Figure {
        bytes_per_unit,
        ..args.label.figure("events", rate, outcome.delivered, cpu)
    })
}

async fn insert(args: InsertArgs) -> anyhow::Result<Figure> {
    let sites = Arc::new(Sites::from_file(&args.snapshot)?);
    let now = contract::event::now_millis();
    let mut traffic = Traffic::new(sites, &args.run, 1);
    let mut rows = Vec::with_capacity(args.rows as usize);
    while (rows.len() as u64) < args.rows {
        rows.extend(
            traffic
                .next_messages(now)
                .into_iter()
                .map(consumer::EventRow::from),
        );
    }
    rows.truncate(args.rows as usize);
    let clickhouse = ClickHouse::new(&args.clickhouse);
    clickhouse.recreate(&args.database).await?;
    let (elapsed, cpu) = watched(
        &args.label,
        clickhouse::reference_insert(&clickhouse, &args.database, &rows, args.batch),
    )
    .await?;
    let stored = clickhouse
        .count(&format!("SELECT count() FROM {}.events", args.database))
        .await?;
    anyhow::ensure!(stored == args.rows, "{stored} rows stored of {}", args.rows);
    let rate = args.rows as f64 / elapsed.as_secs_f64().max(1e-9);
    Ok(args.label.figure("rows", rate, args.rows, cpu))
}

async fn wait_rows(args: WaitArgs) -> anyhow::Result<Figure> {
    let clickhouse = ClickHouse::new(&args.clickhouse);
    let timeout = Duration::from_secs(args.timeout);
    let watch = args.label.watch()?;
    let (drain, cpu) =
        clickhouse::wait_rows(&clickhouse, &args.table, args.rows, timeout, &watch).await?;
    Ok(Figure {
        rss_kib: args.pid.map(peak_rss_kib).transpose()?,
        ..args.label.figure("rows", drain.rate, drain.rows, cpu)
    })
}

/// VmHWM of /proc/PID/status: the most resident memory the process ever had.
fn peak_rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("no process {pid}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmHWM line")
}
