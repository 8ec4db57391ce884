//! The test kit: where the test broker and ClickHouse are, unique names so tests never
//! share a topic, group or database, and the three services started through the same
//! `Application::build` path as production, on port 0.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
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

/// A snapshot of one live experiment, `exp_1` (one variant, `var_1`), for one key.
pub fn one_experiment_snapshot(public_key: &str) -> SnapshotFile {
    SnapshotFile::new(&serde_json::json!({
        "version": 1,
        "experiments": [{ "id": "exp_1", "status": "live", "variants": [
            { "id": "var_1", "weight": 100, "control": true, "parts": {} }] }],
        "keys": [{ "publicKey": public_key, "experiments": ["exp_1"] }]
    }))
}

/// A client's batch of `n` impressions of `exp_1` with client-chosen ids, and those ids.
pub fn client_batch(session: &str, n: usize) -> (serde_json::Value, Vec<uuid::Uuid>) {
    let ids: Vec<uuid::Uuid> = (0..n).map(|_| uuid::Uuid::new_v4()).collect();
    let events: Vec<_> = ids
        .iter()
        .map(|id| {
            serde_json::json!({ "eventId": id.to_string(), "eventName": "impression",
                                "experimentId": "exp_1", "sessionId": session })
        })
        .collect();
    (serde_json::json!({ "events": events }), ids)
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

    /// Asks the service to stop and waits for it, [`STOP_TIMEOUT`] at most: a service that
    /// does not stop by then is aborted and reported as an error.
    pub async fn stop(self) -> anyhow::Result<()> {
        self.stop_within(STOP_TIMEOUT).await
    }

    async fn stop_within(mut self, limit: Duration) -> anyhow::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match tokio::time::timeout(limit, &mut self.task).await {
            Ok(ended) => ended?,
            Err(_) => {
                self.task.abort();
                anyhow::bail!("the service on {} did not stop within {limit:?}", self.addr)
            }
        }
    }
}

/// How long [`Running::stop`] waits: a drain, a last insert and a commit, on a busy machine.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(60);

/// A built service run until [`Running::stop`]; `run` is its `run_until`.
fn running<F>(
    addr: SocketAddr,
    run: impl FnOnce(Pin<Box<dyn Future<Output = ()> + Send>>) -> F,
) -> Running
where
    F: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(run(Box::pin(async move {
        let _ = stopped.await;
    })));
    Running {
        addr,
        stop: Some(stop),
        task,
    }
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
    http_kit::telemetry::init_test_logging();
    let app = ingest::Application::build(config)
        .await
        .expect("ingest builds");
    running(app.local_addr(), |shutdown| app.run_until(shutdown))
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
    http_kit::telemetry::init_test_logging();
    let app = config_api::Application::build(config)
        .await
        .expect("config-api builds");
    running(app.local_addr(), |shutdown| app.run_until(shutdown))
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
    start_consumer_counted(config).await.0
}

/// A started consumer and its counts.
pub async fn start_consumer_counted(config: consumer::Config) -> (Running, Arc<consumer::Stats>) {
    http_kit::telemetry::init_test_logging();
    let app = consumer::Application::build(config)
        .await
        .expect("consumer builds");
    let stats = app.stats();
    (
        running(app.local_addr(), |shutdown| app.run_until(shutdown)),
        stats,
    )
}

pub fn clickhouse(database: &str) -> clickhouse::Client {
    clickhouse_at(&clickhouse_url(), database)
}

pub fn clickhouse_at(url: &str, database: &str) -> clickhouse::Client {
    clickhouse::Client::default()
        .with_url(url)
        .with_database(database)
        .with_validation(false)
}

/// `(rows, rows counted once with FINAL)` of `events`, once `FINAL` counts `want`.
pub async fn wait_for_events(
    client: &clickhouse::Client,
    want: u64,
    timeout: Duration,
) -> (u64, u64) {
    eventually(timeout, &format!("{want} events in ClickHouse"), || async {
        let once: u64 = client
            .query("SELECT count() FROM events FINAL")
            .fetch_one()
            .await
            .ok()?;
        if once < want {
            return None;
        }
        let raw: u64 = client
            .query("SELECT count() FROM events")
            .fetch_one()
            .await
            .ok()?;
        Some((raw, once))
    })
    .await
}

/// Calls `probe` every 200 ms until it returns `Some`, for at most `timeout`: a probe
/// still running at the deadline is cut there, so a hung probe fails the test in time.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match tokio::time::timeout_at(deadline, probe()).await {
            Ok(Some(value)) => return value,
            Ok(None) => {}
            // The deadline passed while a probe ran (it may hang), or during the last pause.
            Err(_) => panic!("timed out waiting for {what} ({timeout:?})"),
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what} ({timeout:?})"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The value of an unlabelled metric in a Prometheus text, `None` when it is absent
/// (never recorded).
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
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

/// A Tansu broker of one test's own, for tests that pause or stop it. The binary is
/// `TEST_TANSU_BIN` (set by `scripts/test`), else `tansu` on PATH.
pub struct PrivateBroker {
    child: std::process::Child,
    pub brokers: String,
    /// The folder of the SQLite storage, when the broker has one.
    _dir: Option<tempfile::TempDir>,
    /// The proxy every client goes through, when the broker has one.
    proxy: Option<DelayProxy>,
}

impl PrivateBroker {
    /// A broker with memory storage.
    pub async fn start() -> Self {
        Self::start_in(None, None).await
    }

    /// A broker with SQLite storage, in a folder of its own: unlike the memory storage,
    /// it reports the offsets of a partition's end (the memory storage answers 1).
    pub async fn start_sqlite() -> Self {
        Self::start_in(Some(tempfile::tempdir().expect("a temporary folder")), None).await
    }

    /// A broker with memory storage that clients reach only through a [`DelayProxy`] (it
    /// advertises the proxy's address): [`PrivateBroker::set_delay`] makes it slow.
    pub async fn start_behind_proxy() -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("the proxy's port");
        Self::start_in(None, Some(listener)).await
    }

    /// How late every byte between the clients and the broker arrives, each way.
    pub fn set_delay(&self, delay: Duration) {
        self.proxy
            .as_ref()
            .expect("a broker started behind a proxy")
            .set_delay(delay);
    }

    async fn start_in(
        dir: Option<tempfile::TempDir>,
        proxy: Option<std::net::TcpListener>,
    ) -> Self {
        let port = free_port();
        let bin = std::env::var("TEST_TANSU_BIN").unwrap_or_else(|_| "tansu".into());
        let url = format!("tcp://127.0.0.1:{port}");
        let advertised = match &proxy {
            Some(listener) => format!("tcp://{}", listener.local_addr().expect("address")),
            None => url.clone(),
        };
        let mut command = std::process::Command::new(&bin);
        command.args([
            "broker",
            "--listener-url",
            &url,
            "--advertised-listener-url",
            &advertised,
        ]);
        match &dir {
            // The SQLite path is relative to the broker's working folder.
            Some(dir) => command
                .current_dir(dir.path())
                .args(["--storage-engine", "sqlite://tansu.db"]),
            None => command.args(["--storage-engine", "memory://tansu/"]),
        };
        let child = command
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
        let proxy = proxy.map(|listener| {
            DelayProxy::serve(listener, brokers.parse().expect("the broker's address"))
        });
        Self {
            child,
            brokers: proxy.as_ref().map_or(brokers, |p| p.addr.to_string()),
            _dir: dir,
            proxy,
        }
    }

    /// SIGSTOP: the broker holds its connections but answers nothing.
    pub fn pause(&self) {
        send_signal(self.child.id(), "-STOP");
    }

    pub fn resume(&self) {
        send_signal(self.child.id(), "-CONT");
    }
}

/// A TCP proxy that forwards everything, both ways, a delay after it arrived, in order; the
/// delay may change while it runs. A server behind it answers slowly rather than not at all.
/// It runs on a thread of its own, so that a test blocking its runtime does not stop it.
pub struct DelayProxy {
    pub addr: SocketAddr,
    delay_ms: Arc<AtomicU64>,
    stop: Option<oneshot::Sender<()>>,
}

impl DelayProxy {
    /// Forwards the connections `listener` accepts to `target`.
    pub fn serve(listener: std::net::TcpListener, target: SocketAddr) -> Self {
        let addr = listener.local_addr().expect("the proxy's address");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let delay_ms = Arc::new(AtomicU64::new(0));
        let delay = delay_ms.clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("the proxy's runtime");
        std::thread::spawn(move || {
            runtime.block_on(async move {
                let listener =
                    tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
                let accept = async {
                    while let Ok((client, _)) = listener.accept().await {
                        let delay = delay.clone();
                        tokio::spawn(async move {
                            let Ok(server) = tokio::net::TcpStream::connect(target).await else {
                                return;
                            };
                            let (from_client, to_client) = client.into_split();
                            let (from_server, to_server) = server.into_split();
                            tokio::join!(
                                forward_late(from_client, to_server, delay.clone()),
                                forward_late(from_server, to_client, delay),
                            );
                        });
                    }
                };
                tokio::select! {
                    () = accept => {}
                    _ = stopped => {}
                }
            });
        });
        Self {
            addr,
            delay_ms,
            stop: Some(stop),
        }
    }

    pub fn set_delay(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.delay_ms.store(ms, Ordering::Relaxed);
    }
}

impl Drop for DelayProxy {
    /// Stops the proxy and closes its connections.
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Copies `from` to `to`, writing each chunk the delay after it was read, in order.
async fn forward_late(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay_ms: Arc<AtomicU64>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (chunks, mut due) = tokio::sync::mpsc::unbounded_channel();
    let read = async move {
        let mut buffer = vec![0; 64 * 1024];
        while let Ok(n @ 1..) = from.read(&mut buffer).await {
            let delay = delay_ms.load(Ordering::Relaxed);
            let at = tokio::time::Instant::now() + Duration::from_millis(delay);
            if chunks.send((at, buffer[..n].to_vec())).is_err() {
                break;
            }
        }
    };
    let write = async move {
        while let Some((at, chunk)) = due.recv().await {
            tokio::time::sleep_until(at).await;
            if to.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(read, write);
}

impl Drop for PrivateBroker {
    fn drop(&mut self) {
        self.resume();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits (90 s at most) until a service's /readyz says ready (200) or not (503).
pub async fn until_ready(readyz: &str, ready: bool, what: &str) {
    eventually(Duration::from_secs(90), what, || async {
        let status = reqwest::get(readyz).await.ok()?.status();
        let answer = if ready {
            status.is_success()
        } else {
            status == reqwest::StatusCode::SERVICE_UNAVAILABLE
        };
        answer.then_some(())
    })
    .await;
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

/// A v1 event message, as the ingest writes it.
pub fn event_message(public_key: &str, session: &str, name: &str) -> contract::event::EventMessage {
    let envelope = contract::event::Envelope {
        received_at: contract::event::now_millis(),
        public_key: public_key.into(),
        user_agent: "test".into(),
        sent_at: None,
    };
    contract::event::EventMessage::from_client(
        &serde_json::json!({ "eventName": name, "experimentId": "exp_1", "sessionId": session }),
        &envelope,
    )
    .expect("valid event")
}

/// A process started by a test, killed (SIGKILL) and reaped at the latest when dropped,
/// so that a failing test leaves nothing running.
pub struct ChildProcess(pub std::process::Child);

impl ChildProcess {
    /// SIGKILL, then wait for the exit.
    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Path of a binary of the workspace, built beside the tests (in their profile) by
/// `cargo build --workspace --bins` (`scripts/test` does it first).
pub fn workspace_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} not built: build the binaries first, in the tests' profile \
         (cargo build [--release] --workspace --bins)",
        path.display()
    );
    path
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A process frozen with SIGSTOP, continued with SIGCONT when this guard is dropped: a
/// test that fails while a server is frozen does not leave it frozen for the next one.
pub struct Paused(u32);

impl Paused {
    pub fn new(pid: u32) -> Self {
        send_signal(pid, "-STOP");
        Self(pid)
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &self.0.to_string()])
            .status();
    }
}

pub fn send_signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .arg(signal)
        .arg(pid.to_string())
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill {signal} {pid} failed");
}

/// A ClickHouse server of one test's own (run as the `clickhouse` user, from the
/// project's config template), for tests that pause or stop it.
pub struct PrivateClickHouse {
    dir: tempfile::TempDir,
    http_port: u16,
    child: Option<std::process::Child>,
}

impl PrivateClickHouse {
    pub async fn start() -> Self {
        let dir = tempfile::tempdir().expect("temporary folder");
        let http_port = free_port();
        let tcp_port = free_port();
        let template = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/clickhouse");
        let config = std::fs::read_to_string(template.join("config.xml"))
            .expect("config template")
            .replace("@DIR@", &dir.path().display().to_string())
            .replace("@HTTP_PORT@", &http_port.to_string())
            .replace("@TCP_PORT@", &tcp_port.to_string());
        std::fs::write(dir.path().join("config.xml"), config).expect("config written");
        std::fs::copy(template.join("users.xml"), dir.path().join("users.xml")).expect("users");
        for sub in ["data", "tmp", "user_files", "format_schemas", "log"] {
            std::fs::create_dir_all(dir.path().join(sub)).expect("folder");
        }
        let status = std::process::Command::new("chown")
            .args(["-R", "clickhouse:clickhouse"])
            .arg(dir.path())
            .status()
            .expect("chown runs");
        assert!(status.success(), "chown failed");
        let mut server = Self {
            dir,
            http_port,
            child: None,
        };
        server.start_again().await;
        server
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.http_port)
    }

    /// Starts the server (again) on the same data.
    pub async fn start_again(&mut self) {
        let child = std::process::Command::new("setpriv")
            .args([
                "--reuid",
                "clickhouse",
                "--regid",
                "clickhouse",
                "--init-groups",
                "--",
            ])
            .arg(clickhouse_server_path())
            .arg(format!(
                "--config-file={}",
                self.dir.path().join("config.xml").display()
            ))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("clickhouse-server starts");
        self.child = Some(child);
        let ping = format!("{}/ping", self.url());
        eventually(Duration::from_secs(60), "the private ClickHouse", || {
            let ping = ping.clone();
            async move {
                reqwest::get(&ping)
                    .await
                    .ok()?
                    .status()
                    .is_success()
                    .then_some(())
            }
        })
        .await;
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// SIGSTOP: connections stay open, nothing answers.
    pub fn pause(&self) {
        send_signal(self.pid(), "-STOP");
    }

    pub fn resume(&self) {
        send_signal(self.pid(), "-CONT");
    }

    /// SIGTERM and wait: the port closes.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            send_signal(child.id(), "-CONT");
            send_signal(child.id(), "-TERM");
            let _ = child.wait();
        }
    }
}

impl Drop for PrivateClickHouse {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn clickhouse_server_path() -> PathBuf {
    ["/usr/sbin/clickhouse-server", "/usr/bin/clickhouse-server"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("clickhouse-server"))
}

/// The nginx front's configuration as `scripts/up` renders it (`render_front` of
/// `scripts/lib.sh`), its files in `dir`.
pub fn render_front(dir: &Path, listen: &str, ingest: &str, config_api: &str) -> String {
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/lib.sh");
    let rendered = std::process::Command::new("bash")
        .args(["-c", r#"source "$0" && render_front "$@""#])
        .arg(&lib)
        .args([&dir.display().to_string(), listen, ingest, config_api])
        .output()
        .expect("bash runs");
    assert!(rendered.status.success(), "render_front failed");
    String::from_utf8(rendered.stdout).expect("text")
}

/// An nginx front of one test's own (`deploy/nginx/local.conf.in`, rendered by the same
/// `render_front` as `scripts/up`) before the given ingest and config-api; it serves the
/// SDK from `sdk/dist` too.
pub struct Front {
    _dir: tempfile::TempDir,
    conf: PathBuf,
    pub port: u16,
}

impl Front {
    pub async fn start(ingest: SocketAddr, config_api: SocketAddr) -> Self {
        let dir = tempfile::tempdir().expect("temporary folder");
        std::fs::create_dir_all(dir.path().join("tmp")).expect("folder");
        let port = free_port();
        let rendered = render_front(
            dir.path(),
            &format!("127.0.0.1:{port}"),
            &ingest.to_string(),
            &config_api.to_string(),
        );
        let conf = dir.path().join("nginx.conf");
        std::fs::write(&conf, rendered).expect("config written");
        let status = std::process::Command::new("nginx")
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&conf)
            .status()
            .expect("nginx starts");
        assert!(status.success(), "nginx failed to start");
        let health = format!("http://127.0.0.1:{port}/healthz");
        eventually(Duration::from_secs(20), "the nginx front", || {
            let health = health.clone();
            async move { reqwest::get(&health).await.ok().map(|_| ()) }
        })
        .await;
        Self {
            _dir: dir,
            conf,
            port,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The front's access log (one line per request, nginx's combined format).
    pub fn access_log(&self) -> PathBuf {
        self.conf.with_file_name("access.log")
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        let _ = std::process::Command::new("nginx")
            .arg("-p")
            .arg(self.conf.parent().expect("folder"))
            .arg("-c")
            .arg(&self.conf)
            .args(["-s", "stop"])
            .status();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn eventually_cuts_a_hung_probe_at_its_deadline() {
        let waiting = tokio::spawn(eventually(Duration::from_millis(300), "a reply", || {
            std::future::pending::<Option<()>>()
        }));
        let ended = tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("eventually gave up by its deadline");
        let panic = ended.expect_err("it fails the test").into_panic();
        let message = panic.downcast_ref::<String>().expect("a message");
        assert!(message.contains("a reply"), "{message}");
    }

    #[tokio::test]
    async fn a_service_that_does_not_stop_is_reported_within_the_limit() {
        let addr = "127.0.0.1:9".parse().expect("an address");
        let deaf = running(addr, |_shutdown| async {
            std::future::pending::<()>().await;
            Ok(())
        });
        let stopped = tokio::time::timeout(
            Duration::from_secs(10),
            deaf.stop_within(Duration::from_millis(300)),
        )
        .await
        .expect("stop gave up within its limit");
        let error = stopped.expect_err("reported as an error").to_string();
        assert!(error.contains("did not stop"), "{error}");
    }
}
