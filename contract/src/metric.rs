//! Metric definitions of the experiments snapshot: which of a visitor's events a metric
//! reads and how it makes one number per visitor of them, and the metrics each experiment
//! is judged by. Only validated definitions exist. Read by the consumer, which writes them
//! for the results views; never served to browsers.
//!
//! - `events`: the events part of a definition, [`Events`] with its [`Aggregate`] and
//!   [`Field`], and the rules of its aggregate and field;
//! - `fields`: the reader of a definition's JSON objects, each problem with its place.

mod events;
mod fields;

use std::collections::HashSet;
use std::sync::LazyLock;

use serde_json::Value;

pub use events::{Aggregate, Events, Field};
use events::{check_aggregate, events};
use fields::Fields;

/// The id of the built-in default goal: today's conversion rate (an event named
/// `conversion`, or any event with `conversion: true`). Reserved: no metric may take it.
pub const DEFAULT_GOAL: &str = "conversion";
/// The CUPED lookback when a metric gives none, in days.
pub const DEFAULT_CUPED_LOOKBACK_DAYS: f64 = 14.0;
/// The longest CUPED lookback, in days.
pub const MAX_CUPED_LOOKBACK_DAYS: f64 = 365.0;
const MAX_ID_LEN: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricKind {
    /// Whether the visitor had a matching event.
    Proportion,
    /// A per-visitor value of their matching events (count, or sum, max or mean of a field).
    Mean,
    /// The sum over visitors of a numerator over the sum of a denominator.
    Ratio,
}

impl MetricKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Proportion => "proportion",
            Self::Mean => "mean",
            Self::Ratio => "ratio",
        }
    }
}

/// The bound each visitor's value is capped at.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Cap {
    /// A fixed bound, above 0.
    Value(f64),
    /// A percentile of the visitors' values, between 0 and 1.
    Percentile(f64),
}

/// A validated metric definition.
#[derive(Clone, Debug, PartialEq)]
pub struct Metric {
    pub id: String,
    pub kind: MetricKind,
    /// A proportion's or mean's events, a ratio's numerator.
    pub numerator: Events,
    /// A ratio's denominator; `None` for the other kinds.
    pub denominator: Option<Events>,
    pub cap: Option<Cap>,
    pub higher_is_better: bool,
    /// 0: no CUPED.
    pub cuped_lookback_days: f64,
    /// The definition as loaded (the same JSON value, written compact).
    pub definition: String,
}

/// The built-in default goal, [`DEFAULT_GOAL`].
pub static DEFAULT_GOAL_METRIC: LazyLock<Metric> = LazyLock::new(|| Metric {
    id: DEFAULT_GOAL.to_owned(),
    kind: MetricKind::Proportion,
    numerator: Events {
        event_name: None,
        click_target: None,
        conversion: true,
        field: None,
        aggregate: None,
    },
    denominator: None,
    cap: None,
    higher_is_better: true,
    cuped_lookback_days: DEFAULT_CUPED_LOOKBACK_DAYS,
    definition: serde_json::json!({ "id": DEFAULT_GOAL, "kind": "proportion", "conversion": true })
        .to_string(),
});

/// What a metric is to an experiment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Goal,
    Secondary,
    Guardrail,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Goal => "goal",
            Self::Secondary => "secondary",
            Self::Guardrail => "guardrail",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        [Self::Goal, Self::Secondary, Self::Guardrail]
            .into_iter()
            .find(|r| r.as_str() == name)
    }
}

/// One entry of an experiment's `metrics`: a defined metric (or the default goal) and its
/// role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetricRef {
    pub id: String,
    pub role: Role,
}

/// Whether `id` may name a metric: 1 to 64 letters, digits, `_` and `-`.
fn is_metric_id(id: &str) -> bool {
    (1..=MAX_ID_LEN).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
}

/// One metric of the top-level list, or `None` (its problems reported).
fn metric(place: &str, value: &Value, problems: &mut Vec<String>) -> Option<Metric> {
    let Some(map) = value.as_object() else {
        problems.push(format!("{place}: must be an object, not {value}"));
        return None;
    };
    let before = problems.len();
    let id = match map.get("id") {
        Some(Value::String(id)) => id.clone(),
        _ => String::new(),
    };
    let fields = Fields {
        place: format!("{place} ({id})"),
        prefix: "",
        map,
    };
    if !is_metric_id(&id) {
        problems.push(format!(
            "{}: id must be 1 to {MAX_ID_LEN} letters, digits, _ or -",
            fields.place
        ));
    } else if id == DEFAULT_GOAL {
        problems.push(format!(
            "{}: id {DEFAULT_GOAL} is reserved for the built-in default goal",
            fields.place
        ));
    }
    let kind = kind(&fields, problems);
    let (numerator, denominator) = parts(&fields, kind, problems);
    let cap = cap(&fields, kind, problems);
    let higher_is_better = higher_is_better(&fields, problems);
    let cuped_lookback_days = fields
        .number(
            "cupedLookbackDays",
            |x| (0.0..=MAX_CUPED_LOOKBACK_DAYS).contains(&x),
            &format!("from 0 to {MAX_CUPED_LOOKBACK_DAYS}"),
            problems,
        )
        .unwrap_or(DEFAULT_CUPED_LOOKBACK_DAYS);
    if problems.len() > before {
        return None;
    }
    Some(Metric {
        id,
        kind: kind?,
        numerator: numerator?,
        denominator,
        cap,
        higher_is_better,
        cuped_lookback_days,
        definition: value.to_string(),
    })
}

/// A metric's `kind`.
fn kind(fields: &Fields, problems: &mut Vec<String>) -> Option<MetricKind> {
    match fields.get("kind") {
        Some(Value::String(k)) if k == "proportion" => Some(MetricKind::Proportion),
        Some(Value::String(k)) if k == "mean" => Some(MetricKind::Mean),
        Some(Value::String(k)) if k == "ratio" => Some(MetricKind::Ratio),
        other => {
            problems.push(format!(
                "{}: kind must be proportion, mean or ratio, not {}",
                fields.place,
                other.map_or_else(|| "missing".to_owned(), ToString::to_string)
            ));
            None
        }
    }
}

/// A metric's numerator and, for a ratio, its denominator: the events each counts.
fn parts(
    fields: &Fields,
    kind: Option<MetricKind>,
    problems: &mut Vec<String>,
) -> (Option<Events>, Option<Events>) {
    const OWN: [&str; 5] = [
        "eventName",
        "clickTarget",
        "conversion",
        "field",
        "aggregate",
    ];
    match kind {
        Some(MetricKind::Ratio) => {
            for name in OWN {
                fields.refuse(
                    name,
                    "is not allowed on a ratio (give it in numerator and denominator)",
                    problems,
                );
            }
            let mut part = |name: &str, prefix: &'static str| -> Option<Events> {
                match fields.get(name) {
                    Some(Value::Object(inner)) => {
                        let nested = Fields {
                            place: fields.place.clone(),
                            prefix,
                            map: inner,
                        };
                        let events = events(&nested, problems);
                        check_aggregate(
                            &nested,
                            &events,
                            &[
                                Aggregate::Count,
                                Aggregate::Sum,
                                Aggregate::Max,
                                Aggregate::Mean,
                                Aggregate::Sessions,
                            ],
                            problems,
                        );
                        Some(events)
                    }
                    other => {
                        problems.push(format!(
                            "{}: {name} must be an object, not {}",
                            fields.place,
                            other.map_or_else(|| "missing".to_owned(), ToString::to_string)
                        ));
                        None
                    }
                }
            };
            let numerator = part("numerator", "numerator.");
            let denominator = part("denominator", "denominator.");
            (numerator, denominator)
        }
        Some(kind) => {
            for name in ["numerator", "denominator"] {
                fields.refuse(name, "is only for a ratio", problems);
            }
            let events = events(fields, problems);
            if kind == MetricKind::Proportion {
                for name in ["field", "aggregate"] {
                    fields.refuse(name, "is not allowed on a proportion", problems);
                }
                if events.event_name.is_none() && !events.conversion {
                    problems.push(format!(
                        "{}: a proportion needs eventName or conversion: true",
                        fields.place
                    ));
                }
            } else {
                if !fields.has("eventName") {
                    problems.push(format!(
                        "{}: eventName is required for a mean",
                        fields.place
                    ));
                }
                check_aggregate(
                    fields,
                    &events,
                    &[
                        Aggregate::Count,
                        Aggregate::Sum,
                        Aggregate::Max,
                        Aggregate::Mean,
                    ],
                    problems,
                );
            }
            (Some(events), None)
        }
        None => (None, None),
    }
}

/// A metric's `cap`, if any (none on a proportion).
fn cap(fields: &Fields, kind: Option<MetricKind>, problems: &mut Vec<String>) -> Option<Cap> {
    match fields.get("cap") {
        None => None,
        Some(_) if kind == Some(MetricKind::Proportion) => {
            problems.push(format!(
                "{}: cap is not allowed on a proportion",
                fields.place
            ));
            None
        }
        Some(Value::Object(inner)) => {
            let cap = Fields {
                place: fields.place.clone(),
                prefix: "cap.",
                map: inner,
            };
            match (cap.has("value"), cap.has("percentile")) {
                (true, false) => cap
                    .number("value", |x| x > 0.0, "above 0", problems)
                    .map(Cap::Value),
                (false, true) => cap
                    .number(
                        "percentile",
                        |p| p > 0.0 && p < 1.0,
                        "between 0 and 1 (both excluded)",
                        problems,
                    )
                    .map(Cap::Percentile),
                _ => {
                    problems.push(format!(
                        "{}: cap must give exactly one of value and percentile",
                        fields.place
                    ));
                    None
                }
            }
        }
        Some(other) => {
            problems.push(format!(
                "{}: cap must be {{\"value\": x}} or {{\"percentile\": p}}, not {other}",
                fields.place
            ));
            None
        }
    }
}

/// Whether higher values of a metric are better (`better`, by default higher).
fn higher_is_better(fields: &Fields, problems: &mut Vec<String>) -> bool {
    match fields.get("better") {
        None => true,
        Some(Value::String(b)) if b == "higher" => true,
        Some(Value::String(b)) if b == "lower" => false,
        Some(other) => {
            problems.push(format!(
                "{}: better must be \"higher\" or \"lower\", not {other}",
                fields.place
            ));
            true
        }
    }
}

/// The snapshot's `metrics` (absent: none) and the ids it defines (also those of
/// definitions with problems, so that an experiment naming one is not reported again).
pub(crate) fn parse_metrics(
    raw: Option<&Value>,
    problems: &mut Vec<String>,
) -> (Vec<Metric>, HashSet<String>) {
    let mut metrics = Vec::new();
    let mut ids = HashSet::new();
    let list = match raw {
        None | Some(Value::Null) => return (metrics, ids),
        Some(Value::Array(list)) => list,
        Some(other) => {
            problems.push(format!("metrics: must be a list, not {other}"));
            return (metrics, ids);
        }
    };
    for (i, value) in list.iter().enumerate() {
        let place = format!("metrics[{i}]");
        if let Some(id) = value.get("id").and_then(Value::as_str)
            && !ids.insert(id.to_owned())
        {
            problems.push(format!("{place} ({id}): duplicate metric id"));
        }
        metrics.extend(metric(&place, value, problems));
    }
    (metrics, ids)
}

/// An experiment's `metrics` (absent: none), each naming one of `defined` or the default
/// goal. `place` is the experiment's.
pub(crate) fn parse_refs(
    place: &str,
    raw: Option<&Value>,
    defined: &HashSet<String>,
    problems: &mut Vec<String>,
) -> Vec<MetricRef> {
    let list = match raw {
        None | Some(Value::Null) => return Vec::new(),
        Some(Value::Array(list)) => list,
        Some(other) => {
            problems.push(format!("{place}: metrics must be a list, not {other}"));
            return Vec::new();
        }
    };
    let mut refs: Vec<MetricRef> = Vec::with_capacity(list.len());
    let mut seen = HashSet::new();
    for (j, value) in list.iter().enumerate() {
        let id = value.get("id").and_then(Value::as_str).unwrap_or_default();
        let rplace = format!("{place}.metrics[{j}] ({id})");
        let Some(map) = value.as_object() else {
            problems.push(format!("{rplace}: must be an object, not {value}"));
            continue;
        };
        let fields = Fields {
            place: rplace.clone(),
            prefix: "",
            map,
        };
        let id_ok = if id.is_empty() {
            problems.push(format!("{rplace}: id must be a metric's id"));
            false
        } else if id != DEFAULT_GOAL && !defined.contains(id) {
            problems.push(format!("{rplace}: unknown metric {id}"));
            false
        } else if !seen.insert(id) {
            problems.push(format!("{rplace}: metric {id} listed twice"));
            false
        } else {
            true
        };
        let role = match fields.get("role") {
            Some(Value::String(r)) => Role::parse(r),
            _ => None,
        };
        if role.is_none() {
            problems.push(format!(
                "{rplace}: role must be goal, secondary or guardrail, not {}",
                fields
                    .get("role")
                    .map_or_else(|| "missing".to_owned(), ToString::to_string)
            ));
        }
        if let (true, Some(role)) = (id_ok, role) {
            refs.push(MetricRef {
                id: id.to_owned(),
                role,
            });
        }
    }
    // Without a goal the experiment takes the default goal first: listed in another role
    // it would be there twice.
    if !refs.iter().any(|r| r.role == Role::Goal)
        && let Some(r) = refs.iter().find(|r| r.id == DEFAULT_GOAL)
    {
        problems.push(format!(
            "{place}: metric {DEFAULT_GOAL} is listed as {} but the experiment has no goal, \
             so {DEFAULT_GOAL} is its default goal too; list a goal, or {DEFAULT_GOAL} as \
             the goal",
            r.role.as_str()
        ));
    }
    refs
}

#[cfg(test)]
#[path = "metric_tests.rs"]
mod tests;
