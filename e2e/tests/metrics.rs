//! `experiment_metric_results` against an independent implementation: each metric's
//! per-visitor values computed in Python from the same raw events (`reference.py`'s
//! `metrics`), then gbstats' statistics on them, to 1e-9 (the harm test, integrated
//! numerically, to 1e-7). And the metrics' rules that an analyst relies on: the guard, a
//! changed definition applied to stored events, the lookback.

mod stats;

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

use clickhouse::Row;
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
        plain(
            "signup",
            "secondary",
            "proportion",
            ("conversion", "signup", 0, "", "any"),
        ),
        plain("clicks", "secondary", "mean", ("click", "", 0, "", "count")),
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
        let topology = schema::topology::Topology::single(self.client.clone());
        consumer::refresh::sweep_once(topology, &self.name)
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

    async fn results(&self) -> Vec<Result> {
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

#[derive(Debug, Deserialize, Row)]
struct Result {
    metric_id: String,
    role: String,
    kind: String,
    variant_id: String,
    is_control: u8,
    visitors: u64,
    value: f64,
    diff: Option<f64>,
    ci_low: Option<f64>,
    ci_high: Option<f64>,
    p_value: Option<f64>,
    always_valid_p_value: Option<f64>,
    always_valid_ci_low: Option<f64>,
    always_valid_ci_high: Option<f64>,
    chance_to_beat_control: Option<f64>,
    always_valid_harm_p_value: Option<f64>,
    cuped_theta: Option<f64>,
    cuped_diff: Option<f64>,
    cuped_ci_low: Option<f64>,
    cuped_ci_high: Option<f64>,
    cuped_p_value: Option<f64>,
    cuped_always_valid_p_value: Option<f64>,
    cuped_always_valid_ci_low: Option<f64>,
    cuped_always_valid_ci_high: Option<f64>,
    cuped_variance_reduction: Option<f64>,
    cap: f64,
    treatments: u64,
    no_test_reason: String,
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
    assert!(row("time_on_page", "C").cap < 86_400_000.0);
    assert!(
        row("load_time", "B")
            .always_valid_harm_p_value
            .expect("harm")
            < 0.05
    );
    assert!(row("conversion", "A").is_control == 1 && row("conversion", "A").diff == Some(0.0));
}

/// A uniform draw in [0, 1) of visitor `number` (a SQL expression), draw `k`: the
/// simulation's events are made inside ClickHouse, deterministic.
fn draw(k: u32) -> String {
    format!("(cityHash64(number, {k}) / 18446744073709551616.)")
}

/// The metrics the A/A simulations define, one of each kind (the proportion, a count, a
/// capped mean, the ratio).
const SIMULATED: [&str; 4] = ["clicks", "clicks_per_session", "conversion", "time_on_page"];

/// A/A experiments of every kind, made in SQL: `experiments` experiments of `visitors`
/// visitors each, `control_share` of them in the control A (by a draw per visitor), the
/// rest in B. Each visitor has an activity level `a`; 80% of them were active before
/// exposure (in another experiment) at the same level, as real returning visitors are.
struct Simulation {
    experiments: u64,
    visitors: u64,
    control_share: f64,
    /// The experiments' `sequentialTuning` (0: the default).
    tuning: f64,
}

impl Simulation {
    /// Defines the experiments' arms and the metrics of every kind, then stores every
    /// visitor's events.
    async fn run(&self, db: &Database) {
        self.define(db).await;
        self.arrive(db, 0, 1).await;
    }

    /// Stores the events of the visitors in `part` of `parts` equal parts of each
    /// experiment, in the order they arrive.
    async fn arrive(&self, db: &Database, part: u64, parts: u64) {
        let Self {
            experiments,
            visitors,
            control_share,
            ..
        } = *self;
        let (a, active) = (draw(0), draw(1));
        let experiment = format!("concat('exp_aa_', toString(intDiv(number, {visitors})))");
        let variant = format!("if({} < {control_share}, 'A', 'B')", draw(8));
        let arriving = format!("intDiv(number % {visitors} * {parts}, {visitors}) = {part}");
        let total = experiments * visitors;
        let common = format!(
            "generateUUIDv4(), toDateTime(intDiv(t, 1000)), t, t, '{KEY}', name, experiment, \
             variant, session, conversion, CAST(NULL AS Nullable(Float64)), \
             CAST(NULL AS Nullable(Float64)), time_on_page, '', concat('aa_', toString(number)), \
             1, 0, 0"
        );
        let columns = "event_id, received_at, received_at_ms, event_time, public_key, event_name, \
                       experiment_id, variant_id, session_id, conversion, load_time, scroll_depth, \
                       time_on_page, click_target, visitor_id, phase, test, is_bot";
        let start = START;
        // (event, experiment, variant, time, session, conversion, time on page, how many)
        let kinds = [
            (
                "'impression'",
                experiment.clone(),
                &*variant,
                "0",
                "'s1'",
                "CAST(NULL AS Nullable(UInt8))",
                "CAST(NULL AS Nullable(Float64))",
                "1".to_owned(),
            ),
            (
                "'click'",
                experiment.clone(),
                "''",
                "1000 + k",
                "if(k % 2 = 0, 's1', 's2')",
                "CAST(NULL AS Nullable(UInt8))",
                "CAST(NULL AS Nullable(Float64))",
                format!("toUInt64(floor(6 * {a} + 2 * {}))", draw(3)),
            ),
            (
                "'click'",
                "'other'".to_owned(),
                "''",
                "-259200000 + k",
                "'pre'",
                "CAST(NULL AS Nullable(UInt8))",
                "CAST(NULL AS Nullable(Float64))",
                format!(
                    "if({active} < 0.8, toUInt64(floor(6 * {a} + 2 * {})), 0)",
                    draw(2)
                ),
            ),
            (
                "'dwell_time'",
                experiment.clone(),
                "''",
                "5000",
                "'s1'",
                "CAST(NULL AS Nullable(UInt8))",
                &*format!("toNullable(round(20000 * {a} + 8000 * {}))", draw(4)),
                "1".to_owned(),
            ),
            (
                "'dwell_time'",
                "'other'".to_owned(),
                "''",
                "-172800000",
                "'pre'",
                "CAST(NULL AS Nullable(UInt8))",
                &*format!("toNullable(round(20000 * {a} + 8000 * {}))", draw(5)),
                format!("toUInt64({active} < 0.8)"),
            ),
            (
                "'conversion'",
                experiment.clone(),
                "''",
                "9000",
                "'s1'",
                "toNullable(toUInt8(1))",
                "CAST(NULL AS Nullable(Float64))",
                format!("toUInt64({} < 0.1 + 0.3 * {a})", draw(6)),
            ),
            (
                "'conversion'",
                "'other'".to_owned(),
                "''",
                "-86400000",
                "'pre'",
                "toNullable(toUInt8(1))",
                "CAST(NULL AS Nullable(Float64))",
                format!("toUInt64({active} < 0.8 AND {} < 0.1 + 0.3 * {a})", draw(7)),
            ),
        ];
        for (name, experiment, variant, offset, session, conversion, time_on_page, count) in kinds {
            let sql = format!(
                "INSERT INTO {db}.events ({columns}) SELECT {common} FROM (SELECT number, \
                 {name} AS name, {experiment} AS experiment, {variant} AS variant, \
                 arrayJoin(range({count})) AS k, {start} + toInt64(number) * 1000 + {offset} AS t, \
                 {session} AS session, {conversion} AS conversion, {time_on_page} AS time_on_page \
                 FROM numbers({total}) WHERE {arriving})",
                db = db.name
            );
            db.client
                .query(&sql)
                .execute()
                .await
                .expect("simulated events");
        }
        db.sweep().await;
    }

    async fn define(&self, db: &Database) {
        let experiments = self.experiments;
        let defined = |sql: String| async move { db.client.query(&sql).execute().await };
        defined(format!(
            "INSERT INTO {db}.experiment_variants (experiment_id, variant_id, version, weight, \
             is_control, status, parts, loaded_at, phase, public_keys, sequential_tuning) \
             SELECT concat('exp_aa_', toString(intDiv(number, 2))), \
             if(number % 2 = 0, 'A', 'B'), 'v1', if(number % 2 = 0, {control}, {treatment}), \
             toUInt8(number % 2 = 0), 'live', '{{}}', {loaded}, 1, ['{KEY}'], {tuning} \
             FROM numbers({arms})",
            db = db.name,
            tuning = self.tuning,
            control = 100.0 * self.control_share,
            treatment = 100.0 * (1.0 - self.control_share),
            loaded = START - DAY,
            arms = experiments * 2
        ))
        .await
        .expect("variants");
        let metrics: Vec<Metric> = metrics()
            .into_iter()
            .filter(|m| SIMULATED.contains(&m.id))
            .collect();
        for (position, m) in metrics.iter().enumerate() {
            let (ne, nt, nc, nf, na) = m.numerator;
            let (de, dt, dc, df, da) = m.denominator.unwrap_or(("", "", 0, "", ""));
            defined(format!(
                "INSERT INTO {db}.experiment_metrics (experiment_id, version, phase, metric_id, \
                 role, position, kind, num_event, num_click_target, num_conversion, num_field, \
                 num_aggregate, den_event, den_click_target, den_conversion, den_field, \
                 den_aggregate, cap_value, cap_percentile, higher_is_better, \
                 cuped_lookback_days, definition, loaded_at, public_keys) SELECT \
                 concat('exp_aa_', toString(number)), 'v1', 1, '{id}', '{role}', {position}, \
                 '{kind}', '{ne}', '{nt}', {nc}, '{nf}', '{na}', '{de}', '{dt}', {dc}, '{df}', \
                 '{da}', {cv}, {cp}, 1, 14, '{{}}', {loaded}, ['{KEY}'] \
                 FROM numbers({experiments})",
                db = db.name,
                id = m.id,
                role = m.role,
                kind = m.kind,
                cv = m.cap_value,
                cp = m.cap_percentile,
                loaded = START - DAY,
            ))
            .await
            .expect("metrics");
        }
    }
}

#[derive(Debug, Deserialize, Row)]
struct Tally {
    metric_id: String,
    tested: u64,
    fixed: u64,
    always_valid: u64,
    cuped_fixed: u64,
    cuped_always_valid: u64,
    reduction: f64,
}

/// 400 A/A experiments of 2 x 60 visitors: for each kind, the fixed-horizon test (plain
/// and CUPED) calls within the 99.9% band of 5%, the always-valid test no more than its
/// top, and CUPED cuts the variance where the visitors' activity carries over.
#[tokio::test]
async fn a_a_tests_of_every_kind_hold_their_error_rate_with_and_without_cuped() {
    const EXPERIMENTS: u64 = 400;
    let db = Database::new().await;
    Simulation {
        experiments: EXPERIMENTS,
        visitors: 120,
        control_share: 0.5,
        tuning: 0.0,
    }
    .run(&db)
    .await;
    let tallies: Vec<Tally> = db
        .client
        .query(
            "SELECT metric_id, count() AS tested, countIf(ifNull(p_value, 1) < 0.05) AS fixed, \
             countIf(ifNull(always_valid_p_value, 1) < 0.05) AS always_valid, \
             countIf(ifNull(cuped_p_value, 1) < 0.05) AS cuped_fixed, \
             countIf(ifNull(cuped_always_valid_p_value, 1) < 0.05) AS cuped_always_valid, \
             avg(ifNull(cuped_variance_reduction, 0)) AS reduction \
             FROM experiment_metric_results WHERE is_control = 0 AND p_value IS NOT NULL \
             GROUP BY metric_id ORDER BY metric_id",
        )
        .fetch_all()
        .await
        .expect("tallies");
    let (lo, hi) = band(EXPERIMENTS, 0.05);
    println!("A/A, {EXPERIMENTS} experiments (99.9% band of 5%: {lo}..={hi}):");
    for t in &tallies {
        println!(
            "  {:<20} tested {:>3}  fixed {:>3}  always-valid {:>3}  CUPED fixed {:>3}  \
             CUPED always-valid {:>3}  CUPED variance reduction {:.1}%",
            t.metric_id,
            t.tested,
            t.fixed,
            t.always_valid,
            t.cuped_fixed,
            t.cuped_always_valid,
            100.0 * t.reduction
        );
    }
    assert_eq!(tallies.len(), 4, "{tallies:?}");
    for t in &tallies {
        assert!(t.tested >= EXPERIMENTS * 95 / 100, "{t:?}: most are tested");
        let (lo, hi) = band(t.tested, 0.05);
        assert!((lo..=hi).contains(&t.fixed), "{t:?}: fixed horizon");
        assert!(t.always_valid <= hi, "{t:?}: always valid");
        if t.metric_id != "clicks_per_session" {
            assert!((lo..=hi).contains(&t.cuped_fixed), "{t:?}: CUPED");
            assert!(t.cuped_always_valid <= hi, "{t:?}: CUPED always valid");
        }
    }
    let reduction = |id: &str| {
        tallies
            .iter()
            .find(|t| t.metric_id == id)
            .expect(id)
            .reduction
    };
    assert!(reduction("clicks") > 0.2, "{tallies:?}");
    assert!(reduction("time_on_page") > 0.2, "{tallies:?}");
}

/// What the looks at one experiment's metric showed: the smallest fixed-horizon,
/// always-valid and CUPED always-valid p, and the fixed-horizon p of the last look.
struct Seen {
    fixed: f64,
    always_valid: f64,
    cuped_always_valid: f64,
    fixed_last: f64,
}

#[derive(Debug, Deserialize, Row)]
struct Look {
    experiment_id: String,
    metric_id: String,
    p_value: Option<f64>,
    always_valid_p_value: Option<f64>,
    cuped_always_valid_p_value: Option<f64>,
}

/// 100 A/A experiments of 1,500 visitors on a 10/90 ramp, arriving in 6 parts with a look
/// at the view after each. For each kind, the always-valid p (plain and CUPED) goes below
/// 0.05 at some look in no more experiments than the top of the 99.9% band of 5%, and the
/// fixed-horizon p at the last look stays within that band. The fixed-horizon p, looked at
/// as often, goes beyond it: the looks are what the always-valid test is for.
#[tokio::test]
async fn a_a_tests_of_every_kind_hold_their_error_rate_under_looks_on_a_ramp() {
    const EXPERIMENTS: u64 = 100;
    const LOOKS: u64 = 6;
    const VISITORS: u64 = 1_500;
    let started = std::time::Instant::now();
    let db = Database::new().await;
    let simulation = Simulation {
        experiments: EXPERIMENTS,
        visitors: VISITORS,
        control_share: 0.1,
        // Tuned to the experiments' size, as their plan would have it; the default, 5 000,
        // is more than three times what they reach.
        tuning: VISITORS as f64,
    };
    simulation.define(&db).await;
    let mut seen: BTreeMap<(String, String), Seen> = BTreeMap::new();
    for look in 0..LOOKS {
        simulation.arrive(&db, look, LOOKS).await;
        let rows: Vec<Look> = db
            .client
            .query(
                "SELECT experiment_id, metric_id, p_value, always_valid_p_value, \
                 cuped_always_valid_p_value FROM experiment_metric_results \
                 WHERE is_control = 0",
            )
            .fetch_all()
            .await
            .expect("a look");
        for row in rows {
            let p = |p: Option<f64>| p.unwrap_or(1.0);
            let seen = seen
                .entry((row.metric_id, row.experiment_id))
                .or_insert(Seen {
                    fixed: 1.0,
                    always_valid: 1.0,
                    cuped_always_valid: 1.0,
                    fixed_last: 1.0,
                });
            seen.fixed = seen.fixed.min(p(row.p_value));
            seen.always_valid = seen.always_valid.min(p(row.always_valid_p_value));
            seen.cuped_always_valid = seen
                .cuped_always_valid
                .min(p(row.cuped_always_valid_p_value));
            seen.fixed_last = p(row.p_value);
        }
    }
    let (lo, hi) = band(EXPERIMENTS, 0.05);
    println!(
        "A/A at 10/90, {EXPERIMENTS} experiments of {VISITORS} visitors, {LOOKS} looks, {:.0} s \
         (99.9% band of 5%: {lo}..={hi}), experiments with p < 0.05:",
        started.elapsed().as_secs_f64()
    );
    let mut fixed_ever_total = 0;
    for kind in SIMULATED {
        let of_kind: Vec<&Seen> = seen
            .iter()
            .filter(|((metric, _), _)| metric == kind)
            .map(|(_, seen)| seen)
            .collect();
        let count = |p: fn(&Seen) -> f64| of_kind.iter().filter(|s| p(s) < 0.05).count() as u64;
        let fixed_ever = count(|s| s.fixed);
        let always_ever = count(|s| s.always_valid);
        let cuped_ever = count(|s| s.cuped_always_valid);
        let fixed_last = count(|s| s.fixed_last);
        println!(
            "  {kind:<20} fixed horizon at the last look {fixed_last:>3}, at some look \
             {fixed_ever:>3}; always-valid at some look {always_ever:>3}, CUPED {cuped_ever:>3}"
        );
        assert_eq!(
            of_kind.len() as u64,
            EXPERIMENTS,
            "{kind}: a row per experiment"
        );
        assert!(
            (lo..=hi).contains(&fixed_last),
            "{kind}: fixed horizon {fixed_last}"
        );
        assert!(
            always_ever <= hi,
            "{kind}: always-valid at some look {always_ever}"
        );
        assert!(
            cuped_ever <= hi,
            "{kind}: CUPED always-valid at some look {cuped_ever}"
        );
        fixed_ever_total += fixed_ever;
    }
    let (_, hi_all) = band(EXPERIMENTS * SIMULATED.len() as u64, 0.05);
    assert!(
        fixed_ever_total > hi_all,
        "the fixed-horizon p went below 0.05 at some look only {fixed_ever_total} times"
    );
}

/// The 99.9% band of a binomial count of `n` trials at rate `p`.
fn band(n: u64, p: f64) -> (u64, u64) {
    use statrs::distribution::{Binomial, DiscreteCDF};
    let b = Binomial::new(p, n).expect("binomial");
    let lo = (0..=n).find(|k| b.cdf(*k) >= 0.0005).expect("lo");
    let hi = (0..=n).find(|k| b.cdf(*k) >= 0.9995).expect("hi");
    (lo, hi)
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
    for id in ["clicks", "load_time"] {
        let mut family = Vec::new();
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
                // The always-valid tests (at 5% / treatments) times the segments tested.
                let times_3 = |p: &Value| json!((3.0 * p.as_f64().expect("p")).min(1.0));
                assert_close(
                    &format!("{what}: always-valid p times 3"),
                    number("always_valid_p_value"),
                    &times_3(&want["always_valid_p_value"]),
                );
                if id == "load_time" {
                    assert_close(
                        &format!("{what}: harm p times 3"),
                        number("harm_p_value"),
                        &times_3(&want["harm_p_value"]),
                    );
                }
                family.push((what.clone(), number("p_value"), number("p_adjusted")));
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
    let tested = |r: &Result| r.p_value.is_some() || r.always_valid_p_value.is_some();
    let fake: Vec<&Result> = results.iter().filter(|r| r.variant_id == "X").collect();
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

    #[derive(Debug, Deserialize, Row)]
    struct Arm {
        variant_id: String,
        exposed: u64,
        p_value: Option<f64>,
        always_valid_p_value: Option<f64>,
        no_test_reason: String,
    }
    let arms: Vec<Arm> = db
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

/// A metric changed in a later snapshot applies to the events already stored: the view
/// reads each experiment's definitions as last loaded.
#[tokio::test]
async fn a_changed_metric_applies_to_the_stored_events() {
    let db = Database::new().await;
    let events = events(3, 60);
    db.store(&events).await;
    let goal = |target: &'static str| Metric {
        id: "goal_clicks",
        role: "goal",
        kind: "proportion",
        numerator: ("conversion", target, 0, "", "any"),
        denominator: None,
        cap_value: 0.0,
        cap_percentile: 0.0,
        higher_is_better: true,
        lookback_days: 14.0,
    };
    // The share of B's visitors with a conversion on `target`, from the events.
    let share = |target: &str| {
        let visitors = |pick: &dyn Fn(&Event) -> bool| {
            let mut v: Vec<&str> = events
                .iter()
                .filter(|e| e.variant == "B" && e.experiment == EXPERIMENT && pick(e))
                .map(|e| e.visitor.as_str())
                .collect();
            v.sort_unstable();
            v.dedup();
            v.len() as f64
        };
        visitors(&|e| e.name == "conversion" && e.target == target)
            / visitors(&|e| e.name == "impression")
    };
    // Each snapshot has its own version, as the consumer writes them: the later one's
    // rows stand beside the earlier one's, not in their place.
    for (version, loaded_at, target) in [("v1", START - DAY, "signup"), ("v2", START, "purchase")] {
        db.define(&[goal(target)], version, loaded_at).await;
        let b = db
            .results()
            .await
            .into_iter()
            .find(|r| r.variant_id == "B")
            .expect("B");
        assert_eq!(b.metric_id, "goal_clicks");
        assert!(
            (b.value - share(target)).abs() < 1e-12,
            "{target}: {} against {}",
            b.value,
            share(target)
        );
    }
    assert!(
        (share("signup") - share("purchase")).abs() > 0.01,
        "the change shows"
    );
}

/// Two results of the same visitors' values: equal but for the order of float sums.
fn assert_same(what: &str, got: &[Result], want: &[Result]) {
    assert_eq!(got.len(), want.len(), "{what}: rows");
    for (g, w) in got.iter().zip(want) {
        let row = format!("{what}: {} {}", g.metric_id, g.variant_id);
        assert_eq!(
            (&g.metric_id, &g.variant_id),
            (&w.metric_id, &w.variant_id),
            "{row}"
        );
        assert_eq!(g.visitors, w.visitors, "{row}: visitors");
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * (1.0 + b.abs());
        assert!(
            close(g.value, w.value),
            "{row}: value {} against {}",
            g.value,
            w.value
        );
        for (name, a, b) in [
            ("p_value", g.p_value, w.p_value),
            ("cuped_diff", g.cuped_diff, w.cuped_diff),
            (
                "cuped_variance_reduction",
                g.cuped_variance_reduction,
                w.cuped_variance_reduction,
            ),
        ] {
            match (a, b) {
                (Some(a), Some(b)) => assert!(close(a, b), "{row}: {name} {a} against {b}"),
                (a, b) => assert_eq!(a, b, "{row}: {name}"),
            }
        }
    }
}

/// The view reads each visitor's latest refresh as it is stored, and nothing else: events
/// stored with no refresh are not counted until one; a refresh of a few visitors after new
/// events gives what storing every visitor anew gives; the same definitions loaded again
/// keep the values, a changed one applies at the sweep that follows.
#[tokio::test]
async fn results_are_those_of_each_visitors_latest_refresh() {
    let db = Database::new().await;
    let mut metrics = metrics();
    db.define(&metrics, "v1", START - DAY).await;
    let mut events = events(11, 60);
    // A visitor id that a statement must quote.
    let odd = "it's a \\ {db} visitor?".to_owned();
    for (name, target, t) in [
        ("impression", "", START),
        ("conversion", "signup", START + 1),
    ] {
        let mut e = events[0].clone();
        (e.visitor, e.variant, e.name, e.target, e.t) = (odd.clone(), "B", name, target, t);
        e.experiment = EXPERIMENT;
        e.session = "odd-session".into();
        events.push(e);
    }
    db.insert_events(&events).await;
    let stale = "SELECT count() FROM experiment_metric_stale";
    let stored = "SELECT count() FROM experiment_metric_values";
    assert_eq!(db.count(stored).await, 0);
    assert!(db.count(stale).await > 100, "every visitor is stale");
    assert!(
        db.results().await.is_empty(),
        "nothing refreshed, nothing counted"
    );

    db.sweep().await;
    assert_eq!(db.count(stale).await, 0, "the sweep stores every visitor");
    let swept = db.results().await;
    assert!(!swept.is_empty());
    // Every visitor stored anew, from nothing: what an incremental refresh must give.
    let anew = || async {
        let truncate = "TRUNCATE TABLE experiment_metric_values";
        db.client.query(truncate).execute().await.expect("truncate");
        db.sweep().await;
        db.results().await
    };

    // A later refresh of the odd visitor, its values altered: it is what the view reads.
    let alter = "INSERT INTO experiment_metric_values SELECT public_key, experiment_id, phase, \
                 visitor_id, metric_id, variant_id, first_exposure_ms, value + 1000, \
                 denominator, pre_value, events_seen, settings_hash, refresh_id + 1 \
                 FROM experiment_metric_values WHERE visitor_id = ? AND refresh_id = \
                 (SELECT max(refresh_id) FROM experiment_metric_values WHERE visitor_id = ?)";
    let alter_odd = || async {
        let query = db.client.query(alter).bind(&odd).bind(&odd);
        query.execute().await.expect("alter");
    };
    alter_odd().await;
    let altered = db.results().await;
    let b = |r: &[Result]| {
        r.iter()
            .find(|r| r.variant_id == "B")
            .map(|r| r.value)
            .expect("B")
    };
    assert!(b(&altered) > b(&swept) + 1.0, "the latest refresh is read");

    // An event of the visitor after the refresh: not counted until refreshed.
    let mut later = events.last().expect("events").clone();
    (later.name, later.target, later.t) = ("click", "", START + 2);
    db.insert("events", &[later.row(events.len())]).await;
    events.push(later);
    assert_eq!(db.count(stale).await, 1, "the odd visitor is stale");
    assert_same("as of the refresh", &db.results().await, &altered);
    // Stored again, for that visitor alone, as the consumer does after a batch.
    let visitor = [(KEY.to_owned(), odd.clone())];
    db.refresh(&visitor, refresh_id_of(Duration::ZERO)).await;
    assert_eq!(db.count(stale).await, 0);
    let refreshed = db.results().await;
    assert!(
        (b(&refreshed) - b(&swept)).abs() < 1.0,
        "the alteration is gone"
    );
    assert_same("refreshed, against stored anew", &refreshed, &anew().await);

    // The same definitions loaded again (a later snapshot): still fresh.
    db.insert_definitions(&metrics, "v2", START).await;
    assert_eq!(
        db.count(stale).await,
        0,
        "unchanged definitions keep the values"
    );
    // A changed definition: every visitor of the experiment is stale, and the results
    // change at the sweep.
    metrics[0].lookback_days = 0.0;
    db.insert_definitions(&metrics, "v3", START + 1).await;
    assert!(
        db.count(stale).await > 100,
        "a changed definition makes them stale"
    );
    db.sweep().await;
    assert_eq!(db.count(stale).await, 0);
    let changed = db.results().await;
    let cuped = |r: &[Result]| r.iter().map(|r| r.cuped_theta).collect::<Vec<_>>();
    assert_ne!(
        cuped(&changed),
        cuped(&refreshed),
        "the new lookback applies"
    );
    assert_same("changed, against stored anew", &changed, &anew().await);
}

/// A refresh id of `ago` before now: a refresh's id is its start, in microseconds (the
/// consumer's `Refresh::next_id`).
fn refresh_id_of(ago: Duration) -> u64 {
    let start = std::time::SystemTime::now() - ago;
    let since = start
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970");
    since.as_millis() as u64 * 1000
}

/// Refreshes landing while a query of the view runs (some read stale: an event came after
/// them), and events landing too, neither drop a visitor nor count one twice: each query
/// sees every exposed visitor's metrics once.
#[tokio::test]
async fn refreshes_and_events_landing_during_a_query_neither_drop_nor_double_a_visitor() {
    let db = Database::new().await;
    db.define(&metrics(), "v1", START - DAY).await;
    let events = events(13, 60);
    db.store(&events).await;
    let visitors: Vec<(String, String)> = db
        .client
        .query("SELECT DISTINCT toString(public_key), visitor_id FROM events")
        .fetch_all()
        .await
        .expect("visitors");
    let rows = "SELECT count() FROM experiment_metric_visitors";
    let want = db.count(rows).await;
    assert!(want > 500, "{want} rows");

    let done = std::sync::atomic::AtomicBool::new(false);
    let running = || !done.load(std::sync::atomic::Ordering::Relaxed);
    // Refreshes of every visitor: a copy of the latest read as stale, then a real one.
    let stale_copy = "INSERT INTO experiment_metric_values SELECT public_key, \
         experiment_id, phase, visitor_id, metric_id, variant_id, first_exposure_ms, value, \
         denominator, pre_value, events_seen + 1000, settings_hash, ? \
         FROM experiment_metric_values \
         WHERE refresh_id = (SELECT max(refresh_id) FROM experiment_metric_values)";
    let refreshes = async {
        while running() {
            let copy = db
                .client
                .query(stale_copy)
                .bind(refresh_id_of(Duration::ZERO));
            copy.execute().await.expect("stale copy");
            db.refresh(&visitors, refresh_id_of(Duration::ZERO)).await;
        }
    };
    // A click of a visitor, after their exposure: their stored values turn stale.
    let clicks = async {
        let mut n = events.len();
        while running() {
            let mut click = events[n % events.len()].clone();
            (click.name, click.experiment, click.target) = ("click", EXPERIMENT, "");
            click.t = START + 100 * DAY;
            db.insert("events", &[click.row(n)]).await;
            n += 1;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    let queries = async {
        let mut wrong = Vec::new();
        for _ in 0..60 {
            let got = db.count(rows).await;
            if got != want {
                wrong.push(got);
            }
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        wrong
    };
    let ((), (), wrong) = tokio::join!(refreshes, clicks, queries);
    assert!(wrong.is_empty(), "{want} rows each time, not {wrong:?}");
}
