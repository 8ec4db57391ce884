//! `experiment_metric_results` against an independent implementation: each metric's
//! per-visitor values computed in Python from the same raw events (`reference.py`'s
//! `metrics`), then gbstats' statistics on them (CUPED's coefficients, where some visitors
//! have a history and some none, by numpy's least squares), to 1e-9 (the harm test,
//! integrated numerically, to 1e-7). And the metrics' rules that an analyst relies on: the guard, a
//! changed definition applied to stored events, the lookback.

mod simulation;
use crate::stats;
mod stored;

use std::collections::BTreeSet;
use std::fmt::Write;
use std::time::Duration;

use clickhouse::Row;
use schema::{MetricResultsRow, ResultsRow};
use serde::Deserialize;
use serde_json::{Value, json};
use stats::{Rng, assert_close};

const KEY: &str = "pk_metrics";
const EXPERIMENT: &str = "exp_metrics";
/// The first exposures' time, milliseconds since the Unix epoch.
const START: i64 = 1_790_000_000_000;
const DAY: i64 = 86_400_000;

/// One event as both sides read it.
#[derive(Clone, Debug)]
struct Event {
    visitor: String,
    variant: &'static str,
    session: String,
    name: &'static str,
    experiment: &'static str,
    t: i64,
    target: &'static str,
    conversion: Option<u8>,
    time_on_page: Option<f64>,
    scroll_depth: Option<f64>,
    load_time: Option<f64>,
    /// The visitor's campaign, on every event.
    source: &'static str,
}

impl Event {
    fn reference(&self) -> Value {
        json!({
            "visitor": self.visitor, "variant": self.variant, "session": self.session,
            "name": self.name, "experiment": self.experiment, "t": self.t,
            "target": self.target, "conversion": self.conversion,
            "timeOnPage": self.time_on_page, "scrollDepth": self.scroll_depth,
            "loadTime": self.load_time,
        })
    }

    fn row(&self, id: usize) -> Value {
        json!({
            "event_id": format!("00000000-0000-4000-8000-{id:012x}"),
            "received_at": self.t / 1000, "received_at_ms": self.t, "event_time": self.t,
            "public_key": KEY, "event_name": self.name, "experiment_id": self.experiment,
            "variant_id": if self.name == "impression" { self.variant } else { "" },
            "session_id": self.session, "conversion": self.conversion,
            "load_time": self.load_time, "scroll_depth": self.scroll_depth,
            "time_on_page": self.time_on_page, "click_target": self.target,
            "visitor_id": self.visitor, "phase": 1, "test": 0, "is_bot": 0,
            "utm_source": self.source,
        })
    }
}

/// A metric as the snapshot defines it, flattened as `experiment_metrics` has it.
#[derive(Clone)]
struct Metric {
    id: &'static str,
    role: &'static str,
    kind: &'static str,
    /// (event, click target, conversion, field, aggregate)
    numerator: (&'static str, &'static str, u8, &'static str, &'static str),
    denominator: Option<(&'static str, &'static str, u8, &'static str, &'static str)>,
    cap_value: f64,
    cap_percentile: f64,
    higher_is_better: bool,
    lookback_days: f64,
}

fn metrics() -> Vec<Metric> {
    let plain = |id, role, kind, numerator| Metric {
        id,
        role,
        kind,
        numerator,
        denominator: None,
        cap_value: 0.0,
        cap_percentile: 0.0,
        higher_is_better: true,
        lookback_days: 14.0,
    };
    vec![
        plain("conversion", "goal", "proportion", ("", "", 1, "", "any")),
        // A lookback that reaches every visitor's oldest event: all have a history.
        Metric {
            lookback_days: 30.0,
            ..plain(
                "signup",
                "secondary",
                "proportion",
                ("conversion", "signup", 0, "", "any"),
            )
        },
        plain("clicks", "secondary", "mean", ("click", "", 0, "", "count")),
        // Its covariate is whether the visitor has a history: CUPED on it alone.
        plain(
            "dwelled",
            "secondary",
            "proportion",
            ("dwell_time", "", 0, "", "any"),
        ),
        Metric {
            cap_percentile: 0.9,
            ..plain(
                "time_on_page",
                "guardrail",
                "mean",
                ("dwell_time", "", 0, "time_on_page", "max"),
            )
        },
        Metric {
            cap_value: 80.0,
            ..plain(
                "scroll",
                "secondary",
                "mean",
                ("scroll_depth", "", 0, "scroll_depth", "mean"),
            )
        },
        Metric {
            higher_is_better: false,
            lookback_days: 7.0,
            ..plain(
                "load_time",
                "guardrail",
                "mean",
                ("performance", "", 0, "load_time", "sum"),
            )
        },
        Metric {
            denominator: Some(("", "", 0, "", "sessions")),
            ..plain(
                "clicks_per_session",
                "secondary",
                "ratio",
                ("click", "", 0, "", "count"),
            )
        },
    ]
}

/// Visitors in three arms (A the control), each with an activity level that drives both
/// their events before exposure (in another experiment, some older than the lookback, some
/// visitors none) and after it; B clicks more, converts more and loads slower; one visitor
/// of C stays a whole day on a page.
fn events(seed: u64, per_arm: usize) -> Vec<Event> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    for i in 0..per_arm * 3 {
        let variant = ["A", "B", "C"][i % 3];
        let visitor = format!("v{seed}_{i}");
        let t0 = START + i as i64 * 1000;
        let activity = rng.uniform();
        let lift = if variant == "B" { 1.0 } else { 0.0 };
        let event = |name, experiment, t, session: &str| Event {
            visitor: visitor.clone(),
            variant,
            session: session.to_owned(),
            name,
            experiment,
            t,
            target: "",
            conversion: None,
            time_on_page: None,
            scroll_depth: None,
            load_time: None,
            source: ["ads", "mail", ""][i / 3 % 3],
        };
        if rng.bernoulli(0.8) {
            for k in 0..rng.poisson(1.0 + 6.0 * activity) {
                out.push(event("click", "other", t0 - 3 * DAY + k as i64, "pre"));
            }
            out.push(Event {
                time_on_page: Some((20_000.0 * activity + 5_000.0 * rng.uniform()).round()),
                ..event("dwell_time", "other", t0 - 2 * DAY, "pre")
            });
            out.push(Event {
                load_time: Some(300.0 + 400.0 * activity),
                ..event("performance", "other", t0 - 10 * DAY, "old")
            });
            if rng.bernoulli(0.1 + 0.5 * activity) {
                out.push(Event {
                    target: "signup",
                    conversion: Some(1),
                    ..event("conversion", "other", t0 - DAY, "pre")
                });
            }
        }
        // Outside every lookback.
        out.push(event("click", "other", t0 - 20 * DAY, "old"));
        out.push(event("impression", EXPERIMENT, t0, "s1"));
        let sessions = 1 + rng.range(0, 2);
        for k in 0..rng.poisson(0.5 + 6.0 * activity + lift) {
            let session = format!("s{}", 1 + k % sessions);
            out.push(event("click", EXPERIMENT, t0 + 1000 + k as i64, &session));
        }
        for k in 0..rng.range(0, 2) {
            let long = variant == "C" && i == 5;
            out.push(Event {
                time_on_page: Some(if long {
                    86_400_000.0
                } else {
                    (20_000.0 * activity + 8_000.0 * rng.uniform()).round()
                }),
                ..event("dwell_time", EXPERIMENT, t0 + 5000 + k as i64, "s1")
            });
        }
        for k in 0..rng.range(1, 3) {
            out.push(Event {
                scroll_depth: Some((100.0 * rng.uniform()).round()),
                ..event("scroll_depth", EXPERIMENT, t0 + 6000 + k as i64, "s1")
            });
        }
        out.push(Event {
            load_time: Some(300.0 + 400.0 * activity + 120.0 * lift + 50.0 * rng.uniform()),
            ..event("performance", EXPERIMENT, t0 + 200, "s1")
        });
        if rng.bernoulli(0.1 + 0.3 * activity + 0.1 * lift) {
            out.push(Event {
                target: if rng.bernoulli(0.7) {
                    "signup"
                } else {
                    "purchase"
                },
                conversion: Some(1),
                ..event("conversion", EXPERIMENT, t0 + 9000, "s1")
            });
        }
    }
    out
}

struct Database {
    name: String,
    client: clickhouse::Client,
    http: reqwest::Client,
}

impl Database {
    async fn new() -> Self {
        let name = e2e::unique("metrics_");
        let client = e2e::clickhouse(&name);
        schema::migrate(&client, &name).await.expect("migrations");
        Self {
            name,
            client,
            http: reqwest::Client::new(),
        }
    }

    async fn insert(&self, table: &str, rows: &[Value]) {
        let mut body = String::new();
        for row in rows {
            let _ = writeln!(body, "{row}");
        }
        let query = format!("INSERT INTO {}.{table} FORMAT JSONEachRow", self.name);
        let response = self
            .http
            .post(e2e::clickhouse_url())
            .query(&[("query", query.as_str())])
            .body(body)
            .send()
            .await
            .expect("ClickHouse answers");
        let status = response.status();
        assert!(
            status.is_success(),
            "insert into {table}: {status} {}",
            response.text().await.unwrap_or_default()
        );
    }

    /// The experiment's arms and `metrics` as the consumer writes them from the snapshot
    /// `version`, loaded at `loaded_at`, then the sweep that follows a new snapshot.
    async fn define(&self, metrics: &[Metric], version: &str, loaded_at: i64) {
        self.insert_definitions(metrics, version, loaded_at).await;
        self.sweep().await;
    }

    /// The definitions of [`Database::define`] alone.
    async fn insert_definitions(&self, metrics: &[Metric], version: &str, loaded_at: i64) {
        let variants: Vec<Value> = [("A", 1), ("B", 0), ("C", 0)]
            .iter()
            .map(|(variant, control)| {
                json!({"experiment_id": EXPERIMENT, "variant_id": variant, "version": version,
                    "weight": 1.0, "is_control": control, "status": "live", "parts": "{}",
                    "loaded_at": START - DAY, "phase": 1, "public_keys": [KEY]})
            })
            .collect();
        self.insert("experiment_variants", &variants).await;
        let rows: Vec<Value> = metrics
            .iter()
            .enumerate()
            .map(|(position, m)| {
                let (ne, nt, nc, nf, na) = m.numerator;
                let (de, dt, dc, df, da) = m.denominator.unwrap_or(("", "", 0, "", ""));
                json!({"experiment_id": EXPERIMENT, "version": version, "phase": 1,
                    "metric_id": m.id, "role": m.role, "position": position, "kind": m.kind,
                    "num_event": ne, "num_click_target": nt, "num_conversion": nc,
                    "num_field": nf, "num_aggregate": na, "den_event": de,
                    "den_click_target": dt, "den_conversion": dc, "den_field": df,
                    "den_aggregate": da, "cap_value": m.cap_value,
                    "cap_percentile": m.cap_percentile,
                    "higher_is_better": u8::from(m.higher_is_better),
                    "cuped_lookback_days": m.lookback_days, "definition": "{}",
                    "loaded_at": loaded_at, "public_keys": [KEY]})
            })
            .collect();
        self.insert("experiment_metrics", &rows).await;
    }

    /// Stores `events` as the consumer does: inserted, then their visitors' values.
    async fn store(&self, events: &[Event]) {
        self.insert_events(events).await;
        self.sweep().await;
    }

    /// Inserts `events` alone, as a backfill does (no consumer refreshes their visitors).
    async fn insert_events(&self, events: &[Event]) {
        let rows: Vec<Value> = events.iter().enumerate().map(|(i, e)| e.row(i)).collect();
        self.insert("events", &rows).await;
    }

    /// Stores the metric values of `visitors`, as the consumer's refresh does after a
    /// batch, as refresh `id`.
    async fn refresh(&self, visitors: &[(String, String)], id: u64) {
        let caps = schema::ServerCaps::of(&self.client).await.expect("version");
        schema::refresh_metric_values(&self.client, caps, None, &self.name, visitors, || id)
            .await
            .expect("refresh");
    }

    /// Stores every missing or stale visitor's metric values: the consumer's sweep.
    async fn sweep(&self) {
        let topology = clickhouse_kit::topology::Topology::single(self.client.clone());
        consumer::refresh::sweep_once(
            topology,
            &self.name,
            consumer::refresh::VISITORS_PER_STATEMENT,
        )
        .await
        .expect("sweep");
    }

    async fn count(&self, query: &str) -> u64 {
        self.client
            .query(query)
            .fetch_one()
            .await
            .unwrap_or_else(|e| panic!("{query}: {e}"))
    }

    async fn results(&self) -> Vec<MetricResultsRow> {
        self.client
            .query(
                "SELECT ?fields FROM experiment_metric_results WHERE experiment_id = ? \
                 ORDER BY position, variant_id",
            )
            .bind(EXPERIMENT)
            .fetch_all()
            .await
            .expect("experiment_metric_results")
    }
}

fn request(metrics: &[Metric], events: &[Event]) -> Value {
    let spec = |(event, target, conversion, field, aggregate): (&str, &str, u8, &str, &str)| {
        json!({"event": event, "target": target, "conversion": conversion == 1,
            "field": if field.is_empty() { Value::Null } else { json!(field) },
            "aggregate": aggregate})
    };
    let metrics: Vec<Value> = metrics
        .iter()
        .map(|m| {
            json!({"id": m.id, "kind": m.kind, "role": m.role,
                "numerator": spec(m.numerator),
                "denominator": m.denominator.map(spec),
                "cap_value": m.cap_value, "cap_percentile": m.cap_percentile,
                "higher_is_better": m.higher_is_better, "lookback_days": m.lookback_days,
                "control": "A", "variants": ["B", "C"]})
        })
        .collect();
    json!({"metrics": [{
        "experiment": EXPERIMENT,
        "events": events.iter().map(Event::reference).collect::<Vec<_>>(),
        "metrics": metrics, "treatments": 2, "tuning": 5000.0,
    }]})
}

#[track_caller]
fn same(what: &str, got: Option<f64>, want: &Value) {
    let got = got.unwrap_or_else(|| panic!("{what}: the view gives none, reference {want}"));
    assert_close(what, got, want);
}

#[tokio::test]
async fn every_metric_kind_and_its_cuped_equal_gbstats_on_the_raw_events() {
    let db = Database::new().await;
    let metrics = metrics();
    let events = events(7, 150);
    db.define(&metrics, "v1", START - DAY).await;
    db.store(&events).await;
    let results = db.results().await;
    let answers = stats::reference(&request(&metrics, &events));
    let answers = answers["metrics"][0].as_array().expect("answers").clone();

    assert_eq!(
        results.len(),
        metrics.len() * 3,
        "a row per metric and arm: {results:?}"
    );
    for want in &answers {
        let metric = want["metric"].as_str().expect("metric");
        let variant = want["variant"].as_str().expect("variant");
        let got = results
            .iter()
            .find(|r| r.metric_id == metric && r.variant_id == variant)
            .unwrap_or_else(|| panic!("no row for {metric} {variant}"));
        let what = format!("{metric} ({}) {variant}", got.kind);
        assert_eq!(
            got.visitors,
            want["visitors"].as_u64().expect("n"),
            "{what}"
        );
        assert_eq!(got.treatments, 2, "{what}");
        assert_eq!(got.no_test_reason, "", "{what}");
        assert_close(&format!("{what}: value"), got.value, &want["value"]);
        assert_close(&format!("{what}: cap"), got.cap, &want["cap"]);
        same(&format!("{what}: diff"), got.diff, &want["diff"]);
        same(&format!("{what}: ci low"), got.ci_low, &want["ci"][0]);
        same(&format!("{what}: ci high"), got.ci_high, &want["ci"][1]);
        same(&format!("{what}: p"), got.p_value, &want["p_value"]);
        same(
            &format!("{what}: always-valid p"),
            got.always_valid_p_value,
            &want["always_valid_p_value"],
        );
        same(
            &format!("{what}: always-valid low"),
            got.always_valid_ci_low,
            &want["always_valid_ci"][0],
        );
        same(
            &format!("{what}: always-valid high"),
            got.always_valid_ci_high,
            &want["always_valid_ci"][1],
        );
        same(
            &format!("{what}: chance to beat the control"),
            got.chance_to_beat_control,
            &want["chance_to_beat_control"],
        );
        match (&want["harm_p_value"], got.always_valid_harm_p_value) {
            (Value::Null, None) => assert_ne!(got.role, "guardrail", "{what}"),
            (want, Some(got)) => {
                let want = want.as_f64().expect("harm p");
                assert!(
                    (got - want).abs() <= 1e-7 * want.abs().max(1e-12),
                    "{what}: harm p {got:e}, integrated {want:e}"
                );
            }
            (want, got) => panic!("{what}: harm p {got:?}, reference {want}"),
        }
        let cuped = &want["cuped"];
        if cuped.is_null() {
            assert_eq!(got.cuped_diff, None, "{what}: a ratio has no CUPED");
            continue;
        }
        same(&format!("{what}: theta"), got.cuped_theta, &cuped["theta"]);
        same(
            &format!("{what}: history's theta"),
            got.cuped_history_theta,
            &cuped["history_theta"],
        );
        same(
            &format!("{what}: CUPED diff"),
            got.cuped_diff,
            &cuped["diff"],
        );
        same(
            &format!("{what}: CUPED low"),
            got.cuped_ci_low,
            &cuped["ci"][0],
        );
        same(
            &format!("{what}: CUPED high"),
            got.cuped_ci_high,
            &cuped["ci"][1],
        );
        same(
            &format!("{what}: CUPED p"),
            got.cuped_p_value,
            &cuped["p_value"],
        );
        same(
            &format!("{what}: CUPED always-valid p"),
            got.cuped_always_valid_p_value,
            &cuped["always_valid_p_value"],
        );
        same(
            &format!("{what}: CUPED always-valid low"),
            got.cuped_always_valid_ci_low,
            &cuped["always_valid_ci"][0],
        );
        same(
            &format!("{what}: CUPED always-valid high"),
            got.cuped_always_valid_ci_high,
            &cuped["always_valid_ci"][1],
        );
        same(
            &format!("{what}: variance reduction"),
            got.cuped_variance_reduction,
            &cuped["variance_reduction"],
        );
    }
    // The data are made so that each part is at work: CUPED cuts the variance of the
    // activity-driven metrics, but not where the only earlier events are older than the
    // lookback (load time: 10 days, its lookback 7); the cap binds; a guardrail is harmed.
    let row = |metric: &str, variant: &str| {
        results
            .iter()
            .find(|r| r.metric_id == metric && r.variant_id == variant)
            .expect("row")
    };
    assert!(row("clicks", "B").cuped_variance_reduction.expect("CUPED") > 0.1);
    assert!(
        row("time_on_page", "C")
            .cuped_variance_reduction
            .expect("CUPED")
            > 0.05
    );
    assert_eq!(row("load_time", "B").cuped_theta, Some(0.0));
    // The history is at work where some visitors have none, not where the covariate is it.
    assert_ne!(row("clicks", "B").cuped_history_theta, Some(0.0));
    assert_ne!(row("load_time", "B").cuped_history_theta, Some(0.0));
    assert_eq!(row("dwelled", "B").cuped_history_theta, Some(0.0));
    assert_eq!(row("signup", "B").cuped_history_theta, Some(0.0));
    assert!(row("time_on_page", "C").cap < 86_400_000.0);
    assert!(
        row("load_time", "B")
            .always_valid_harm_p_value
            .expect("harm")
            < 0.05
    );
    assert!(row("conversion", "A").is_control == 1 && row("conversion", "A").diff == Some(0.0));
    secondary_metrics_are_corrected_for_their_number(&metrics, &results);
}

/// The secondary metrics' p-values, per treatment, corrected for the number of secondary
/// metrics as statsmodels' Bonferroni does; the goal's and the guardrails' as they are.
fn secondary_metrics_are_corrected_for_their_number(
    metrics: &[Metric],
    results: &[MetricResultsRow],
) {
    let secondary: Vec<&str> = metrics
        .iter()
        .filter(|m| m.role == "secondary")
        .map(|m| m.id)
        .collect();
    assert!(secondary.len() >= 2, "{secondary:?}");
    let treatments: BTreeSet<&str> = results
        .iter()
        .filter(|r| r.is_control == 0)
        .map(|r| r.variant_id.as_str())
        .collect();
    for variant in treatments {
        let rows: Vec<&MetricResultsRow> = secondary
            .iter()
            .map(|m| {
                results
                    .iter()
                    .find(|r| r.metric_id == *m && r.variant_id == variant)
                    .expect("a secondary metric's row")
            })
            .collect();
        let fixed: Vec<f64> = rows.iter().map(|r| r.p_value.expect("p")).collect();
        let always: Vec<f64> = rows
            .iter()
            .map(|r| r.always_valid_p_value.expect("always-valid p"))
            .collect();
        let answers = stats::reference(&json!({ "families": [fixed, always] }));
        for (f, (kind, got)) in [
            (
                "fixed",
                rows.iter().map(|r| r.adjusted_p_value).collect::<Vec<_>>(),
            ),
            (
                "always-valid",
                rows.iter()
                    .map(|r| r.adjusted_always_valid_p_value)
                    .collect(),
            ),
        ]
        .into_iter()
        .enumerate()
        {
            for (i, got) in got.into_iter().enumerate() {
                let what = format!("{variant} {}: {kind} adjusted p", secondary[i]);
                same(&what, got, &answers["families"][f]["bonferroni"][i]);
            }
        }
        for r in results.iter().filter(|r| r.variant_id == variant) {
            assert_eq!(r.secondary_metrics, secondary.len() as u64, "{r:?}");
            if r.role != "secondary" {
                assert_eq!(
                    (r.adjusted_p_value, r.adjusted_always_valid_p_value),
                    (r.p_value, r.always_valid_p_value),
                    "{} {variant}: the goal and the guardrails keep their p",
                    r.metric_id
                );
            }
        }
    }
}

/// What `experiment-results` prints for `config`.
async fn command_text(config: &tools::results::ResultsConfig) -> anyhow::Result<String> {
    let reports = tools::results::reports(config).await?;
    tools::results::text(config, &reports)
}

/// `experiment-results` on the metrics: goal first, then secondary, then guardrails, a
/// harmed guardrail flagged above them; `--by utm_source` gives each segment the
/// statistics of its visitors alone (the reference on that segment's events), a visitor's
/// segment that of their first exposure, says how many segments were tested and adjusts
/// for them (Holm across the segments and treatments; the always-valid and harm
/// p-values times the segments).
#[tokio::test]
async fn the_command_shows_every_metric_in_order_and_per_segment() {
    let db = Database::new().await;
    let metrics = metrics();
    // 150 visitors per arm and segment: B's p-values (fixed, always-valid, harm) are well
    // below 1 in each segment, so that the segments' correction shows.
    let mut events = events(11, 450);
    // A quarter of the visitors come back a minute later from another campaign: a second
    // impression, in another segment than their first.
    let returns: Vec<Event> = events
        .iter()
        .filter(|e| e.name == "impression")
        .step_by(4)
        .map(|e| Event {
            t: e.t + 60_000,
            session: "back".to_owned(),
            source: match e.source {
                "ads" => "mail",
                "mail" => "",
                _ => "ads",
            },
            ..e.clone()
        })
        .collect();
    events.extend(returns);
    // Each visitor's segment: the campaign of their first impression.
    let mut first: std::collections::HashMap<&str, (i64, &str)> = Default::default();
    for e in events.iter().filter(|e| e.name == "impression") {
        let seen = first.entry(e.visitor.as_str()).or_insert((e.t, e.source));
        if e.t < seen.0 {
            *seen = (e.t, e.source);
        }
    }
    db.define(&metrics, "v1", START - DAY).await;
    db.store(&events).await;
    let args = |extra: &[&str]| {
        let mut args = vec![
            "experiment-results",
            EXPERIMENT,
            "--clickhouse-url",
            "",
            "--clickhouse-database",
            &db.name,
        ];
        args.extend_from_slice(extra);
        let url = e2e::clickhouse_url();
        let mut config = <tools::results::ResultsConfig as clap::Parser>::parse_from(args);
        config.clickhouse.clickhouse_url = url;
        config
    };

    let text = command_text(&args(&[])).await.expect("the command");
    let order: Vec<usize> = [
        "\nconversion ",
        "\nsignup ",
        "\nclicks ",
        "\ntime_on_page ",
        "\nload_time ",
    ]
    .iter()
    .map(|m| text.find(m).unwrap_or_else(|| panic!("{m:?} in:\n{text}")))
    .collect();
    assert!(
        order[0] < order[1] && order[1] < order[2] && order[2] < order[3],
        "goal, then secondary, then guardrails:\n{text}"
    );
    let flag = text
        .find("GUARDRAIL HARMED: load_time in B")
        .unwrap_or_else(|| panic!("the harmed guardrail flagged:\n{text}"));
    assert!(flag < order[0], "flagged above the metrics:\n{text}");
    assert!(text.contains("load time, ms"), "units:\n{text}");
    let secondaries = metrics.iter().filter(|m| m.role == "secondary").count();
    let stated = format!(
        "Secondary metrics: p adj. and always-valid p multiplied by their number \
         ({secondaries}, Bonferroni)"
    );
    assert!(text.contains(&stated), "the correction stated:\n{text}");

    let json: Value = serde_json::from_str(
        &command_text(&args(&["--json", "--by", "utm_source"]))
            .await
            .expect("--by"),
    )
    .expect("JSON");
    let report = &json[0]["metrics"];
    assert_eq!(report["segments_tested"], 3, "{report}");
    // Per segment, clicks and the load time (neither capped, so a segment's statistics
    // are its visitors' only) against the reference on the events of the segment's
    // visitors alone.
    // A secondary metric's p-values come corrected for the number of secondary metrics
    // (Bonferroni, by the view) before the segments' correction.
    for id in ["clicks", "load_time"] {
        let mut family = Vec::new();
        let k = if id == "clicks" {
            secondaries as f64
        } else {
            1.0
        };
        for segment in ["ads", "mail", ""] {
            let mine: Vec<Event> = events
                .iter()
                .filter(|e| first[e.visitor.as_str()].1 == segment)
                .cloned()
                .collect();
            let metric: Vec<Metric> = self::metrics().into_iter().filter(|m| m.id == id).collect();
            let want = stats::reference(&request(&metric, &mine));
            let got = report["metrics"]
                .as_array()
                .expect("metrics")
                .iter()
                .find(|m| m["metric_id"] == id && m["segment"] == segment)
                .unwrap_or_else(|| panic!("{id} [{segment}] in {report}"));
            let answers = want["metrics"][0].as_array().expect("answers");
            assert_eq!(answers.len(), 2, "{id} [{segment}]: two treatments");
            for want in answers {
                let variant = got["variants"]
                    .as_array()
                    .expect("variants")
                    .iter()
                    .find(|v| v["variant_id"] == want["variant"])
                    .expect("variant");
                let what = format!("{id} [{segment}] {}", want["variant"]);
                let number = |field: &str| {
                    variant[field]
                        .as_f64()
                        .unwrap_or_else(|| panic!("{what}: {field} in {variant}"))
                };
                assert_close(&format!("{what}: p"), number("p_value"), &want["p_value"]);
                assert_close(&format!("{what}: diff"), number("diff"), &want["diff"]);
                // The always-valid tests (at 5% / treatments) times the segments tested
                // (and a secondary metric's times the secondary metrics).
                let times_3 = |p: &Value| json!((3.0 * p.as_f64().expect("p")).min(1.0));
                let times_3k = |p: &Value| json!((3.0 * k * p.as_f64().expect("p")).min(1.0));
                assert_close(
                    &format!("{what}: always-valid p times 3 (and {k})"),
                    number("always_valid_p_value"),
                    &times_3k(&want["always_valid_p_value"]),
                );
                if id == "load_time" {
                    assert_close(
                        &format!("{what}: harm p times 3"),
                        number("harm_p_value"),
                        &times_3(&want["harm_p_value"]),
                    );
                }
                let p = (k * number("p_value")).min(1.0);
                family.push((what.clone(), p, number("p_adjusted")));
            }
        }
        // Holm across the 3 segments and 2 treatments: the k-th smallest p times 6 - k + 1,
        // never below the one before it.
        assert_eq!(family.len(), 6, "{id}");
        family.sort_by(|a, b| a.1.total_cmp(&b.1));
        let mut running = 0.0_f64;
        for (rank, (what, p, adjusted)) in family.iter().enumerate() {
            running = running.max((family.len() - rank) as f64 * p).min(1.0);
            assert_close(
                &format!("{what}: Holm-adjusted p"),
                *adjusted,
                &json!(running),
            );
        }
    }
}

/// One visitor of C stays a whole day on a page. Capped at the 99th percentile, the
/// arm's mean moves by at most twice the cap over the arm's visitors (that one visitor at
/// the cap, and the percentile's own shift); uncapped, by the day over the visitors.
#[tokio::test]
async fn a_capped_mean_is_not_moved_by_one_extreme_visitor() {
    let top = |id: &'static str, cap_percentile: f64| Metric {
        id,
        role: "secondary",
        kind: "mean",
        numerator: ("dwell_time", "", 0, "time_on_page", "max"),
        denominator: None,
        cap_value: 0.0,
        cap_percentile,
        higher_is_better: true,
        lookback_days: 14.0,
    };
    let metrics = [top("capped", 0.99), top("raw", 0.0)];
    let with = events(7, 150);
    let without: Vec<Event> = with
        .iter()
        .filter(|e| e.time_on_page != Some(86_400_000.0))
        .cloned()
        .collect();
    assert_eq!(with.len(), without.len() + 1, "one extreme dwell");
    let mut c = Vec::new();
    for events in [&with, &without] {
        let db = Database::new().await;
        db.define(&metrics, "v1", START - DAY).await;
        db.store(events).await;
        let results = db.results().await;
        let arm = |id: &str| {
            results
                .iter()
                .find(|r| r.metric_id == id && r.variant_id == "C")
                .expect("C")
        };
        c.push((
            arm("capped").value,
            arm("raw").value,
            arm("capped").cap,
            arm("capped").visitors,
        ));
    }
    let ((capped, raw, cap, n), (capped_0, raw_0, _, _)) = (c[0], c[1]);
    println!(
        "C's mean time on page with and without the day-long visit: capped {capped:.0} / {capped_0:.0} ms, raw {raw:.0} / {raw_0:.0} ms (cap {cap:.0} ms)"
    );
    assert!(cap > 0.0 && cap < 86_400_000.0, "the cap binds: {cap}");
    assert!(
        (capped - capped_0).abs() <= 2.0 * cap / n as f64,
        "capped: {capped} against {capped_0}, bound {}",
        2.0 * cap / n as f64
    );
    assert!(
        raw - raw_0 > 0.9 * 86_400_000.0 / n as f64,
        "raw: {raw} against {raw_0}"
    );
}

/// Any client can send exposures to a variant id of its choosing. An arm the phase does not
/// define keeps its row in both results views, with its counts, but gets no test against
/// the control, whatever its data: no fake variant can win.
#[tokio::test]
async fn an_arm_the_phase_does_not_define_gets_its_row_but_no_test() {
    let db = Database::new().await;
    db.define(&metrics(), "v1", START - DAY).await;
    // C's visitors, sent to an arm X that no snapshot defines.
    let events: Vec<Event> = events(11, 150)
        .into_iter()
        .map(|e| Event {
            variant: if e.variant == "C" { "X" } else { e.variant },
            ..e
        })
        .collect();
    db.store(&events).await;
    const UNDEFINED: &str = "the phase does not define this variant";

    let results = db.results().await;
    let tested = |r: &MetricResultsRow| r.p_value.is_some() || r.always_valid_p_value.is_some();
    let fake: Vec<&MetricResultsRow> = results.iter().filter(|r| r.variant_id == "X").collect();
    assert_eq!(
        fake.len(),
        metrics().len(),
        "a row per metric: {results:#?}"
    );
    for r in &fake {
        assert!(r.visitors > 0, "{r:#?}");
        assert!(
            !tested(r) && r.chance_to_beat_control.is_none() && r.diff.is_none(),
            "{r:#?}"
        );
        assert_eq!(r.no_test_reason, UNDEFINED, "{r:#?}");
    }
    // The same data in a defined arm is tested.
    assert!(
        results.iter().any(|r| r.variant_id == "B" && tested(r)),
        "{results:#?}"
    );

    let arms: Vec<ResultsRow> = db
        .client
        .query("SELECT ?fields FROM experiment_results WHERE experiment_id = ?")
        .bind(EXPERIMENT)
        .fetch_all()
        .await
        .expect("experiment_results");
    let x = arms.iter().find(|a| a.variant_id == "X").expect("X's row");
    assert_eq!(x.exposed, 150, "{arms:#?}");
    assert!(
        x.p_value.is_none() && x.always_valid_p_value.is_none(),
        "{arms:#?}"
    );
    assert_eq!(x.no_test_reason, UNDEFINED, "{arms:#?}");
}

/// The always-valid tests of every metric use the default tuning (results_settings) in
/// force when the phase began, as experiment_results does: one set before applies, one
/// set since does not, and with none the built-in 5 000.
#[tokio::test]
async fn the_default_tuning_in_force_when_the_phase_began_applies_to_every_metric() {
    let db = Database::new().await;
    db.define(&metrics(), "v1", START - DAY).await;
    db.store(&events(11, 60)).await;
    let tunings = async || -> Vec<f64> {
        let mut tunings: Vec<f64> = db
            .client
            .query("SELECT groupUniqArray(sequential_tuning) FROM experiment_metric_results")
            .fetch_one()
            .await
            .expect("tunings");
        tunings.sort_by(f64::total_cmp);
        tunings
    };
    assert_eq!(tunings().await, [5_000.0], "none set");
    for (value, set_at) in [(2_000.0, START - DAY), (3_000.0, START + 30 * DAY)] {
        db.client
            .query(&format!(
                "INSERT INTO results_settings (name, value, set_at) \
                 SELECT 'sequential_tuning', {value}, toDateTime({})",
                set_at / 1000
            ))
            .execute()
            .await
            .expect("a setting");
    }
    assert_eq!(tunings().await, [2_000.0], "the one before the phase");
}
