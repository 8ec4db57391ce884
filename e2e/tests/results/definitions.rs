//! The consumer's mirror of the snapshot's definitions in ClickHouse: `experiment_metrics`
//! holds each experiment's metrics, the default goal first where the experiment lists no
//! goal, stamped like the `experiment_variants` rows of the same version, for every
//! version loaded.

use std::time::Duration;

use clickhouse::Row;
use e2e::{ConsumerNames, SnapshotFile};
use serde::Deserialize;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

fn metrics() -> Value {
    json!([
        { "id": "signup", "kind": "proportion", "eventName": "conversion",
          "clickTarget": "signup" },
        { "id": "time_on_page", "kind": "mean", "eventName": "dwell_time",
          "field": "timeOnPage", "aggregate": "max", "cap": { "percentile": 0.99 } },
        { "id": "clicks_per_session", "kind": "ratio",
          "numerator": { "eventName": "click", "aggregate": "count" },
          "denominator": { "aggregate": "sessions" }, "better": "lower",
          "cupedLookbackDays": 0 },
        { "id": "scroll", "kind": "mean", "eventName": "scroll_depth", "conversion": true,
          "field": "scrollDepth", "aggregate": "sum", "cap": { "value": 500 },
          "cupedLookbackDays": 7.5 },
        { "id": "load_ratio", "kind": "ratio",
          "numerator": { "eventName": "performance", "clickTarget": "#hero",
                         "field": "loadTime", "aggregate": "mean" },
          "denominator": { "eventName": "click", "conversion": true, "field": "timeOnPage",
                           "aggregate": "max" } }
    ])
}

fn snapshot(version: &str, plain_metrics: Option<Value>) -> Value {
    let variant = |id: &str| json!({ "id": id, "weight": 100, "control": true, "parts": {} });
    let mut plain = json!({ "id": "exp_plain", "status": "live", "variants": [variant("var_p")] });
    if let Some(listed) = plain_metrics {
        plain["metrics"] = listed;
    }
    json!({
        "version": version,
        "metrics": metrics(),
        "experiments": [
            { "id": "exp_goal", "phase": 2, "status": "live", "variants": [variant("var_g")],
              "metrics": [{ "id": "signup", "role": "goal" },
                          { "id": "time_on_page", "role": "guardrail" }] },
            { "id": "exp_nogoal", "status": "draft", "variants": [variant("var_n")],
              "metrics": [{ "id": "clicks_per_session", "role": "secondary" },
                          { "id": "scroll", "role": "guardrail" },
                          { "id": "load_ratio", "role": "secondary" }] },
            plain
        ],
        "keys": [
            { "publicKey": "pk_b", "experiments": ["exp_plain", "exp_goal"] },
            { "publicKey": "pk_a", "experiments": ["exp_goal"] }
        ]
    })
}

#[derive(Debug, PartialEq, Row, Deserialize)]
struct MetricRow {
    experiment_id: String,
    phase: u32,
    metric_id: String,
    role: String,
    position: u32,
    kind: String,
    num_event: String,
    num_click_target: String,
    num_conversion: u8,
    num_field: String,
    num_aggregate: String,
    den_event: String,
    den_click_target: String,
    den_conversion: u8,
    den_field: String,
    den_aggregate: String,
    cap_value: f64,
    cap_percentile: f64,
    higher_is_better: u8,
    cuped_lookback_days: f64,
    public_keys: Vec<String>,
}

/// An expected row: the fields that vary, the rest as for a metric that sets nothing.
struct Want {
    experiment: &'static str,
    phase: u32,
    metric: &'static str,
    role: &'static str,
    position: u32,
    kind: &'static str,
    num: (&'static str, &'static str, u8, &'static str, &'static str),
    den: (&'static str, &'static str, u8, &'static str, &'static str),
    cap: (f64, f64),
    higher: u8,
    cuped: f64,
    keys: &'static [&'static str],
}

impl Want {
    fn row(&self) -> MetricRow {
        MetricRow {
            experiment_id: self.experiment.into(),
            phase: self.phase,
            metric_id: self.metric.into(),
            role: self.role.into(),
            position: self.position,
            kind: self.kind.into(),
            num_event: self.num.0.into(),
            num_click_target: self.num.1.into(),
            num_conversion: self.num.2,
            num_field: self.num.3.into(),
            num_aggregate: self.num.4.into(),
            den_event: self.den.0.into(),
            den_click_target: self.den.1.into(),
            den_conversion: self.den.2,
            den_field: self.den.3.into(),
            den_aggregate: self.den.4.into(),
            cap_value: self.cap.0,
            cap_percentile: self.cap.1,
            higher_is_better: self.higher,
            cuped_lookback_days: self.cuped,
            public_keys: self.keys.iter().map(|k| (*k).to_owned()).collect(),
        }
    }
}

const NONE: (&str, &str, u8, &str, &str) = ("", "", 0, "", "");
/// The built-in default goal's numerator: any conversion, as today's conversion rate.
const CONVERSION: (&str, &str, u8, &str, &str) = ("", "", 1, "", "any");

fn default_goal(experiment: &'static str, phase: u32, keys: &'static [&'static str]) -> Want {
    Want {
        experiment,
        phase,
        metric: "conversion",
        role: "goal",
        position: 0,
        kind: "proportion",
        num: CONVERSION,
        den: NONE,
        cap: (0.0, 0.0),
        higher: 1,
        cuped: 14.0,
        keys,
    }
}

fn version_one() -> Vec<Want> {
    let goal_keys: &'static [&'static str] = &["pk_a", "pk_b"];
    vec![
        Want {
            experiment: "exp_goal",
            phase: 2,
            metric: "signup",
            role: "goal",
            position: 0,
            kind: "proportion",
            num: ("conversion", "signup", 0, "", "any"),
            den: NONE,
            cap: (0.0, 0.0),
            higher: 1,
            cuped: 14.0,
            keys: goal_keys,
        },
        Want {
            experiment: "exp_goal",
            phase: 2,
            metric: "time_on_page",
            role: "guardrail",
            position: 1,
            kind: "mean",
            num: ("dwell_time", "", 0, "time_on_page", "max"),
            den: NONE,
            cap: (0.0, 0.99),
            higher: 1,
            cuped: 14.0,
            keys: goal_keys,
        },
        default_goal("exp_nogoal", 1, &[]),
        Want {
            experiment: "exp_nogoal",
            phase: 1,
            metric: "clicks_per_session",
            role: "secondary",
            position: 1,
            kind: "ratio",
            num: ("click", "", 0, "", "count"),
            den: ("", "", 0, "", "sessions"),
            cap: (0.0, 0.0),
            higher: 0,
            cuped: 0.0,
            keys: &[],
        },
        Want {
            experiment: "exp_nogoal",
            phase: 1,
            metric: "scroll",
            role: "guardrail",
            position: 2,
            kind: "mean",
            num: ("scroll_depth", "", 1, "scroll_depth", "sum"),
            den: NONE,
            cap: (500.0, 0.0),
            higher: 1,
            cuped: 7.5,
            keys: &[],
        },
        Want {
            experiment: "exp_nogoal",
            phase: 1,
            metric: "load_ratio",
            role: "secondary",
            position: 3,
            kind: "ratio",
            num: ("performance", "#hero", 0, "load_time", "mean"),
            den: ("click", "", 1, "time_on_page", "max"),
            cap: (0.0, 0.0),
            higher: 1,
            cuped: 14.0,
            keys: &[],
        },
        default_goal("exp_plain", 1, &["pk_b"]),
    ]
}

async fn metric_rows(ch: &clickhouse::Client, version: &str) -> Vec<MetricRow> {
    ch.query(
        "SELECT experiment_id, phase, metric_id, role, position, kind, num_event, \
         num_click_target, num_conversion, num_field, num_aggregate, den_event, \
         den_click_target, den_conversion, den_field, den_aggregate, cap_value, \
         cap_percentile, higher_is_better, cuped_lookback_days, public_keys \
         FROM experiment_metrics FINAL WHERE version = ? ORDER BY experiment_id, position",
    )
    .bind(version)
    .fetch_all()
    .await
    .unwrap_or_default()
}

#[tokio::test]
async fn the_consumer_writes_each_experiments_metrics_with_the_default_goal() {
    let file = SnapshotFile::new(&snapshot("m-1", None));
    let names = ConsumerNames::unique();
    let snapshot_flag = format!("--experiments-snapshot={}", file.path.display());
    let consumer = e2e::start_consumer(e2e::consumer_config(
        &names,
        &[&snapshot_flag, "--snapshot-poll-interval-ms=100"],
    ))
    .await;
    let ch = e2e::clickhouse(&names.database);

    let want: Vec<MetricRow> = version_one().iter().map(Want::row).collect();
    let got = e2e::eventually(WAIT, "version m-1 in experiment_metrics", || async {
        let rows = metric_rows(&ch, "m-1").await;
        (rows.len() >= want.len()).then_some(rows)
    })
    .await;
    assert_eq!(got, want);

    // Stamped as the variants of the same write; the definition the same JSON value as given.
    let stamps: u64 = ch
        .query(
            "SELECT uniqExact(loaded_at) FROM (\
             SELECT loaded_at FROM experiment_metrics WHERE version = 'm-1' \
             UNION ALL SELECT loaded_at FROM experiment_variants WHERE version = 'm-1')",
        )
        .fetch_one()
        .await
        .expect("stamps");
    assert_eq!(
        stamps, 1,
        "one loaded_at for the variants and metrics of m-1"
    );
    let definitions: Vec<(String, String)> = ch
        .query(
            "SELECT metric_id, definition FROM experiment_metrics FINAL WHERE version = 'm-1' \
             AND experiment_id = 'exp_nogoal' ORDER BY position",
        )
        .fetch_all()
        .await
        .expect("definitions");
    let parsed = |text: &str| serde_json::from_str::<Value>(text).expect("JSON");
    assert_eq!(definitions[0].0, "conversion");
    assert_eq!(
        parsed(&definitions[0].1),
        json!({ "id": "conversion", "kind": "proportion", "conversion": true })
    );
    for (id, definition) in &definitions[1..] {
        let given = metrics()
            .as_array()
            .and_then(|all| all.iter().find(|m| m["id"] == id.as_str()).cloned())
            .expect("a defined metric");
        assert_eq!(parsed(definition), given, "{id}");
    }

    // A new version: exp_plain now lists the default goal after another metric; the
    // first version's rows stay.
    file.replace(&snapshot(
        "m-2",
        Some(json!([{ "id": "scroll", "role": "secondary" },
                     { "id": "conversion", "role": "goal" }])),
    ));
    let plain = e2e::eventually(WAIT, "version m-2 in experiment_metrics", || async {
        let rows: Vec<MetricRow> = metric_rows(&ch, "m-2")
            .await
            .into_iter()
            .filter(|r| r.experiment_id == "exp_plain")
            .collect();
        (rows.len() >= 2).then_some(rows)
    })
    .await;
    let mut scroll = version_one().remove(4);
    (scroll.experiment, scroll.role, scroll.position, scroll.keys) =
        ("exp_plain", "secondary", 0, &["pk_b"]);
    let mut goal = default_goal("exp_plain", 1, &["pk_b"]);
    goal.position = 1;
    assert_eq!(plain, [scroll.row(), goal.row()]);
    assert_eq!(metric_rows(&ch, "m-1").await, want, "version m-1 stays");

    consumer.stop().await.expect("clean stop");
    e2e::drop_database(&names.database).await;
}
