//! The browser SDK in real headless Chromium against the real pipeline: the three
//! services of each test, an nginx front serving the built SDK, and fixture pages on
//! another origin. The browser half is `sdk/test/browser/*.mjs` (Playwright, node's test
//! runner); this half starts what it talks to, gives it the addresses and bounds its run.

use std::io::{Read, Seek};
use std::time::{Duration, Instant};

use std::os::unix::process::CommandExt;

use e2e::ConsumerNames;

/// A child leading a process group, the whole group killed (SIGKILL) when dropped.
struct Group(std::process::Child);

impl Group {
    fn kill(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .status();
        let _ = self.0.wait();
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Each browser run's limit; each of its tests has its own (`T` in kit.mjs).
const BROWSER_LIMIT: Duration = Duration::from_secs(240);

/// The experiments of every browser run: a live one with text parts, a draft (the live
/// gate), one that a single-page app shows on its second view, and one whose phase,
/// weights and status `fresh.mjs` changes in the file (the services reload it). The hero
/// is judged by two metrics that the auto-capture's goal and conversion clicks feed.
fn snapshot() -> e2e::SnapshotFile {
    e2e::SnapshotFile::new(&serde_json::json!({
        "version": "sdk-1",
        "metrics": [
            { "id": "signup", "kind": "proportion", "eventName": "click", "clickTarget": "signup" },
            { "id": "buys", "kind": "mean", "eventName": "conversion", "clickTarget": "buy",
              "aggregate": "count" }
        ],
        "experiments": [{
            "id": "exp_sdk_hero",
            "status": "live",
            "metrics": [{ "id": "signup", "role": "goal" }, { "id": "buys", "role": "secondary" }],
            "variants": [
                { "id": "var_sdk_a", "weight": 50, "control": true,
                  "parts": { "headline": "Alpha <b>headline</b>", "cta": "Buy A" } },
                { "id": "var_sdk_b", "weight": 50, "control": false,
                  "parts": { "headline": "Beta <b>headline</b>", "cta": "Buy B" } }
            ]
        }, {
            "id": "exp_sdk_draft",
            "status": "draft",
            "variants": [{ "id": "var_sdk_only", "weight": 100, "control": true, "parts": {} }]
        }, {
            "id": "exp_sdk_spa",
            "status": "live",
            "variants": [
                { "id": "var_sdk_spa_a", "weight": 50, "control": true, "parts": { "title": "Spa A" } },
                { "id": "var_sdk_spa_b", "weight": 50, "control": false, "parts": { "title": "Spa B" } }
            ]
        }, {
            "id": "exp_sdk_phase",
            "status": "live",
            "phase": 1,
            "variants": [
                { "id": "var_sdk_p_a", "weight": 50, "control": true, "parts": { "title": "Phase A" } },
                { "id": "var_sdk_p_b", "weight": 50, "control": false, "parts": { "title": "Phase B" } }
            ]
        }],
        "keys": [{ "publicKey": "pk_sdk",
                   "experiments": ["exp_sdk_hero", "exp_sdk_draft", "exp_sdk_spa", "exp_sdk_phase"] }]
    }))
}

/// The core: the answer, parts without flicker or late swap, batches, beacons within the
/// browser's budget, retries, test mode, blocked storage, every field in ClickHouse, and
/// fresh answers (a new phase, weight 0, a stopped experiment).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_in_a_real_browser_runs_a_split_test_end_to_end() {
    browser_run(&[
        "test/browser/core.mjs",
        "test/browser/sender.mjs",
        "test/browser/fresh.mjs",
    ])
    .await;
}

/// Single-page views, consent, forced variants, another library's `window.Split`, the
/// queuing snippet, and the opt-in auto-capture.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_follows_views_consent_qa_and_autotrack_in_a_real_browser() {
    browser_run(&["test/browser/views.mjs", "test/browser/autotrack.mjs"]).await;
}

/// The consent-manager flow over 6 views, and a field that cannot be serialized.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_keeps_one_visitor_through_consent_and_refuses_bad_fields_in_a_real_browser() {
    browser_run(&["test/browser/consent.mjs"]).await;
}

/// Returning visitors with a slow answer (the stored answer at once, a late one from the
/// next view), every frame under a strict CSP (`style-src 'self'`), and the versioned path
/// pinned with docs/sdk.md's integrity hash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_shows_returning_visitors_their_variant_at_once_and_hides_parts_under_a_strict_csp()
{
    browser_run(&["test/browser/returning.mjs", "test/browser/csp.mjs"]).await;
}

/// A hostile page (frozen JSON, read-only pushState, no sendBeacon, an invalid conversion
/// rule), and two subdomains sharing one visitor through `cookieDomain`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_survives_a_hostile_page_and_keeps_one_visitor_across_subdomains() {
    browser_run(&["test/browser/hostile.mjs", "test/browser/subdomains.mjs"]).await;
}

/// The real web: old page libraries and the state they broke, a start with no inline
/// script, a server-rendered page, a login, the error hook; many tabs, an outage and a
/// killed tab.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_loses_nothing_to_old_libraries_many_tabs_outages_or_killed_tabs() {
    browser_run(&["test/browser/realweb.mjs", "test/browser/tabs.mjs"]).await;
}

/// Runs the browser test `files` (node's test runner, one file at a time) against a
/// pipeline of their own: consumer, ingest, config-api and the nginx front, its own
/// topic and database.
async fn browser_run(files: &[&str]) {
    let sdk = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../sdk");
    assert!(
        sdk.join("dist/split.min.js").exists()
            && sdk.join("dist/split-autotrack.min.js").exists()
            && sdk.join("node_modules/playwright-core").exists(),
        "the SDK is not built: scripts/test builds it (npm ci; node build.mjs)"
    );
    let snapshot = snapshot();
    let names = ConsumerNames::unique();
    // The consumer mirrors the snapshot, so the metrics are in ClickHouse.
    let mirrored = format!("--experiments-snapshot={}", snapshot.path.display());
    let consumer = e2e::start_consumer(e2e::consumer_config(&names, &[&mirrored])).await;
    let ingest = e2e::start_ingest(e2e::ingest_config(&snapshot.path, &names.topic, &[])).await;
    let config_api = e2e::start_config_api(&snapshot.path).await;
    let front = e2e::Front::start(ingest.addr, config_api.addr).await;

    // Output to files, not pipes: a browser process left behind cannot hold the reads.
    let mut stdout = tempfile::tempfile().expect("temporary file");
    let mut stderr = tempfile::tempfile().expect("temporary file");
    let mut node = std::process::Command::new("node");
    // SDK_TEST_NAME_PATTERN runs only the browser tests whose names match it.
    if let Ok(pattern) = std::env::var("SDK_TEST_NAME_PATTERN") {
        node.arg(format!("--test-name-pattern={pattern}"));
    }
    node.arg("--test")
        .arg("--test-concurrency=1")
        .args(files)
        .current_dir(&sdk)
        .env("FRONT", front.url())
        .env("ACCESS_LOG", front.access_log())
        .env("CLICKHOUSE_URL", e2e::clickhouse_url())
        .env("CLICKHOUSE_DATABASE", &names.database)
        .env("SNAPSHOT", &snapshot.path)
        .stdout(stdout.try_clone().expect("file handle"))
        .stderr(stderr.try_clone().expect("file handle"));
    // A process group of its own: node's runner, a child per file and their browsers are
    // all killed (SIGKILL) when it is dropped, so a timeout or a panic leaves none behind.
    node.process_group(0);
    let mut child = Group(node.spawn().expect("node runs"));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("node's status") {
            break Some(status);
        }
        if started.elapsed() > BROWSER_LIMIT {
            child.kill();
            break None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let read = |file: &mut std::fs::File| {
        let mut bytes = Vec::new();
        file.rewind().expect("rewind");
        file.read_to_end(&mut bytes).expect("node's output");
        String::from_utf8_lossy(&bytes).into_owned()
    };
    let (text, errors) = (read(&mut stdout), read(&mut stderr));
    println!("{text}\n{errors}");
    let Some(status) = status else {
        panic!(
            "the browser test timed out after {} s (node killed):\n{text}\n{errors}",
            BROWSER_LIMIT.as_secs()
        );
    };
    assert!(
        status.success(),
        "the browser test failed:\n{text}\n{errors}"
    );
    assert!(text.contains("# fail 0"), "{text}");

    ingest.stop().await.expect("ingest stops");
    config_api.stop().await.expect("config-api stops");
    consumer.stop().await.expect("consumer stops");
    e2e::drop_database(&names.database).await;
}
