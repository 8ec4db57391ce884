//! `analytics-access` on a real 18.16 server of the test's own, set up as `scripts/up` sets
//! it up (`clickhouse_access_reader` of `scripts/lib.sh`): a granted analyst reads exactly
//! their keys' rows through every table and view with a `public_key`, by no path reads
//! another key's, the analysts' database or the filtering views, and cannot write, change
//! settings or call table functions; a revoked analyst is let in no more.

use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Parser;
use tools::access::{AccessConfig, check, run};

/// A query over HTTP as `user`: the body, or the server's error text.
async fn query(url: &str, user: &str, password: &str, sql: &str) -> Result<String, String> {
    let response = reqwest::Client::new()
        .post(url)
        .basic_auth(user, Some(password))
        .body(sql.to_owned())
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let ok = response.status().is_success();
    let text = response.text().await.map_err(|e| e.to_string())?;
    if ok {
        Ok(text.trim().to_owned())
    } else {
        Err(text)
    }
}

fn access(url: &str, users_dir: &Path, args: &[&str]) -> AccessConfig {
    let mut argv = vec![
        "analytics-access".to_owned(),
        format!("--clickhouse-url={url}"),
        format!("--users-dir={}", users_dir.display()),
    ];
    argv.extend(args.iter().map(|a| (*a).to_owned()));
    AccessConfig::parse_from(argv)
}

async fn access_run(url: &str, users_dir: &Path, args: &[&str]) -> String {
    let config = access(url, users_dir, args);
    check(&config.command).expect("a valid command line");
    run(&config).await.expect("analytics-access runs")
}

/// `grant --user USER --password PASSWORD --key K...`.
async fn grant(url: &str, users_dir: &Path, user: &str, password: &str, keys: &[&str]) {
    let mut args = vec!["grant", "--user", user, "--password", password];
    for key in keys {
        args.extend(["--key", key]);
    }
    access_run(url, users_dir, &args).await;
}

/// Visitors of two sites, pk_a and pk_b, exposed to two variants, some converting.
async fn fill(url: &str) {
    let client = clickhouse::Client::default()
        .with_url(url)
        .with_database("analytics")
        .with_validation(false);
    let mut insert = client
        .insert::<consumer::EventRow>("events")
        .await
        .expect("insert");
    for (key, visitors) in [("pk_a", 6), ("pk_b", 9)] {
        for v in 0..visitors {
            for name in ["impression", "conversion"].iter().take(1 + v % 2) {
                let envelope = contract::event::Envelope::new(
                    1_763_700_000_000 + v as i64 * 1000,
                    key.into(),
                    String::new(),
                    None,
                );
                let variant = ["var_a", "var_b"][v % 2];
                let body = serde_json::json!({ "eventName": name, "experimentId": "exp_1",
                    "variantId": variant, "sessionId": format!("s{v}"),
                    "visitorId": format!("{key}_v{v}") });
                let message =
                    contract::event::EventMessage::from_client(&body, &envelope).expect("valid");
                insert
                    .write(&consumer::EventRow::from(message))
                    .await
                    .expect("row");
            }
        }
    }
    insert.end().await.expect("inserted");
}

#[tokio::test]
async fn an_analyst_reads_only_their_keys_rows_and_cannot_write() {
    let dir = tempfile::tempdir().expect("temporary folder");
    let root = dir.path().join("clickhouse");
    let (http, tcp) = (e2e::free_port(), e2e::free_port());
    let root_s = root.display().to_string();
    e2e::lib_sh(
        "clickhouse_access_reader \"$1\" \"$2\" \"$3\"",
        &[
            &root_s,
            &tcp.to_string(),
            &dir.path().join("secrets/reader").display().to_string(),
        ],
    );
    let _server = e2e::ScriptedClickHouse::start(&root, http, tcp);
    let url = format!("http://127.0.0.1:{http}");
    let admin = |sql: &'static str| {
        let url = url.clone();
        async move { query(&url, "default", "", sql).await.expect(sql) }
    };
    let topology = consumer::topology::Topology::single(
        clickhouse::Client::default()
            .with_url(&url)
            .with_validation(false),
    );
    consumer::schema::migrate_topology(&topology, "analytics", u32::MAX)
        .await
        .expect("migrated");
    fill(&url).await;
    let users = root.join("users.d");

    // Refused before anything is sent: exit code 2 from the binary, nothing made.
    let bin = e2e::workspace_binary("analytics-access");
    for bad in [
        vec![
            "grant",
            "--user",
            "alice",
            "--password",
            "short",
            "--key",
            "pk_a",
        ],
        vec![
            "grant",
            "--user",
            "default",
            "--password",
            "long enough!",
            "--key",
            "pk_a",
        ],
        vec![
            "grant",
            "--user",
            "alice",
            "--password",
            "long enough!",
            "--key",
            "pk_a') OR 1 --",
        ],
    ] {
        let out = Command::new(&bin)
            .args(&bad)
            .env("CLICKHOUSE_URL", &url)
            .output()
            .expect("runs");
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("refusing"));
    }
    assert_eq!(
        admin("SELECT count() FROM system.databases WHERE name LIKE 'analyst%'").await,
        "0"
    );

    let alice_pw = "alice's long password";
    let bob_pw = "bob's long password!";
    grant(&url, &users, "alice", alice_pw, &["pk_a"]).await;
    grant(&url, &users, "bob", bob_pw, &["pk_b"]).await;
    assert_eq!(
        access_run(&url, &users, &["list"]).await,
        "alice\tpk_a\nbob\tpk_b\n"
    );

    // Every table and view with a public_key, as the analyst sees it and as the operator
    // sees the key's rows: the same rows (an order-free digest of each whole row).
    let tables = admin(
        "SELECT DISTINCT table FROM system.columns WHERE database = 'analytics' \
         AND name = 'public_key' AND NOT startsWith(table, '.inner') ORDER BY table",
    )
    .await;
    let tables: Vec<&str> = tables.lines().collect();
    for expected in [
        "events",
        "experiment_results",
        "experiment_visitors",
        "experiment_variant_counts",
    ] {
        assert!(tables.contains(&expected), "{expected} in {tables:?}");
    }
    for (user, password, key, other) in [
        ("alice", alice_pw, "pk_a", "pk_b"),
        ("bob", bob_pw, "pk_b", "pk_a"),
    ] {
        let mut rows_seen = 0;
        for table in &tables {
            let digest = |from: String| {
                format!("SELECT count(), sum(cityHash64(toString(tuple(*)))) FROM {from}")
            };
            let theirs = query(
                &url,
                user,
                password,
                &digest(format!("analyst_{user}.{table}")),
            )
            .await
            .unwrap_or_else(|e| panic!("{user} reads {table}: {e}"));
            let truth = query(
                &url,
                "default",
                "",
                &digest(format!("analytics.{table} WHERE public_key = '{key}'")),
            )
            .await
            .expect("operator reads");
            assert_eq!(theirs, truth, "{user}'s {table}");
            rows_seen += theirs
                .split('\t')
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .expect("a count");
            let others = query(
                &url,
                user,
                password,
                &format!(
                    "SELECT count() FROM analyst_{user}.{table} FINAL WHERE public_key = '{other}'"
                ),
            )
            .await;
            // FINAL is refused on a Distributed table over a view, or finds nothing.
            assert!(
                matches!(others.as_deref(), Ok("0") | Err(_)),
                "{user} {table} FINAL: {others:?}"
            );
        }
        assert!(rows_seen > 0, "{user} saw no rows at all");
        for sql in [
            "SELECT count() FROM analytics.events".to_owned(),
            "SELECT count() FROM analytics.experiment_results".to_owned(),
            "SELECT count() FROM analytics_access.grants".to_owned(),
            format!("SELECT count() FROM analytics_access.{user}__events"),
            format!(
                "SELECT count() FROM analyst_{}.events",
                if user == "alice" { "bob" } else { "alice" }
            ),
            "SELECT count() FROM remote('127.0.0.1', analytics.events)".to_owned(),
            "SELECT count() FROM url('http://127.0.0.1:1/', TSV, 'x String')".to_owned(),
            "SELECT count() FROM merge('analytics', '.*')".to_owned(),
            format!("INSERT INTO analyst_{user}.events (public_key) VALUES ('{other}')"),
            format!("CREATE TABLE analyst_{user}.t (x UInt8) ENGINE = Memory"),
            format!("DROP TABLE analyst_{user}.events"),
            format!("ALTER TABLE analyst_{user}.events DELETE WHERE 1"),
            "SET readonly = 0".to_owned(),
            "CREATE DATABASE mine".to_owned(),
        ] {
            let refused = query(&url, user, password, &sql).await;
            assert!(refused.is_err(), "{user} ran {sql}: {refused:?}");
        }
        // What the system tables show of the analysts' database: nothing.
        for sql in [
            "SELECT count() FROM system.tables WHERE database IN ('analytics', 'analytics_access')",
            "SELECT count() FROM system.parts WHERE database IN ('analytics', 'analytics_access')",
            "SELECT count() FROM system.columns WHERE database IN ('analytics', 'analytics_access')",
            "SELECT count() FROM system.mutations",
        ] {
            assert_eq!(
                query(&url, user, password, sql).await.as_deref(),
                Ok("0"),
                "{user}: {sql}"
            );
        }
    }
    assert_eq!(
        query(&url, "alice", "wrong password!!", "SELECT 1")
            .await
            .ok(),
        None,
        "a wrong password is let in"
    );

    // A second key for alice; bob revoked: refused, his database and views gone.
    grant(&url, &users, "alice", alice_pw, &["pk_a", "pk_b"]).await;
    assert_eq!(
        query(
            &url,
            "alice",
            alice_pw,
            "SELECT count() FROM analyst_alice.events"
        )
        .await,
        query(&url, "default", "", "SELECT count() FROM analytics.events").await
    );
    access_run(&url, &users, &["revoke", "--user", "bob"]).await;
    assert!(
        query(&url, "bob", bob_pw, "SELECT 1").await.is_err(),
        "bob is still let in"
    );
    assert_eq!(
        admin("SELECT count() FROM system.tables WHERE database = 'analyst_bob' OR (database = 'analytics_access' AND startsWith(name, 'bob__'))").await,
        "0"
    );
    assert_eq!(
        access_run(&url, &users, &["list"]).await,
        "alice\tpk_a,pk_b\n"
    );
    // Revoking again changes nothing and succeeds.
    access_run(&url, &users, &["revoke", "--user", "bob"]).await;
}

/// The same on the test cluster (two shards of two replicas, `scripts/test` starts it with
/// the reader): through any of the four servers, the analyst reads their key's rows of
/// every shard, and nothing of the analysts' database.
#[tokio::test]
async fn cluster_an_analyst_reads_only_their_keys_rows_from_every_server() {
    let url = std::env::var("TEST_CLICKHOUSE_CLUSTER_URL").unwrap_or_else(|_| {
        "http://127.0.0.1:28123,http://127.0.0.1:28124;http://127.0.0.1:28125,http://127.0.0.1:28126"
            .to_owned()
    });
    // scripts/test's cluster, or the one it would start.
    let dir = std::env::var_os("TEST_CLICKHOUSE_CLUSTER_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../.run/test/cluster"),
        PathBuf::from,
    );
    let users: Vec<String> = (1..=4)
        .map(|n| dir.join(format!("ch{n}/users.d")).display().to_string())
        .collect();
    let database = e2e::unique("access");
    let user = e2e::unique("analyst");
    let password = "a long password for the cluster";
    let servers: Vec<&str> = url.split([',', ';']).collect();
    let base = [
        "analytics-access".to_owned(),
        format!("--clickhouse-url={url}"),
        "--clickhouse-cluster=analytics".to_owned(),
        format!("--clickhouse-database={database}"),
        format!("--users-dir={}", users.join(",")),
    ];
    let config = |args: &[&str]| {
        let mut argv = base.to_vec();
        argv.extend(args.iter().map(|a| (*a).to_owned()));
        AccessConfig::parse_from(argv)
    };
    let topology =
        consumer::topology::Topology::from_args(&config(&["list"]).clickhouse).expect("topology");
    consumer::schema::migrate_topology(&topology, &database, u32::MAX)
        .await
        .expect("migrated");
    for (key, n) in [("pk_a", 7), ("pk_b", 5)] {
        let sql = format!(
            "INSERT INTO {database}.events (event_id, received_at, public_key, session_id, \
             visitor_id, event_name, experiment_id, variant_id) SELECT generateUUIDv4(), now(), \
             '{key}', concat('s', toString(number)), concat('{key}_v', toString(number)), \
             'impression', 'exp', 'a' FROM system.numbers LIMIT {n}"
        );
        let url = format!("{}/?insert_distributed_sync=1", servers[0]);
        query(&url, "default", "", &sql).await.expect("inserted");
    }
    run(&config(&[
        "grant",
        "--user",
        &user,
        "--password",
        password,
        "--key",
        "pk_a",
    ]))
    .await
    .expect("granted");
    for server in &servers {
        let seen = query(
            server,
            &user,
            password,
            &format!("SELECT count(), countIf(public_key != 'pk_a') FROM analyst_{user}.events"),
        )
        .await;
        assert_eq!(seen.as_deref(), Ok("7\t0"), "through {server}");
        let other = query(
            server,
            &user,
            password,
            &format!("SELECT count() FROM {database}.events"),
        )
        .await;
        assert!(other.is_err(), "{server}: {other:?}");
    }
    run(&config(&["revoke", "--user", &user]))
        .await
        .expect("revoked");
    for server in &servers {
        assert!(
            query(server, &user, password, "SELECT 1").await.is_err(),
            "{server}"
        );
    }
}
