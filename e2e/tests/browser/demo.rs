//! The demo and what shows its answer: `loadgen demo` (what `scripts/demo` runs) through a
//! pipeline of the test's own finds the effect it planted and no other; its HTML report,
//! opened in real Chromium from a file with the network cut, shows that experiment's
//! numbers in a table and a chart; and `experiment_results_over_time` equals a count made
//! here, hour by hour, from events of known times written straight into ClickHouse.

use crate::stats;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use e2e::ConsumerNames;
use schema::{ResultsOverTimeRow, ResultsRow};

const KEY: &str = "pk_demo_coffee";
const PLANTED: &str = "exp_home_headline";
const NULL: &str = "exp_checkout_button";

fn demo_snapshot() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/experiments.json")
}

/// Runs a command to its end within `limit`, killed after it.
async fn run_bounded(mut command: std::process::Command, limit: Duration) -> std::process::Output {
    let child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the command starts");
    let pid = child.id();
    let waited = tokio::time::timeout(
        limit,
        tokio::task::spawn_blocking(move || child.wait_with_output()),
    )
    .await;
    match waited {
        Ok(output) => output.expect("joined").expect("output"),
        Err(_) => {
            e2e::send_signal(pid, "KILL");
            panic!("{command:?} ran over {} s (killed)", limit.as_secs());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_finds_its_planted_effect_and_no_other_and_its_report_shows_it_offline() {
    let snapshot = demo_snapshot();
    let names = ConsumerNames::unique();
    let snapshot_flag = format!("--experiments-snapshot={}", snapshot.display());
    let consumer = e2e::start_consumer(e2e::consumer_config(&names, &[&snapshot_flag])).await;
    let ingest = e2e::start_ingest(e2e::ingest_config(&snapshot, &names.topic, &[])).await;
    let config_api = e2e::start_config_api(&snapshot).await;
    let front = e2e::Front::start(ingest.addr, config_api.addr).await;

    let mut loadgen = std::process::Command::new(e2e::workspace_binary("loadgen"));
    loadgen.args([
        "demo",
        "--url",
        &front.url(),
        "--clickhouse",
        &e2e::clickhouse_url(),
    ]);
    loadgen.args(["--database", &names.database, "--settle", "150"]);
    let started = Instant::now();
    let output = run_bounded(loadgen, Duration::from_secs(240)).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "loadgen demo failed: {stderr}");
    println!(
        "{stderr}loadgen demo: {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let ch = e2e::clickhouse(&names.database);
    let rows: Vec<ResultsRow> = ch
        .query(
            "SELECT ?fields FROM experiment_results WHERE public_key = ? ORDER BY experiment_id, variant_id",
        )
        .bind(KEY)
        .fetch_all()
        .await
        .expect("experiment_results");
    for row in &rows {
        println!("{row:?}");
    }
    let planted = of_experiment(&rows, PLANTED);
    let mut steps = e2e::Steps::default();
    steps
        .run("results", async { the_planted_effect_and_no_other(&rows) })
        .await;
    steps
        .run("README", async { the_readme_shows_this_run(&planted) })
        .await;
    steps
        .run(
            "report",
            the_report_shows_it_offline(&names.database, &planted),
        )
        .await;

    ingest.stop().await.expect("ingest stops");
    config_api.stop().await.expect("config-api stops");
    consumer.stop().await.expect("consumer stops");
    e2e::drop_database(&names.database).await;
    steps.end();
}

/// The rows of `experiment`.
fn of_experiment<'a>(rows: &'a [ResultsRow], experiment: &str) -> Vec<&'a ResultsRow> {
    rows.iter()
        .filter(|r| r.experiment_id == experiment)
        .collect()
}

/// Every visitor exposed once; the SDK's hashing follows the weights; the planted +4 pp
/// found and held by its interval, and no effect where none was planted.
fn the_planted_effect_and_no_other(rows: &[ResultsRow]) {
    let (planted, null) = (of_experiment(rows, PLANTED), of_experiment(rows, NULL));
    assert_eq!(planted.len(), 2, "control and treatment: {planted:?}");
    assert_eq!(null.len(), 3, "three variants: {null:?}");
    let visitors: u64 = planted.iter().map(|r| r.exposed).sum();
    assert_eq!(
        visitors, 6000,
        "every visitor exposed once, none in two variants"
    );
    assert_eq!(null.iter().map(|r| r.exposed).sum::<u64>(), 6000);
    for row in planted.iter().chain(&null) {
        assert!(
            row.srm_p_value.is_some_and(|p| p > 0.001),
            "the SDK's hashing follows the weights: {row:?}"
        );
        if row.is_control == 1 {
            continue;
        }
        let (low, high) = (
            row.always_valid_ci_low.expect("an interval"),
            row.always_valid_ci_high.expect("an interval"),
        );
        if row.experiment_id == PLANTED {
            assert!(low > 0.0, "the planted effect is found: {row:?}");
            assert!(
                low < 0.04 && high > 0.04,
                "its interval holds +4 pp: {row:?}"
            );
        } else {
            assert!(
                low < 0.0 && high > 0.0,
                "no effect where none was planted: {row:?}"
            );
        }
    }
}

/// The README shows this run's answer.
fn the_readme_shows_this_run(planted: &[&ResultsRow]) {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README");
    for row in planted {
        let line = readme
            .lines()
            .find(|l| l.starts_with(&format!("{} ", row.variant_id)))
            .unwrap_or_else(|| panic!("no README line for {}", row.variant_id));
        let counts: Vec<u64> = line
            .split_whitespace()
            .filter_map(|t| t.parse().ok())
            .take(2)
            .collect();
        assert_eq!(counts, [row.exposed, row.converted], "README: {line}");
    }
}

/// The report of the planted experiment, in a real browser, offline: no request, no wider
/// than a phone, the command's figures, its verdicts and chart, and a screenshot.
async fn the_report_shows_it_offline(database: &str, planted: &[&ResultsRow]) {
    let dir = tempfile::tempdir().expect("a folder");
    let report = dir.path().join("report.html");
    let screenshot = std::env::var("DEMO_SCREENSHOT")
        .map(PathBuf::from)
        .unwrap_or_else(|_| dir.path().join("report.png"));
    let mut command = std::process::Command::new(e2e::workspace_binary("experiment-results"));
    command
        .args([PLANTED, "--public-key", KEY, "--html"])
        .arg(&report)
        .env("CLICKHOUSE_URL", e2e::clickhouse_url())
        .env("CLICKHOUSE_DATABASE", database);
    let output = run_bounded(command, Duration::from_secs(30)).await;
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "experiment-results: {table}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    println!("{table}");
    assert!(table.contains("var_home_urgency"), "{table}");
    let sdk = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../sdk");
    assert!(
        sdk.join("node_modules/playwright-core").exists(),
        "playwright-core is not installed: scripts/test installs it (npm ci in sdk/)"
    );
    let mut node = std::process::Command::new("node");
    node.arg("test/browser/report.mjs")
        .current_dir(&sdk)
        .env("REPORT", &report)
        .env("SCREENSHOT", &screenshot);
    let output = run_bounded(node, Duration::from_secs(90)).await;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(
        output.status.success(),
        "the browser run failed: {stdout}{stderr}"
    );
    let seen: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    println!("{seen}");
    assert_eq!(
        seen["requests"],
        serde_json::json!([]),
        "the page asked the network"
    );
    assert!(
        seen["overflow"].as_i64() == Some(0),
        "wider than a phone: {seen}"
    );
    let sections = seen["sections"].as_array().expect("sections");
    assert_eq!(sections.len(), 1, "{seen}");
    let section = &sections[0];
    assert!(
        section["srm"]
            .as_str()
            .is_some_and(|s| s.starts_with("Sample ratio as expected"))
    );
    assert!(section["range"].as_str().is_some_and(|s| s.contains("UTC")));
    for row in planted {
        let shown = section["rows"]
            .as_array()
            .and_then(|rows| {
                rows.iter()
                    .find(|r| r["variant"] == row.variant_id.as_str())
            })
            .unwrap_or_else(|| panic!("no row for {}: {seen}", row.variant_id));
        assert_eq!(shown["exposed"], row.exposed, "{shown}");
        assert_eq!(shown["converted"], row.converted, "{shown}");
        assert_eq!(shown["visible"], true);
        if row.is_control == 1 {
            let verdict = section["verdicts"][row.variant_id.as_str()]
                .as_str()
                .unwrap_or_default();
            assert!(verdict.starts_with("The control"), "{verdict}");
        } else {
            let verdict = section["verdicts"][row.variant_id.as_str()]
                .as_str()
                .unwrap_or_default();
            assert!(verdict.starts_with("Better than the control"), "{verdict}");
            let pp = |x: Option<f64>| format!("{:+.2} pp", x.unwrap_or(f64::NAN) * 100.0);
            let interval = format!(
                "between {} and {}",
                pp(row.always_valid_ci_low).trim_end_matches(" pp"),
                pp(row.always_valid_ci_high)
            );
            assert!(
                verdict.contains(&interval),
                "{verdict} should say {interval}"
            );
            let axis = &section["axis"];
            assert!(
                axis[0].as_str().is_some_and(|t| t.starts_with('+')),
                "top of the y axis: {axis}"
            );
            let chart = &section["chart"][0];
            assert_eq!(chart["variant"], row.variant_id.as_str(), "{seen}");
            assert!(chart["points"].as_u64().is_some_and(|n| n >= 10), "{chart}");
            assert_eq!(chart["bands"], 1, "{chart}");
            assert!(
                chart["width"].as_f64().is_some_and(|w| w > 300.0),
                "{chart}"
            );
        }
    }
    let png = std::fs::read(&screenshot).expect("the screenshot");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "a real screenshot"
    );
}

/// An event written straight into `events` (what the consumer would write).
#[derive(Clone, Debug)]
struct Event {
    visitor: String,
    phase: u32,
    name: &'static str,
    variant: &'static str,
    /// Milliseconds since the Unix epoch.
    at: i64,
    test: bool,
    bot: bool,
}

/// A small deterministic generator (xorshift64*), so the data is fixed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) % n
    }
}

/// One counted visitor of a phase, by the rules of docs/results.md, from the events.
struct Counted {
    variant: String,
    /// The hours (in seconds) from which they count as exposed, as converted (within their
    /// window) and as mature (their window past).
    exposed_from: u32,
    converted_from: Option<u32>,
    mature_from: Option<u32>,
}

/// The counted visitors of `phase`, whose window ends at `window_end` (ms; `None`: open).
fn visitors_of(events: &[Event], phase: u32, window_end: Option<i64>) -> Vec<Counted> {
    let hour_of = |ms: i64| (ms / 1000 / 3600 * 3600) as u32;
    let now = contract::event::now_millis();
    let mut by_visitor: BTreeMap<&str, Vec<&Event>> = BTreeMap::new();
    for e in events.iter().filter(|e| e.phase == phase) {
        by_visitor.entry(&e.visitor).or_default().push(e);
    }
    by_visitor
        .values()
        .filter(|list| !list.iter().any(|e| e.test || e.bot))
        .filter_map(|list| {
            let impressions: Vec<&&Event> =
                list.iter().filter(|e| e.name == "impression").collect();
            let first = impressions.iter().min_by_key(|e| e.at)?;
            let variants: BTreeSet<&str> = impressions.iter().map(|e| e.variant).collect();
            let variant = if variants.len() > 1 {
                "__multiple__"
            } else {
                first.variant
            };
            let conversion = list
                .iter()
                .filter(|e| e.name == "conversion" && e.at >= first.at)
                .map(|e| e.at)
                .min()
                .filter(|&at| window_end.is_none_or(|end| at <= end));
            Some(Counted {
                variant: variant.to_owned(),
                exposed_from: hour_of(first.at),
                converted_from: conversion.map(hour_of),
                mature_from: window_end.filter(|&end| end <= now).map(hour_of),
            })
        })
        .collect()
}

/// The sequential sample-ratio p-value after each of `looks` (each variant's count),
/// from the independent reference (scipy's gammaln).
fn sequential_srm(looks: &[Vec<f64>], weights: &[f64]) -> Vec<f64> {
    let answer = stats::reference(&serde_json::json!({ "srm_sequential": [{
        "looks": looks, "weights": weights, "prior": schema::SRM_PRIOR }] }));
    serde_json::from_value(answer["srm_sequential"][0].clone()).expect("p-values")
}

/// Phase 1's and phase 2's events: 700 visitors over their hours, some converting
/// before exposure or in a later hour, a few seeing two variants, test and bot visitors.
fn the_events(base: i64, hour: i64) -> Vec<Event> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut events = Vec::new();
    for i in 0..700 {
        let phase = if i % 10 == 9 { 2 } else { 1 };
        let h = match phase {
            1 => [0, 1, 2, 5, 6, 7, 8][rng.below(7) as usize],
            _ => [1, 6][rng.below(2) as usize],
        };
        let variant = match (phase, rng.below(4)) {
            (2, r) => ["var_x", "var_y"][(r % 2) as usize],
            (_, 0 | 1) => "var_x",
            (_, 2) => "var_y",
            _ => "var_z",
        };
        let at = base + h * hour + rng.below(hour as u64 - 120_000) as i64;
        let visitor = format!("v{i}");
        let event = |name, variant, at| Event {
            visitor: visitor.clone(),
            phase,
            name,
            variant,
            at,
            test: i % 97 == 0,
            bot: i % 89 == 0,
        };
        events.push(event("impression", variant, at));
        let rate = match variant {
            "var_y" => 30,
            "var_z" => 18,
            _ => 15,
        };
        match rng.below(100) {
            r if r < rate => events.push(event(
                "conversion",
                variant,
                at + rng.below(3 * hour as u64) as i64,
            )),
            r if r < rate + 5 => events.push(event("conversion", variant, at - 1_000)),
            _ => {}
        }
        if i % 150 == 1 {
            events.push(event("impression", "var_z", at + 60_000));
        }
        events.push(event("click", variant, at + 5_000));
    }

    events
}

/// A row of the over-time view as computed here: (phase, hour, variant, exposed,
/// converted, mature visitors), then diff, ci_low, ci_high, p_value, srm, av_low, av_high.
type Want = ((u32, u32, String, u64, u64, u64), [Option<f64>; 7]);

/// The same, here: per phase, every hour with a visitor's first exposure, conversion or
/// window end; at each, each variant's visitors as of its end, and the statistics of
/// docs/results.md.
fn expected_rows(
    events: &[Event],
    weights: &[(&str, f64, u32)],
    loaded_at: impl Fn(u32) -> i64,
) -> Vec<Want> {
    let mut want: Vec<Want> = Vec::new();
    for (phase, weights, window_end) in [
        (1, &weights[..3], Some(loaded_at(2) + 3)),
        (2, &weights[3..], None),
    ] {
        let visitors = visitors_of(events, phase, window_end);
        let hours: BTreeSet<u32> = visitors
            .iter()
            .flat_map(|v| [Some(v.exposed_from), v.converted_from, v.mature_from])
            .flatten()
            .collect();
        let variants: BTreeSet<&str> = visitors.iter().map(|v| v.variant.as_str()).collect();
        let as_of = |variant: &str, h: u32| {
            let of = visitors.iter().filter(|v| v.variant == variant);
            let by = |at: Option<u32>| at.is_some_and(|at| at <= h);
            (
                of.clone().filter(|v| v.exposed_from <= h).count() as f64,
                of.clone().filter(|v| by(v.converted_from)).count() as f64,
                of.filter(|v| by(v.mature_from)).count() as u64,
            )
        };
        let srm_at = sequential_srm(
            &hours
                .iter()
                .map(|&h| weights.iter().map(|w| as_of(w.0, h).0).collect())
                .collect::<Vec<_>>(),
            &weights.iter().map(|w| w.1).collect::<Vec<_>>(),
        );
        // The treatments share the always-valid error rate.
        let family = (weights.len() - 1) as f64;
        for (&h, srm) in hours.iter().zip(srm_at) {
            let (n0, c0, _) = as_of("var_x", h);
            let p0 = c0 / n0;
            for &variant in variants.iter().filter(|v| as_of(v, h).0 > 0.0) {
                let (n, c, mature) = as_of(variant, h);
                let p = c / n;
                let se = (p * (1.0 - p) / n + p0 * (1.0 - p0) / n0).sqrt();
                // Both arms with variance and the minimum-data guard.
                let (min_n, min_c) = (schema::MIN_VISITORS as f64, schema::MIN_CONVERSIONS as f64);
                let testable = variant != "var_x"
                    && variant != "__multiple__"
                    && n0 > 0.0
                    && se > 0.0
                    && c > 0.0
                    && c < n
                    && c0 > 0.0
                    && c0 < n0
                    && n.min(n0) >= min_n
                    && c + c0 >= min_c
                    && (n + n0) - (c + c0) >= min_c;
                // The fixed-horizon test under its null: one pooled rate.
                let pooled = (c + c0) / (n + n0);
                let se_null = (pooled * (1.0 - pooled) * (1.0 / n + 1.0 / n0)).sqrt();
                let alpha: f64 = 0.05 / family;
                let rho2 = (-2.0 * alpha.ln() + (-2.0 * alpha.ln() + 1.0).ln()) / 5000.0;
                let x = (n + n0) * rho2;
                // The always-valid test on the larger of the two standard errors.
                let half =
                    se.max(se_null) * ((x + 1.0) / x * ((x + 1.0).ln() - 2.0 * alpha.ln())).sqrt();
                let z95 = 1.959_963_984_540_054;
                want.push((
                    (phase, h, variant.to_owned(), n as u64, c as u64, mature),
                    [
                        (variant != "__multiple__" && n0 > 0.0).then_some(if variant == "var_x" {
                            0.0
                        } else {
                            p - p0
                        }),
                        testable.then_some(p - p0 - z95 * se),
                        testable.then_some(p - p0 + z95 * se),
                        testable.then_some(statrs::function::erf::erfc(
                            (p - p0).abs() / se_null / 2f64.sqrt(),
                        )),
                        Some(srm),
                        testable.then_some(p - p0 - half),
                        testable.then_some(p - p0 + half),
                    ],
                ));
            }
        }
    }
    want
}

/// Each row of the view equal to the one computed here; phase 1's hours, returned.
fn compare_rows(got: &[ResultsOverTimeRow], want: &[Want]) -> BTreeSet<u32> {
    assert_eq!(got.len(), want.len(), "rows: {got:#?}");
    let hours: BTreeSet<u32> = got
        .iter()
        .filter(|r| r.phase == 1)
        .map(|r| r.hour)
        .collect();
    assert!(
        hours.len() > 8,
        "the hours with a first exposure, a conversion or a window's end: {hours:?}"
    );
    for (row, (key, stats)) in got.iter().zip(want) {
        let what = format!("phase {} hour {} {}", row.phase, row.hour, row.variant_id);
        assert_eq!(
            (
                row.phase,
                row.hour,
                row.variant_id.clone(),
                row.exposed,
                row.converted,
                row.mature_visitors,
            ),
            key.clone(),
            "{what}"
        );
        assert_eq!(u32::from(row.day), row.hour / 86_400, "{what}: day");
        let got_stats = [
            row.diff,
            row.ci_low,
            row.ci_high,
            row.p_value,
            row.srm_p_value,
            row.always_valid_ci_low,
            row.always_valid_ci_high,
        ];
        let names = [
            "diff", "ci_low", "ci_high", "p_value", "srm", "av_low", "av_high",
        ];
        for ((g, w), name) in got_stats.iter().zip(stats).zip(names) {
            match (g, w) {
                (Some(g), Some(w)) => assert!((g - w).abs() <= 1e-9, "{what} {name}: {g} != {w}"),
                _ => assert_eq!(g.is_some(), w.is_some(), "{what} {name}: {g:?} / {w:?}"),
            }
        }
    }
    hours
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_over_time_equal_a_count_made_hour_by_hour_from_the_events() {
    let database = e2e::unique("over_time");
    let ch = e2e::clickhouse(&database);
    schema::migrate(&e2e::clickhouse("default"), &database)
        .await
        .expect("migrations");

    // Phase 1: 50/25/25 over nine hours with a gap (hours 3 and 4 have no first exposure),
    // a visitor seeing two variants, conversions before exposure, in a later hour, test
    // and bot visitors; phase 2 (50/50), a few visitors in two hours.
    let base: i64 = 1_793_491_200_000; // 2026-11-01 00:00 UTC
    let hour = 3_600_000;
    let weights = [
        ("var_x", 50.0, 1u32),
        ("var_y", 25.0, 1),
        ("var_z", 25.0, 1),
        ("var_x", 50.0, 2),
        ("var_y", 50.0, 2),
    ];
    let events = the_events(base, hour);
    let rows: Vec<serde_json::Value> = events
        .iter()
        .enumerate()
        .map(|(n, e)| {
            serde_json::json!({
                "event_id": uuid::Uuid::from_u128(n as u128 + 1).to_string(),
                "received_at": e.at / 1000 + 5, "public_key": "pk_t", "event_name": e.name,
                "experiment_id": "exp_t", "variant_id": e.variant,
                "session_id": format!("{}-s", e.visitor), "visitor_id": e.visitor,
                "phase": e.phase, "event_time": e.at, "received_at_ms": e.at + 5_000,
                "test": u8::from(e.test), "is_bot": u8::from(e.bot),
            })
        })
        .collect();
    let body: String = rows.iter().map(|r| format!("{r}\n")).collect();
    insert(&database, "events", body).await;
    // Phase 1 is loaded the day before, phase 2 ten days after: phase 1's windows end
    // then (no conversionWindowHours), past the conversions, and are past now.
    let loaded_at = |phase: u32| base + if phase == 1 { -24 * hour } else { 240 * hour };
    let definitions: String = weights
        .iter()
        .enumerate()
        .map(|(i, (v, w, phase))| {
            format!(
                "{}\n",
                serde_json::json!({ "experiment_id": "exp_t", "variant_id": v,
                    "version": format!("t-{phase}"), "weight": w, "is_control": u8::from(*v == "var_x"),
                    "status": "live", "parts": "{}", "loaded_at": loaded_at(*phase) + i as i64,
                    "phase": phase })
            )
        })
        .collect();
    insert(&database, "experiment_variants", definitions).await;

    let got: Vec<ResultsOverTimeRow> = ch
        .query(
            "SELECT ?fields FROM experiment_results_over_time WHERE public_key = 'pk_t' AND experiment_id = 'exp_t' \
             ORDER BY phase, hour, variant_id",
        )
        .fetch_all()
        .await
        .expect("experiment_results_over_time");

    let want = expected_rows(&events, &weights, loaded_at);
    let hours = compare_rows(&got, &want);
    // The last hour of each phase is the all-time answer.
    let last: Vec<(String, u64, u64)> = got
        .iter()
        .filter(|r| r.phase == 1 && Some(&r.hour) == hours.last())
        .map(|r| (r.variant_id.clone(), r.exposed, r.converted))
        .collect();
    let all_time: Vec<(String, u64, u64)> = ch
        .query(
            "SELECT variant_id, exposed, converted FROM experiment_results \
             WHERE experiment_id = 'exp_t' AND phase = 1 ORDER BY variant_id",
        )
        .fetch_all::<(String, u64, u64)>()
        .await
        .expect("experiment_results");
    assert_eq!(last, all_time);
    e2e::drop_database(&database).await;
}

async fn insert(database: &str, table: &str, body: String) {
    let response = reqwest::Client::new()
        .post(e2e::clickhouse_url())
        .query(&[
            ("database", database),
            ("query", &format!("INSERT INTO {table} FORMAT JSONEachRow")),
        ])
        .body(body)
        .send()
        .await
        .expect("ClickHouse answers");
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    assert!(status.is_success(), "insert into {table}: {text}");
}
