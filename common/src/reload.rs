//! Keeps a value built from the snapshot file current: the file is read at start (an
//! invalid file is then fatal) and polled afterwards; a changed file that validates
//! replaces the value atomically, an invalid one is logged and counted while the last
//! good value keeps serving.
//!
//! Polling compares the file's bytes, so a replacement by rename and a rewrite in place
//! are both seen, whatever the file system's timestamp granularity.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use arc_swap::ArcSwap;
use tokio::task::JoinHandle;

use crate::snapshot::Snapshot;

/// How the watched value is made from a validated snapshot.
pub type Build<T> = Arc<dyn Fn(Snapshot) -> T + Send + Sync>;

/// Where the snapshot comes from and how often to look again.
#[derive(Clone, Debug)]
pub struct WatchOptions {
    pub path: PathBuf,
    pub interval: Duration,
    /// Prefix of the metric names, the service's name (`ingest`, `config_api`).
    pub metrics_prefix: &'static str,
}

/// Loads the snapshot once and spawns the task that reloads it. Fails when the file
/// cannot be read or is invalid, with every problem in the error.
pub async fn load_and_watch<T: Send + Sync + 'static>(
    options: WatchOptions,
    build: Build<T>,
) -> anyhow::Result<(Arc<ArcSwap<T>>, JoinHandle<()>)> {
    let bytes = read(&options.path).await?;
    let snapshot = Snapshot::from_json(&bytes)
        .with_context(|| format!("invalid snapshot {}", options.path.display()))?;
    tracing::info!(path = %options.path.display(), version = %snapshot.version, "Snapshot loaded.");
    record_loaded(options.metrics_prefix, &snapshot);
    let current = Arc::new(ArcSwap::from_pointee(build(snapshot)));
    let task = tokio::spawn(watch(options, bytes, build, current.clone()));
    Ok((current, task))
}

async fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    tokio::fs::read(path)
        .await
        .with_context(|| format!("cannot read snapshot {}", path.display()))
}

fn record_loaded(prefix: &str, snapshot: &Snapshot) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    metrics::gauge!(format!("{prefix}_snapshot_loaded_timestamp_seconds")).set(now);
    metrics::gauge!(format!("{prefix}_snapshot_info"), "version" => snapshot.version.clone())
        .set(1.0);
}

async fn watch<T: Send + Sync + 'static>(
    options: WatchOptions,
    mut last: Vec<u8>,
    build: Build<T>,
    current: Arc<ArcSwap<T>>,
) {
    let reloads = format!("{}_snapshot_reloads_total", options.metrics_prefix);
    let mut ticker = tokio::time::interval(options.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let bytes = match read(&options.path).await {
            Ok(bytes) => bytes,
            Err(e) => {
                // A rename in progress or a deleted file: keep serving, look again later.
                tracing::debug!(error = %format!("{e:#}"), "Snapshot unreadable.");
                continue;
            }
        };
        if bytes == last {
            continue;
        }
        match Snapshot::from_json(&bytes) {
            Ok(snapshot) => {
                tracing::info!(version = %snapshot.version, "Snapshot reloaded.");
                metrics::counter!(reloads.clone(), "result" => "ok").increment(1);
                record_loaded(options.metrics_prefix, &snapshot);
                current.store(Arc::new(build(snapshot)));
            }
            Err(e) => {
                tracing::warn!(path = %options.path.display(), problems = ?e.problems,
                    "Snapshot rejected; the last good one keeps serving.");
                metrics::counter!(reloads.clone(), "result" => "invalid").increment(1);
            }
        }
        last = bytes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot_json(version: u32) -> String {
        serde_json::json!({
            "version": version,
            "experiments": [{ "id": "exp_a", "status": "live", "variants": [
                { "id": "var_a", "weight": 100, "control": true, "parts": {} }] }],
            "keys": [{ "publicKey": "pk_a", "experiments": ["exp_a"] }]
        })
        .to_string()
    }

    async fn wait_for_version(current: &ArcSwap<String>, want: &str) {
        for _ in 0..200 {
            if current.load().as_str() == want {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("version stayed {}, wanted {want}", current.load());
    }

    #[tokio::test]
    async fn reloads_on_rename_and_in_place_write_and_keeps_last_good() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("snapshot.json");
        std::fs::write(&path, snapshot_json(1)).expect("write");
        let options = WatchOptions {
            path: path.clone(),
            interval: Duration::from_millis(20),
            metrics_prefix: "test",
        };
        let (current, task) = load_and_watch(options, Arc::new(|s: Snapshot| s.version))
            .await
            .expect("loads");
        assert_eq!(current.load().as_str(), "1");

        // Rewritten in place.
        std::fs::write(&path, snapshot_json(2)).expect("write");
        wait_for_version(&current, "2").await;

        // Replaced by rename.
        let tmp = dir.path().join("next.json");
        std::fs::write(&tmp, snapshot_json(3)).expect("write");
        std::fs::rename(&tmp, &path).expect("rename");
        wait_for_version(&current, "3").await;

        // An invalid file is ignored; the next valid one is taken.
        std::fs::write(&path, "{ not json").expect("write");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(current.load().as_str(), "3");
        std::fs::write(&path, snapshot_json(4)).expect("write");
        wait_for_version(&current, "4").await;
        task.abort();
    }

    #[tokio::test]
    async fn invalid_at_start_is_an_error_naming_the_problems() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("snapshot.json");
        std::fs::write(&path, r#"{"version":1,"experiments":[],"keys":[{"publicKey":"pk_a","experiments":["exp_x"]}]}"#)
            .expect("write");
        let options = WatchOptions {
            path,
            interval: Duration::from_secs(1),
            metrics_prefix: "test",
        };
        let err = load_and_watch(options, Arc::new(|s: Snapshot| s.version))
            .await
            .expect_err("fails");
        assert!(
            format!("{err:#}").contains("unknown experiment exp_x"),
            "{err:#}"
        );
    }
}
