//! Tests of metric definitions as the snapshot loads them: the documented example with its
//! defaults, the default goal, and every refusal with its sentence.

use serde_json::{Value, json};

use crate::metric::*;
use crate::snapshot::{Snapshot, SnapshotError};

/// A snapshot of one experiment `exp_x` listing `listed`, with `metrics` defined.
fn load(metrics: Value, listed: Value) -> Result<Snapshot, SnapshotError> {
    let mut experiment = json!({ "id": "exp_x", "status": "live", "variants": [
        { "id": "var_a", "weight": 100, "control": true, "parts": {} }] });
    if !listed.is_null() {
        experiment["metrics"] = listed;
    }
    let doc = json!({ "version": 1, "metrics": metrics, "experiments": [experiment],
        "keys": [] });
    Snapshot::from_json(doc.to_string().as_bytes())
}

fn problems(metrics: Value, listed: Value) -> Vec<String> {
    load(metrics, listed).expect_err("refused").problems
}

fn example() -> Value {
    json!([
        { "id": "signup", "kind": "proportion", "eventName": "conversion",
          "clickTarget": "signup" },
        { "id": "time_on_page", "kind": "mean", "eventName": "dwell_time",
          "field": "timeOnPage", "aggregate": "max", "cap": { "percentile": 0.99 } },
        { "id": "clicks_per_session", "kind": "ratio",
          "numerator": { "eventName": "click", "aggregate": "count" },
          "denominator": { "aggregate": "sessions" }, "better": "lower",
          "cupedLookbackDays": 0, "someday": "ignored" }
    ])
}

#[test]
fn the_documented_example_loads_with_its_defaults() {
    let s = load(
        example(),
        json!([{ "id": "signup", "role": "goal" },
               { "id": "time_on_page", "role": "guardrail" }]),
    )
    .expect("valid");
    assert_eq!(s.metrics.len(), 3);
    let signup = &s.metrics[0];
    assert_eq!(signup.kind, MetricKind::Proportion);
    assert_eq!(signup.numerator.event_name.as_deref(), Some("conversion"));
    assert_eq!(signup.numerator.click_target.as_deref(), Some("signup"));
    assert_eq!(signup.numerator.aggregate, None);
    assert!(signup.higher_is_better);
    assert_eq!(signup.cuped_lookback_days, DEFAULT_CUPED_LOOKBACK_DAYS);
    let time = &s.metrics[1];
    assert_eq!(time.numerator.field, Some(Field::TimeOnPage));
    assert_eq!(time.numerator.aggregate, Some(Aggregate::Max));
    assert_eq!(time.cap, Some(Cap::Percentile(0.99)));
    let ratio = &s.metrics[2];
    assert_eq!(ratio.numerator.aggregate, Some(Aggregate::Count));
    let denominator = ratio.denominator.as_ref().expect("a denominator");
    assert_eq!(denominator.aggregate, Some(Aggregate::Sessions));
    assert_eq!(denominator.event_name, None);
    assert!(!ratio.higher_is_better);
    assert_eq!(ratio.cuped_lookback_days, 0.0);
    let definition: Value = serde_json::from_str(&ratio.definition).expect("JSON");
    assert_eq!(definition, example()[2]);
    let listed: Vec<(Role, &str)> = s
        .metrics_of(&s.experiments[0])
        .into_iter()
        .map(|(role, m)| (role, m.id.as_str()))
        .collect();
    assert_eq!(
        listed,
        [(Role::Goal, "signup"), (Role::Guardrail, "time_on_page")]
    );
}

#[test]
fn without_a_goal_the_default_goal_comes_first() {
    let s = load(example(), Value::Null).expect("valid");
    let of = |s: &Snapshot| -> Vec<(Role, String)> {
        s.metrics_of(&s.experiments[0])
            .into_iter()
            .map(|(role, m)| (role, m.id.clone()))
            .collect()
    };
    assert_eq!(of(&s), [(Role::Goal, DEFAULT_GOAL.to_owned())]);
    let goal = s.metrics_of(&s.experiments[0])[0].1;
    assert_eq!(goal.kind, MetricKind::Proportion);
    assert!(goal.numerator.conversion && goal.numerator.event_name.is_none());
    let s = load(
        example(),
        json!([{ "id": "time_on_page", "role": "secondary" },
               { "id": "clicks_per_session", "role": "guardrail" }]),
    )
    .expect("valid");
    assert_eq!(
        of(&s),
        [
            (Role::Goal, DEFAULT_GOAL.to_owned()),
            (Role::Secondary, "time_on_page".to_owned()),
            (Role::Guardrail, "clicks_per_session".to_owned())
        ]
    );
    // Listed as the goal, it is where the list puts it, once.
    let s = load(
        example(),
        json!([{ "id": "signup", "role": "secondary" },
               { "id": "conversion", "role": "goal" }]),
    )
    .expect("valid");
    assert_eq!(
        of(&s),
        [
            (Role::Secondary, "signup".to_owned()),
            (Role::Goal, DEFAULT_GOAL.to_owned())
        ]
    );
}

/// Asserts that each definition, alone in the snapshot, is refused with a problem of
/// `metrics[0]` that contains its expected sentence.
fn assert_refused(cases: Vec<(Value, &str)>) {
    for (definition, expected) in cases {
        let found = problems(json!([definition]), Value::Null);
        assert!(
            found
                .iter()
                .any(|p| p.starts_with("metrics[0]") && p.contains(expected)),
            "{definition}: {expected:?} not in {found:?}"
        );
    }
}

#[test]
fn a_bad_id_kind_or_shape_is_refused_naming_the_metric() {
    assert_refused(vec![
        (
            json!({ "kind": "proportion", "eventName": "x" }),
            "metrics[0] (): id must be 1 to 64",
        ),
        (
            json!({ "id": "a b", "kind": "proportion", "eventName": "x" }),
            "metrics[0] (a b): id must be",
        ),
        (
            json!({ "id": "a".repeat(65), "kind": "proportion", "eventName": "x" }),
            "id must be 1 to 64",
        ),
        (
            json!({ "id": "conversion", "kind": "proportion", "eventName": "x" }),
            "(conversion): id conversion is reserved",
        ),
        (
            json!({ "id": "m", "kind": "median", "eventName": "x" }),
            "(m): kind must be proportion, mean or ratio",
        ),
        (
            json!({ "id": "m", "eventName": "x" }),
            "(m): kind must be proportion, mean or ratio, not missing",
        ),
        (json!("signup"), "metrics[0]: must be an object"),
    ]);
    let found = problems(json!({ "signup": {} }), Value::Null);
    assert_eq!(found.len(), 1);
    assert!(found[0].starts_with("metrics: must be a list"), "{found:?}");
    let mut twice = example();
    twice[2]["id"] = "signup".into();
    assert_eq!(
        problems(twice, Value::Null),
        ["metrics[2] (signup): duplicate metric id"]
    );
}

#[test]
fn a_bad_proportion_is_refused_naming_the_metric_and_field() {
    assert_refused(vec![
        (
            json!({ "id": "m", "kind": "proportion" }),
            "(m): a proportion needs eventName or conversion: true",
        ),
        (
            json!({ "id": "m", "kind": "proportion", "conversion": false }),
            "(m): a proportion needs eventName",
        ),
        (
            json!({ "id": "m", "kind": "proportion", "eventName": "" }),
            "(m): eventName must be a non-empty string",
        ),
        (
            json!({ "id": "m", "kind": "proportion", "eventName": 3 }),
            "(m): eventName must be a non-empty string",
        ),
        (
            json!({ "id": "m", "kind": "proportion", "conversion": "yes" }),
            "(m): conversion must be true or false",
        ),
        (
            json!({ "id": "m", "kind": "proportion", "eventName": "x", "clickTarget": "" }),
            "(m): clickTarget must be a non-empty string",
        ),
        (
            json!({ "id": "m", "kind": "proportion", "eventName": "x", "field": "timeOnPage" }),
            "(m): field is not allowed on a proportion",
        ),
        (
            json!({ "id": "m", "kind": "proportion", "eventName": "x", "aggregate": "count" }),
            "(m): aggregate is not allowed on a proportion",
        ),
        (
            json!({ "id": "m", "kind": "proportion", "eventName": "x", "cap": { "value": 3 } }),
            "(m): cap is not allowed on a proportion",
        ),
        (
            json!({ "id": "m", "kind": "proportion", "eventName": "x", "numerator": {} }),
            "(m): numerator is only for a ratio",
        ),
    ]);
}

#[test]
fn a_bad_mean_or_ratio_is_refused_naming_the_metric_and_field() {
    assert_refused(vec![
        (
            json!({ "id": "m", "kind": "mean", "aggregate": "count" }),
            "(m): eventName is required for a mean",
        ),
        (
            json!({ "id": "m", "kind": "mean", "eventName": "x" }),
            "(m): aggregate is required",
        ),
        (
            json!({ "id": "m", "kind": "mean", "eventName": "x", "aggregate": "median" }),
            "(m): aggregate must be count, sum, max, mean or sessions, not \"median\"",
        ),
        (
            json!({ "id": "m", "kind": "mean", "eventName": "x", "aggregate": "sessions" }),
            "(m): aggregate sessions is not allowed here",
        ),
        (
            json!({ "id": "m", "kind": "mean", "eventName": "x", "aggregate": "sum" }),
            "(m): field is required with aggregate sum",
        ),
        (
            json!({ "id": "m", "kind": "mean", "eventName": "x", "aggregate": "count", "field": "loadTime" }),
            "(m): field is not allowed with aggregate count",
        ),
        (
            json!({ "id": "m", "kind": "mean", "eventName": "x", "aggregate": "max", "field": "revenue" }),
            "(m): field must be timeOnPage, scrollDepth or loadTime, not \"revenue\"",
        ),
        (
            json!({ "id": "m", "kind": "ratio", "numerator": { "aggregate": "count" } }),
            "(m): denominator must be an object, not missing",
        ),
        (
            json!({ "id": "m", "kind": "ratio", "numerator": 1, "denominator": { "aggregate": "count" } }),
            "(m): numerator must be an object, not 1",
        ),
        (
            json!({ "id": "m", "kind": "ratio", "eventName": "x", "numerator": { "aggregate": "count" }, "denominator": { "aggregate": "count" } }),
            "(m): eventName is not allowed on a ratio",
        ),
        (
            json!({ "id": "m", "kind": "ratio", "numerator": { "eventName": "x" }, "denominator": { "aggregate": "count" } }),
            "(m): numerator.aggregate is required",
        ),
        (
            json!({ "id": "m", "kind": "ratio", "numerator": { "aggregate": "sessions", "field": "scrollDepth" }, "denominator": { "aggregate": "count" } }),
            "(m): numerator.field is not allowed with aggregate sessions",
        ),
        (
            json!({ "id": "m", "kind": "ratio", "numerator": { "aggregate": "count" }, "denominator": { "aggregate": "mean" } }),
            "(m): denominator.field is required with aggregate mean",
        ),
        (
            json!({ "id": "m", "kind": "ratio", "numerator": { "aggregate": "count", "clickTarget": "" }, "denominator": { "aggregate": "count" } }),
            "(m): numerator.clickTarget must be a non-empty string",
        ),
    ]);
}

#[test]
fn a_bad_cap_direction_or_lookback_is_refused_naming_the_metric_and_field() {
    assert_refused(vec![
        (
            json!({ "id": "m", "kind": "mean", "eventName": "x", "aggregate": "count", "cap": {} }),
            "(m): cap must give exactly one of value and percentile",
        ),
        (
            json!({ "id": "m", "kind": "mean", "eventName": "x", "aggregate": "count", "cap": { "value": 1, "percentile": 0.5 } }),
            "(m): cap must give exactly one",
        ),
        (
            json!({ "id": "m", "kind": "mean", "eventName": "x", "aggregate": "count", "cap": { "value": 0 } }),
            "(m): cap.value must be a number above 0, not 0",
        ),
        (
            json!({ "id": "m", "kind": "mean", "eventName": "x", "aggregate": "count", "cap": { "percentile": 1 } }),
            "(m): cap.percentile must be a number between 0 and 1",
        ),
        (
            json!({ "id": "m", "kind": "mean", "eventName": "x", "aggregate": "count", "cap": { "percentile": 0 } }),
            "(m): cap.percentile must be a number between 0 and 1",
        ),
        (
            json!({ "id": "m", "kind": "mean", "eventName": "x", "aggregate": "count", "cap": 5 }),
            "(m): cap must be {\"value\": x} or {\"percentile\": p}",
        ),
        (
            json!({ "id": "m", "kind": "proportion", "eventName": "x", "better": "up" }),
            "(m): better must be \"higher\" or \"lower\"",
        ),
        (
            json!({ "id": "m", "kind": "proportion", "eventName": "x", "cupedLookbackDays": 366 }),
            "(m): cupedLookbackDays must be a number from 0 to 365, not 366",
        ),
        (
            json!({ "id": "m", "kind": "proportion", "eventName": "x", "cupedLookbackDays": -1 }),
            "(m): cupedLookbackDays must be a number from 0 to 365",
        ),
        (
            json!({ "id": "m", "kind": "proportion", "eventName": "x", "cupedLookbackDays": "14" }),
            "(m): cupedLookbackDays must be a number",
        ),
    ]);
}

#[test]
fn the_edges_of_a_definition_are_allowed() {
    for fine in [
        json!({ "id": "A-z_09", "kind": "proportion", "conversion": true, "cupedLookbackDays": 365 }),
        json!({ "id": "a".repeat(64), "kind": "mean", "eventName": "x", "aggregate": "count", "conversion": true, "cap": { "value": 0.5 }, "better": "higher" }),
        json!({ "id": "m", "kind": "ratio", "numerator": { "aggregate": "sum", "field": "loadTime", "conversion": true }, "denominator": { "eventName": "x", "clickTarget": "#b", "aggregate": "count" }, "cap": { "percentile": 0.5 } }),
    ] {
        assert!(load(json!([fine]), Value::Null).is_ok(), "{fine}");
    }
}

#[test]
fn an_experiment_lists_defined_metrics_once_each_with_a_role() {
    let cases: Vec<(Value, &str)> = vec![
        (
            json!([{ "id": "nope", "role": "goal" }]),
            "experiments[0] (exp_x).metrics[0] (nope): unknown metric nope",
        ),
        (
            json!([{ "id": "signup", "role": "goal" }, { "id": "signup", "role": "secondary" }]),
            "experiments[0] (exp_x).metrics[1] (signup): metric signup listed twice",
        ),
        (
            json!([{ "id": "signup", "role": "boss" }]),
            "experiments[0] (exp_x).metrics[0] (signup): role must be goal, secondary or guardrail, not \"boss\"",
        ),
        (
            json!([{ "id": "signup" }]),
            "experiments[0] (exp_x).metrics[0] (signup): role must be goal, secondary or guardrail, not missing",
        ),
        (
            json!([{ "role": "goal" }]),
            "experiments[0] (exp_x).metrics[0] (): id must be a metric's id",
        ),
        (
            json!(["signup"]),
            "experiments[0] (exp_x).metrics[0] (): must be an object",
        ),
        (
            json!({ "signup": "goal" }),
            "experiments[0] (exp_x): metrics must be a list",
        ),
        (
            json!([{ "id": "conversion", "role": "guardrail" }]),
            "experiments[0] (exp_x): metric conversion is listed as guardrail but the experiment has no goal",
        ),
    ];
    for (listed, expected) in cases {
        let found = problems(example(), listed.clone());
        assert!(
            found.iter().any(|p| p.contains(expected)),
            "{listed}: {expected:?} not in {found:?}"
        );
    }
    assert!(
        load(
            example(),
            json!([{ "id": "signup", "role": "goal" },
            { "id": "conversion", "role": "guardrail" }])
        )
        .is_ok()
    );
}
