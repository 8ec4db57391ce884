//! The test kit: where the test broker and ClickHouse are, unique names so tests never
//! share a topic, group or database, and the three services started through the same
//! `Application::build` path as production, on port 0.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Kafka of the tests: `TEST_KAFKA_BROKERS`, default the one `scripts/test` starts.
pub fn kafka_brokers() -> String {
    std::env::var("TEST_KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:19092".into())
}

/// ClickHouse of the tests: `TEST_CLICKHOUSE_URL`, default the one `scripts/test` starts.
pub fn clickhouse_url() -> String {
    std::env::var("TEST_CLICKHOUSE_URL").unwrap_or_else(|_| "http://127.0.0.1:18123".into())
}

/// `prefix` followed by a random suffix of letters and digits.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}{}", uuid::Uuid::new_v4().simple())
}

/// A snapshot file in a temporary folder that lives as long as this value.
pub struct SnapshotFile {
    _dir: tempfile::TempDir,
    pub path: PathBuf,
}

impl SnapshotFile {
    pub fn new(document: &serde_json::Value) -> Self {
        let dir = tempfile::tempdir().expect("temporary folder");
        let path = dir.path().join("experiments.json");
        std::fs::write(&path, document.to_string()).expect("snapshot written");
        Self { _dir: dir, path }
    }

    /// Replaces the file by rename, as a deploy tool would.
    pub fn replace(&self, document: &serde_json::Value) {
        let tmp = self.path.with_extension("tmp");
        std::fs::write(&tmp, document.to_string()).expect("snapshot written");
        std::fs::rename(&tmp, &self.path).expect("snapshot renamed");
    }
}

/// A service running in this process; `stop` asks it to shut down and waits.
pub struct Running {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Running {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task).await?
    }
}

fn shutdown_pair() -> (
    oneshot::Sender<()>,
    impl Future<Output = ()> + Send + 'static,
) {
    let (tx, rx) = oneshot::channel::<()>();
    (tx, async move {
        let _ = rx.await;
    })
}

/// `base` flags (`--name=value`) with `extra` added; an extra flag replaces a base one of
/// the same name.
fn with_overrides(base: Vec<String>, extra: &[&str]) -> Vec<String> {
    let name = |arg: &str| arg.split('=').next().unwrap_or(arg).to_owned();
    let overridden: Vec<String> = extra.iter().map(|e| name(e)).collect();
    base.into_iter()
        .filter(|arg| !overridden.contains(&name(arg)))
        .chain(extra.iter().map(|e| e.to_string()))
        .collect()
}

/// Ingest settings for tests: port 0, the test broker, `topic`, `snapshot`.
pub fn ingest_config(snapshot: &Path, topic: &str, extra: &[&str]) -> ingest::Config {
    let args = vec![
        "ingest".to_owned(),
        "--listen=127.0.0.1:0".into(),
        format!("--kafka-brokers={}", kafka_brokers()),
        format!("--topic={topic}"),
        format!("--snapshot={}", snapshot.display()),
        "--snapshot-poll-interval-ms=100".into(),
    ];
    ingest::Config::parse_from(with_overrides(args, extra))
}

pub async fn start_ingest(config: ingest::Config) -> Running {
    common::telemetry::init_test_logging();
    let app = ingest::Application::build(config)
        .await
        .expect("ingest builds");
    let addr = app.local_addr();
    let (stop, shutdown) = shutdown_pair();
    let task = tokio::spawn(app.run_until(shutdown));
    Running {
        addr,
        stop: Some(stop),
        task,
    }
}

pub async fn start_config_api(snapshot: &Path) -> Running {
    start_config_api_with(config_api::Config::parse_from([
        "config-api".to_owned(),
        "--listen=127.0.0.1:0".into(),
        format!("--snapshot={}", snapshot.display()),
        "--snapshot-poll-interval-ms=100".into(),
    ]))
    .await
}

pub async fn start_config_api_with(config: config_api::Config) -> Running {
    common::telemetry::init_test_logging();
    let app = config_api::Application::build(config)
        .await
        .expect("config-api builds");
    let addr = app.local_addr();
    let (stop, shutdown) = shutdown_pair();
    let task = tokio::spawn(app.run_until(shutdown));
    Running {
        addr,
        stop: Some(stop),
        task,
    }
}

/// Names one consumer's topic, dead-letter topic, group and database.
#[derive(Clone, Debug)]
pub struct ConsumerNames {
    pub topic: String,
    pub dlq_topic: String,
    pub group: String,
    pub database: String,
}

impl ConsumerNames {
    pub fn unique() -> Self {
        Self {
            topic: unique("events-"),
            dlq_topic: unique("dlq-"),
            group: unique("group-"),
            database: unique("test_"),
        }
    }
}

pub fn consumer_config(names: &ConsumerNames, extra: &[&str]) -> consumer::Config {
    let args = vec![
        "consumer".to_owned(),
        "--listen=127.0.0.1:0".into(),
        format!("--kafka-brokers={}", kafka_brokers()),
        format!("--topic={}", names.topic),
        format!("--dlq-topic={}", names.dlq_topic),
        format!("--group-id={}", names.group),
        format!("--clickhouse-url={}", clickhouse_url()),
        format!("--clickhouse-database={}", names.database),
        "--batch-max-wait-ms=200".into(),
    ];
    consumer::Config::parse_from(with_overrides(args, extra))
}

pub async fn start_consumer(config: consumer::Config) -> Running {
    common::telemetry::init_test_logging();
    let app = consumer::Application::build(config)
        .await
        .expect("consumer builds");
    let addr = app.local_addr();
    let (stop, shutdown) = shutdown_pair();
    let task = tokio::spawn(app.run_until(shutdown));
    Running {
        addr,
        stop: Some(stop),
        task,
    }
}

pub fn clickhouse(database: &str) -> clickhouse::Client {
    clickhouse::Client::default()
        .with_url(clickhouse_url())
        .with_database(database)
        .with_validation(false)
}

/// Calls `probe` every 200 ms until it returns `Some`, for at most `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Drops a test database; for the end of a test.
pub async fn drop_database(database: &str) {
    let _ = clickhouse("default")
        .query(&format!("DROP DATABASE IF EXISTS {database}"))
        .execute()
        .await;
}

/// Reads `topic` from the beginning of every partition, without a consumer group (a
/// group join takes seconds on Tansu), until `want` messages arrived or `timeout` passed.
pub async fn read_topic(
    topic: &str,
    want: usize,
    timeout: Duration,
) -> Vec<rdkafka::message::OwnedMessage> {
    use rdkafka::consumer::{Consumer, StreamConsumer};
    use rdkafka::{Message, Offset, TopicPartitionList};

    let consumer: StreamConsumer = common::kafka::client_config(&kafka_brokers())
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

/// A Tansu broker of one test's own, for tests that pause or stop it. The binary is
/// `TEST_TANSU_BIN` (set by `scripts/test`), else `tansu` on PATH.
pub struct PrivateBroker {
    child: std::process::Child,
    pub brokers: String,
}

impl PrivateBroker {
    pub async fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let bin = std::env::var("TEST_TANSU_BIN").unwrap_or_else(|_| "tansu".into());
        let url = format!("tcp://127.0.0.1:{port}");
        let child = std::process::Command::new(&bin)
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
            ])
            .args(["--storage-engine", "memory://tansu/"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {bin}: {e}"));
        let brokers = format!("127.0.0.1:{port}");
        let addr = brokers.clone();
        eventually(Duration::from_secs(20), "the private broker", || {
            let addr = addr.clone();
            async move { tokio::net::TcpStream::connect(addr).await.ok().map(|_| ()) }
        })
        .await;
        Self { child, brokers }
    }

    fn signal(&self, signal: &str) {
        let status = std::process::Command::new("kill")
            .arg(signal)
            .arg(self.child.id().to_string())
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill {signal} failed");
    }

    /// SIGSTOP: the broker holds its connections but answers nothing.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    pub fn resume(&self) {
        self.signal("-CONT");
    }
}

impl Drop for PrivateBroker {
    fn drop(&mut self) {
        self.resume();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
