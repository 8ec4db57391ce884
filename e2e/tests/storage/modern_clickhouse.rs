//! Every statement of the schema, in its single-server and cluster forms, as the consumer
//! would send it to a modern server, run through chdb: ClickHouse 26.x in-process (PyPI
//! `chdb-core`, which `scripts/test` installs), since no modern server runs here. A
//! statement that modern ClickHouse refuses fails this test.

use std::path::PathBuf;
use std::process::Command;

use schema::ServerCaps;

fn python() -> PathBuf {
    std::env::var_os("TEST_CHDB_PYTHON").map_or_else(
        || {
            let home = std::env::var_os("HOME").expect("HOME");
            PathBuf::from(home).join(".local/share/chdb-core-26.9.0/bin/python")
        },
        PathBuf::from,
    )
}

fn run(command: &mut Command) -> String {
    let output = command.output().expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{command:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The version chdb runs, and what the consumer's decision point makes of it.
fn chdb_caps() -> (String, ServerCaps) {
    let version = run(Command::new(python()).args([
        "-c",
        "import chdb; print(str(chdb.query('SELECT version()', 'TSVRaw')).strip())",
    ]));
    let caps = ServerCaps::parse(version.trim()).expect("a version");
    (version.trim().to_owned(), caps)
}

/// Runs `statements` (`{"runs", "sql", "settings", "parse_only"?}`) through
/// `chdb/check.py` in `layout`, for a server of version `caps`; its output, after checking
/// that every one passed.
fn check(caps: ServerCaps, layout: &str, statements: &[serde_json::Value]) -> String {
    let dir = tempfile::tempdir().expect("temporary folder");
    let plan = dir.path().join(format!("{layout}.json"));
    // After the rows, before the views are read: the consumer's refresh of every visitor.
    let visitors = schema::REFRESH_VISITORS;
    let refresh = [
        format!("CREATE TEMPORARY TABLE {visitors} (public_key String, visitor_id String)"),
        format!(
            "INSERT INTO {visitors} SELECT DISTINCT toString(public_key), visitor_id \
             FROM analytics.events"
        ),
        schema::metric_values_refresh(caps, None, "analytics", 1),
    ];
    let document = serde_json::json!({ "layout": layout, "statements": statements,
                                        "refresh": refresh });
    std::fs::write(&plan, document.to_string()).expect("plan written");
    let folder = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("chdb");
    let out = run(Command::new(python())
        .arg(folder.join("check.py"))
        .arg(&plan)
        .arg(folder.join("config.xml")));
    let ran = out.lines().filter(|l| l.starts_with("ok ")).count();
    assert_eq!(ran, statements.len(), "{layout}:\n{out}");
    out
}

/// The schema's statements for `caps` as `check` takes them.
fn schema(caps: ServerCaps, cluster: Option<&str>, db: &str) -> Vec<serde_json::Value> {
    schema::statements(caps, cluster, db)
        .into_iter()
        .map(|s| serde_json::json!(s))
        .collect()
}

fn once(sql: &str, parse_only: bool) -> serde_json::Value {
    serde_json::json!({ "runs": "once", "sql": sql, "settings": [], "parse_only": parse_only })
}

/// The columns `check.py` described for `view`: `columns VIEW: [[name, type], ...]`.
fn described(out: &str, view: &str) -> Vec<(String, String)> {
    let prefix = format!("columns {view}: ");
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no columns of {view}:\n{out}"));
    let columns: Vec<(String, String)> = serde_json::from_str(line).expect("JSON pairs");
    plain(&columns)
}

/// Columns with `LowCardinality(T)` read as `T`: a row reads both alike, and the servers
/// keep the 18.x schema's dictionary columns where 26.x computes plain ones.
fn plain<N: AsRef<str>, T: AsRef<str>>(columns: &[(N, T)]) -> Vec<(String, String)> {
    columns
        .iter()
        .map(|(name, ty)| {
            let ty = ty.as_ref();
            let ty = ty
                .strip_prefix("LowCardinality(")
                .and_then(|t| t.strip_suffix(')'))
                .unwrap_or(ty);
            (name.as_ref().to_owned(), ty.to_owned())
        })
        .collect()
}

/// Every statement runs, every results view answers, and each has the columns of its
/// row type (`schema::view_rows`; on 18.16: `schema.rs`).
#[test]
fn every_schema_statement_runs_on_modern_clickhouse() {
    let (version, caps) = chdb_caps();
    assert!(caps.major >= 26, "chdb runs ClickHouse {version}");
    for (layout, cluster) in [("single", None), ("cluster", Some("analytics"))] {
        let statements = schema::statements(caps, cluster, "analytics");
        // 26.x refuses the 18.x LowCardinality switch in every placement.
        assert!(
            statements.iter().all(|s| s.settings.is_empty()),
            "{layout}: a setting for old servers is sent to {version}"
        );
        let out = check(caps, layout, &schema(caps, cluster, "analytics"));
        if cluster.is_none() {
            // Two visitors of two variants, first exposed in two hours: a row per variant
            // now, and per variant and hour over time (b from its first hour on), and per
            // variant and metric.
            for expected in [
                "view experiment_results: 2 rows",
                "view experiment_variant_counts_over_time: 3 rows",
                "view experiment_results_over_time: 3 rows",
                "view experiment_metric_results: 4 rows",
            ] {
                assert!(out.contains(expected), "{expected}:\n{out}");
            }
            for (view, columns) in schema::view_rows::VIEWS {
                assert_eq!(described(&out, view), plain(columns), "{view}:\n{out}");
            }
        }
    }
}

/// What `analytics-erase` and a retention run send, after the schema, on one server: the
/// deletions by visitor and by session, the rebuild of a session's visitors, the wait on
/// `system.mutations`, the retention's cutoff, partitions and drop.
#[test]
fn erasure_and_retention_statements_run_on_modern_clickhouse() {
    let (_, caps) = chdb_caps();
    let db = "analytics";
    let visitors = "has([1, 2], sipHash64(visitor_id))";
    let mut statements = schema(caps, None, db);
    statements.extend([
        format!(
            "INSERT INTO {db}.events (event_id, received_at, public_key, session_id, visitor_id, \
             event_name, experiment_id, variant_id) VALUES \
             (generateUUIDv4(), now(), 'pk', 's1', 'v1', 'impression', 'exp', 'a'), \
             (generateUUIDv4(), now(), 'pk', 's2', 'v1', 'conversion', 'exp', '')"
        ),
        tools::erase::count_statement(db, "events", "sipHash64(session_id) = 2"),
        tools::erase::delete_statement(db, "events", "sipHash64(session_id) = 2"),
        tools::erase::count_statement(db, "experiment_visitors", visitors),
        tools::erase::delete_statement(db, "experiment_visitors", visitors),
        schema::visitors_rebuild(caps, None, db, visitors),
        tools::erase::delete_statement(db, "events", "sipHash64(visitor_id) = 1"),
        format!(
            "SELECT count() FROM system.mutations \
             WHERE database = '{db}' AND table = 'events' AND is_done = 0"
        ),
        "SELECT toYYYYMM(now() - toIntervalDay(60))".to_owned(),
        format!(
            "SELECT DISTINCT partition FROM system.parts \
             WHERE database = '{db}' AND table = 'events' AND active"
        ),
        consumer::retention::drop_statement(db, "events", 202_401),
    ]
    .map(|sql| once(&sql, false)));
    check(caps, "single", &statements);
}

/// What `analytics-access grant` and `revoke` send to a modern server: the grants table is
/// made and written; users, roles, grants and row policies are parsed (EXPLAIN AST) only,
/// since chdb has no writeable user storage ("no writeable access storage").
#[test]
fn access_statements_parse_on_modern_clickhouse() {
    let (version, caps) = chdb_caps();
    assert!(caps.has_sql_access(), "{version} takes the SQL path");
    let db = "analytics";
    let mut statements = schema(caps, None, db);
    let tables = ["events", "experiment_results", "experiment_visitors"].map(String::from);
    let access = tools::access::modern_statements(db, &tables);
    let parse_only = |sql: &str| {
        [
            "CREATE ROLE",
            "CREATE USER",
            "ALTER USER",
            "CREATE QUOTA",
            "GRANT",
            "REVOKE",
            "CREATE ROW POLICY",
            "DROP",
        ]
        .iter()
        .any(|p| sql.starts_with(p))
    };
    assert!(access.iter().filter(|s| parse_only(s)).count() >= 3 * tables.len() + 7);
    // The analyst's caps are their settings, fixed by readonly, with an hourly quota.
    assert!(access.iter().any(|s| s.starts_with("ALTER USER alice")
        && s.contains("max_execution_time = 60")
        && s.contains("max_concurrent_queries_for_user = 4")
        && s.contains("cancel_http_readonly_queries_on_client_close = 1")));
    assert!(
        access
            .iter()
            .any(|s| s.starts_with("CREATE QUOTA OR REPLACE alice"))
    );
    statements.extend(access.iter().map(|sql| once(sql, parse_only(sql))));
    check(caps, "single", &statements);
}
