//! The benchmark's tools, run as `scripts/bench` runs them, against the real services,
//! broker and ClickHouse: what they count and report, not how fast anything is.

use std::path::PathBuf;
use std::process::Output;

use e2e::ConsumerNames;
use serde_json::Value;

fn demo_snapshot() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/experiments.json")
}

/// Runs `loadgen ARGS` to its end.
async fn loadgen(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(e2e::workspace_binary("loadgen"))
            .args(&args)
            .output()
            .expect("loadgen runs")
    })
    .await
    .expect("loadgen finished")
}

/// The figure a successful run printed.
fn figure(output: &Output) -> Value {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "loadgen failed: {stderr}");
    serde_json::from_slice(&output.stdout).expect("one JSON figure on stdout")
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// Requests the ingest answered so far, whatever their status, from its /metrics.
async fn requests_served(metrics: &str) -> u64 {
    e2e::metrics_text(metrics)
        .await
        .lines()
        .filter(|l| l.starts_with("ingest_requests_total{"))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum::<f64>() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_load_counts_what_was_accepted_and_every_accepted_event_lands() {
    let names = ConsumerNames::unique();
    let consumer = e2e::start_consumer(e2e::consumer_config(&names, &[])).await;
    let ingest = e2e::start_ingest(e2e::ingest_config(&demo_snapshot(), &names.topic, &[])).await;
    let snapshot = demo_snapshot().display().to_string();
    let url = ingest.url("");
    let base = [
        "ingest",
        "--bench",
        "t",
        "--subject",
        "closed",
        "--url",
        &url,
        "--snapshot",
        &snapshot,
    ];

    // Closed loop, then every accepted event checked in ClickHouse (exit 0 says so).
    let mut closed = args(&base);
    closed.extend(args(&[
        "--connections=4",
        "--warmup=0.5",
        "--duration=2",
        "--watch=me=self",
        "--verify-clickhouse",
        &e2e::clickhouse_url(),
        "--database",
        &names.database,
    ]));
    let f = figure(&loadgen(closed).await);
    let requests = f["requests"].as_u64().expect("requests");
    assert!(requests > 0, "{f}");
    assert!(
        f["rate"].as_f64().expect("rate") >= requests as f64 * 4.0 / 2.0 / 2.0,
        "events per second count 1-5 events per request: {f}"
    );
    assert_eq!(f["failures"], serde_json::json!({}), "{f}");
    assert_eq!(f["transport_errors"], 0, "{f}");
    let (p50, p99, max) = (&f["p50_us"], &f["p99_us"], &f["max_us"]);
    assert!(
        p50.as_u64() <= p99.as_u64() && p99.as_u64() <= max.as_u64(),
        "{f}"
    );
    assert!(f["cpu_percent"]["me"].as_f64().is_some(), "{f}");

    // Open loop: the schedule, not the server, sets the number of requests. 40 a second
    // from the start of the half-second warm-up to the end: the ingest sees exactly 100,
    // however slowly it answers; the figure counts those due in the 2 s measured (80),
    // less any answered after the end.
    let mut open = args(&base);
    open.extend(args(&[
        "--connections=8",
        "--warmup=0.5",
        "--duration=2",
        "--rate=40",
    ]));
    let metrics = ingest.url("/metrics");
    let before = requests_served(&metrics).await;
    let f = figure(&loadgen(open).await);
    let served = requests_served(&metrics).await - before;
    assert_eq!(f["transport_errors"], 0, "{f}");
    assert_eq!(
        served, 100,
        "40 per second for 2.5 s reached the ingest: {f}"
    );
    let requests = f["requests"].as_u64().expect("requests");
    assert!((1..=80).contains(&requests), "40 per second for 2 s: {f}");

    // Events that never reach ClickHouse fail the verification: this ingest's topic has
    // no consumer.
    let stray = e2e::start_ingest(e2e::ingest_config(
        &demo_snapshot(),
        &e2e::unique("unconsumed-"),
        &[],
    ))
    .await;
    let stray_url = stray.url("");
    let output = loadgen(args(&[
        "ingest",
        "--bench=t",
        "--subject=lost",
        "--url",
        &stray_url,
        "--snapshot",
        &snapshot,
        "--connections=2",
        "--warmup=0",
        "--duration=0.5",
        "--verify-clickhouse",
        &e2e::clickhouse_url(),
        "--database",
        &names.database,
        "--verify-timeout=2",
    ]))
    .await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("reached ClickHouse"), "{stderr}");

    stray.stop().await.expect("stop");
    ingest.stop().await.expect("stop");
    consumer.stop().await.expect("stop");
    e2e::drop_database(&names.database).await;
}

#[tokio::test]
async fn get_load_reports_non_2xx_answers_apart() {
    let config_api = e2e::start_config_api(&demo_snapshot()).await;
    let url = config_api.url("/api/v1/experiments");
    let run = |key: &'static str| {
        loadgen(args(&[
            "get",
            "--bench=t",
            "--subject=get",
            "--url",
            &url,
            "-H",
            key,
            "--connections=2",
            "--warmup=0",
            "--duration=0.5",
        ]))
    };
    let ok = figure(&run("X-public-key: pk_demo_coffee").await);
    assert!(ok["requests"].as_u64() > Some(0), "{ok}");
    assert_eq!(ok["failures"], serde_json::json!({}));

    let refused = figure(&run("X-public-key: pk_nobody").await);
    assert_eq!(
        refused["requests"], 0,
        "only 2xx answers are requests done: {refused}"
    );
    assert_eq!(refused["rate"], 0.0);
    assert!(refused["failures"]["401"].as_u64() > Some(0), "{refused}");
    config_api.stop().await.expect("stop");
}

#[tokio::test]
async fn reference_tools_produce_read_back_and_insert_what_they_say() {
    // The top-up reads a topic's size off its end offsets, which Tansu's memory storage
    // does not report: a broker with SQLite storage.
    let broker = e2e::PrivateBroker::start_sqlite().await;
    let brokers = broker.brokers.clone();
    let topic = e2e::unique("bench-");
    let snapshot = demo_snapshot().display().to_string();
    let produce = |events: &'static str, extra: &'static [&'static str]| {
        let mut list = args(&[
            "produce",
            "--bench=t",
            "--subject=p",
            "--brokers",
            &brokers,
            "--topic",
            &topic,
            events,
            "--snapshot",
            &snapshot,
        ]);
        list.extend(args(extra));
        loadgen(list)
    };
    let produced = figure(&produce("--events=500", &[]).await);
    assert_eq!(produced["requests"], 500, "{produced}");

    // A top-up sends only what is missing.
    let topped = figure(&produce("--events=700", &["--top-up"]).await);
    assert_eq!(topped["requests"], 200, "{topped}");

    let group = e2e::unique("raw-");
    let read = figure(
        &loadgen(args(&[
            "consume",
            "--bench=t",
            "--subject=c",
            "--brokers",
            &brokers,
            "--topic",
            &topic,
            "--group",
            &group,
            "--events=700",
        ]))
        .await,
    );
    assert_eq!(read["requests"], 700, "{read}");

    let database = e2e::unique("bench_ref_");
    let inserted = figure(
        &loadgen(args(&[
            "clickhouse-insert",
            "--bench=t",
            "--subject=i",
            "--clickhouse",
            &e2e::clickhouse_url(),
            "--database",
            &database,
            "--rows=1000",
            "--batch=300",
            "--snapshot",
            &snapshot,
        ]))
        .await,
    );
    assert_eq!(inserted["requests"], 1000, "{inserted}");
    let stored: u64 = e2e::clickhouse(&database)
        .query("SELECT count() FROM events WHERE event_name != ''")
        .fetch_one()
        .await
        .expect("count");
    assert_eq!(stored, 1000);
    e2e::drop_database(&database).await;
}
