//! The consumer against a real ClickHouse cluster: two shards of two replicas (18.16) on
//! ZooKeeper, started once by `scripts/test` (`TEST_CLICKHOUSE_CLUSTER_*`). The tests take
//! turns: one stops servers that the others' cluster-wide statements would wait for.

use std::path::PathBuf;
use std::time::Duration;

use clickhouse_kit::topology::Topology;
use e2e::{ConsumerNames, SnapshotFile};
use serde_json::json;
use tokio::sync::Mutex;

static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

const CLUSTER: &str = "analytics";

/// The test cluster: its servers' URLs per shard, and how to stop and start them.
struct Cluster {
    url: String,
    dir: PathBuf,
    ports: stack_kit::clickhouse::ClusterPorts,
}

impl Cluster {
    /// This test's turn with the cluster, made whole first: whatever an earlier test left
    /// frozen (SIGSTOP) is continued and whatever it left down is started, since a test
    /// killed at its time limit runs no drop guard.
    async fn take_turn() -> (tokio::sync::MutexGuard<'static, ()>, Self) {
        let turn = ONE_AT_A_TIME.lock().await;
        let cluster = Self::from_env();
        for n in 1..=4 {
            if let Some(pid) = cluster.pid(n) {
                e2e::resume(pid);
            }
        }
        cluster.start();
        (turn, cluster)
    }

    fn from_env() -> Self {
        let var =
            |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.into());
        let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        Self {
            url: var(
                "TEST_CLICKHOUSE_CLUSTER_URL",
                "http://127.0.0.1:28123,http://127.0.0.1:28124;\
                 http://127.0.0.1:28125,http://127.0.0.1:28126",
            ),
            dir: PathBuf::from(var(
                "TEST_CLICKHOUSE_CLUSTER_DIR",
                &repo.join(".run/test/cluster").display().to_string(),
            )),
            // ZooKeeper, then the first HTTP, native and interserver ports.
            ports: {
                let ports: Vec<u16> =
                    var("TEST_CLICKHOUSE_CLUSTER_PORTS", "22181 28123 29000 29009")
                        .split_whitespace()
                        .map(|p| p.parse().expect("a port"))
                        .collect();
                stack_kit::clickhouse::ClusterPorts {
                    zookeeper: ports[0],
                    http: ports[1],
                    tcp: ports[2],
                    interserver: ports[3],
                }
            },
        }
    }

    /// Server `n` (1 to 4: shard 1 is 1 and 2, shard 2 is 3 and 4).
    fn server(&self, n: usize) -> String {
        self.url
            .split([';', ','])
            .nth(n - 1)
            .expect("four servers")
            .to_owned()
    }

    fn client(&self, n: usize, database: &str) -> clickhouse::Client {
        e2e::clickhouse_at(&self.server(n), database)
    }

    fn topology(&self, database: &str) -> Topology {
        let args = consumer_args(&self.url, database);
        Topology::from_args(&args).expect("a cluster topology")
    }

    /// The pid of server `n`, if its pid file has one.
    fn pid(&self, n: usize) -> Option<u32> {
        let file = self.dir.join(format!("ch{n}/clickhouse.pid"));
        std::fs::read_to_string(file).ok()?.trim().parse().ok()
    }

    fn running_pid(&self, n: usize) -> u32 {
        self.pid(n)
            .unwrap_or_else(|| panic!("server {n} of the cluster has no pid file"))
    }

    /// Server `n` killed (SIGKILL), and gone: a start while it still dies would find it
    /// running and leave it dead.
    fn kill(&self, n: usize) {
        let pid = self.running_pid(n);
        e2e::send_signal(pid, "-KILL");
        assert!(
            stack_kit::process::wait_gone(pid, Duration::from_secs(10)),
            "server {n} still runs 10 s after SIGKILL"
        );
    }

    /// Server `n` frozen (SIGSTOP) until the guard is dropped, however the test ends.
    fn pause(&self, n: usize) -> e2e::Paused {
        e2e::Paused::new(self.running_pid(n))
    }

    /// Starts whatever of the cluster is not running, as `scripts/test` did.
    fn start(&self) {
        stack_kit::clickhouse::start_cluster(&e2e::repo(), &self.dir, self.ports)
            .expect("the cluster starts");
    }

    async fn drop_database(&self, database: &str) {
        let _ = self
            .client(1, "default")
            .query(&format!(
                "DROP DATABASE IF EXISTS {database} ON CLUSTER {CLUSTER}"
            ))
            .execute()
            .await;
    }
}

fn consumer_args(url: &str, database: &str) -> clickhouse_kit::ClickHouseArgs {
    use clap::Parser;
    #[derive(Parser)]
    struct Args {
        #[command(flatten)]
        clickhouse: clickhouse_kit::ClickHouseArgs,
    }
    Args::parse_from([
        "test".to_owned(),
        format!("--clickhouse-url={url}"),
        format!("--clickhouse-cluster={CLUSTER}"),
        format!("--clickhouse-database={database}"),
    ])
    .clickhouse
}

/// `(count() FINAL, distinct event ids)` of the Distributed `events` seen from server `n`.
async fn counted_once(cluster: &Cluster, n: usize, database: &str) -> Option<(u64, u64)> {
    cluster
        .client(n, database)
        .query("SELECT count(), uniqExact(event_id) FROM events FINAL")
        .fetch_one()
        .await
        .ok()
}

/// Waits until `events` counts `want` events once each, then checks that every row is on
/// its visitor's shard and that both replicas of each shard hold the same events.
async fn assert_landed_once(cluster: &Cluster, database: &str, want: u64) {
    let (once, ids) = e2e::eventually(
        Duration::from_secs(120),
        "every event in the cluster",
        || async {
            counted_once(cluster, 4, database)
                .await
                .filter(|(n, _)| *n >= want)
        },
    )
    .await;
    assert_eq!(
        (once, ids),
        (want, want),
        "each event once on the Distributed table"
    );
    for n in 1..=4 {
        let shard = (n - 1) / 2;
        let misplaced: u64 = cluster
            .client(n, database)
            .query("SELECT count() FROM events_local WHERE sipHash64(visitor_id) % 2 != ?")
            .bind(shard as u64)
            .fetch_one()
            .await
            .expect("local rows");
        assert_eq!(misplaced, 0, "server {n} holds rows of the other shard");
    }
    for pair in [(1, 2), (3, 4)] {
        let local = |n: usize| async move {
            cluster
                .client(n, database)
                .query("SELECT count(), uniqExact(event_id) FROM events_local FINAL")
                .fetch_one::<(u64, u64)>()
                .await
                .ok()
        };
        let (first, second) = e2e::eventually(
            Duration::from_secs(120),
            "both replicas of a shard alike",
            || async {
                let (a, b) = (local(pair.0).await?, local(pair.1).await?);
                (a == b && a.0 > 0).then_some((a, b))
            },
        )
        .await;
        assert_eq!(first.0, first.1, "server {} counts an event twice", pair.0);
        assert_eq!(
            second.0, second.1,
            "server {} counts an event twice",
            pair.1
        );
    }
}

#[tokio::test]
async fn migrations_on_cluster_are_idempotent_and_build_the_distributed_schema() {
    let (_turn, cluster) = Cluster::take_turn().await;
    let database = e2e::unique("cluster_");
    let topology = cluster.topology(&database);
    // Two consumers starting together, then a restart.
    let (a, b) = tokio::join!(
        schema::migrate_topology(&topology, &database, u32::MAX),
        schema::migrate_topology(&topology, &database, u32::MAX),
    );
    a.expect("first migrates");
    b.expect("second migrates");
    schema::migrate_topology(&topology, &database, u32::MAX)
        .await
        .expect("migrating again changes nothing");

    for n in 1..=4 {
        let client = cluster.client(n, &database);
        let tables: Vec<(String, String)> = client
            .query("SELECT name, engine FROM system.tables WHERE database = ? ORDER BY name")
            .bind(&database)
            .fetch_all()
            .await
            .expect("tables");
        let tables: Vec<(&str, &str)> = tables
            .iter()
            .map(|(n, e)| (n.as_str(), e.as_str()))
            .collect();
        assert_eq!(
            tables,
            [
                ("events", "Distributed"),
                ("events_local", "ReplicatedReplacingMergeTree"),
                ("experiment_daily", "View"),
                ("experiment_metric_definitions", "View"),
                ("experiment_metric_freshness", "View"),
                ("experiment_metric_results", "View"),
                ("experiment_metric_stale", "View"),
                ("experiment_metric_stored", "View"),
                ("experiment_metric_visitors", "View"),
                ("experiment_metrics", "ReplicatedReplacingMergeTree"),
                ("experiment_phase_settings", "View"),
                ("experiment_phase_variants", "View"),
                ("experiment_results", "View"),
                ("experiment_results_over_time", "View"),
                ("experiment_variant_counts", "View"),
                ("experiment_variant_counts_over_time", "View"),
                ("experiment_variants", "ReplicatedReplacingMergeTree"),
                ("experiment_variants_current", "View"),
                ("experiment_visitor_exposures", "View"),
                ("experiment_visitors", "Distributed"),
                (
                    "experiment_visitors_local",
                    "ReplicatedAggregatingMergeTree"
                ),
                ("experiment_visitors_mv3", "MaterializedView"),
                ("metric_refresh_marks", "ReplicatedReplacingMergeTree"),
                ("results_settings", "ReplicatedReplacingMergeTree"),
                ("results_settings_log", "ReplicatedMergeTree"),
                ("results_settings_log_mv", "MaterializedView"),
                ("schema_migrations", "ReplicatedMergeTree"),
                ("schema_views", "ReplicatedMergeTree"),
                ("visitor_event_counts", "Distributed"),
                ("visitor_event_counts_local", "ReplicatedSummingMergeTree"),
                ("visitor_event_counts_mv", "MaterializedView"),
                ("visitor_metric_values", "Distributed"),
                (
                    "visitor_metric_values_local",
                    "ReplicatedReplacingMergeTree"
                ),
            ],
            "server {n}"
        );
        // The Distributed tables were altered on every server, not only where the
        // migration ran.
        for (table, column) in [
            ("events", "event_time"),
            ("experiment_visitors", "first_conversion"),
        ] {
            let columns: Vec<String> = client
                .query("SELECT name FROM system.columns WHERE database = ? AND table = ?")
                .bind(&database)
                .bind(table)
                .fetch_all()
                .await
                .expect("columns");
            assert!(
                columns.iter().any(|c| c == column),
                "server {n}: {table}: {columns:?}"
            );
        }
        // One record of what ran, replicated to every server.
        let versions: Vec<u32> = e2e::eventually(
            Duration::from_secs(30),
            "schema_migrations replicated",
            || async {
                let v: Vec<u32> = client
                    .query("SELECT DISTINCT version FROM schema_migrations ORDER BY version")
                    .fetch_all()
                    .await
                    .ok()?;
                (v == schema::migration_versions()).then_some(v)
            },
        )
        .await;
        assert_eq!(versions, schema::migration_versions());
    }
    cluster.drop_database(&database).await;
}

/// Each arm's visitors and value of the default goal, as `client`'s server answers.
async fn conversion_rows(
    client: &clickhouse::Client,
) -> clickhouse::error::Result<Vec<(String, u64, f64)>> {
    client
        .query(
            "SELECT variant_id, visitors, value FROM experiment_metric_results \
             WHERE metric_id = 'conversion' ORDER BY variant_id",
        )
        .fetch_all()
        .await
}

/// The per-metric results answer through the Distributed tables, read on any server: two
/// visitors on (most likely) two shards, the default goal of their experiment.
#[tokio::test]
async fn metric_results_answer_on_the_cluster() {
    let (_turn, cluster) = Cluster::take_turn().await;
    let database = e2e::unique("cluster_");
    schema::migrate_topology(&cluster.topology(&database), &database, u32::MAX)
        .await
        .expect("migrates");
    let first = cluster.client(1, &database);
    for sql in [
        "INSERT INTO events (event_id, received_at, public_key, event_name, experiment_id, \
         variant_id, session_id, visitor_id, phase, event_time) VALUES \
         (toUUID('00000000-0000-4000-8000-000000000001'), toDateTime(1790000000), 'pk', 'impression', 'exp', 'a', 's1', \
          'visitor-1', 1, 1790000000000), \
         (toUUID('00000000-0000-4000-8000-000000000002'), toDateTime(1790000000), 'pk', 'impression', 'exp', 'b', 's2', \
          'visitor-2', 1, 1790000000000), \
         (toUUID('00000000-0000-4000-8000-000000000003'), toDateTime(1790000001), 'pk', 'conversion', 'exp', '', 's2', \
          'visitor-2', 1, 1790000001000)",
        "INSERT INTO experiment_variants (experiment_id, variant_id, version, weight, \
         is_control, status, parts, loaded_at, phase) VALUES \
         ('exp', 'a', 'v', 1, 1, 'live', '{}', 1789990000000, 1), \
         ('exp', 'b', 'v', 1, 0, 'live', '{}', 1789990000000, 1)",
        "INSERT INTO experiment_metrics (experiment_id, version, phase, metric_id, role, \
         kind, num_conversion, num_aggregate, cuped_lookback_days, loaded_at) VALUES \
         ('exp', 'v', 1, 'conversion', 'goal', 'proportion', 1, 'any', 14, 1789990000000)",
    ] {
        first
            .query(sql)
            .with_setting("insert_distributed_sync", "1")
            .execute()
            .await
            .expect("inserted");
    }
    // The consumer's sweep stores both visitors' values, each on their shard, and every
    // server reads them, with the same results, as of the sweep.
    let swept = consumer::refresh::sweep_once(
        cluster.topology(&database),
        &database,
        consumer::refresh::VISITORS_PER_STATEMENT,
    )
    .await
    .expect("swept");
    assert_eq!(swept, 2);
    for n in 1..=4 {
        let client = cluster.client(n, &database);
        // A replica fetches the other's parts a moment after the insert.
        e2e::eventually(
            Duration::from_secs(30),
            &format!("server {n}: both visitors stored and fresh"),
            || async {
                let fresh: u64 = client
                    .query(
                        "SELECT uniqExactIf(visitor_id, fresh = 1) FROM experiment_metric_stored",
                    )
                    .fetch_one()
                    .await
                    .ok()?;
                (fresh == 2).then_some(())
            },
        )
        .await;
        let rows: Vec<(String, u64, f64)> = e2e::eventually(
            Duration::from_secs(30),
            "both arms on every server",
            || async {
                let rows = conversion_rows(&client).await.ok()?;
                (rows.len() == 2).then_some(rows)
            },
        )
        .await;
        assert_eq!(
            rows,
            [("a".to_owned(), 1, 0.0), ("b".to_owned(), 1, 1.0)],
            "server {n}"
        );
        // The marks are replicated to every server.
        let as_of = "SELECT min(toUInt32(as_of)) FROM experiment_metric_results";
        e2e::eventually(Duration::from_secs(30), "as of the sweep", || async {
            let as_of: u32 = client.query(as_of).fetch_one().await.ok()?;
            (as_of > 1_790_000_000).then_some(())
        })
        .await;
    }
    cluster.drop_database(&database).await;
}

#[tokio::test]
async fn events_land_once_on_their_visitor_shard_with_redeliveries_and_retries() {
    let (_turn, cluster) = Cluster::take_turn().await;
    let file = SnapshotFile::new(&json!({
        "version": "cluster-1",
        "experiments": [{ "id": "exp_c", "status": "live", "variants": [
            { "id": "var_a", "weight": 50, "control": true, "parts": {} },
            { "id": "var_b", "weight": 50, "control": false, "parts": {} }] }],
        "keys": [{ "publicKey": "pk_cluster", "experiments": ["exp_c"] }]
    }));
    let names = ConsumerNames::unique();
    let snapshot = format!("--experiments-snapshot={}", file.path.display());
    let url = format!("--clickhouse-url={}", cluster.url);
    let consumer = e2e::start_consumer(e2e::consumer_config(
        &names,
        &[&url, "--clickhouse-cluster=analytics", &snapshot],
    ))
    .await;
    let ingest = e2e::start_ingest(e2e::ingest_config(&file.path, &names.topic, &[])).await;
    let http = reqwest::Client::new();

    // 40 visitors of 3 events: an impression, a click and, for 24, a conversion. Each
    // batch is posted twice, as a client whose first answer was lost.
    let mut events = 0;
    for batch in 0..8 {
        let mut body = Vec::new();
        for s in 0..5 {
            let session = format!("{}-{batch}-{s}", names.group);
            let variant = if s % 2 == 0 { "var_a" } else { "var_b" };
            // The click and the conversion come in the visitor's next session.
            let (visitor, next) = (format!("v-{session}"), format!("{session}-next"));
            body.push(json!({ "eventName": "impression", "experimentId": "exp_c",
                "sessionId": session, "visitorId": visitor, "variantId": variant,
                "eventId": uuid::Uuid::new_v4() }));
            body.push(json!({ "eventName": "click", "experimentId": "exp_c",
                "sessionId": next, "visitorId": visitor, "variantId": variant,
                "eventId": uuid::Uuid::new_v4() }));
            if s < 3 {
                body.push(json!({ "eventName": "conversion", "experimentId": "exp_c",
                    "sessionId": next, "visitorId": visitor, "variantId": variant,
                    "eventId": uuid::Uuid::new_v4() }));
            }
        }
        events += body.len() as u64;
        for _ in 0..2 {
            let response = http
                .post(ingest.url("/api/v1/analytics"))
                .header("X-public-key", "pk_cluster")
                .json(&json!({ "events": body }))
                .send()
                .await
                .expect("ingest answers");
            assert_eq!(response.status(), 202);
        }
    }
    // Kafka delivers some messages a second time, byte for byte.
    let messages = e2e::read_topic(&names.topic, 10, Duration::from_secs(30)).await;
    let again: Vec<(Option<&[u8]>, &[u8])> = messages
        .iter()
        .map(|m| {
            use rdkafka::Message;
            (m.key(), m.payload().expect("payload"))
        })
        .collect();
    e2e::produce_all(&e2e::kafka_brokers(), &names.topic, &again).await;

    assert_landed_once(&cluster, &names.database, events).await;
    // The results read the visitors of both shards, each once.
    let exposed: Vec<(String, u64, u64)> =
        e2e::eventually(Duration::from_secs(30), "the variants' counts", || async {
            let rows: Vec<(String, u64, u64)> = cluster
                .client(2, &names.database)
                .query(
                    "SELECT variant_id, exposed, converted FROM experiment_variant_counts \
                     WHERE experiment_id = 'exp_c' ORDER BY variant_id",
                )
                .fetch_all()
                .await
                .ok()?;
            (rows.len() == 2).then_some(rows)
        })
        .await;
    // Visitors 0, 2, 4 of each batch saw `a`; 0, 1, 2 converted, in their next session.
    assert_eq!(exposed, [("var_a".into(), 24, 16), ("var_b".into(), 16, 8)]);

    ingest.stop().await.expect("ingest stops");
    consumer.stop().await.expect("consumer stops");
    cluster.drop_database(&names.database).await;
}

#[tokio::test]
async fn a_replica_crashed_or_hung_mid_stream_loses_and_duplicates_nothing() {
    let (_turn, cluster) = Cluster::take_turn().await;
    let names = ConsumerNames::unique();
    let url = format!("--clickhouse-url={}", cluster.url);
    // A hung replica costs one insert timeout: 5 s here (the default is 30 s).
    let consumer = e2e::start_consumer(e2e::consumer_config(
        &names,
        &[
            &url,
            "--clickhouse-cluster=analytics",
            "--insert-timeout-ms=5000",
        ],
    ))
    .await;

    let brokers = e2e::kafka_brokers();
    let topic = names.topic.clone();
    let group = names.group.clone();
    // 50 events every 250 ms, in sessions of both shards, until the faults are over and
    // for 5 s after (at most 150 s).
    let faults_over = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let over = faults_over.clone();
    let producer = tokio::spawn(async move {
        let (mut sent, mut after) = (0u64, 0);
        for round in 0..600 {
            if after == 20 {
                break;
            }
            if over.load(std::sync::atomic::Ordering::Relaxed) {
                after += 1;
            }
            let payloads: Vec<Vec<u8>> = (0..50)
                .map(|i| {
                    let session = format!("{group}-{round}-{i}");
                    serde_json::to_vec(&e2e::event_message("pk_faults", &session, "click"))
                        .expect("JSON")
                })
                .collect();
            let messages: Vec<(Option<&[u8]>, &[u8])> =
                payloads.iter().map(|p| (None, p.as_slice())).collect();
            e2e::produce_all(&brokers, &topic, &messages).await;
            sent += 50;
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        sent
    });

    // Some rows in, then the first replica of shard 1 crashes and restarts at once.
    e2e::eventually(Duration::from_secs(60), "the first rows", || async {
        counted_once(&cluster, 4, &names.database)
            .await
            .filter(|(n, _)| *n > 0)
    })
    .await;
    cluster.kill(1);
    cluster.start();
    // Then the first replica of shard 2 hangs for longer than the insert timeout: shard
    // 2's rows go to its other replica (which cannot fetch them from the hung one).
    tokio::time::sleep(Duration::from_secs(5)).await;
    let local_rows = || async {
        cluster
            .client(4, &names.database)
            .query("SELECT count() FROM events_local")
            .fetch_one::<u64>()
            .await
            .ok()
    };
    let hung = cluster.pause(3);
    let before = local_rows().await.expect("server 4 answers");
    e2e::eventually(
        Duration::from_secs(60),
        "shard 2 written to its second replica while the first hangs",
        || async { local_rows().await.filter(|n| *n >= before + 500) },
    )
    .await;
    drop(hung);
    faults_over.store(true, std::sync::atomic::Ordering::Relaxed);

    let sent = producer.await.expect("producer ran");
    assert_landed_once(&cluster, &names.database, sent).await;
    consumer.stop().await.expect("consumer stops");
    cluster.drop_database(&names.database).await;
}
