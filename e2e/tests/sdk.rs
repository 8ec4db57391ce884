//! The browser SDK in real headless Chromium against the real pipeline: the three
//! services of this test, an nginx front serving the built SDK, and a fixture page on
//! another origin. The browser half is `sdk/test/browser.mjs` (Playwright); this half
//! starts what it talks to and gives it the addresses.

use std::io::{Read, Seek};
use std::time::{Duration, Instant};

use e2e::ConsumerNames;

/// The whole browser run's limit; each of its tests has its own (`T` in browser.mjs).
const BROWSER_LIMIT: Duration = Duration::from_secs(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_in_a_real_browser_runs_a_split_test_end_to_end() {
    let sdk = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../sdk");
    assert!(
        sdk.join("dist/split.min.js").exists() && sdk.join("node_modules/playwright-core").exists(),
        "the SDK is not built: scripts/test builds it (npm ci; node build.mjs)"
    );
    let snapshot = e2e::SnapshotFile::new(&serde_json::json!({
        "version": "sdk-1",
        "experiments": [{
            "id": "exp_sdk_hero",
            "status": "live",
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
        }],
        "keys": [{ "publicKey": "pk_sdk", "experiments": ["exp_sdk_hero", "exp_sdk_draft"] }]
    }));
    let names = ConsumerNames::unique();
    let consumer = e2e::start_consumer(e2e::consumer_config(&names, &[])).await;
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
    node.arg("test/browser.mjs")
        .current_dir(&sdk)
        .env("FRONT", front.url())
        .env("ACCESS_LOG", front.access_log())
        .env("CLICKHOUSE_URL", e2e::clickhouse_url())
        .env("CLICKHOUSE_DATABASE", &names.database)
        .stdout(stdout.try_clone().expect("file handle"))
        .stderr(stderr.try_clone().expect("file handle"));
    // Killed (SIGKILL) when dropped, so a timeout or a panic leaves no node behind.
    let mut child = e2e::ChildProcess(node.spawn().expect("node runs"));
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
