//! The browser SDK in real headless Chromium against the real pipeline: the three
//! services of this test, an nginx front serving the built SDK, and a fixture page on
//! another origin. The browser half is `sdk/test/browser.mjs` (Playwright); this half
//! starts what it talks to and gives it the addresses.

use e2e::ConsumerNames;

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

    let mut node = std::process::Command::new("node");
    node.arg("test/browser.mjs")
        .current_dir(&sdk)
        .env("FRONT", front.url())
        .env("ACCESS_LOG", front.access_log())
        .env("CLICKHOUSE_URL", e2e::clickhouse_url())
        .env("CLICKHOUSE_DATABASE", &names.database);
    let output = tokio::task::spawn_blocking(move || node.output())
        .await
        .expect("joined")
        .expect("node runs");
    let text = String::from_utf8_lossy(&output.stdout);
    let errors = String::from_utf8_lossy(&output.stderr);
    println!("{text}\n{errors}");
    assert!(
        output.status.success(),
        "the browser test failed:\n{text}\n{errors}"
    );
    assert!(text.contains("# fail 0"), "{text}");

    ingest.stop().await.expect("ingest stops");
    config_api.stop().await.expect("config-api stops");
    consumer.stop().await.expect("consumer stops");
    e2e::drop_database(&names.database).await;
}
