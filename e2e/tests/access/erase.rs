//! `analytics-erase` against real servers, one and a cluster (two shards of two replicas,
//! `TEST_CLICKHOUSE_CLUSTER_URL` as in `cluster.rs`): after it no table holds a row of the
//! erased visitor (or session), and every results view answers what a database that never
//! received those events answers.

use std::process::Command;

use clap::Parser;
use clickhouse_kit::topology::Topology;
use e2e::unique;
use tools::erase::{EraseConfig, Subject, erase};

const CLUSTER: &str = "analytics";

/// The views an analyst reads, compared whole.
const VIEWS: [&str; 4] = [
    "experiment_visitor_exposures",
    "experiment_variant_counts",
    "experiment_results",
    "experiment_daily",
];

fn event(visitor: &str, session: &str, name: &str, variant: &str, at: i64) -> schema::EventRow {
    let envelope =
        contract::event::Envelope::new(1_763_700_000_000 + at, "pk_e".into(), String::new(), None);
    let mut body = serde_json::json!({ "eventName": name, "experimentId": "exp_1",
        "sessionId": session, "visitorId": visitor });
    if !variant.is_empty() {
        body["variantId"] = variant.into();
    }
    schema::EventRow::from(
        contract::event::EventMessage::from_client(&body, &envelope).expect("valid"),
    )
}

/// Visitors v1 to v6; v1 has two sessions: s1 exposed to var_a, s2 converting.
fn events() -> Vec<(&'static str, &'static str, schema::EventRow)> {
    let mut rows = Vec::new();
    for (i, (visitor, variant)) in [
        ("v1", "var_a"),
        ("v2", "var_a"),
        ("v3", "var_b"),
        ("v4", "var_b"),
        ("v5", "var_a"),
        ("v6", "var_b"),
    ]
    .into_iter()
    .enumerate()
    {
        let session = if visitor == "v1" { "s1" } else { visitor };
        let at = i as i64 * 10;
        rows.push((
            visitor,
            session,
            event(visitor, session, "impression", variant, at),
        ));
        if i % 2 == 0 {
            rows.push((
                visitor,
                session,
                event(visitor, session, "page_view", "", at + 1),
            ));
        }
    }
    rows.push(("v1", "s2", event("v1", "s2", "conversion", "", 100)));
    rows.push(("v1", "s2", event("v1", "s2", "page_view", "", 101)));
    rows.push(("v3", "v3", event("v3", "v3", "conversion", "", 102)));
    rows
}

fn args(url: &str, cluster: Option<&str>, database: &str, subject: &[&str]) -> EraseConfig {
    let mut argv = vec![
        "analytics-erase".to_owned(),
        format!("--clickhouse-url={url}"),
        format!("--clickhouse-database={database}"),
        "--wait-secs=120".to_owned(),
    ];
    if let Some(cluster) = cluster {
        argv.push(format!("--clickhouse-cluster={cluster}"));
    }
    argv.extend(subject.iter().map(|s| (*s).to_owned()));
    EraseConfig::parse_from(argv)
}

/// A migrated database holding `rows` (each on its visitor's shard, as the consumer
/// writes) and the experiment's definition.
async fn loaded(topology: &Topology, database: &str, rows: &[schema::EventRow]) {
    schema::migrate_topology(topology, database, u32::MAX)
        .await
        .expect("migrates");
    let local = topology.local();
    for (shard, replicas) in topology.shards.iter().enumerate() {
        let mine: Vec<&schema::EventRow> = rows
            .iter()
            .filter(|r| topology.shard_of(r.visitor_id.as_bytes()) == shard)
            .collect();
        if mine.is_empty() {
            continue;
        }
        let client = replicas[0].client.clone();
        let mut insert = client
            .insert::<schema::EventRow>(&format!("events{local}"))
            .await
            .expect("insert starts");
        for row in mine {
            insert.write(row).await.expect("row written");
        }
        insert.end().await.expect("insert ends");
    }
    topology.shards[0][0]
        .client
        .query(
            "INSERT INTO experiment_variants (experiment_id, variant_id, version, weight, \
             is_control, status, parts, loaded_at, phase) VALUES \
             ('exp_1', 'var_a', 'r1', 50, 1, 'live', '{}', 0, 1), \
             ('exp_1', 'var_b', 'r1', 50, 0, 'live', '{}', 0, 1)",
        )
        .with_setting("allow_experimental_low_cardinality_type", "1")
        .execute()
        .await
        .expect("definitions");
    // Every replica holds every row before the views are read through any of them.
    if topology.cluster.is_some() {
        for server in topology.servers() {
            let tables: Vec<String> = server
                .client
                .query("SELECT name FROM system.tables WHERE database = ? AND engine LIKE 'Replicated%'")
                .bind(database)
                .fetch_all()
                .await
                .expect("tables");
            for table in tables {
                server
                    .client
                    .query(&format!("SYSTEM SYNC REPLICA {database}.`{table}`"))
                    .execute()
                    .await
                    .expect("replica synced");
            }
        }
    }
}

/// Every view's rows, as text, sorted; but `as_of`, the time of each query.
async fn views(client: &clickhouse::Client) -> Vec<(String, Vec<String>)> {
    let mut all = Vec::new();
    for view in VIEWS {
        let columns: String = client
            .query(
                "SELECT arrayStringConcat(groupArray(concat('`', name, '`')), ', ') \
                 FROM system.columns WHERE database = currentDatabase() AND table = ? \
                 AND name != 'as_of'",
            )
            .bind(view)
            .fetch_one()
            .await
            .expect("columns");
        let bytes = client
            .query(&format!("SELECT {columns} FROM {view}"))
            .fetch_bytes("TabSeparated")
            .expect("query")
            .collect()
            .await
            .expect("rows");
        let mut lines: Vec<String> = String::from_utf8_lossy(&bytes)
            .lines()
            .map(str::to_owned)
            .collect();
        lines.sort();
        all.push((view.to_owned(), lines));
    }
    all
}

/// Rows with `column = id` in every table of the database that has that column, on
/// every server.
async fn left(topology: &Topology, database: &str, column: &str, id: &str) -> Vec<(String, u64)> {
    let mut found = Vec::new();
    for server in topology.servers() {
        let tables: Vec<String> = server
            .client
            .query("SELECT table FROM system.columns WHERE database = ? AND name = ?")
            .bind(database)
            .bind(column)
            .fetch_all()
            .await
            .expect("tables");
        assert!(tables.iter().any(|t| t.starts_with("events")), "{tables:?}");
        for table in tables {
            let n: u64 = server
                .client
                .query(&format!("SELECT count() FROM `{table}` WHERE {column} = ?"))
                .bind(id)
                .fetch_one()
                .await
                .expect("count");
            if n > 0 {
                found.push((format!("{} {table}", server.url), n));
            }
        }
    }
    found
}

struct Case {
    url: String,
    cluster: Option<&'static str>,
}

impl Case {
    fn topology(&self, database: &str) -> Topology {
        let config = args(&self.url, self.cluster, database, &["--visitor-id=x"]);
        Topology::from_args(&config.clickhouse).expect("topology")
    }

    /// Erases `subject` from a database of [`events`], checks that nothing of it is left,
    /// that the views answer as a database loaded without `kept`'s complement does, and
    /// that a second run removes nothing.
    async fn check(&self, flag: &str, id: &str, column: &str) {
        let all = events();
        let database = unique("test_erase_");
        let topology = self.topology(&database);
        loaded(
            &topology,
            &database,
            &all.iter().map(|(_, _, r)| r.clone()).collect::<Vec<_>>(),
        )
        .await;
        let expected_db = unique("test_erase_expected_");
        let expected_topology = self.topology(&expected_db);
        let without: Vec<schema::EventRow> = all
            .iter()
            .filter(|(v, s, _)| {
                if column == "visitor_id" {
                    *v != id
                } else {
                    *s != id
                }
            })
            .map(|(_, _, r)| r.clone())
            .collect();
        loaded(&expected_topology, &expected_db, &without).await;
        assert!(!left(&topology, &database, column, id).await.is_empty());

        let config = args(&self.url, self.cluster, &database, &[flag, id]);
        let subject = Subject::parse(&config).expect("a valid id");
        let erased = erase(&config, &subject).await.expect("erased");
        let events_table = format!("events{}", topology.local());
        let erased_events = erased
            .rows
            .iter()
            .find(|(t, _)| *t == events_table)
            .map(|(_, n)| *n);
        assert_eq!(
            erased_events,
            Some((all.len() - without.len()) as u64),
            "{erased:?}"
        );
        assert!(erased.report(&subject).contains(&events_table));
        assert_eq!(left(&topology, &database, column, id).await, []);
        let read = |t: &Topology| t.shards[0][0].client.clone();
        let got = views(&read(&topology)).await;
        let want = views(&read(&expected_topology)).await;
        assert!(
            want.iter().all(|(_, rows)| !rows.is_empty()),
            "the views answer: {want:?}"
        );
        assert_eq!(got, want);

        // The id is not kept in the mutations' records (nor, in a cluster, in ZooKeeper).
        for server in topology.servers() {
            let kept: u64 = server
                .client
                .query("SELECT count() FROM system.mutations WHERE position(command, ?) > 0")
                .bind(format!("'{id}'"))
                .fetch_one()
                .await
                .expect("mutations read");
            assert_eq!(kept, 0, "{} keeps {id} in system.mutations", server.url);
        }

        let again = erase(&config, &subject).await.expect("erased again");
        assert_eq!(again.total(), 0, "{again:?}");
        assert!(again.report(&subject).starts_with("Nothing stored"));
        for db in [&database, &expected_db] {
            let _ = read(&topology)
                .query(&format!(
                    "DROP DATABASE IF EXISTS {db}{}",
                    match self.cluster {
                        Some(c) => format!(" ON CLUSTER {c}"),
                        None => String::new(),
                    }
                ))
                .execute()
                .await;
        }
    }
}

fn single() -> Case {
    Case {
        url: e2e::clickhouse_url(),
        cluster: None,
    }
}

fn cluster() -> Case {
    Case {
        url: std::env::var("TEST_CLICKHOUSE_CLUSTER_URL").unwrap_or_else(|_| {
            "http://127.0.0.1:28123,http://127.0.0.1:28124;\
             http://127.0.0.1:28125,http://127.0.0.1:28126"
                .into()
        }),
        cluster: Some(CLUSTER),
    }
}

#[tokio::test]
async fn erasing_a_visitor_leaves_no_row_and_the_results_of_the_others() {
    single().check("--visitor-id", "v1", "visitor_id").await;
}

#[tokio::test]
async fn erasing_a_session_rebuilds_its_visitor_from_the_other_sessions() {
    single().check("--session-id", "s2", "session_id").await;
}

/// An analyst who reads the server's query texts (`system.processes` while it runs,
/// `system.query_log` after; 18.x shows them to every user) learns no erased id: the
/// statements name the session and its visitors by their hashes only.
#[tokio::test]
async fn erasing_a_session_writes_no_raw_id_into_a_statement() {
    let dir = tempfile::tempdir().expect("temporary folder");
    let root = dir.path().join("clickhouse");
    std::fs::create_dir_all(root.join("users.d")).expect("users.d");
    std::fs::write(
        root.join("users.d/log_queries.xml"),
        "<yandex><profiles><default><log_queries>1</log_queries></default></profiles></yandex>",
    )
    .expect("every query logged");
    let (http, tcp) = (e2e::free_port(), e2e::free_port());
    let _server = e2e::ScriptedClickHouse::start(&root, http, tcp);
    let url = format!("http://127.0.0.1:{http}");
    let database = unique("test_erase_");
    let config = args(&url, None, &database, &["--session-id", "s2"]);
    let topology = Topology::from_args(&config.clickhouse).expect("topology");
    let rows: Vec<schema::EventRow> = events().into_iter().map(|(_, _, r)| r).collect();
    loaded(&topology, &database, &rows).await;
    let subject = Subject::parse(&config).expect("a valid id");
    let erased = erase(&config, &subject).await.expect("erased");
    assert_eq!(erased.rebuilt_visitors, ["v1"]);

    let client = topology.shards[0][0].client.clone();
    client
        .query("SYSTEM FLUSH LOGS")
        .execute()
        .await
        .expect("logs flushed");
    let texts: Vec<String> = client
        .query(
            "SELECT query FROM system.query_log WHERE type = 1 \
             AND (position(query, '\\'s2\\'') > 0 OR position(query, '\\'v1\\'') > 0) \
             AND position(query, 'query_log') = 0",
        )
        .fetch_all()
        .await
        .expect("query log read");
    assert!(texts.is_empty(), "raw ids in statements: {texts:#?}");
}

/// Databases that only look like analysts' copies (named `analyst_…` by anyone who may
/// create one) stop no erasure. One that is not a copy is left alone and named in the
/// report. A copy that cannot be erased fails the command, naming it, after every other
/// copy is erased; the run is safe to repeat once it is dropped.
#[tokio::test]
async fn databases_that_look_like_copies_stop_no_erasure() {
    // A server of its own: the copies are every `analyst_…` database of the server.
    let dir = tempfile::tempdir().expect("temporary folder");
    let root = dir.path().join("clickhouse");
    std::fs::create_dir_all(root.join("users.d")).expect("users.d");
    let (http, tcp) = (e2e::free_port(), e2e::free_port());
    let _server = e2e::ScriptedClickHouse::start(&root, http, tcp);
    let url = format!("http://127.0.0.1:{http}");
    let rows: Vec<schema::EventRow> = events().into_iter().map(|(_, _, r)| r).collect();
    let topology = |database: &str| {
        let config = args(&url, None, database, &["--visitor-id=x"]);
        Topology::from_args(&config.clickhouse).expect("topology")
    };
    let database = unique("test_erase_");
    loaded(&topology(&database), &database, &rows).await;
    // A copy, sorted after the two others.
    loaded(&topology("analyst_zz"), "analyst_zz", &rows).await;
    let client = topology(&database).shards[0][0].client.clone();
    for sql in [
        "CREATE DATABASE analyst_0empty",
        "CREATE DATABASE analyst_1broken",
        "CREATE TABLE analyst_1broken.schema_migrations (version UInt32) ENGINE = Log",
        // No session_id: erasing a session from it fails.
        "CREATE TABLE analyst_1broken.events (visitor_id String) \
         ENGINE = MergeTree ORDER BY visitor_id",
    ] {
        client.query(sql).execute().await.expect(sql);
    }
    let config = args(&url, None, &database, &["--session-id", "s2"]);
    let subject = Subject::parse(&config).expect("a valid id");

    let error = erase(&config, &subject).await.expect_err("a copy failed");
    let error = format!("{error:#}");
    assert!(
        error.contains("not from: analyst_1broken (") && error.contains("safe to repeat"),
        "{error}"
    );
    for erased in [database.as_str(), "analyst_zz"] {
        let left = left(&topology(erased), erased, "session_id", "s2").await;
        assert!(left.is_empty(), "{erased}: {left:?}");
    }

    client
        .query("DROP DATABASE analyst_1broken")
        .execute()
        .await
        .expect("dropped");
    let erased = erase(&config, &subject).await.expect("erased again");
    assert_eq!(erased.not_copies, ["analyst_0empty"]);
    let report = erased.report(&subject);
    assert!(
        report.contains("not copies (no events table): analyst_0empty"),
        "{report}"
    );
}

#[tokio::test]
async fn cluster_erasing_a_visitor_leaves_no_row_on_any_replica() {
    cluster().check("--visitor-id", "v1", "visitor_id").await;
}

#[tokio::test]
async fn cluster_erasing_a_session_rebuilds_its_visitor_on_its_shard() {
    cluster().check("--session-id", "s2", "session_id").await;
}

#[test]
fn the_command_refuses_wildcards_and_blanks_with_exit_code_2() {
    let bin = e2e::workspace_binary("analytics-erase");
    let help = Command::new(&bin).arg("--help").output().expect("runs");
    assert!(help.status.success());
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(
        text.contains("--visitor-id") && text.contains("--session-id"),
        "{text}"
    );
    for (flag, id) in [
        ("--visitor-id", "*"),
        ("--session-id", " "),
        ("--visitor-id", ""),
    ] {
        let out = Command::new(&bin)
            .args([flag, id])
            // Nothing must be reached: a server that is not there.
            .env("CLICKHOUSE_URL", "http://127.0.0.1:9")
            .output()
            .expect("runs");
        assert_eq!(out.status.code(), Some(2), "{flag} {id:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("refusing"), "{err}");
    }
}
