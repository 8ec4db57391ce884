//! The config-api over HTTP: keys, live gate, filter, test mode, caching headers, CORS,
//! hot reload and the refusal of an invalid snapshot; metric definitions never served.

use std::time::Duration;

use e2e::{Running, SnapshotFile};
use reqwest::StatusCode;
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

const URL: &str = "/api/v1/experiments";

/// How long a reload may take: the poll is every 100 ms, but a loaded machine sets the
/// pace (a wait ends as soon as the reload is seen).
const RELOAD: Duration = Duration::from_secs(30);

fn at(offset: Duration, future: bool) -> String {
    let now = OffsetDateTime::now_utc();
    let t = if future { now + offset } else { now - offset };
    t.format(&Rfc3339).expect("formats")
}

fn experiment(id: &str, status: &str, start: Option<String>, end: Option<String>) -> Value {
    let mut e = json!({ "id": id, "status": status, "variants": [
        { "id": format!("var_{id}_1"), "weight": 33.5, "control": true, "parts": { "t": "\u{e9}" } },
        { "id": format!("var_{id}_2"), "weight": 66.5, "control": false, "parts": {} } ] });
    if let Some(s) = start {
        e["startAt"] = json!(s);
    }
    if let Some(s) = end {
        e["endAt"] = json!(s);
    }
    e
}

fn document(version: u32) -> Value {
    let hour = Duration::from_secs(3600);
    json!({
        "version": version,
        "experiments": [
            experiment("exp_live", "live", None, None),
            experiment("exp_draft", "draft", None, None),
            experiment("exp_paused", "paused", None, None),
            experiment("exp_ended", "ended", None, None),
            experiment("exp_started", "live", Some(at(hour, false)), Some(at(hour, true))),
            experiment("exp_future", "live", Some(at(hour, true)), None),
            experiment("exp_past", "live", None, Some(at(hour, false))),
            experiment("exp_other", "live", None, None)
        ],
        "keys": [
            { "publicKey": "pk_cfg", "experiments": [
                "exp_past", "exp_live", "exp_draft", "exp_paused", "exp_ended", "exp_started", "exp_future"] },
            { "publicKey": "pk_other", "experiments": ["exp_other"],
              "allowedOrigins": ["https://other.example"] }
        ]
    })
}

/// The ids of the experiments a 200 answer lists.
async fn experiment_ids(request: reqwest::RequestBuilder) -> Vec<String> {
    let response = request.send().await.expect("answer");
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.expect("JSON");
    body["experiments"]
        .as_array()
        .expect("experiments array")
        .iter()
        .map(|e| e["id"].as_str().expect("id").to_owned())
        .collect()
}

struct Fixture {
    file: SnapshotFile,
    api: Running,
    http: reqwest::Client,
}

impl Fixture {
    async fn new() -> Self {
        let file = SnapshotFile::new(&document(1));
        let api = e2e::start_config_api(&file.path).await;
        Self {
            file,
            api,
            http: reqwest::Client::new(),
        }
    }

    fn get(&self, key: &str) -> reqwest::RequestBuilder {
        self.http.get(self.api.url(URL)).header("X-public-key", key)
    }

    /// The snapshots refused so far, from /metrics.
    async fn invalid_reloads(&self) -> f64 {
        let text = e2e::metrics_text(&self.api.url("/metrics")).await;
        e2e::metric(
            &text,
            "config_api_snapshot_reloads_total{result=\"invalid\"}",
        )
        .unwrap_or(0.0)
    }
}

#[tokio::test]
async fn live_gate_filter_test_mode_and_key_isolation() {
    let f = Fixture::new().await;
    assert_eq!(
        experiment_ids(f.get("pk_cfg")).await,
        ["exp_live", "exp_started"]
    );
    assert_eq!(
        experiment_ids(f.get("pk_cfg").header("X-service-test", "TRUE")).await,
        [
            "exp_past",
            "exp_live",
            "exp_draft",
            "exp_paused",
            "exp_ended",
            "exp_started",
            "exp_future"
        ],
        "test mode bypasses the gate, in the key's order"
    );
    assert_eq!(
        experiment_ids(f.get("pk_cfg").header("X-service-test", "yes")).await,
        ["exp_live", "exp_started"]
    );
    let filtered = f.get("pk_cfg").header(
        "X-experiment-ids",
        " exp_started , exp_other,exp_nope,, exp_draft",
    );
    assert_eq!(
        experiment_ids(filtered).await,
        ["exp_started"],
        "foreign, unknown and gated ids left out"
    );
    assert_eq!(
        experiment_ids(f.get("pk_cfg").header("X-experiment-ids", " , ")).await,
        ["exp_live", "exp_started"]
    );
    let other = f
        .get("pk_other")
        .header("X-service-test", "true")
        .header("X-experiment-ids", "exp_live");
    assert!(
        experiment_ids(other).await.is_empty(),
        "another key's experiment never leaks"
    );
    assert_eq!(experiment_ids(f.get("pk_other")).await, ["exp_other"]);

    // The exact shape: no internal fields, numbers and text as in the snapshot.
    let body = f
        .get("pk_cfg")
        .header("X-experiment-ids", "exp_live")
        .send()
        .await
        .expect("answer")
        .text()
        .await
        .expect("text");
    assert_eq!(
        body,
        r#"{"experiments":[{"id":"exp_live","phase":1,"variants":[{"id":"var_exp_live_1","weight":33.5,"control":true,"parts":{"t":"é"}},{"id":"var_exp_live_2","weight":66.5,"control":false,"parts":{}}]}]}"#
    );
    f.api.stop().await.expect("clean stop");
}

/// The document of [`document`] with metric definitions, and exp_live listing two.
fn document_with_metrics(version: u32) -> Value {
    let mut doc = document(version);
    doc["metrics"] = json!([
        { "id": "signup", "kind": "proportion", "eventName": "conversion",
          "clickTarget": "signup" },
        { "id": "time_on_page", "kind": "mean", "eventName": "dwell_time",
          "field": "timeOnPage", "aggregate": "max", "cap": { "percentile": 0.99 } }
    ]);
    doc["experiments"][0]["metrics"] = json!([
        { "id": "signup", "role": "goal" }, { "id": "time_on_page", "role": "guardrail" }]);
    doc
}

#[tokio::test]
async fn metric_definitions_are_never_served_and_a_bad_one_is_refused() {
    let file = SnapshotFile::new(&document_with_metrics(1));
    let api = e2e::start_config_api(&file.path).await;
    let f = Fixture {
        file,
        api,
        http: reqwest::Client::new(),
    };
    let text = |request: reqwest::RequestBuilder| async move {
        let response = request.send().await.expect("answer");
        assert_eq!(response.status(), StatusCode::OK);
        response.text().await.expect("text")
    };
    // Exactly what the same snapshot without metrics serves.
    assert_eq!(
        text(f.get("pk_cfg").header("X-experiment-ids", "exp_live")).await,
        r#"{"experiments":[{"id":"exp_live","phase":1,"variants":[{"id":"var_exp_live_1","weight":33.5,"control":true,"parts":{"t":"é"}},{"id":"var_exp_live_2","weight":66.5,"control":false,"parts":{}}]}]}"#
    );
    // Nothing of them in any answer, in test mode or not.
    for key in ["pk_cfg", "pk_other"] {
        for test in ["false", "true"] {
            let body = text(f.get(key).header("X-service-test", test)).await;
            for secret in [
                "metrics",
                "signup",
                "time_on_page",
                "goal",
                "guardrail",
                "dwell",
            ] {
                assert!(
                    !body.contains(secret),
                    "{key} test={test}: {secret} in {body}"
                );
            }
        }
    }

    // A snapshot with a bad metric is refused and the last good one keeps serving.
    for (what, bad) in [
        (
            "a reserved id",
            json!({ "id": "conversion", "kind": "proportion", "eventName": "x" }),
        ),
        (
            "a field on a proportion",
            json!({ "id": "m", "kind": "proportion", "eventName": "x", "field": "timeOnPage" }),
        ),
    ] {
        let mut next = document_with_metrics(2);
        next["metrics"][1] = bad;
        // exp_draft goes live: taken, the snapshot would serve it.
        next["experiments"][1]["status"] = json!("live");
        let before = f.invalid_reloads().await;
        f.file.replace(&next);
        e2e::eventually(
            RELOAD,
            &format!("the snapshot with {what} refused"),
            || async { (f.invalid_reloads().await > before).then_some(()) },
        )
        .await;
        assert_eq!(
            experiment_ids(f.get("pk_cfg")).await,
            ["exp_live", "exp_started"],
            "the snapshot with {what} was taken"
        );
    }
    f.api.stop().await.expect("clean stop");
}

#[tokio::test]
async fn key_problems_get_401_and_other_methods_405() {
    let f = Fixture::new().await;
    for (key, code) in [
        (None, "missing_public_key"),
        (Some("nope"), "invalid_public_key"),
        (Some("pk_"), "invalid_public_key"),
        (Some("pk_unknown"), "unknown_public_key"),
    ] {
        let mut request = f.http.get(f.api.url(URL));
        if let Some(k) = key {
            request = request.header("X-public-key", k);
        }
        let response = request.send().await.expect("answer");
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        let body: Value = response.json().await.expect("JSON");
        assert_eq!(body["error"]["code"], code, "{key:?}");
    }
    let response = f.http.post(f.api.url(URL)).send().await.expect("answer");
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert!(
        response.headers()["allow"]
            .to_str()
            .expect("text")
            .contains("GET")
    );
    let response = f
        .http
        .request(reqwest::Method::OPTIONS, f.api.url(URL))
        .send()
        .await
        .expect("answer");
    assert!(response.status().is_success(), "plain OPTIONS");
    assert_eq!(response.headers()["allow"], "GET, HEAD, OPTIONS");
    let response = f
        .http
        .head(f.api.url(URL))
        .header("X-public-key", "pk_cfg")
        .send()
        .await
        .expect("answer");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.text().await.expect("empty"), "");
    f.api.stop().await.expect("clean stop");
}

#[tokio::test]
async fn etag_304_and_cache_headers() {
    let f = Fixture::new().await;
    let response = f.get("pk_cfg").send().await.expect("answer");
    let h = response.headers().clone();
    assert_eq!(h["content-type"], "application/json");
    assert_eq!(h["cache-control"], "public, max-age=30");
    let vary = h["vary"].to_str().expect("text").to_ascii_lowercase();
    for name in ["x-public-key", "x-experiment-ids", "x-service-test"] {
        assert!(vary.contains(name), "{name} not in Vary {vary}");
    }
    let etag = h["etag"].to_str().expect("text").to_owned();

    let response = f
        .get("pk_cfg")
        .header("If-None-Match", &etag)
        .send()
        .await
        .expect("answer");
    assert_eq!(response.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(response.headers()["etag"], etag.as_str());
    assert_eq!(response.text().await.expect("body"), "");

    // Another key, filter or mode is another representation.
    let test_mode = f
        .get("pk_cfg")
        .header("X-service-test", "true")
        .header("If-None-Match", &etag);
    let response = test_mode.send().await.expect("answer");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["cache-control"], "no-store");
    assert_ne!(response.headers()["etag"], etag.as_str());
    let filtered = f
        .get("pk_cfg")
        .header("X-experiment-ids", "exp_live")
        .header("If-None-Match", &etag);
    assert_eq!(
        filtered.send().await.expect("answer").status(),
        StatusCode::OK
    );
    f.api.stop().await.expect("clean stop");
}

#[tokio::test]
async fn cors_preflight_and_origin_restriction() {
    let f = Fixture::new().await;
    let response = f
        .http
        .request(reqwest::Method::OPTIONS, f.api.url(URL))
        .header("Origin", "https://site.example")
        .header("Access-Control-Request-Method", "GET")
        .header(
            "Access-Control-Request-Headers",
            "x-public-key,x-experiment-ids,x-service-test",
        )
        .send()
        .await
        .expect("answer");
    assert!(response.status().is_success());
    let h = response.headers();
    assert_eq!(h["access-control-allow-origin"], "https://site.example");
    assert_eq!(h["access-control-max-age"], "86400");
    let allowed = h["access-control-allow-headers"]
        .to_str()
        .expect("text")
        .to_ascii_lowercase();
    for name in [
        "x-public-key",
        "x-experiment-ids",
        "x-service-test",
        "accept",
    ] {
        assert!(allowed.contains(name), "{name} not in {allowed}");
    }
    for (key, origin, allowed) in [
        ("pk_cfg", "https://a.example", true),
        ("pk_other", "https://other.example", true),
        ("pk_other", "https://evil.example", false),
    ] {
        let response = f
            .get(key)
            .header("Origin", origin)
            .send()
            .await
            .expect("answer");
        let got = response
            .headers()
            .get("access-control-allow-origin")
            .cloned();
        assert_eq!(
            got.is_some_and(|v| v == origin),
            allowed,
            "{key} from {origin}"
        );
        assert_eq!(
            response.status(),
            StatusCode::OK,
            "the data is served; the browser hides it"
        );
    }
    f.api.stop().await.expect("clean stop");
}

#[tokio::test]
async fn hot_reload_by_rename_and_in_place_and_invalid_snapshots_are_refused() {
    let f = Fixture::new().await;
    assert_eq!(
        experiment_ids(f.get("pk_cfg")).await,
        ["exp_live", "exp_started"]
    );

    let mut next = document(2);
    next["experiments"][1]["status"] = json!("live"); // exp_draft goes live
    f.file.replace(&next);
    e2e::eventually(RELOAD, "rename reload", || async {
        (experiment_ids(f.get("pk_cfg"))
            .await
            .contains(&"exp_draft".to_owned()))
        .then_some(())
    })
    .await;

    let mut next = document(3);
    next["keys"][0]["experiments"] = json!(["exp_paused"]);
    next["experiments"][2]["status"] = json!("live");
    std::fs::write(&f.file.path, next.to_string()).expect("in-place write");
    e2e::eventually(RELOAD, "in-place reload", || async {
        (experiment_ids(f.get("pk_cfg")).await == ["exp_paused"]).then_some(())
    })
    .await;

    // Invalid snapshots, each for one reason, each read and refused (the refusals are
    // counted) while the last good one keeps serving. Taken, each would serve another list.
    let mut weights_off = document(4);
    weights_off["experiments"][0]["variants"][0]["weight"] = json!(1);
    let mut unknown = document(5);
    unknown["keys"][0]["experiments"] = json!(["exp_live", "exp_missing"]);
    for (what, bytes) in [
        ("weights off", weights_off.to_string()),
        ("an unknown experiment", unknown.to_string()),
        ("not JSON", "{ not json".to_owned()),
    ] {
        let before = f.invalid_reloads().await;
        // By rename: a rewrite in place could be read half written, and that refusal
        // taken for this one's.
        let tmp = f.file.path.with_extension("bad");
        std::fs::write(&tmp, bytes).expect("write");
        std::fs::rename(&tmp, &f.file.path).expect("rename");
        e2e::eventually(
            RELOAD,
            &format!("the snapshot with {what} refused"),
            || async { (f.invalid_reloads().await > before).then_some(()) },
        )
        .await;
        assert_eq!(
            experiment_ids(f.get("pk_cfg")).await,
            ["exp_paused"],
            "the snapshot with {what} was taken"
        );
    }
    f.api.stop().await.expect("clean stop");
}

/// An upstream serving a snapshot with an ETag; counts the 304s it answered.
struct Upstream {
    addr: std::net::SocketAddr,
    state: std::sync::Arc<std::sync::Mutex<(String, u32)>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Upstream {
    async fn start(document: &Value) -> Self {
        use axum::http::{HeaderMap, StatusCode as S, header};
        let state = std::sync::Arc::new(std::sync::Mutex::new((document.to_string(), 0u32)));
        let shared = state.clone();
        let app = axum::Router::new().route(
            "/snapshot.json",
            axum::routing::get(move |headers: HeaderMap| {
                let shared = shared.clone();
                async move {
                    let mut guard = shared.lock().expect("lock");
                    let etag = {
                        use std::hash::{Hash, Hasher};
                        let mut hasher = std::collections::hash_map::DefaultHasher::new();
                        guard.0.hash(&mut hasher);
                        format!("\"{:x}\"", hasher.finish())
                    };
                    let matches = headers
                        .get(header::IF_NONE_MATCH)
                        .is_some_and(|v| v.as_bytes() == etag.as_bytes());
                    if matches {
                        guard.1 += 1;
                        (S::NOT_MODIFIED, [(header::ETAG, etag)], String::new())
                    } else {
                        (S::OK, [(header::ETAG, etag)], guard.0.clone())
                    }
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await
                .expect("upstream serves");
        });
        Self {
            addr,
            state,
            stop: Some(stop),
            task,
        }
    }

    fn set(&self, document: &Value) {
        self.state.lock().expect("lock").0 = document.to_string();
    }

    fn not_modified_count(&self) -> u32 {
        self.state.lock().expect("lock").1
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

async fn start_config_api_from(url: &str, cache: &std::path::Path) -> Running {
    use clap::Parser;
    let config = config_api::Config::parse_from([
        "config-api".to_owned(),
        "--listen=127.0.0.1:0".into(),
        format!("--snapshot={url}"),
        format!("--snapshot-cache={}", cache.display()),
        "--snapshot-poll-interval-ms=100".into(),
    ]);
    e2e::start_config_api_with(config).await
}

#[tokio::test]
async fn url_source_polls_with_etag_and_serves_its_disk_copy_when_upstream_is_down() {
    let upstream = Upstream::start(&document(1)).await;
    let url = format!("http://{}/snapshot.json", upstream.addr);
    let dir = tempfile::tempdir().expect("temporary folder");
    let cache = dir.path().join("copy.json");
    let http = reqwest::Client::new();
    let ids =
        |api: &Running| experiment_ids(http.get(api.url(URL)).header("X-public-key", "pk_cfg"));

    let api = start_config_api_from(&url, &cache).await;
    assert_eq!(ids(&api).await, ["exp_live", "exp_started"]);
    e2e::eventually(Duration::from_secs(5), "a conditional poll", || async {
        (upstream.not_modified_count() > 0).then_some(())
    })
    .await;

    let mut next = document(2);
    next["experiments"][1]["status"] = json!("live");
    upstream.set(&next);
    e2e::eventually(RELOAD, "the URL's change served", || async {
        ids(&api)
            .await
            .contains(&"exp_draft".to_owned())
            .then_some(())
    })
    .await;
    api.stop().await.expect("clean stop");

    // Upstream gone: a restart serves the last good copy.
    upstream.stop().await;
    let api = start_config_api_from(&url, &cache).await;
    assert_eq!(ids(&api).await, ["exp_live", "exp_draft", "exp_started"]);
    api.stop().await.expect("clean stop");

    // No upstream and no copy: the service refuses to start.
    let config = {
        use clap::Parser;
        config_api::Config::parse_from([
            "config-api".to_owned(),
            "--listen=127.0.0.1:0".into(),
            format!("--snapshot={url}"),
            format!(
                "--snapshot-cache={}",
                dir.path().join("none.json").display()
            ),
        ])
    };
    let err = config_api::Application::build(config)
        .await
        .err()
        .expect("no snapshot, no start");
    assert!(format!("{err:#}").contains("no usable copy"), "{err:#}");
}

/// At shutdown the config-api turns /readyz to 503 for its drain period and still answers
/// every request, so that a load balancer stops sending before the process goes: no
/// client gets a refusal while it drains.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_with_readyz_503_and_every_request_answered() {
    use clap::Parser;
    let file = SnapshotFile::new(&document(1));
    let api = e2e::start_config_api_with(config_api::Config::parse_from([
        "config-api".to_owned(),
        "--listen=127.0.0.1:0".into(),
        format!("--snapshot={}", file.path.display()),
        // Long enough for /readyz to be seen 503 during it on a loaded machine.
        "--shutdown-drain-ms=3000".into(),
    ]))
    .await;
    let (url, readyz) = (api.url(URL), api.url("/readyz"));
    let http = reqwest::Client::new();
    let client = {
        let (http, url) = (http.clone(), url.clone());
        tokio::spawn(async move {
            let (mut answered, mut refused) = (0, 0);
            // Until the server is gone: a refused connection ends the loop.
            for _ in 0..100_000 {
                match http.get(&url).header("X-public-key", "pk_cfg").send().await {
                    Ok(r) if r.status() == StatusCode::OK => answered += 1,
                    Ok(_) => refused += 1,
                    Err(_) => break,
                }
            }
            (answered, refused)
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stopping = tokio::spawn(api.stop());
    e2e::eventually(
        Duration::from_secs(10),
        "/readyz 503 while draining",
        || async {
            let status = http.get(&readyz).send().await.ok()?.status();
            (status == StatusCode::SERVICE_UNAVAILABLE).then_some(())
        },
    )
    .await;
    let during = http.get(&url).header("X-public-key", "pk_cfg").send().await;
    assert_eq!(
        during.expect("answered while draining").status(),
        StatusCode::OK
    );
    stopping.await.expect("stop task").expect("clean stop");
    let (answered, refused) = client.await.expect("client");
    assert_eq!(refused, 0, "no request was refused while draining");
    assert!(answered > 10, "{answered} answered");
}
