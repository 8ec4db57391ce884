//! Test data and names: snapshot files, client batches, event messages and the unique
//! names that keep tests apart. Every name made here carries a random suffix, so no two
//! tests ever share a topic, group or database.

use std::path::PathBuf;

/// `prefix` followed by a random suffix of letters and digits.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}{}", uuid::Uuid::new_v4().simple())
}

/// Names one consumer's topic, dead-letter topic, group and database.
#[derive(Clone, Debug)]
pub struct ConsumerNames {
    pub topic: String,
    pub dlq_topic: String,
    pub group: String,
    pub database: String,
}

impl ConsumerNames {
    pub fn unique() -> Self {
        Self {
            topic: unique("events-"),
            dlq_topic: unique("dlq-"),
            group: unique("group-"),
            database: unique("test_"),
        }
    }
}

/// A snapshot file in a temporary folder that lives as long as this value.
pub struct SnapshotFile {
    _dir: tempfile::TempDir,
    pub path: PathBuf,
}

impl SnapshotFile {
    pub fn new(document: &serde_json::Value) -> Self {
        let dir = tempfile::tempdir().expect("temporary folder");
        let path = dir.path().join("experiments.json");
        std::fs::write(&path, document.to_string()).expect("snapshot written");
        Self { _dir: dir, path }
    }

    /// Replaces the file by rename, as a deploy tool would.
    pub fn replace(&self, document: &serde_json::Value) {
        let tmp = self.path.with_extension("tmp");
        std::fs::write(&tmp, document.to_string()).expect("snapshot written");
        std::fs::rename(&tmp, &self.path).expect("snapshot renamed");
    }
}

/// A snapshot of one live experiment, `exp_1` (one variant, `var_1`), for one key.
pub fn one_experiment_snapshot(public_key: &str) -> SnapshotFile {
    SnapshotFile::new(&serde_json::json!({
        "version": 1,
        "experiments": [{ "id": "exp_1", "status": "live", "variants": [
            { "id": "var_1", "weight": 100, "control": true, "parts": {} }] }],
        "keys": [{ "publicKey": public_key, "experiments": ["exp_1"] }]
    }))
}

/// A client's batch of `n` impressions of `exp_1` with client-chosen ids, and those ids.
pub fn client_batch(session: &str, n: usize) -> (serde_json::Value, Vec<uuid::Uuid>) {
    let ids: Vec<uuid::Uuid> = (0..n).map(|_| uuid::Uuid::new_v4()).collect();
    let events: Vec<_> = ids
        .iter()
        .map(|id| {
            serde_json::json!({ "eventId": id.to_string(), "eventName": "impression",
                                "experimentId": "exp_1", "sessionId": session })
        })
        .collect();
    (serde_json::json!({ "events": events }), ids)
}

/// A v1 event message, as the ingest writes it.
pub fn event_message(public_key: &str, session: &str, name: &str) -> contract::event::EventMessage {
    let envelope = contract::event::Envelope::new(
        contract::event::now_millis(),
        public_key.into(),
        "test".into(),
        None,
    );
    contract::event::EventMessage::from_client(
        &serde_json::json!({ "eventName": name, "experimentId": "exp_1", "sessionId": session }),
        &envelope,
    )
    .expect("valid event")
}
