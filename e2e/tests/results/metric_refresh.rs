//! The consumer's refresh of the stored metric values: the visitors of the batches it
//! inserts have their values stored soon after, and a sweep stores those of the visitors
//! whose values are missing or stale when the mirrored snapshot changes (here: rows that
//! did not come through a consumer, and a changed metric definition).

use std::time::Duration;

use e2e::{ConsumerNames, SnapshotFile};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);
const KEY: &str = "pk_refresh";
const EXPERIMENT: &str = "exp_refresh";

/// Clicks per visitor: all of them, or those on `clicks_on`.
fn snapshot(version: &str, clicks_on: Option<&str>) -> Value {
    let mut metric = json!({ "id": "clicks", "kind": "mean", "eventName": "click",
                             "aggregate": "count" });
    if let Some(target) = clicks_on {
        metric["clickTarget"] = json!(target);
    }
    let variant = |id: &str, control: bool| json!({ "id": id, "weight": 50, "control": control, "parts": {} });
    json!({
        "version": version,
        "metrics": [metric],
        "experiments": [{ "id": EXPERIMENT, "status": "live",
                          "variants": [variant("var_a", true), variant("var_b", false)],
                          "metrics": [{ "id": "clicks", "role": "secondary" }] }],
        "keys": [{ "publicKey": KEY, "experiments": [EXPERIMENT] }]
    })
}

/// An impression and three clicks (two on `#buy`) of `visitor`, as the ingest sends them.
fn events(visitor: &str, variant: &str) -> Vec<contract::event::EventMessage> {
    let envelope = contract::event::Envelope::new(
        contract::event::now_millis(),
        KEY.into(),
        "Mozilla/5.0 (X11; Linux x86_64) Chrome/130.0".into(),
        None,
    );
    let event = |name: &str, target: &str| {
        let mut body = json!({ "eventName": name, "experimentId": EXPERIMENT,
            "sessionId": format!("s-{visitor}"), "visitorId": visitor });
        if name == "impression" {
            body["variantId"] = json!(variant);
        } else {
            body["clickTarget"] = json!(target);
        }
        contract::event::EventMessage::from_client(&body, &envelope).expect("valid event")
    };
    vec![
        event("impression", ""),
        event("click", "#buy"),
        event("click", "#buy"),
        event("click", "#nav"),
    ]
}

/// `events` rows of `visitors`' events, as the consumer would insert them.
fn rows(visitors: std::ops::Range<u32>) -> String {
    let rows: Vec<String> = visitors
        .flat_map(|v| events(&format!("v{v}"), "var_a"))
        .map(|e| {
            json!({ "event_id": e.event_id.to_string(), "received_at": e.received_at / 1000,
                "received_at_ms": e.received_at, "event_time": e.received_at,
                "public_key": KEY, "event_name": e.event_name, "experiment_id": EXPERIMENT,
                "variant_id": e.variant_id.unwrap_or_default(), "session_id": e.session_id,
                "click_target": e.click_target.unwrap_or_default(),
                "visitor_id": e.visitor_id.unwrap_or_default(), "phase": 1 })
            .to_string()
        })
        .collect();
    format!("INSERT INTO events FORMAT JSONEachRow {}", rows.join("\n"))
}

async fn count(ch: &clickhouse::Client, query: &str) -> u64 {
    ch.query(query).fetch_one().await.unwrap_or(u64::MAX)
}

#[tokio::test]
async fn the_consumer_stores_its_visitors_values_and_sweeps_the_rest_on_a_new_snapshot() {
    let file = SnapshotFile::new(&snapshot("r-1", None));
    let names = ConsumerNames::unique();
    let snapshot_flag = format!("--experiments-snapshot={}", file.path.display());
    let consumer = e2e::start_consumer(e2e::consumer_config(
        &names,
        &[
            &snapshot_flag,
            "--snapshot-poll-interval-ms=100",
            "--metrics-refresh-ms=200",
        ],
    ))
    .await;
    let ch = e2e::clickhouse(&names.database);
    let stale = "SELECT count() FROM experiment_metric_stale";
    // The stored clicks of each visitor, as the view reads them.
    let stored = |metric_rows: u64| {
        let ch = ch.clone();
        async move {
            let rows = count(
                &ch,
                "SELECT count() FROM experiment_metric_stored \
                 WHERE fresh = 1 AND metric_id = 'clicks'",
            )
            .await;
            (rows == metric_rows && count(&ch, stale).await == 0).then_some(())
        }
    };
    e2e::eventually(WAIT, "the snapshot mirrored", || async {
        (count(&ch, "SELECT count() FROM experiment_metrics").await > 0).then_some(())
    })
    .await;

    let mut messages = Vec::new();
    for v in 0..10 {
        messages.extend(events(
            &format!("v{v}"),
            if v % 2 == 0 { "var_a" } else { "var_b" },
        ));
    }
    e2e::produce_events_to(&e2e::kafka_brokers(), &names.topic, &messages).await;
    e2e::eventually(WAIT, "the consumed visitors' values stored", || stored(10)).await;
    let means = "SELECT groupArray(value) FROM (SELECT value FROM experiment_metric_results WHERE metric_id = 'clicks' \
                 ORDER BY variant_id)";
    let all_clicks: Vec<f64> = ch.query(means).fetch_one().await.expect("results");
    assert_eq!(all_clicks, [3.0, 3.0]);

    // Rows that no consumer inserted: their visitors stay stale until a sweep.
    ch.query(&rows(10..15)).execute().await.expect("insert");
    assert_eq!(count(&ch, stale).await, 5);

    // A new snapshot with a changed metric: every visitor is swept.
    file.replace(&snapshot("r-2", Some("#buy")));
    e2e::eventually(WAIT, "every visitor's values stored again", || stored(15)).await;
    let buys: Vec<f64> = ch.query(means).fetch_one().await.expect("results");
    assert_eq!(buys, [2.0, 2.0], "the changed definition applies");

    consumer.stop().await.expect("clean stop");
    e2e::drop_database(&names.database).await;
}

/// `consumer --refresh-metrics-only` migrates, stores the values of every stale visitor
/// (rows inserted with no consumer running) and exits.
#[tokio::test]
async fn the_refresh_only_run_stores_the_stale_visitors_and_exits() {
    let database = e2e::unique("refresh_");
    let ch = e2e::clickhouse(&database);
    let run = || refresh_only(&database);
    assert!(
        run().status.success(),
        "an empty database: nothing to store"
    );
    define_clicks(&ch).await;
    ch.query(&rows(0..4)).execute().await.expect("insert");
    let stale = "SELECT count() FROM experiment_metric_stale";
    assert_eq!(count(&ch, stale).await, 4);
    let output = run();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(count(&ch, stale).await, 0, "every stale visitor stored");
    let clicks = "SELECT sum(value) FROM experiment_metric_stored WHERE metric_id = 'clicks'";
    let total: f64 = ch.query(clicks).fetch_one().await.expect("stored");
    assert_eq!(total, 12.0, "three clicks each");
    e2e::drop_database(&database).await;
}

/// Visitors a statement of these tests' sweeps: fewer than the default, so that a sweep of
/// a few tens of thousands spans statements.
const PER_STATEMENT: &str = "20000";

/// `consumer --refresh-metrics-only` on `database`.
fn refresh_only(database: &str) -> std::process::Output {
    std::process::Command::new(e2e::workspace_binary("consumer"))
        .arg("--refresh-metrics-only")
        .env("METRICS_VISITORS_PER_STATEMENT", PER_STATEMENT)
        .env("CLICKHOUSE_URL", e2e::clickhouse_url())
        .env("CLICKHOUSE_DATABASE", database)
        .output()
        .expect("the consumer runs")
}

/// A sweep stores more visitors than one statement takes (20 000 here), each statement a
/// full list, which must pass the server's limits on a statement's size (18.x refused a
/// list of 20 000 visitors written in the statement: "AST is too big").
#[tokio::test]
async fn a_sweep_stores_more_visitors_than_one_statement_takes() {
    let database = e2e::unique("refresh_");
    let ch = e2e::clickhouse(&database);
    assert!(refresh_only(&database).status.success(), "migrated");
    ch.query(
        "INSERT INTO events (event_id, received_at, received_at_ms, event_time, public_key, \
         event_name, experiment_id, variant_id, session_id, visitor_id, phase) \
         SELECT generateUUIDv4(), toDateTime(1795300000), 1795300000000, 1795300000000, ?, \
         'impression', ?, 'var_a', concat('s', toString(number)), \
         concat('v''\\\\', toString(number)), 1 FROM numbers(45000)",
    )
    .bind(KEY)
    .bind(EXPERIMENT)
    .execute()
    .await
    .expect("insert");
    let stale = "SELECT count() FROM experiment_metric_stale";
    assert_eq!(count(&ch, stale).await, 45_000);
    let output = refresh_only(&database);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(count(&ch, stale).await, 0, "every stale visitor stored");
    let stored = "SELECT uniqExact(visitor_id) FROM experiment_metric_stored WHERE fresh = 1";
    assert_eq!(count(&ch, stored).await, 45_000);
    e2e::drop_database(&database).await;
}

/// A consumer asked to stop while its refresh waits on a ClickHouse that does not answer
/// (paused) stops at once: the refresh is dropped, not waited for.
#[tokio::test]
async fn a_consumer_stops_at_once_while_its_refresh_waits_on_a_paused_server() {
    let server = e2e::PrivateClickHouse::start().await;
    let names = ConsumerNames::unique();
    let url = format!("--clickhouse-url={}", server.url());
    let consumer = e2e::start_consumer(e2e::consumer_config(
        &names,
        &[&url, "--metrics-refresh-ms=100", "--metrics-sweep-secs=1"],
    ))
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    server.pause();
    // A sweep every second: one is waiting on the paused server now.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let started = std::time::Instant::now();
    let stopped = consumer.stop().await;
    let took = started.elapsed();
    server.resume();
    stopped.expect("a clean stop");
    assert!(took < Duration::from_secs(10), "stopped in {took:?}");
}

/// The definitions of one metric, clicks per visitor, as the consumer writes them.
async fn define_clicks(ch: &clickhouse::Client) {
    ch.query(
        "INSERT INTO experiment_metrics (experiment_id, version, phase, metric_id, role, kind, \
         num_event, num_aggregate, loaded_at) VALUES \
         (?, 'r', 1, 'clicks', 'goal', 'mean', 'click', 'count', 0)",
    )
    .bind(EXPERIMENT)
    .execute()
    .await
    .expect("definitions");
}

/// `experiment_metric_results`' `as_of` is the earliest mark of the consumers that wrote
/// one in the last two minutes (a sweep writes one), or the latest mark when none did.
#[tokio::test]
async fn metric_results_are_as_of_the_earliest_running_consumers_mark() {
    let database = e2e::unique("refresh_");
    let ch = e2e::clickhouse(&database);
    assert!(refresh_only(&database).status.success(), "migrated");
    define_clicks(&ch).await;
    ch.query(&rows(0..4)).execute().await.expect("insert");
    let now = || async {
        let now: u32 = ch
            .query("SELECT toUInt32(now())")
            .fetch_one()
            .await
            .expect("now");
        now
    };
    let as_of = || async {
        let as_of: Vec<u32> = ch
            .query("SELECT DISTINCT toUInt32(as_of) FROM experiment_metric_results")
            .fetch_all()
            .await
            .expect("as_of");
        assert_eq!(as_of.len(), 1, "one as_of for every row: {as_of:?}");
        // The statement that asks for it alone says the same.
        let alone: u32 = ch
            .query(&format!(
                "SELECT toUInt32(refreshed_as_of) FROM ({})",
                schema::metric_results_as_of(&database)
            ))
            .fetch_one()
            .await
            .expect("as_of alone");
        assert_eq!(alone, as_of[0], "as_of alone");
        as_of[0]
    };
    let mark = |name: &'static str, ago: u32, written_ago: u32| {
        let ch = ch.clone();
        async move {
            ch.query(
                "INSERT INTO metric_refresh_marks (consumer, as_of, written_at) \
                 SELECT ?, now() - ?, now() - ?",
            )
            .bind(name)
            .bind(ago)
            .bind(written_ago)
            .execute()
            .await
            .expect("mark");
        }
    };
    let before = now().await;
    assert!(refresh_only(&database).status.success());
    let swept = as_of().await;
    assert!(
        swept + 2 >= before && swept <= now().await,
        "the sweep's start: {swept} against {before}"
    );

    mark("behind", 300, 0).await;
    let behind = now().await - 300;
    assert!(
        as_of().await.abs_diff(behind) <= 2,
        "the earliest running mark"
    );
    mark("stopped", 3000, 600).await;
    assert!(
        as_of().await.abs_diff(behind) <= 2,
        "a stopped consumer is left out"
    );

    ch.query("TRUNCATE TABLE metric_refresh_marks")
        .execute()
        .await
        .expect("truncate");
    mark("gone", 900, 600).await;
    mark("gone too", 800, 700).await;
    let latest = now().await - 800;
    assert!(
        as_of().await.abs_diff(latest) <= 2,
        "none running: the latest mark"
    );
    e2e::drop_database(&database).await;
}

/// A consumer killed during a sweep leaves every visitor at one refresh, whole, and the
/// next sweep stores those it did not reach.
#[tokio::test]
async fn a_sweep_killed_midway_leaves_whole_visitors_and_the_next_one_finishes() {
    const VISITORS: u64 = 100_000;
    let database = e2e::unique("refresh_");
    let ch = e2e::clickhouse(&database);
    assert!(refresh_only(&database).status.success(), "migrated");
    define_clicks(&ch).await;
    ch.query(&format!(
        "INSERT INTO events (event_id, received_at, received_at_ms, event_time, public_key, \
         event_name, experiment_id, variant_id, session_id, visitor_id, phase) \
         SELECT generateUUIDv4(), toDateTime(1795300000), 1795300000000, 1795300000000, ?, \
         'impression', ?, if(number % 2 = 0, 'var_a', 'var_b'), concat('s', toString(number)), \
         concat('v', toString(number)), 1 FROM numbers({VISITORS})"
    ))
    .bind(KEY)
    .bind(EXPERIMENT)
    .execute()
    .await
    .expect("insert");
    let stored = "SELECT uniqExact(visitor_id) FROM visitor_metric_values";
    let mut sweep = std::process::Command::new(e2e::workspace_binary("consumer"))
        .arg("--refresh-metrics-only")
        .env("METRICS_VISITORS_PER_STATEMENT", PER_STATEMENT)
        .env("CLICKHOUSE_URL", e2e::clickhouse_url())
        .env("CLICKHOUSE_DATABASE", &database)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the consumer runs");
    e2e::eventually(WAIT, "a first statement stored", || async {
        (count(&ch, stored).await > 0).then_some(())
    })
    .await;
    sweep.kill().expect("killed");
    let _ = sweep.wait();
    let visitors = "SELECT count() FROM experiment_metric_visitors";
    let partial = count(&ch, stored).await;
    assert!(partial < VISITORS, "killed midway: {partial} stored");
    assert_eq!(
        count(&ch, visitors).await,
        partial,
        "each stored visitor once"
    );

    let output = refresh_only(&database);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(count(&ch, visitors).await, VISITORS, "every visitor, once");
    assert_eq!(
        count(&ch, "SELECT count() FROM experiment_metric_stale").await,
        0
    );
    e2e::drop_database(&database).await;
}
