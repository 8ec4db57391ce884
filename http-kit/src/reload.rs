//! Keeps a value built from the snapshot current. The snapshot comes from a file or an
//! `http(s)://` URL; it is loaded at start (invalid and no good copy: fatal) and polled
//! afterwards. A changed snapshot that validates replaces the value atomically; an invalid
//! or unreachable one is logged and counted while the last good value keeps serving. So is
//! one that changes an experiment's variants or weights without raising its phase
//! ([`Snapshot::phase_problems`]).
//!
//! A file is compared by its bytes, so a replacement by rename and a rewrite in place are
//! both seen, whatever the file system's timestamp granularity. A URL is polled with
//! `If-None-Match`, and its last good copy is kept on disk (written atomically), so a
//! restart while the URL is unreachable still serves it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use arc_swap::ArcSwap;
use tokio::task::JoinHandle;

use contract::snapshot::{Snapshot, SnapshotError};

/// How the watched value is made from a validated snapshot.
pub type Build<T> = Arc<dyn Fn(Snapshot) -> T + Send + Sync>;

/// Where the snapshot comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    File(PathBuf),
    /// Polled over HTTP; `cache` holds the last good copy.
    Url {
        url: String,
        cache: PathBuf,
    },
}

impl Source {
    /// An `http://` or `https://` address is a URL, anything else a file path.
    pub fn parse(raw: &str, cache: PathBuf) -> Self {
        let lower = raw.to_ascii_lowercase();
        if lower.starts_with("http://") || lower.starts_with("https://") {
            Self::Url {
                url: raw.to_owned(),
                cache,
            }
        } else {
            Self::File(PathBuf::from(raw))
        }
    }

    fn describe(&self) -> String {
        match self {
            Self::File(path) => path.display().to_string(),
            Self::Url { url, .. } => url.clone(),
        }
    }
}

/// The snapshot settings of a service, shared by the ingest and the config-api.
#[derive(clap::Args, Clone, Debug)]
pub struct SnapshotArgs {
    /// Experiments snapshot: a file path, or an http(s):// URL polled with If-None-Match.
    #[arg(
        long,
        env = "EXPERIMENTS_SNAPSHOT",
        default_value = "deploy/experiments.json"
    )]
    pub snapshot: String,

    #[command(flatten)]
    pub watch: SnapshotWatchArgs,
}

impl SnapshotArgs {
    /// Watch options for the service whose metrics start with `metrics_prefix`.
    pub fn watch_options(&self, metrics_prefix: &'static str) -> WatchOptions {
        self.watch.watch_options(&self.snapshot, metrics_prefix)
    }
}

/// How a snapshot is watched, whatever names it: shared by every service that loads one
/// (the consumer's snapshot is optional, and its flag named for it).
#[derive(clap::Args, Clone, Debug)]
pub struct SnapshotWatchArgs {
    /// How often the snapshot is checked for changes, in milliseconds.
    #[arg(long, env = "SNAPSHOT_POLL_INTERVAL_MS", default_value_t = 1000)]
    pub snapshot_poll_interval_ms: u64,

    /// Where the last good copy of a URL snapshot is kept
    /// [default: <temp dir>/<service>-snapshot.json].
    #[arg(long, env = "SNAPSHOT_CACHE")]
    pub snapshot_cache: Option<PathBuf>,
}

impl SnapshotWatchArgs {
    /// Watch options for `snapshot` (a file path or URL), for the service whose metrics
    /// start with `metrics_prefix`.
    pub fn watch_options(&self, snapshot: &str, metrics_prefix: &'static str) -> WatchOptions {
        let cache = self.snapshot_cache.clone().unwrap_or_else(|| {
            std::env::temp_dir().join(format!("{metrics_prefix}-snapshot.json"))
        });
        WatchOptions {
            source: Source::parse(snapshot, cache),
            interval: Duration::from_millis(self.snapshot_poll_interval_ms),
            metrics_prefix,
        }
    }
}

/// Where the snapshot comes from and how often to look again.
#[derive(Clone, Debug)]
pub struct WatchOptions {
    pub source: Source,
    pub interval: Duration,
    /// Prefix of the metric names, the service's name (`ingest`, `config_api`).
    pub metrics_prefix: &'static str,
}

/// Reads the source; for a URL, remembers the `ETag` to ask with `If-None-Match`.
struct Fetcher {
    source: Source,
    http: reqwest::Client,
    etag: Option<String>,
}

impl Fetcher {
    fn new(source: Source) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .context("cannot create the HTTP client")?;
        Ok(Self {
            source,
            http,
            etag: None,
        })
    }

    /// The current bytes, or `None` when the URL answered 304 Not Modified.
    async fn fetch(&mut self) -> anyhow::Result<Option<Vec<u8>>> {
        let url = match &self.source {
            Source::File(path) => return read(path).await.map(Some),
            Source::Url { url, .. } => url.clone(),
        };
        let mut request = self.http.get(&url);
        if let Some(etag) = &self.etag {
            request = request.header(reqwest::header::IF_NONE_MATCH, etag);
        }
        let response = request
            .send()
            .await
            .with_context(|| format!("cannot fetch snapshot {url}"))?;
        if response.status() == reqwest::StatusCode::NOT_MODIFIED {
            return Ok(None);
        }
        if !response.status().is_success() {
            anyhow::bail!("snapshot {url} answered {}", response.status());
        }
        let etag = response
            .headers()
            .get(reqwest::header::ETAG)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let bytes = response
            .bytes()
            .await
            .with_context(|| format!("cannot read snapshot {url}"))?;
        self.etag = etag;
        Ok(Some(bytes.to_vec()))
    }

    /// Keeps a good copy of a URL's snapshot on disk: written beside, then renamed.
    async fn keep_copy(&self, bytes: &[u8]) {
        let Source::Url { cache, .. } = &self.source else {
            return;
        };
        let tmp = cache.with_extension("tmp");
        let result = async {
            tokio::fs::write(&tmp, bytes).await?;
            tokio::fs::rename(&tmp, cache).await
        }
        .await;
        if let Err(e) = result {
            tracing::warn!(path = %cache.display(), error = %e, "Cannot keep a copy of the snapshot.");
        }
    }

    /// The first snapshot: from the source, else (for a URL) from the copy on disk.
    async fn initial(&mut self) -> anyhow::Result<(Vec<u8>, Snapshot)> {
        let described = self.source.describe();
        let fetched = match self.fetch().await {
            Ok(bytes) => bytes
                .context("304 without a request tag")
                .and_then(|bytes| {
                    let snapshot = Snapshot::from_json(&bytes)
                        .with_context(|| format!("invalid snapshot {described}"))?;
                    Ok((bytes, snapshot))
                }),
            Err(e) => Err(e),
        };
        let error = match fetched {
            Ok((bytes, snapshot)) => {
                self.keep_copy(&bytes).await;
                return Ok((bytes, snapshot));
            }
            Err(e) => e,
        };
        let Source::Url { cache, .. } = &self.source else {
            return Err(error);
        };
        tracing::warn!(error = %format!("{error:#}"), copy = %cache.display(),
            "Snapshot URL unusable at start; serving the last good copy.");
        let bytes = read(cache)
            .await
            .map_err(|e| error.context(format!("and no usable copy: {e:#}")))?;
        let snapshot = Snapshot::from_json(&bytes)
            .with_context(|| format!("invalid snapshot copy {}", cache.display()))?;
        // Forget the tag so that the next poll fetches the URL's current content.
        self.etag = None;
        Ok((bytes, snapshot))
    }
}

/// Loads the snapshot once and spawns the task that reloads it. Fails when no valid
/// snapshot can be had, with every problem in the error.
pub async fn load_and_watch<T: Send + Sync + 'static>(
    options: WatchOptions,
    build: Build<T>,
) -> anyhow::Result<(Arc<ArcSwap<T>>, JoinHandle<()>)> {
    let mut fetcher = Fetcher::new(options.source.clone())?;
    let (bytes, snapshot) = fetcher.initial().await?;
    tracing::info!(source = %options.source.describe(), version = %snapshot.version,
        "Snapshot loaded.");
    record_loaded(options.metrics_prefix, None, &snapshot);
    let current = Arc::new(ArcSwap::from_pointee(build(snapshot.clone())));
    let task = tokio::spawn(watch(
        options,
        fetcher,
        bytes,
        snapshot,
        build,
        current.clone(),
    ));
    Ok((current, task))
}

async fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    tokio::fs::read(path)
        .await
        .with_context(|| format!("cannot read snapshot {}", path.display()))
}

fn record_loaded(prefix: &str, previous: Option<&str>, snapshot: &Snapshot) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    metrics::gauge!(format!("{prefix}_snapshot_loaded_timestamp_seconds")).set(now);
    metrics::gauge!(format!("{prefix}_snapshot_refused")).set(0.0);
    if let Some(previous) = previous {
        metrics::gauge!(format!("{prefix}_snapshot_info"), "version" => previous.to_owned())
            .set(0.0);
    }
    metrics::gauge!(format!("{prefix}_snapshot_info"), "version" => snapshot.version.clone())
        .set(1.0);
}

async fn watch<T: Send + Sync + 'static>(
    options: WatchOptions,
    mut fetcher: Fetcher,
    mut last: Vec<u8>,
    mut previous: Snapshot,
    build: Build<T>,
    current: Arc<ArcSwap<T>>,
) {
    let reloads = format!("{}_snapshot_reloads_total", options.metrics_prefix);
    let mut ticker = tokio::time::interval(options.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    loop {
        ticker.tick().await;
        let bytes = match fetcher.fetch().await {
            Ok(Some(bytes)) => bytes,
            Ok(None) => continue,
            Err(e) => {
                // A rename in progress, a deleted file, an upstream down: keep serving.
                tracing::debug!(error = %format!("{e:#}"), "Snapshot unreachable.");
                metrics::counter!(reloads.clone(), "result" => "unreachable").increment(1);
                continue;
            }
        };
        if bytes == last {
            continue;
        }
        let checked = Snapshot::from_json(&bytes).and_then(|snapshot| {
            match previous.phase_problems(&snapshot) {
                problems if problems.is_empty() => Ok(snapshot),
                problems => Err(SnapshotError { problems }),
            }
        });
        match checked {
            Ok(snapshot) => {
                tracing::info!(version = %snapshot.version, "Snapshot reloaded.");
                metrics::counter!(reloads.clone(), "result" => "ok").increment(1);
                record_loaded(options.metrics_prefix, Some(&previous.version), &snapshot);
                fetcher.keep_copy(&bytes).await;
                current.store(Arc::new(build(snapshot.clone())));
                previous = snapshot;
            }
            Err(e) => {
                tracing::error!(source = %options.source.describe(), problems = ?e.problems,
                    "Snapshot rejected; the last good one keeps serving.");
                metrics::counter!(reloads.clone(), "result" => "invalid").increment(1);
                // 1 until a good one is loaded: the file stays refused, the alert stays.
                metrics::gauge!(format!("{}_snapshot_refused", options.metrics_prefix)).set(1.0);
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

    /// Polls `done` every 10 ms, for 30 s at most (a loaded machine, not the poll
    /// interval, sets how long a reload takes).
    async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !done() {
            assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn wait_for_version(current: &ArcSwap<String>, want: &str) {
        wait_until(&format!("version {want}"), || {
            current.load().as_str() == want
        })
        .await;
    }

    /// The snapshots the watcher with metrics prefix `prefix` rejected so far.
    fn rejected(prefix: &str) -> u64 {
        let name = format!("{prefix}_snapshot_reloads_total{{result=\"invalid\"}} ");
        crate::telemetry::metrics_handle()
            .render()
            .lines()
            .find_map(|l| l.strip_prefix(&name)?.trim().parse().ok())
            .unwrap_or(0)
    }

    /// The watcher's `_snapshot_refused` gauge: 1 while the file it reads is refused.
    fn refused(prefix: &str) -> Option<f64> {
        let name = format!("{prefix}_snapshot_refused ");
        crate::telemetry::metrics_handle()
            .render()
            .lines()
            .find_map(|l| l.strip_prefix(&name)?.trim().parse().ok())
    }

    /// Replaces the file by `bytes` (by rename: a rewrite in place could be read half
    /// written, and that rejection taken for theirs) and waits until the watcher rejected
    /// them, so that the checks after it look at a snapshot that was read.
    async fn write_rejected(path: &Path, prefix: &str, what: &str, bytes: &str) {
        let before = rejected(prefix);
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, bytes).expect("write");
        std::fs::rename(&tmp, path).expect("rename");
        wait_until(&format!("{what} rejected"), || rejected(prefix) > before).await;
    }

    #[tokio::test]
    async fn reloads_on_rename_and_in_place_write_and_keeps_last_good() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("snapshot.json");
        std::fs::write(&path, snapshot_json(1)).expect("write");
        // Its own prefix: the rejections it waits for are counted apart from other tests'.
        let prefix = "reload_test";
        crate::telemetry::metrics_handle();
        let options = WatchOptions {
            source: Source::File(path.clone()),
            interval: Duration::from_millis(20),
            metrics_prefix: prefix,
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

        // Invalid files are read and ignored, whatever makes them invalid: weights that
        // do not sum to 100 (valid JSON, refused by the snapshot's rules), then no JSON.
        let mut weights_off: serde_json::Value =
            serde_json::from_str(&snapshot_json(4)).expect("JSON");
        weights_off["experiments"][0]["variants"][0]["weight"] = serde_json::json!(60);
        write_rejected(&path, prefix, "weights off", &weights_off.to_string()).await;
        assert_eq!(current.load().as_str(), "3", "weights off were taken");
        write_rejected(&path, prefix, "not JSON", "{ not json").await;
        assert_eq!(current.load().as_str(), "3", "a file not JSON was taken");
        assert_eq!(
            refused(prefix),
            Some(1.0),
            "refused while the file stays so"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            refused(prefix),
            Some(1.0),
            "still refused: the file did not change"
        );
        // The next valid one is taken.
        std::fs::write(&path, snapshot_json(5)).expect("write");
        wait_for_version(&current, "5").await;
        assert_eq!(refused(prefix), Some(0.0));
        task.abort();
    }

    /// A Kubernetes ConfigMap volume: the file is a link through `..data`, a link to a
    /// folder of the current version, which the kubelet replaces by renaming a new link
    /// over it (the way `kubectl apply` of a changed ConfigMap reaches a pod). The new
    /// version is taken, as from a plain file.
    #[tokio::test]
    async fn reloads_a_config_map_volume_updated_as_the_kubelet_does() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        let version = |n: u32| {
            let folder = root.join(format!("..2026_11_29_{n}"));
            std::fs::create_dir(&folder).expect("folder");
            std::fs::write(folder.join("experiments.json"), snapshot_json(n)).expect("write");
            folder
        };
        let first = version(1);
        symlink(first.file_name().expect("name"), root.join("..data")).expect("link");
        symlink("..data/experiments.json", root.join("experiments.json")).expect("link");
        let options = WatchOptions {
            source: Source::File(root.join("experiments.json")),
            interval: Duration::from_millis(20),
            metrics_prefix: "config_map_test",
        };
        let (current, task) = load_and_watch(options, Arc::new(|s: Snapshot| s.version))
            .await
            .expect("loads");
        assert_eq!(current.load().as_str(), "1");
        let second = version(2);
        symlink(second.file_name().expect("name"), root.join("..data_tmp")).expect("link");
        std::fs::rename(root.join("..data_tmp"), root.join("..data")).expect("swap");
        std::fs::remove_dir_all(&first).expect("old version removed");
        wait_for_version(&current, "2").await;
        task.abort();
    }

    #[test]
    fn sources_parse() {
        let cache = PathBuf::from("/tmp/c.json");
        assert_eq!(
            Source::parse("deploy/x.json", cache.clone()),
            Source::File("deploy/x.json".into())
        );
        assert_eq!(
            Source::parse("HTTPS://cfg.example/x.json", cache.clone()),
            Source::Url {
                url: "HTTPS://cfg.example/x.json".into(),
                cache
            }
        );
    }

    #[tokio::test]
    async fn invalid_at_start_is_an_error_naming_the_problems() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("snapshot.json");
        std::fs::write(&path, r#"{"version":1,"experiments":[],"keys":[{"publicKey":"pk_a","experiments":["exp_x"]}]}"#)
            .expect("write");
        let options = WatchOptions {
            source: Source::File(path),
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
