//! The experiments snapshot, format v1: the model, its validation and the live gate.
//!
//! A [`Snapshot`] only exists validated: every problem of a file is reported at once, with
//! its place, and a file with any problem yields no snapshot at all.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::event::MAX_PHASE;
use crate::key::PublicKey;
use crate::metric::{self, DEFAULT_GOAL_METRIC, Metric, MetricRef, Role};

/// Tolerance on the sum of a experiment's variant weights.
const WEIGHT_SUM_TOLERANCE: f64 = 1e-6;
/// The longest conversion window: a year and a day.
pub const MAX_CONVERSION_WINDOW_HOURS: f64 = 8_808.0;
/// The largest always-valid tuning N*, far beyond any experiment's visitors.
pub const MAX_SEQUENTIAL_TUNING: f64 = 1e12;

/// Life-cycle status of an experiment. Only `live` ones pass the live gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Draft,
    Live,
    Paused,
    Ended,
}

/// A variant, serialized exactly as the contract shows it.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct Variant {
    pub id: String,
    /// Kept as the snapshot wrote it (`50` stays `50`, never `50.0`).
    pub weight: serde_json::Number,
    pub control: bool,
    /// Part name to text, in the snapshot's order.
    pub parts: IndexMap<String, String>,
}

#[derive(Clone, Debug)]
pub struct Experiment {
    pub id: String,
    /// Starts at 1; raised by whoever changes the experiment's variants or weights, so
    /// that no result pools visitors assigned under different weights. The SDK
    /// re-randomizes its visitors in a new phase, and results are per phase.
    pub phase: u32,
    pub status: Status,
    pub start_at: Option<OffsetDateTime>,
    pub end_at: Option<OffsetDateTime>,
    pub variants: Vec<Variant>,
    /// Hours after a visitor's first exposure in which their conversion counts; `None`:
    /// until the phase ends. Read by the results views, never served to browsers.
    pub conversion_window_hours: Option<f64>,
    /// The always-valid test's tuning N* for this experiment; `None`: the deployment's
    /// default when the phase starts. Never served to browsers.
    pub sequential_tuning: Option<f64>,
    /// The metrics it is judged by, as listed (each one of the snapshot's, or the default
    /// goal); see [`Snapshot::metrics_of`]. Never served to browsers.
    pub metrics: Vec<MetricRef>,
}

impl Experiment {
    /// The live gate: status `live`, and `start_at <= now < end_at` where those are given.
    pub fn is_live(&self, now: OffsetDateTime) -> bool {
        self.status == Status::Live
            && self.start_at.is_none_or(|start| now >= start)
            && self.end_at.is_none_or(|end| now < end)
    }
}

/// What one public key may see and where it may be used from.
#[derive(Clone, Debug)]
pub struct KeyEntry {
    pub public_key: PublicKey,
    /// Indexes into [`Snapshot::experiments`], in the key's order.
    pub experiments: Vec<usize>,
    /// `None`: any origin.
    pub allowed_origins: Option<Vec<String>>,
    /// Events per second the ingest accepts for this key (each replica its share);
    /// `None`: the ingest's default.
    pub max_events_per_second: Option<f64>,
}

impl KeyEntry {
    /// Whether a request with this `Origin` header's bytes may use the key: any, unless
    /// it lists `allowedOrigins` (which bytes that are not text never match).
    pub fn allows_origin(&self, origin: &[u8]) -> bool {
        self.allowed_origins
            .as_ref()
            .is_none_or(|allowed| allowed.iter().any(|o| o.as_bytes() == origin))
    }
}

/// A validated snapshot.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// The file's `version`, as text (a number is written in its JSON form).
    pub version: String,
    pub experiments: Vec<Arc<Experiment>>,
    /// The metric definitions, in the snapshot's order. Never served to browsers.
    pub metrics: Vec<Metric>,
    keys: HashMap<String, KeyEntry>,
}

impl Snapshot {
    pub fn key(&self, public_key: &str) -> Option<&KeyEntry> {
        self.keys.get(public_key)
    }

    pub fn keys(&self) -> impl Iterator<Item = &KeyEntry> {
        self.keys.values()
    }

    /// The metrics of `experiment` with their roles, in order: its list, after the
    /// built-in default goal when the list has no goal (so an experiment without a list
    /// has just that).
    pub fn metrics_of(&self, experiment: &Experiment) -> Vec<(Role, &Metric)> {
        let mut out = Vec::with_capacity(experiment.metrics.len() + 1);
        if !experiment.metrics.iter().any(|m| m.role == Role::Goal) {
            out.push((Role::Goal, &*DEFAULT_GOAL_METRIC));
        }
        for listed in &experiment.metrics {
            let found = if listed.id == metric::DEFAULT_GOAL {
                Some(&*DEFAULT_GOAL_METRIC)
            } else {
                self.metrics.iter().find(|m| m.id == listed.id)
            };
            // Validation makes every listed id found.
            out.extend(found.map(|m| (listed.role, m)));
        }
        out
    }

    /// The phase live now of `experiment_id`, one of `key`'s experiments; 1 for another.
    pub fn phase_of(&self, key: &KeyEntry, experiment_id: &str) -> u32 {
        key.experiments
            .iter()
            .map(|&i| &self.experiments[i])
            .find(|e| e.id == experiment_id)
            .map_or(1, |e| e.phase)
    }

    /// Why `next` may not follow this snapshot: an experiment whose variants, their order
    /// or their weights changed while its phase stayed (visitors assigned under both
    /// weights would be pooled), or whose phase went back, or rose under the same
    /// `version` (the stored definitions are kept per version: the earlier phase's would be
    /// overwritten). Empty: it may.
    pub fn phase_problems(&self, next: &Snapshot) -> Vec<String> {
        let arms = |e: &Experiment| -> Vec<(String, f64)> {
            e.variants
                .iter()
                .map(|v| (v.id.clone(), v.weight.as_f64().unwrap_or(0.0)))
                .collect()
        };
        let mut problems = Vec::new();
        for new in &next.experiments {
            let Some(old) = self.experiments.iter().find(|e| e.id == new.id) else {
                continue;
            };
            if new.phase < old.phase {
                problems.push(format!(
                    "{}: phase went back from {} to {}",
                    new.id, old.phase, new.phase
                ));
            } else if new.phase > old.phase && next.version == self.version {
                problems.push(format!(
                    "{}: phase raised from {} to {} under the same version {:?}; a new phase \
                     needs a new \"version\"",
                    new.id, old.phase, new.phase, next.version
                ));
            } else if new.phase == old.phase && arms(old) != arms(new) {
                problems.push(format!(
                    "{}: variants or weights changed in phase {}; a change of them starts a \
                     new phase (set \"phase\": {})",
                    new.id,
                    old.phase,
                    old.phase + 1
                ));
            }
        }
        problems
    }

    /// Parses and validates a snapshot document.
    pub fn from_json(bytes: &[u8]) -> Result<Self, SnapshotError> {
        let raw: RawSnapshot = serde_json::from_slice(bytes).map_err(|e| SnapshotError {
            problems: vec![format!("not a snapshot document: {e}")],
        })?;
        raw.validate()
    }
}

/// Every problem found in a snapshot document, each naming its place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotError {
    pub problems: Vec<String>,
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} problem(s):", self.problems.len())?;
        for problem in &self.problems {
            write!(
                f,
                "
  - {problem}"
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for SnapshotError {}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawSnapshot {
    version: serde_json::Value,
    experiments: Vec<RawExperiment>,
    keys: Vec<RawKey>,
    /// Checked field by field ([`metric`]), so that a problem names the metric and field.
    metrics: Option<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawExperiment {
    id: String,
    phase: Option<serde_json::Number>,
    status: Status,
    start_at: Option<String>,
    end_at: Option<String>,
    variants: Vec<Variant>,
    conversion_window_hours: Option<serde_json::Number>,
    sequential_tuning: Option<serde_json::Number>,
    metrics: Option<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawKey {
    public_key: String,
    experiments: Vec<String>,
    allowed_origins: Option<Vec<String>>,
    max_events_per_second: Option<f64>,
}

fn is_well_formed_id(id: &str, prefix: &str) -> bool {
    id.len() > prefix.len() && id.starts_with(prefix) && id.len() <= 256
}

/// `scheme://host[:port]` with an http(s) scheme and nothing after the authority.
fn is_origin(origin: &str) -> bool {
    let Some((scheme, authority)) = origin.split_once("://") else {
        return false;
    };
    matches!(scheme, "http" | "https")
        && !authority.is_empty()
        && authority
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'))
}

fn parse_time(
    place: &str,
    raw: Option<&str>,
    problems: &mut Vec<String>,
) -> Option<OffsetDateTime> {
    let raw = raw?;
    match OffsetDateTime::parse(raw, &Rfc3339) {
        Ok(t) => Some(t),
        Err(e) => {
            problems.push(format!("{place}: {raw:?} is not an RFC 3339 time ({e})"));
            None
        }
    }
}

impl RawSnapshot {
    fn validate(self) -> Result<Snapshot, SnapshotError> {
        let mut problems = Vec::new();
        let version = match &self.version {
            serde_json::Value::String(s) if !s.is_empty() => s.clone(),
            serde_json::Value::Number(n) => n.to_string(),
            _ => {
                problems.push("version: must be a non-empty string or a number".into());
                String::new()
            }
        };

        let (metrics, metric_ids) = metric::parse_metrics(self.metrics.as_ref(), &mut problems);

        let mut experiments = Vec::with_capacity(self.experiments.len());
        let mut index_of = HashMap::new();
        let mut variant_ids = HashSet::new();
        for (i, e) in self.experiments.into_iter().enumerate() {
            let place = format!("experiments[{i}] ({})", e.id);
            if index_of.insert(e.id.clone(), i).is_some() {
                problems.push(format!("{place}: duplicate experiment id"));
            }
            let checked = experiment(&place, e, &metric_ids, &mut variant_ids, &mut problems);
            experiments.push(Arc::new(checked));
        }

        let mut keys = HashMap::with_capacity(self.keys.len());
        for (i, k) in self.keys.into_iter().enumerate() {
            let place = format!("keys[{i}] ({})", k.public_key);
            let public_key = match PublicKey::parse(&k.public_key) {
                Ok(pk) => pk,
                Err(e) => {
                    problems.push(format!("{place}: {e}"));
                    continue;
                }
            };
            let mut indexes = Vec::with_capacity(k.experiments.len());
            for id in &k.experiments {
                match index_of.get(id) {
                    Some(&idx) if !indexes.contains(&idx) => indexes.push(idx),
                    Some(_) => problems.push(format!("{place}: experiment {id} listed twice")),
                    None => problems.push(format!("{place}: unknown experiment {id}")),
                }
            }
            for origin in k.allowed_origins.iter().flatten() {
                if !is_origin(origin) {
                    problems.push(format!(
                        "{place}: {origin:?} is not an origin (scheme://host[:port], no path)"
                    ));
                }
            }
            if let Some(rate) = k.max_events_per_second
                && !(rate.is_finite() && rate > 0.0)
            {
                problems.push(format!(
                    "{place}: maxEventsPerSecond must be a positive number, not {rate}"
                ));
            }
            let entry = KeyEntry {
                public_key,
                experiments: indexes,
                allowed_origins: k.allowed_origins,
                max_events_per_second: k.max_events_per_second,
            };
            if keys.insert(k.public_key, entry).is_some() {
                problems.push(format!("{place}: duplicate public key"));
            }
        }

        if problems.is_empty() {
            Ok(Snapshot {
                version,
                experiments,
                metrics,
                keys,
            })
        } else {
            Err(SnapshotError { problems })
        }
    }
}

/// One experiment of the snapshot at `place`, checked: its problems reported. Its variant
/// ids go into `variant_ids` (unique across the snapshot).
fn experiment(
    place: &str,
    e: RawExperiment,
    metric_ids: &HashSet<String>,
    variant_ids: &mut HashSet<String>,
    problems: &mut Vec<String>,
) -> Experiment {
    if !is_well_formed_id(&e.id, "exp_") {
        problems.push(format!(
            "{place}: id must be exp_ followed by 1 to 252 characters"
        ));
    }
    let start_at = parse_time(&format!("{place}.startAt"), e.start_at.as_deref(), problems);
    let end_at = parse_time(&format!("{place}.endAt"), e.end_at.as_deref(), problems);
    if let (Some(s), Some(t)) = (start_at, end_at)
        && s >= t
    {
        problems.push(format!("{place}: startAt must be before endAt"));
    }
    if e.variants.is_empty() {
        problems.push(format!("{place}: needs at least one variant"));
    }
    let mut sum = 0.0;
    let mut controls = 0;
    for (j, v) in e.variants.iter().enumerate() {
        let vplace = format!("{place}.variants[{j}] ({})", v.id);
        if !is_well_formed_id(&v.id, "var_") {
            problems.push(format!(
                "{vplace}: id must be var_ followed by 1 to 252 characters"
            ));
        }
        if !variant_ids.insert(v.id.clone()) {
            problems.push(format!("{vplace}: duplicate variant id"));
        }
        match v.weight.as_f64() {
            Some(w) if w.is_finite() && w >= 0.0 => sum += w,
            _ => problems.push(format!("{vplace}: weight must be a finite number >= 0")),
        }
        controls += usize::from(v.control);
    }
    if !e.variants.is_empty() && (sum - 100.0).abs() > WEIGHT_SUM_TOLERANCE {
        problems.push(format!("{place}: variant weights sum to {sum}, not 100"));
    }
    if controls > 1 {
        problems.push(format!(
            "{place}: {controls} control variants, at most one allowed"
        ));
    }
    let phase = match &e.phase {
        None => 1,
        Some(n) => match n.as_u64().and_then(|p| u32::try_from(p).ok()) {
            Some(p @ 1..=MAX_PHASE) => p,
            _ => {
                problems.push(format!(
                    "{place}: phase must be a whole number from 1 to {MAX_PHASE}, not {n}"
                ));
                1
            }
        },
    };
    let mut positive = |field: &str, n: &Option<serde_json::Number>, max: f64| {
        let value = n.as_ref()?.as_f64().filter(|v| *v > 0.0 && *v <= max);
        if value.is_none() {
            problems.push(format!(
                "{place}: {field} must be a number above 0 and at most {max}, not {}",
                n.as_ref().map_or_else(String::new, ToString::to_string)
            ));
        }
        value
    };
    let conversion_window_hours = positive(
        "conversionWindowHours",
        &e.conversion_window_hours,
        MAX_CONVERSION_WINDOW_HOURS,
    );
    let sequential_tuning = positive(
        "sequentialTuning",
        &e.sequential_tuning,
        MAX_SEQUENTIAL_TUNING,
    );
    let metrics = metric::parse_refs(place, e.metrics.as_ref(), metric_ids, problems);
    Experiment {
        id: e.id,
        phase,
        status: e.status,
        start_at,
        end_at,
        variants: e.variants,
        conversion_window_hours,
        sequential_tuning,
        metrics,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    fn doc(experiments: serde_json::Value, keys: serde_json::Value) -> Vec<u8> {
        serde_json::json!({ "version": 7, "experiments": experiments, "keys": keys })
            .to_string()
            .into_bytes()
    }

    fn variant(id: &str, weight: f64, control: bool) -> serde_json::Value {
        serde_json::json!({ "id": id, "weight": weight, "control": control, "parts": { "h": "x" } })
    }

    #[test]
    fn valid_snapshot_indexes_keys_in_order() {
        let s = Snapshot::from_json(&doc(
            serde_json::json!([
                { "id": "exp_a", "status": "live", "variants": [variant("var_a1", 100.0, true)] },
                { "id": "exp_b", "status": "draft", "variants": [variant("var_b1", 100.0, false)] }
            ]),
            serde_json::json!([{ "publicKey": "pk_1", "experiments": ["exp_b", "exp_a"] }]),
        ))
        .expect("valid");
        assert_eq!(s.version, "7");
        assert_eq!(s.key("pk_1").expect("key").experiments, vec![1, 0]);
        assert!(s.key("pk_2").is_none());
    }

    #[test]
    fn reports_every_problem_with_its_place() {
        let err = Snapshot::from_json(&doc(
            serde_json::json!([
                { "id": "exp_a", "status": "live", "variants": [
                    variant("var_a1", 60.0, true), variant("var_a2", 30.0, true)] },
                { "id": "bad", "status": "live", "startAt": "2026-02-01T00:00:00Z",
                  "endAt": "2026-01-01T00:00:00Z", "variants": [] },
                { "id": "exp_a", "status": "live", "variants": [variant("var_a1", 100.0, false)] }
            ]),
            serde_json::json!([
                { "publicKey": "nokey", "experiments": [] },
                { "publicKey": "pk_1", "experiments": ["exp_zz"], "allowedOrigins": ["https://a.com/path"] },
                { "publicKey": "pk_2", "experiments": [], "maxEventsPerSecond": 0 }
            ]),
        ))
        .expect_err("invalid");
        let all = err.problems.join("\n");
        for needle in [
            "experiments[0] (exp_a): variant weights sum to 90",
            "experiments[0] (exp_a): 2 control variants",
            "experiments[1] (bad): id must be exp_",
            "experiments[1] (bad): startAt must be before endAt",
            "experiments[1] (bad): needs at least one variant",
            "experiments[2] (exp_a): duplicate experiment id",
            "experiments[2] (exp_a).variants[0] (var_a1): duplicate variant id",
            "keys[0] (nokey): a public key starts with pk_",
            "keys[1] (pk_1): unknown experiment exp_zz",
            "keys[1] (pk_1): \"https://a.com/path\" is not an origin",
            "keys[2] (pk_2): maxEventsPerSecond must be a positive number, not 0",
        ] {
            assert!(all.contains(needle), "missing {needle:?} in\n{all}");
        }
        assert_eq!(err.problems.len(), 11, "{all}");
    }

    #[test]
    fn a_change_of_weights_or_variants_needs_a_new_phase() {
        let of = |phase: Option<u32>, weights: [u32; 2], ids: [&str; 2]| {
            let mut e = serde_json::json!({ "id": "exp_a", "status": "live", "variants": [
                { "id": ids[0], "weight": weights[0], "control": true, "parts": {} },
                { "id": ids[1], "weight": weights[1], "control": false, "parts": {} }] });
            if let Some(phase) = phase {
                e["phase"] = phase.into();
            }
            Snapshot::from_json(&doc(serde_json::json!([e]), serde_json::json!([]))).expect("valid")
        };
        let first = of(None, [50, 50], ["var_a", "var_b"]);
        assert_eq!(first.experiments[0].phase, 1);
        // Texts, status, schedule: anything but the arms may change within a phase.
        assert!(
            first
                .phase_problems(&of(Some(1), [50, 50], ["var_a", "var_b"]))
                .is_empty()
        );
        let problems = first.phase_problems(&of(None, [10, 90], ["var_a", "var_b"]));
        assert_eq!(
            problems,
            [
                "exp_a: variants or weights changed in phase 1; a change of them starts a new \
              phase (set \"phase\": 2)"
            ]
        );
        assert_eq!(
            first
                .phase_problems(&of(None, [50, 50], ["var_a", "var_c"]))
                .len(),
            1
        );
        assert_eq!(
            first
                .phase_problems(&of(None, [50, 50], ["var_b", "var_a"]))
                .len(),
            1
        );
        // A new phase under the same version would overwrite the stored definitions of
        // the earlier one; under a new version it may follow.
        let second = of(Some(2), [10, 90], ["var_a", "var_b"]);
        assert_eq!(
            first.phase_problems(&second),
            [
                "exp_a: phase raised from 1 to 2 under the same version \"7\"; a new phase \
              needs a new \"version\""
            ]
        );
        let mut second = second;
        second.version = "8".into();
        assert!(first.phase_problems(&second).is_empty());
        assert_eq!(
            second.phase_problems(&first),
            ["exp_a: phase went back from 2 to 1"]
        );
        for bad in ["0", "-1", "1.5", "\"2\"", "1000001"] {
            let text = format!(
                r#"{{"version":1,"experiments":[{{"id":"exp_a","phase":{bad},"status":"live",
                "variants":[{{"id":"var_a","weight":100,"control":true,"parts":{{}}}}]}}],"keys":[]}}"#
            );
            assert!(Snapshot::from_json(text.as_bytes()).is_err(), "{bad}");
        }
    }

    #[test]
    fn conversion_window_and_tuning_are_positive_numbers() {
        let of = |field: &str, value: serde_json::Value| {
            let mut e = serde_json::json!({ "id": "exp_a", "status": "live",
                "variants": [variant("var_a", 100.0, true)] });
            e[field] = value;
            Snapshot::from_json(&doc(serde_json::json!([e]), serde_json::json!([])))
        };
        let s = of("conversionWindowHours", 72.into()).expect("valid");
        assert_eq!(s.experiments[0].conversion_window_hours, Some(72.0));
        assert_eq!(s.experiments[0].sequential_tuning, None);
        let s = of("sequentialTuning", 2500.5.into()).expect("valid");
        assert_eq!(s.experiments[0].sequential_tuning, Some(2500.5));
        assert_eq!(s.experiments[0].conversion_window_hours, None);
        for field in ["conversionWindowHours", "sequentialTuning"] {
            for bad in [
                serde_json::json!(0),
                serde_json::json!(-1),
                serde_json::json!(1e13),
            ] {
                let err = of(field, bad.clone()).expect_err("invalid");
                assert!(
                    err.problems[0].starts_with(&format!(
                        "experiments[0] (exp_a): {field} must be a number above 0"
                    )),
                    "{field} {bad}: {:?}",
                    err.problems
                );
            }
            assert!(of(field, "24".into()).is_err(), "{field} as a string");
        }
    }

    #[test]
    fn not_json_is_one_problem() {
        let err = Snapshot::from_json(b"{nope").expect_err("invalid");
        assert_eq!(err.problems.len(), 1);
        assert!(err.problems[0].starts_with("not a snapshot document"));
    }

    #[test]
    fn live_gate_respects_status_and_half_open_schedule() {
        let start = datetime!(2026-01-01 00:00 UTC);
        let end = datetime!(2026-02-01 00:00 UTC);
        let mut e = Experiment {
            id: "exp_x".into(),
            phase: 1,
            status: Status::Live,
            start_at: Some(start),
            end_at: Some(end),
            variants: vec![],
            conversion_window_hours: None,
            sequential_tuning: None,
            metrics: vec![],
        };
        assert!(!e.is_live(start - time::Duration::nanoseconds(1)));
        assert!(e.is_live(start));
        assert!(e.is_live(end - time::Duration::nanoseconds(1)));
        assert!(!e.is_live(end));
        for status in [Status::Draft, Status::Paused, Status::Ended] {
            e.status = status;
            assert!(!e.is_live(start), "{status:?} passed the gate");
        }
        e.status = Status::Live;
        e.start_at = None;
        e.end_at = None;
        assert!(e.is_live(OffsetDateTime::UNIX_EPOCH));
    }
}
