//! The reader of a definition's JSON objects: each field read with its type checked, and
//! every problem reported with the place of the object.

use serde_json::{Map, Value};

/// Reads the fields of one JSON object, each problem reported with `place`. A field given
/// as `null` is taken as absent, as for the rest of the snapshot; unknown fields are
/// ignored, as for experiments.
pub(super) struct Fields<'a> {
    pub(super) place: String,
    /// How the object's fields are named in a problem: `numerator.` for a ratio's.
    pub(super) prefix: &'static str,
    pub(super) map: &'a Map<String, Value>,
}

impl<'a> Fields<'a> {
    pub(super) fn get(&self, name: &str) -> Option<&'a Value> {
        self.map.get(name).filter(|v| !v.is_null())
    }

    pub(super) fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    pub(super) fn string(&self, name: &str, problems: &mut Vec<String>) -> Option<&'a str> {
        match self.get(name)? {
            Value::String(s) if !s.is_empty() => Some(s),
            other => {
                problems.push(format!(
                    "{}: {}{name} must be a non-empty string, not {other}",
                    self.place, self.prefix
                ));
                None
            }
        }
    }

    pub(super) fn boolean(&self, name: &str, problems: &mut Vec<String>) -> bool {
        match self.get(name) {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                problems.push(format!(
                    "{}: {}{name} must be true or false, not {other}",
                    self.place, self.prefix
                ));
                false
            }
        }
    }

    /// A number within `ok`, described by `range` in the problem.
    pub(super) fn number(
        &self,
        name: &str,
        ok: impl Fn(f64) -> bool,
        range: &str,
        problems: &mut Vec<String>,
    ) -> Option<f64> {
        let value = self.get(name)?;
        let number = value.as_f64().filter(|x| x.is_finite() && ok(*x));
        if number.is_none() {
            problems.push(format!(
                "{}: {}{name} must be a number {range}, not {value}",
                self.place, self.prefix
            ));
        }
        number
    }

    pub(super) fn refuse(&self, name: &str, why: &str, problems: &mut Vec<String>) {
        if self.has(name) {
            problems.push(format!("{}: {}{name} {why}", self.place, self.prefix));
        }
    }
}
