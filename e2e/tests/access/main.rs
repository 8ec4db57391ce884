//! `analytics-access` on real 18.16 servers, tried as a hostile analyst would: a granted
//! analyst reads exactly their keys' rows (those stored before the grant and those inserted
//! after) through every table and view with a `public_key`, and their experiments' variants
//! and metrics, and by no path reads anything else: not through subqueries in any position
//! (which 18.x would once run with another user's rights), error messages, table functions,
//! dictionaries, settings, another analyst's copy or the feeds. Their queries are capped in time, memory, concurrency,
//! result size and per hour, and cannot hold up the operators or the consumer. Erasure
//! reaches their copy; a revoked analyst is let in no more and their copy is gone.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Parser;
use tools::access::{AccessConfig, check, run};

mod erase;
mod erase_kafka;
mod gate;
mod names;
mod races;
mod shared;
mod story;

/// A query over HTTP as `user`: the body, or the server's error text.
async fn query(url: &str, user: &str, password: &str, sql: &str) -> Result<String, String> {
    let response = reqwest::Client::new()
        .post(url)
        .basic_auth(user, Some(password))
        .timeout(Duration::from_secs(60))
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

/// The command line `args`. A grant lets the analyst in from 127.0.0.1 unless it says
/// where from: these tests query the server as the gate would (`gate.rs` goes through it).
fn access(url: &str, users_dir: &Path, args: &[&str]) -> AccessConfig {
    let mut argv = vec![
        "analytics-access".to_owned(),
        format!("--clickhouse-url={url}"),
        format!("--users-dir={}", users_dir.display()),
    ];
    argv.extend(args.iter().map(|a| (*a).to_owned()));
    if args.first() == Some(&"grant") && !args.contains(&"--network") {
        argv.extend(["--network".to_owned(), "127.0.0.1".to_owned()]);
    }
    AccessConfig::parse_from(argv)
}

async fn access_run(url: &str, users_dir: &Path, args: &[&str]) -> String {
    let config = access(url, users_dir, args);
    check(&config.command).expect("a valid command line");
    run(&config).await.expect("analytics-access runs")
}

/// The schema migrated into `analytics` on the server at `url`.
async fn migrate(url: &str) {
    let client = clickhouse::Client::default()
        .with_url(url)
        .with_validation(false);
    schema::migrate_topology(
        &clickhouse_kit::topology::Topology::single(client),
        "analytics",
        u32::MAX,
    )
    .await
    .expect("migrated");
}

/// `grant --user USER --password PASSWORD --key K... EXTRA...`.
async fn grant(
    url: &str,
    users_dir: &Path,
    user: &str,
    password: &str,
    keys: &[&str],
    extra: &[&str],
) {
    let mut args = vec!["grant", "--user", user, "--password", password];
    for key in keys {
        args.extend(["--key", key]);
    }
    args.extend(extra);
    access_run(url, users_dir, &args).await;
}

/// Round `round` of visitors of two sites, pk_a (experiment exp_a) and pk_b (exp_b),
/// exposed to two variants, some converting; visitor ids name their key. Inserted as
/// `user`.
async fn fill(url: &str, round: usize, (user, password): (&str, &str)) {
    let client = clickhouse::Client::default()
        .with_url(url)
        .with_user(user)
        .with_password(password)
        .with_database("analytics")
        .with_validation(false);
    let mut insert = client
        .insert::<schema::EventRow>("events")
        .await
        .expect("insert");
    for (key, experiment, visitors) in [("pk_a", "exp_a", 6), ("pk_b", "exp_b", 9)] {
        for v in 0..visitors {
            for name in ["impression", "conversion"].iter().take(1 + v % 2) {
                let envelope = contract::event::Envelope::new(
                    1_763_700_000_000 + (round * 100 + v) as i64 * 1000,
                    key.into(),
                    String::new(),
                    None,
                );
                let variant = ["var_a", "var_b"][v % 2];
                let body = serde_json::json!({ "eventName": name, "experimentId": experiment,
                    "variantId": variant, "sessionId": format!("s{round}_{v}"),
                    "visitorId": format!("{key}_v{round}_{v}") });
                let message =
                    contract::event::EventMessage::from_client(&body, &envelope).expect("valid");
                insert
                    .write(&schema::EventRow::from(message))
                    .await
                    .expect("row");
            }
        }
    }
    insert.end().await.expect("inserted");
}

/// Stores the metric values of every stale visitor: a consumer's sweep, as `user`.
async fn refresh_metric_values(url: &str, (user, password): (&str, &str)) {
    let client = clickhouse::Client::default()
        .with_url(url)
        .with_user(user)
        .with_password(password)
        .with_validation(false);
    let topology = clickhouse_kit::topology::Topology::single(client);
    consumer::refresh::sweep_once(
        topology,
        "analytics",
        consumer::refresh::VISITORS_PER_STATEMENT,
    )
    .await
    .expect("metric values stored");
}

/// When definitions of `version` (`vN`) were loaded, as the consumer records it: each
/// version later than the one before, so the views take the last.
fn loaded_at(version: &str) -> u32 {
    version[1..].parse().expect("vN")
}

/// The definitions of both experiments at `version`, as the consumer writes them (the keys
/// that list each), or, `listed` false, as rows written before the keys were recorded.
fn definitions(version: &str, listed: bool) -> String {
    let keys = |k: &str| {
        if listed {
            format!("['{k}']")
        } else {
            "[]".to_owned()
        }
    };
    format!(
        "INSERT INTO analytics.experiment_variants (experiment_id, variant_id, version, weight, \
         is_control, status, parts, loaded_at, public_keys) VALUES \
         ('exp_a', 'var_a', '{version}', 50, 1, 'live', '{{}}', {at}, {a}), \
         ('exp_a', 'var_b', '{version}', 50, 0, 'live', '{{}}', {at}, {a}), \
         ('exp_b', 'var_a', '{version}', 50, 1, 'live', '{{\"secret\":\"b\"}}', {at}, {b}), \
         ('exp_b', 'var_b', '{version}', 50, 0, 'live', '{{}}', {at}, {b})",
        a = keys("pk_a"),
        b = keys("pk_b"),
        at = loaded_at(version)
    )
}

/// The metrics of both experiments at `version`, as the consumer writes them (the default
/// goal, then a metric named after the key), or, `listed` false, listing no keys.
fn metric_definitions(version: &str, listed: bool) -> String {
    let keys = |k: &str| {
        if listed {
            format!("['{k}']")
        } else {
            "[]".to_owned()
        }
    };
    let at = loaded_at(version);
    let rows: Vec<String> = [("exp_a", "pk_a"), ("exp_b", "pk_b")]
        .iter()
        .flat_map(|(experiment, key)| {
            let keys = keys(key);
            [
                format!(
                    "('{experiment}', '{version}', 'conversion', 'goal', 0, 'proportion', '', \
                     1, 'any', '', '{{}}', {at}, {keys})"
                ),
                format!(
                    "('{experiment}', '{version}', 'metric_{key}', 'guardrail', 1, 'ratio', \
                     'secret_{key}', 0, 'count', 'sessions', \
                     '{{\"id\":\"metric_{key}\"}}', {at}, {keys})"
                ),
            ]
        })
        .collect();
    format!(
        "INSERT INTO analytics.experiment_metrics (experiment_id, version, metric_id, role, \
         position, kind, num_event, num_conversion, num_aggregate, den_aggregate, definition, \
         loaded_at, public_keys) VALUES {}",
        rows.join(", ")
    )
}

/// An order-free digest of every row of `from` (`FINAL` for a table of the MergeTree
/// family: each row once, as the views read them).
fn digest(from: &str) -> String {
    format!("SELECT count(), sum(cityHash64(toString(tuple(*)))) FROM {from}")
}

/// Attacks by `user` that must each be refused, and whose refusals must not print
/// anything of `other` (its visitors are named `{other}_v...`).
async fn refused_all(url: &str, user: &str, password: &str, other: &str, attacks: &[String]) {
    for sql in attacks {
        let answer = query(url, user, password, sql).await;
        match answer {
            Err(text) => assert!(
                !text.contains(&format!("{other}_v"))
                    && !text.contains("'pk_b']")
                    && !text.contains(&format!("metric_{other}")),
                "{user}: {sql}: the refusal prints another key's data: {text}"
            ),
            Ok(rows) => panic!("{user} ran {sql}: {rows}"),
        }
    }
}

/// What a hostile analyst tries, reading from their own copy `own`: everything that
/// reaches beyond it, in every position a subquery or a table can take.
fn attacks(own: &str, other_user: &str) -> Vec<String> {
    let secret = "SELECT public_key FROM analytics.events WHERE public_key = 'pk_b'";
    let visitor = "SELECT any(visitor_id) FROM analytics.events WHERE public_key = 'pk_b'";
    let mut sql = vec![
        // Subqueries on a forbidden table, in every place, over the analyst's own tables
        // and views.
        format!("SELECT count() FROM {own}.events WHERE public_key IN ({secret})"),
        format!("SELECT count() FROM {own}.events WHERE public_key GLOBAL IN ({secret})"),
        format!("SELECT count() FROM {own}.events PREWHERE public_key IN ({secret})"),
        format!("SELECT count() FROM {own}.events WHERE public_key NOT IN ({secret})"),
        format!("SELECT count() FROM {own}.experiment_results WHERE public_key IN ({secret})"),
        format!(
            "SELECT count() FROM {own}.events HAVING count() > (SELECT count() FROM analytics.events)"
        ),
        format!("SELECT (SELECT count() FROM analytics.events) FROM {own}.events LIMIT 1"),
        format!(
            "SELECT count() FROM {own}.events ANY LEFT JOIN (SELECT visitor_id, public_key AS k FROM analytics.events) USING visitor_id"
        ),
        format!("SELECT count() FROM {own}.events ALL INNER JOIN analytics.events USING event_id"),
        format!(
            "SELECT count() FROM {own}.events GLOBAL ANY LEFT JOIN (SELECT visitor_id FROM analytics.events) USING visitor_id"
        ),
        format!("SELECT count() FROM (SELECT * FROM analytics.events) WHERE 1"),
        format!("SELECT * FROM {own}.events UNION ALL SELECT * FROM analytics.events"),
        format!("WITH ({visitor}) AS v SELECT v FROM {own}.events LIMIT 1"),
        format!("SELECT arrayJoin((SELECT groupArray(visitor_id) FROM analytics.events))"),
        format!(
            "SELECT count() FROM {own}.events WHERE has((SELECT groupArray(public_key) FROM analytics.events), public_key)"
        ),
        // Error messages as a channel: a conversion that fails on the secret value.
        format!("SELECT toUInt8(({visitor}))"),
        format!("SELECT toUInt8(({visitor})) FROM {own}.events"),
        format!("SELECT throwIf(1, ({visitor}))"),
        format!("SELECT CAST(({visitor}) AS Date)"),
        "SELECT toUInt8((SELECT any(name) FROM system.databases WHERE name = 'analytics'))"
            .to_owned(),
        // The access bookkeeping, the feeds, another analyst's copy.
        "SELECT count() FROM analytics_access.grants".to_owned(),
        format!(
            "SELECT count() FROM {own}.events WHERE public_key IN (SELECT arrayJoin(keys) FROM analytics_access.grants)"
        ),
        format!("SELECT count() FROM analytics_access.{other_user}__events"),
        format!("SELECT count() FROM analyst_{other_user}.events"),
        format!(
            "SELECT count() FROM {own}.events WHERE visitor_id IN (SELECT visitor_id FROM analyst_{other_user}.events)"
        ),
        "SELECT count() FROM analytics.experiment_results".to_owned(),
        "SELECT count() FROM analytics.experiment_variants".to_owned(),
        "SELECT count() FROM default.events".to_owned(),
        // Table functions, dictionaries, other servers.
        "SELECT count() FROM remote('127.0.0.1', analytics.events)".to_owned(),
        "SELECT count() FROM remote('127.0.0.1', analytics.events, 'default', '')".to_owned(),
        format!(
            "SELECT count() FROM {own}.events WHERE public_key IN (SELECT public_key FROM remote('127.0.0.1', analytics.events, 'default', ''))"
        ),
        "SELECT count() FROM url('http://127.0.0.1:1/', TSV, 'x String')".to_owned(),
        "SELECT * FROM file('/etc/passwd', TSV, 'x String')".to_owned(),
        "SELECT count() FROM merge('analytics', '.*')".to_owned(),
        "SELECT count() FROM numbers(10)".to_owned(),
        "SELECT dictGetString('analytics', 'x', toUInt64(1))".to_owned(),
        // Writes, schema changes, settings, other users' queries, the server itself.
        format!("INSERT INTO {own}.events (public_key) VALUES ('pk_b')"),
        format!("CREATE TABLE {own}.t (x UInt8) ENGINE = Memory"),
        "CREATE TEMPORARY TABLE t (x UInt8)".to_owned(),
        format!("DROP TABLE {own}.events"),
        format!("ALTER TABLE {own}.events DELETE WHERE 1"),
        format!("OPTIMIZE TABLE {own}.events FINAL"),
        format!("RENAME TABLE {own}.events TO {own}.e2"),
        format!("DETACH TABLE {own}.events"),
        "CREATE DATABASE mine".to_owned(),
        "SET readonly = 0".to_owned(),
        "SET max_execution_time = 0".to_owned(),
        "SELECT 1 SETTINGS max_memory_usage = 0".to_owned(),
        "SYSTEM STOP MERGES".to_owned(),
        "SYSTEM RELOAD CONFIG".to_owned(),
        "SYSTEM SHUTDOWN".to_owned(),
    ];
    // The metric definitions of the other site's experiments, by the same paths: the
    // table itself, subqueries and joins over their own copy, error messages, the other
    // analyst's copy and feed, table functions.
    let metric = "SELECT any(metric_id) FROM analytics.experiment_metrics \
                  WHERE metric_id != 'conversion'";
    sql.extend([
        "SELECT count() FROM analytics.experiment_metrics".to_owned(),
        "SELECT * FROM analytics.experiment_metrics FINAL".to_owned(),
        format!(
            "SELECT count() FROM {own}.experiment_metrics WHERE metric_id IN \
             (SELECT metric_id FROM analytics.experiment_metrics)"
        ),
        format!(
            "SELECT count() FROM {own}.experiment_metrics WHERE experiment_id GLOBAL IN \
             (SELECT experiment_id FROM analytics.experiment_metrics)"
        ),
        format!(
            "SELECT count() FROM {own}.events WHERE experiment_id IN \
             (SELECT experiment_id FROM analytics.experiment_metrics)"
        ),
        format!(
            "SELECT count() FROM {own}.experiment_metrics PREWHERE has(public_keys, \
             (SELECT any(arrayJoin(public_keys)) FROM analytics.experiment_metrics))"
        ),
        format!(
            "SELECT (SELECT count() FROM analytics.experiment_metrics) \
             FROM {own}.experiment_metrics LIMIT 1"
        ),
        format!(
            "SELECT count() FROM {own}.experiment_metrics ANY LEFT JOIN \
             (SELECT experiment_id, metric_id AS m FROM analytics.experiment_metrics) \
             USING experiment_id"
        ),
        format!(
            "SELECT count() FROM {own}.experiment_metrics ALL INNER JOIN \
             analytics.experiment_metrics USING metric_id"
        ),
        format!(
            "SELECT count() FROM {own}.experiment_variants GLOBAL ANY LEFT JOIN \
             (SELECT experiment_id, metric_id FROM analytics.experiment_metrics) \
             USING experiment_id"
        ),
        format!(
            "SELECT * FROM {own}.experiment_metrics UNION ALL \
             SELECT * FROM analytics.experiment_metrics"
        ),
        format!("WITH ({metric}) AS m SELECT m FROM {own}.experiment_metrics LIMIT 1"),
        format!("SELECT toUInt8(({metric}))"),
        format!("SELECT toUInt8(({metric})) FROM {own}.experiment_metrics"),
        format!("SELECT throwIf(1, ({metric}))"),
        format!("SELECT count() FROM analytics_access.{other_user}__experiment_metrics"),
        format!("SELECT count() FROM analyst_{other_user}.experiment_metrics"),
        format!(
            "SELECT count() FROM {own}.experiment_metrics WHERE metric_id IN \
             (SELECT metric_id FROM analyst_{other_user}.experiment_metrics)"
        ),
        "SELECT count() FROM remote('127.0.0.1', analytics.experiment_metrics, 'default', '')"
            .to_owned(),
        "SELECT count() FROM merge('analytics', '^experiment_metrics$')".to_owned(),
        format!("INSERT INTO {own}.experiment_metrics (metric_id) VALUES ('x')"),
        format!("ALTER TABLE {own}.experiment_metrics DELETE WHERE 1"),
    ]);
    // Each again through the native format's favourite: a subquery in a view of theirs.
    sql.push(format!(
        "SELECT count() FROM {own}.experiment_results_over_time WHERE experiment_id IN \
         (SELECT experiment_id FROM analytics.events)"
    ));
    sql
}

/// The same on the test cluster (two shards of two replicas, `scripts/test` starts it):
/// through any of the four servers, the analyst reads their key's rows of every shard,
/// stored before the grant and inserted after, from a copy of their own, and no subquery
/// reaches beyond it on any server.
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
    let topology = clickhouse_kit::topology::Topology::from_args(&config(&["list"]).clickhouse)
        .expect("topology");
    schema::migrate_topology(&topology, &database, u32::MAX)
        .await
        .expect("migrated");
    let insert = |key: &'static str, n: u32, round: u32| {
        let database = database.clone();
        let url = format!("{}/?insert_distributed_sync=1", servers[0]);
        async move {
            let sql = format!(
                "INSERT INTO {database}.events (event_id, received_at, public_key, session_id, \
                 visitor_id, event_name, experiment_id, variant_id) SELECT generateUUIDv4(), \
                 now(), '{key}', concat('s', toString(number)), \
                 concat('{key}_v{round}_', toString(number)), 'impression', 'exp', 'a' \
                 FROM system.numbers LIMIT {n}"
            );
            query(&url, "default", "", &sql).await.expect("inserted");
        }
    };
    insert("pk_a", 7, 0).await;
    insert("pk_b", 5, 0).await;
    run(&config(&[
        "grant",
        "--user",
        &user,
        "--password",
        password,
        "--key",
        "pk_a",
        "--network",
        "127.0.0.1",
    ]))
    .await
    .expect("granted");
    // After the grant, on both shards (the feeds run where the rows land).
    insert("pk_a", 11, 1).await;
    insert("pk_b", 13, 1).await;
    let own = format!("analyst_{user}");
    for server in &servers {
        // The rows and the per-visitor aggregate are replicated to each server as parts
        // of two tables, each in its own time: wait for both.
        let sql = format!(
            "SELECT uniqExact(event_id), countIf(public_key != 'pk_a'), \
             (SELECT sum(exposed) FROM {own}.experiment_variant_counts) FROM {own}.events"
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let seen = query(server, &user, password, &sql).await;
            if seen.as_deref() == Ok("18\t0\t18") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "through {server} (events, other keys' rows, exposed in the results): {seen:?}"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        for sql in [
            format!("SELECT count() FROM {database}.events"),
            format!(
                "SELECT count() FROM {own}.events WHERE public_key IN (SELECT public_key FROM {database}.events_local)"
            ),
            format!(
                "SELECT count() FROM {own}.events WHERE public_key IN (SELECT public_key FROM {database}.events)"
            ),
            format!(
                "SELECT toUInt8((SELECT any(visitor_id) FROM {database}.events_local WHERE public_key = 'pk_b'))"
            ),
            format!("SELECT count() FROM cluster('analytics', {database}.events_local)"),
        ] {
            let answer = query(server, &user, password, &sql).await;
            assert!(
                answer.as_ref().is_err_and(|e| !e.contains("pk_b_v")),
                "{server}: {sql}: {answer:?}"
            );
        }
    }
    run(&config(&["revoke", "--user", &user]))
        .await
        .expect("revoked");
    for server in &servers {
        assert!(
            query(server, &user, password, "SELECT 1").await.is_err(),
            "{server}"
        );
        let left = query(
            server,
            "default",
            "",
            &format!("SELECT count() FROM system.databases WHERE name = '{own}'"),
        )
        .await;
        assert_eq!(left.as_deref(), Ok("0"), "{server}");
    }
}
