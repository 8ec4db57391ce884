//! Responses prepared at snapshot load: each experiment's JSON is serialized once, so a
//! request only picks the experiments its key, filter and mode let through and joins
//! their bytes.

use contract::snapshot::{KeyEntry, Snapshot, Variant};
use http_kit::cors::HasSnapshot;
use serde::Serialize;
use time::OffsetDateTime;

pub struct Prepared {
    snapshot: Snapshot,
    /// `{"id":…,"phase":…,"variants":[…]}` of each experiment, indexed as `snapshot.experiments`.
    experiment_json: Vec<Vec<u8>>,
}

#[derive(Serialize)]
struct ExperimentOut<'a> {
    id: &'a str,
    /// An extension of the contract: the experiment's phase, in which the SDK assigns.
    phase: u32,
    variants: &'a [Variant],
}

/// Which of a key's experiments a request asks for.
pub struct Selection<'a> {
    /// `None`: all of the key's experiments.
    pub ids: Option<Vec<&'a str>>,
    /// Test mode: the live gate is bypassed.
    pub test_mode: bool,
    pub now: OffsetDateTime,
}

impl Selection<'_> {
    /// Parses `X-experiment-ids`: comma-separated, blanks around ids ignored; an empty
    /// or blank list is no filter.
    pub fn parse_ids(raw: Option<&str>) -> Option<Vec<&str>> {
        let ids: Vec<&str> = raw?
            .split(',')
            .map(str::trim)
            .filter(|id| !id.is_empty())
            .collect();
        (!ids.is_empty()).then_some(ids)
    }
}

impl Prepared {
    pub fn new(snapshot: Snapshot) -> Self {
        let experiment_json = snapshot
            .experiments
            .iter()
            .map(|e| {
                serde_json::to_vec(&ExperimentOut {
                    id: &e.id,
                    phase: e.phase,
                    variants: &e.variants,
                })
                .unwrap_or_default()
            })
            .collect();
        Self {
            snapshot,
            experiment_json,
        }
    }

    /// The response body for `entry`: its experiments in the key's order, those the
    /// selection lets through.
    pub fn render(&self, entry: &KeyEntry, selection: &Selection<'_>) -> Vec<u8> {
        let mut body = Vec::with_capacity(256);
        body.extend_from_slice(b"{\"experiments\":[");
        let mut first = true;
        for &index in &entry.experiments {
            let experiment = &self.snapshot.experiments[index];
            let wanted = selection
                .ids
                .as_ref()
                .is_none_or(|ids| ids.contains(&experiment.id.as_str()));
            if wanted && (selection.test_mode || experiment.is_live(selection.now)) {
                if !first {
                    body.push(b',');
                }
                first = false;
                body.extend_from_slice(&self.experiment_json[index]);
            }
        }
        body.extend_from_slice(b"]}");
        body
    }
}

impl HasSnapshot for Prepared {
    fn snapshot(&self) -> &Snapshot {
        &self.snapshot
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_parsing_trims_and_treats_blank_as_none() {
        assert_eq!(Selection::parse_ids(None), None);
        assert_eq!(Selection::parse_ids(Some("")), None);
        assert_eq!(Selection::parse_ids(Some(" , ,")), None);
        assert_eq!(
            Selection::parse_ids(Some(" exp_a ,exp_b,, exp_c")),
            Some(vec!["exp_a", "exp_b", "exp_c"])
        );
    }
}
