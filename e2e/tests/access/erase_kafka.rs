//! What `analytics-erase` cannot reach, and how long it stays (docs/privacy.md): the
//! Kafka topics keep an erased visitor's raw events until their retention
//! (`KAFKA_RETENTION_HOURS`, set on the topics the services create, and said in the
//! command's report), after which Tansu's SQLite storage has deleted them; the broker's
//! files and the services' logs are their owner's only; the nginx fronts log the client's
//! network, not its address nor its User-Agent; the deployment files put no ClickHouse
//! password on a command line and leave no passwordless `default` user on the network.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use clap::Parser;
use kafka_kit::client::{
    DEFAULT_RETENTION_HOURS, Ensured, KafkaArgs, TopicSettings, client_config, create_topics,
    topic_configs,
};
use rdkafka::Message;
use serde_yaml::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The services' Kafka flags, parsed as the ingest and the consumer parse them.
#[derive(clap::Parser)]
struct Services {
    #[command(flatten)]
    kafka: KafkaArgs,
}

fn kafka_args(brokers: &str, topic: &str, flags: &[&str]) -> KafkaArgs {
    let argv = ["x", "--kafka-brokers", brokers, "--topic", topic];
    Services::parse_from(argv.iter().chain(flags)).kafka
}

/// Every topic the broker at `brokers` lists (a metadata request for all topics creates
/// none).
fn topic_names(brokers: &str) -> Vec<String> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let client: BaseConsumer = client_config(brokers, "e2e")
        .create()
        .expect("metadata client");
    let metadata = client
        .fetch_metadata(None, Duration::from_secs(10))
        .expect("metadata");
    metadata
        .topics()
        .iter()
        .map(|t| t.name().to_owned())
        .collect()
}

#[tokio::test]
async fn the_services_create_their_topics_with_the_retention_of_kafka_retention_hours() {
    let brokers = e2e::kafka_brokers();
    let (events, dlq) = (e2e::unique("events-"), e2e::unique("dlq-"));
    let args = kafka_args(&brokers, &events, &["--kafka-retention-hours", "5"]);
    let ensured = args
        .ensure_topics("e2e", &[&events, &dlq])
        .await
        .expect("topics");
    assert_eq!(
        ensured,
        [
            (events.clone(), Ensured::Created),
            (dlq.clone(), Ensured::Created)
        ]
    );
    for topic in [&events, &dlq] {
        let configs = topic_configs(client_config(&brokers, "e2e"), topic)
            .await
            .expect("described");
        let want = BTreeMap::from([
            ("cleanup.policy".to_owned(), "delete".to_owned()),
            ("retention.ms".to_owned(), (5 * 3_600_000).to_string()),
            ("segment.ms".to_owned(), "3600000".to_owned()),
        ]);
        let got: BTreeMap<String, String> = configs
            .into_iter()
            .filter(|(name, _)| want.contains_key(name))
            .collect();
        assert_eq!(got, want, "{topic}");
    }
    // A start with another retention leaves the existing topics as they are, and says what
    // they keep (the warning's cause), rather than pretending its own horizon holds.
    let again = kafka_args(&brokers, &events, &[])
        .ensure_topics("e2e", &[&events])
        .await
        .expect("topics");
    assert_eq!(
        again,
        [(
            events.clone(),
            Ensured::Existed {
                retention_ms: Some("18000000".into())
            }
        )]
    );
}

#[tokio::test]
async fn with_topic_creation_off_the_services_create_no_topic() {
    let brokers = e2e::kafka_brokers();
    let topic = e2e::unique("events-");
    let args = kafka_args(&brokers, &topic, &["--kafka-create-topics", "false"]);
    let ensured = args.ensure_topics("e2e", &[&topic]).await.expect("nothing");
    assert_eq!(ensured, [(topic.clone(), Ensured::NotManaged)]);
    assert!(
        !topic_names(&brokers).contains(&topic),
        "{topic} was created"
    );
    // The same flags with creation on make it: the check above could see one.
    kafka_args(&brokers, &topic, &[])
        .ensure_topics("e2e", &[&topic])
        .await
        .expect("created");
    assert!(
        topic_names(&brokers).contains(&topic),
        "{topic} is not listed"
    );
}

/// A broker started as scripts/up starts its own (stack-kit), SQLite storage in a folder
/// of its own, stopped when dropped.
struct ScriptedTansu {
    dir: tempfile::TempDir,
    brokers: String,
}

impl ScriptedTansu {
    /// `TEST_TANSU_BIN` (set by scripts/test) is the broker, else `tansu` on PATH.
    fn start(maintenance_interval: &str) -> Self {
        let dir = tempfile::tempdir().expect("temporary folder");
        let port = e2e::free_port();
        let bin = std::env::var("TEST_TANSU_BIN").unwrap_or_else(|_| "tansu".into());
        stack_kit::tansu::start(&stack_kit::tansu::Broker {
            bin: Path::new(&bin),
            dir: &dir.path().join("tansu"),
            port,
            storage: stack_kit::tansu::Storage::Sqlite,
            maintenance_interval: Some(maintenance_interval),
        })
        .expect("the broker starts");
        Self {
            dir,
            brokers: format!("127.0.0.1:{port}"),
        }
    }

    fn folder(&self) -> PathBuf {
        self.dir.path().join("tansu")
    }
}

impl Drop for ScriptedTansu {
    fn drop(&mut self) {
        let _ = stack_kit::tansu::stop(&self.folder(), "tansu");
    }
}

/// Every record of `topic` readable from the beginning, without a group, after `quiet` of
/// silence. A partition's start that moved past the deleted records is no error: what
/// Kafka holds is what a reader gets.
async fn readable(brokers: &str, topic: &str, quiet: Duration) -> Vec<Vec<u8>> {
    use rdkafka::consumer::{Consumer, StreamConsumer};
    use rdkafka::{Offset, TopicPartitionList};
    let consumer: StreamConsumer = client_config(brokers, "e2e")
        .set("group.id", e2e::unique("reader-"))
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", "100")
        .create()
        .expect("reader");
    let mut partitions = TopicPartitionList::new();
    partitions
        .add_partition_offset(topic, 0, Offset::Beginning)
        .expect("partition");
    consumer.assign(&partitions).expect("assigned");
    let mut payloads = Vec::new();
    while let Ok(message) = tokio::time::timeout(quiet, consumer.recv()).await {
        let message = message.unwrap_or_else(|e| panic!("reading {topic}: {e}"));
        payloads.push(message.payload().unwrap_or_default().to_vec());
    }
    payloads
}

/// The records that name `visitor`.
fn of_visitor(records: &[Vec<u8>], visitor: &str) -> usize {
    records
        .iter()
        .filter(|r| String::from_utf8_lossy(r).contains(visitor))
        .count()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// Tansu 0.6.0 honours `retention.ms` with SQLite storage (its maintenance task deletes
/// the older records of every topic whose `cleanup.policy` says `delete`, every
/// `maintenance_interval`): a visitor's events sent to a topic of a 3-second horizon are
/// there at once and gone after it, while a topic of the default horizon keeps the same
/// events. The broker's folder and files are its owner's only.
#[tokio::test]
async fn an_erased_visitors_events_are_gone_from_the_broker_after_the_horizon() {
    let broker = ScriptedTansu::start("1s");
    let folder = broker.folder();
    let short = e2e::unique("events-");
    let kept = e2e::unique("events-");
    let horizon = TopicSettings {
        partitions: 1,
        retention: Duration::from_secs(3),
        ..TopicSettings::default()
    };
    let config = || client_config(&broker.brokers, "e2e");
    create_topics(config(), &[&short], &horizon)
        .await
        .expect("topic");
    create_topics(
        config(),
        &[&kept],
        &TopicSettings {
            partitions: 1,
            ..TopicSettings::default()
        },
    )
    .await
    .expect("topic");
    let visitor = e2e::unique("visitor-");
    let payloads: Vec<Vec<u8>> = (0..5)
        .map(|i| {
            serde_json::to_vec(&serde_json::json!({
                "eventName": "page_view", "visitorId": visitor, "sessionId": "s1", "n": i
            }))
            .expect("json")
        })
        .collect();
    let messages: Vec<(Option<&[u8]>, &[u8])> = payloads
        .iter()
        .map(|p| (Some(b"s1".as_slice()), p.as_slice()))
        .collect();
    for topic in [&short, &kept] {
        e2e::produce_all(&broker.brokers, topic, &messages).await;
    }
    assert_eq!(
        of_visitor(
            &readable(&broker.brokers, &short, Duration::from_secs(2)).await,
            &visitor
        ),
        5,
        "the events are readable before the horizon"
    );
    let started = std::time::Instant::now();
    e2e::eventually(
        Duration::from_secs(60),
        "the visitor's events to age out",
        || {
            let (brokers, short, visitor) =
                (broker.brokers.clone(), short.clone(), visitor.clone());
            async move {
                let records = readable(&brokers, &short, Duration::from_secs(1)).await;
                (of_visitor(&records, &visitor) == 0).then_some(())
            }
        },
    )
    .await;
    println!(
        "gone from the 3 s topic {:.1} s after the first read",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(
        of_visitor(
            &readable(&broker.brokers, &kept, Duration::from_secs(2)).await,
            &visitor
        ),
        5,
        "the topic of the default horizon keeps them: the deletion is the retention's"
    );

    assert_eq!(mode(&folder), 0o700, "{}", folder.display());
    let files: Vec<PathBuf> = std::fs::read_dir(&folder)
        .expect("broker folder")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_file())
        .collect();
    for name in ["tansu.db", "tansu.log"] {
        assert!(
            files.iter().any(|f| f.ends_with(name)),
            "{name} in {files:?}"
        );
    }
    for file in &files {
        assert_eq!(mode(file), 0o600, "{}", file.display());
    }
}

/// The report's last line, whatever ClickHouse held (here, an empty database: "Nothing
/// stored"), gives the horizon of the environment's `KAFKA_RETENTION_HOURS`.
#[tokio::test]
async fn analytics_erase_reports_the_kafka_horizon() {
    let bin = e2e::workspace_binary("analytics-erase");
    let database = e2e::unique("erase_kafka_");
    e2e::clickhouse("default")
        .query(&format!("CREATE DATABASE {database}"))
        .execute()
        .await
        .expect("database");
    let run = |retention: Option<&str>| {
        let mut command = Command::new(&bin);
        command
            .arg(format!("--clickhouse-url={}", e2e::clickhouse_url()))
            .arg(format!("--clickhouse-database={database}"))
            .arg(format!("--visitor-id={}", e2e::unique("v")))
            .env_remove("KAFKA_RETENTION_HOURS");
        if let Some(hours) = retention {
            command.env("KAFKA_RETENTION_HOURS", hours);
        }
        let output = command.output().expect("analytics-erase runs");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).expect("text")
    };
    let default = run(None);
    assert!(
        default.contains(&format!(
            "Kafka still holds this visitor's raw events until they age out: at most \
             KAFKA_RETENTION_HOURS={DEFAULT_RETENTION_HOURS} hours"
        )),
        "{default}"
    );
    let short = run(Some("5"));
    assert!(short.contains("KAFKA_RETENTION_HOURS=5 hours"), "{short}");
    let help = Command::new(&bin)
        .arg("--help")
        .output()
        .expect("analytics-erase runs");
    assert!(String::from_utf8_lossy(&help.stdout).contains("KAFKA_RETENTION_HOURS"));
    e2e::drop_database(&database).await;
}

/// The help of both services says what the retention means for an erasure, and the
/// privacy page says the same default.
#[test]
fn the_help_and_the_privacy_page_say_the_horizon() {
    use clap::CommandFactory;
    for (name, mut command) in [
        ("ingest", ingest::Config::command()),
        ("consumer", consumer::Config::command()),
    ] {
        let help = command.render_long_help().to_string();
        for said in [
            "KAFKA_RETENTION_HOURS",
            "horizon of an erasure",
            "KAFKA_REPLICATION_FACTOR",
            "KAFKA_CREATE_TOPICS",
        ] {
            assert!(help.contains(said), "{name} --help does not say {said:?}");
        }
    }
    let page = read("docs/privacy.md");
    for said in [
        format!("KAFKA_RETENTION_HOURS` (default {DEFAULT_RETENTION_HOURS})"),
        "analytics-events-dlq".to_owned(),
        "analyst_".to_owned(),
        "access.log".to_owned(),
    ] {
        assert!(
            page.contains(&said),
            "docs/privacy.md does not say {said:?}"
        );
    }
}

/// The block between `# BEGIN access log without personal data` and its END.
fn privacy_block(conf: &str) -> String {
    let lines: Vec<&str> = conf.lines().map(str::trim).collect();
    let begin = lines
        .iter()
        .position(|l| l.starts_with("# BEGIN access log without personal data"))
        .expect("BEGIN");
    let end = lines
        .iter()
        .position(|l| l.starts_with("# END access log without personal data"))
        .expect("END");
    lines[begin..=end].join("\n")
}

/// nginx running `conf` (a whole configuration) from `dir`, stopped when dropped.
struct Nginx {
    dir: PathBuf,
    conf: PathBuf,
}

impl Nginx {
    async fn start(dir: &Path, conf: String, port: u16) -> Self {
        std::fs::create_dir_all(dir.join("tmp")).expect("folder");
        let path = dir.join("nginx.conf");
        std::fs::write(&path, conf).expect("written");
        let nginx = Self {
            dir: dir.to_owned(),
            conf: path,
        };
        let status = nginx.command().status().expect("nginx runs");
        assert!(status.success(), "nginx did not start");
        let url = format!("http://127.0.0.1:{port}/");
        e2e::eventually(Duration::from_secs(20), "nginx", || {
            let url = url.clone();
            async move { reqwest::get(&url).await.ok().map(drop) }
        })
        .await;
        nginx
    }

    fn command(&self) -> Command {
        let mut command = Command::new("nginx");
        command.arg("-p").arg(&self.dir).arg("-c").arg(&self.conf);
        command
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.command().args(["-s", "stop"]).status();
    }
}

/// A request as a browser sends it, with a User-Agent and a Referer that name the person.
async fn browser_request(port: u16, path: &str) {
    let _ = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}{path}"))
        .header("User-Agent", "SecretAgent/7.0 (visitor-laptop)")
        .header(
            "Referer",
            "https://shop.example/account?email=jane%40example.com",
        )
        .send()
        .await
        .expect("an answer");
}

/// The line of `log` about `path` (nginx writes it just after its answer): the client's
/// /24 and the request, no address, no User-Agent, no Referer.
async fn assert_private_log(log: &Path, path: &str, front: &str) {
    let line = e2e::eventually(Duration::from_secs(10), "the access log's line", || {
        let (log, path) = (log.to_owned(), path.to_owned());
        async move {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let lines: Vec<String> = text
                .lines()
                .filter(|l| l.contains(&path))
                .map(String::from)
                .collect();
            assert!(lines.len() <= 1, "{text}");
            lines.into_iter().next()
        }
    })
    .await;
    assert!(line.starts_with("127.0.0.0 - - ["), "{front}: {line}");
    assert!(
        line.contains(&format!("\"GET {path} HTTP/1.1\"")),
        "{front}: {line}"
    );
    for personal in [
        "127.0.0.1",
        "SecretAgent",
        "visitor-laptop",
        "jane",
        "shop.example",
    ] {
        assert!(!line.contains(personal), "{front} logs {personal}: {line}");
    }
}

/// The three fronts (scripts/up's, docker-compose's, the SDK image's) log one format, and
/// each run by nginx logs a browser's request without its address or User-Agent.
#[tokio::test]
async fn the_nginx_fronts_log_the_clients_network_not_its_address_nor_its_browser() {
    let local_in = read("deploy/nginx/local.conf.in");
    let block = privacy_block(&local_in);
    for file in ["compose.conf", "sdk.conf"] {
        let conf = read(&format!("deploy/nginx/{file}"));
        assert_eq!(privacy_block(&conf), block, "{file} logs another format");
    }

    // scripts/up's front, rendered as it renders it.
    let front = e2e::Front::start(
        "127.0.0.1:9".parse().expect("address"),
        "127.0.0.1:9".parse().expect("address"),
    )
    .await;
    let path = format!("/{}?pk=pk_1", e2e::unique("nothing-"));
    browser_request(front.port, &path).await;
    assert_private_log(&front.access_log(), &path, "scripts/up's front").await;

    // The container fronts, their /etc/nginx files read from deploy/nginx and their log
    // in a folder of the test's.
    for file in ["compose.conf", "sdk.conf"] {
        let dir = tempfile::tempdir().expect("folder");
        let port = e2e::free_port();
        let nginx_dir = repo().join("deploy/nginx");
        let server = e2e::container_server(file, "127.0.0.1:9", "127.0.0.1:9")
            .replace("listen 8080;", &format!("listen 127.0.0.1:{port};"))
            .replace(
                "/var/log/nginx/access.log",
                &dir.path().join("access.log").display().to_string(),
            )
            .replace("/etc/nginx/", &format!("{}/", nginx_dir.display()));
        // The image's nginx.conf logs everything in its `main` format at the http level.
        let conf = format!(
            "pid {0}/nginx.pid;\nerror_log {0}/error.log;\nevents {{}}\nhttp {{\n\
             log_format main '$remote_addr - $remote_user [$time_local] \"$request\" \
             $status $body_bytes_sent \"$http_referer\" \"$http_user_agent\"';\n\
             access_log {0}/main.log main;\n{server}\n}}\n",
            dir.path().display()
        );
        let _nginx = Nginx::start(dir.path(), conf, port).await;
        let path = format!("/{}", e2e::unique("nothing-"));
        browser_request(port, &path).await;
        assert_private_log(&dir.path().join("access.log"), &path, file).await;
        let main = std::fs::read_to_string(dir.path().join("main.log")).unwrap_or_default();
        assert!(
            !main.contains(&path),
            "{file} also logs to the image's log: {main}"
        );
    }
}

fn str_of<'a>(v: &'a Value, what: &str) -> &'a str {
    v.as_str()
        .unwrap_or_else(|| panic!("{what} is not a string: {v:?}"))
}

/// Every ClickHouse server of docker-compose (single and cluster): a health check without
/// a password, no `default` user (the image replaces it with CLICKHOUSE_USER, and
/// no-default-user.xml removes it whatever the environment says).
#[test]
fn compose_clickhouse_has_no_password_on_a_command_line_and_no_default_user() {
    let merged: Value =
        serde_yaml::from_slice(&e2e::compose_cluster_config()).expect("merged YAML");
    let mut single: Value = serde_yaml::from_str(&read("docker-compose.yml")).expect("YAML");
    single.apply_merge().expect("merge keys");
    let mut servers = 0;
    for compose in [&single, &merged] {
        for (name, service) in compose["services"].as_mapping().expect("services") {
            let name = str_of(name, "name");
            let image = service["image"].as_str().unwrap_or_default();
            if !image.starts_with("clickhouse/clickhouse-server") {
                continue;
            }
            servers += 1;
            let test = serde_yaml::to_string(&service["healthcheck"]["test"]).expect("text");
            assert!(
                !test.to_lowercase().contains("password"),
                "{name}'s health check names a password: {test}"
            );
            assert!(test.contains("/ping"), "{name}: {test}");
            assert_ne!(
                service["environment"]["CLICKHOUSE_USER"].as_str(),
                Some("default"),
                "{name}"
            );
            let mounted = serde_yaml::to_string(&service["volumes"]).expect("text");
            assert!(
                mounted.contains(
                    "deploy/clickhouse/compose/no-default-user.xml:/etc/clickhouse-server/users.d/"
                ),
                "{name} does not remove `default`: {mounted}"
            );
        }
    }
    assert_eq!(servers, 5, "one server, then four in the cluster");
    let users = read("deploy/clickhouse/compose/no-default-user.xml");
    assert!(users.contains("<default remove=\"remove\"/>"), "{users}");
}

/// deploy/k8s: the services' topic settings, the Strimzi topics that stand for them (the
/// same retention, replication and partitions), and a `default` user of loopback only.
#[test]
fn kubernetes_topics_and_clickhouse_users_keep_the_same_horizon_and_no_open_default() {
    // The env file of the generated ConfigMap kafka-settings.
    let kafka = read("deploy/k8s/settings/kafka.env");
    let number = |key: &str| -> u64 {
        kafka
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key}"))
            .parse()
            .unwrap_or_else(|e| panic!("{key}: {e}"))
    };
    let hours = number("KAFKA_RETENTION_HOURS");
    assert_eq!(hours, u64::from(DEFAULT_RETENTION_HOURS));
    assert!(
        number("KAFKA_REPLICATION_FACTOR") >= 3,
        "production replication"
    );
    let topics: Vec<Value> =
        serde_yaml::Deserializer::from_str(&read("deploy/k8s/operators/kafka-topics.yaml"))
            .map(|doc| serde::Deserialize::deserialize(doc).expect("YAML"))
            .collect();
    let names: Vec<&str> = topics
        .iter()
        .map(|t| str_of(&t["spec"]["topicName"], "topicName"))
        .collect();
    assert_eq!(names, ["analytics-events", "analytics-events-dlq"]);
    for topic in &topics {
        let spec = &topic["spec"];
        assert_eq!(
            spec["config"]["retention.ms"].as_u64(),
            Some(hours * 3_600_000)
        );
        assert_eq!(spec["config"]["cleanup.policy"].as_str(), Some("delete"));
        let segment = spec["config"]["segment.ms"].as_u64().expect("segment.ms");
        assert!(segment <= 3_600_000, "segment.ms {segment}");
        assert_eq!(
            spec["replicas"].as_u64(),
            Some(number("KAFKA_REPLICATION_FACTOR"))
        );
        assert_eq!(
            spec["partitions"].as_u64(),
            Some(number("KAFKA_TOPIC_PARTITIONS"))
        );
    }
    let users: Value =
        serde_yaml::from_str(&read("deploy/k8s/operators/clickhouse-installation.yaml"))
            .expect("YAML");
    let users = &users["spec"]["configuration"]["users"];
    let networks: Vec<&str> = users["default/networks/ip"]
        .as_sequence()
        .expect("default/networks/ip")
        .iter()
        .map(|ip| str_of(ip, "ip"))
        .collect();
    assert_eq!(
        networks,
        ["127.0.0.1", "::1"],
        "`default` reaches no further"
    );
    assert!(
        users["default/password"].is_null(),
        "no password in a manifest"
    );
}
