//! The ingest against the real broker: both body forms, every rejection, limits, CORS.

use std::io::Write;
use std::time::Duration;

use common::event::EventMessage;
use e2e::{Running, SnapshotFile};
use rdkafka::Message;
use reqwest::StatusCode;
use serde_json::{Value, json};

const URL: &str = "/api/v1/analytics";

fn snapshot() -> SnapshotFile {
    SnapshotFile::new(&json!({
        "version": 1,
        "experiments": [{ "id": "exp_1", "status": "live", "variants": [
            { "id": "var_1", "weight": 100, "control": true, "parts": {} }] }],
        "keys": [
            { "publicKey": "pk_ingest", "experiments": ["exp_1"] },
            { "publicKey": "pk_strict", "experiments": ["exp_1"],
              "allowedOrigins": ["https://shop.example"] }
        ]
    }))
}

struct Fixture {
    snapshot: SnapshotFile,
    topic: String,
    ingest: Running,
    http: reqwest::Client,
}

impl Fixture {
    async fn new() -> Self {
        let snapshot = snapshot();
        let topic = e2e::unique("ingest-");
        let ingest = e2e::start_ingest(e2e::ingest_config(&snapshot.path, &topic, &[])).await;
        Self {
            snapshot,
            topic,
            ingest,
            http: reqwest::Client::new(),
        }
    }

    fn post(&self) -> reqwest::RequestBuilder {
        self.http.post(self.ingest.url(URL))
    }

    /// A POST with the test key in `X-public-key`.
    fn post_keyed(&self) -> reqwest::RequestBuilder {
        self.post().header("X-public-key", "pk_ingest")
    }

    async fn messages(&self, want: usize) -> Vec<rdkafka::message::OwnedMessage> {
        e2e::read_topic(&self.topic, want, Duration::from_secs(20)).await
    }

    /// For checks that fewer than `want` were published: every request was acknowledged
    /// before this is called, so what was published is readable at once.
    async fn messages_short_of(&self, want: usize) -> Vec<rdkafka::message::OwnedMessage> {
        e2e::read_topic(&self.topic, want, Duration::from_secs(3)).await
    }
}

fn event(session: &str, name: &str) -> Value {
    json!({ "eventName": name, "experimentId": "exp_1", "sessionId": session })
}

async fn error_code(response: reqwest::Response) -> (StatusCode, String) {
    let status = response.status();
    let body: Value = response.json().await.expect("JSON error body");
    let code = body["error"]["code"]
        .as_str()
        .expect("error.code")
        .to_owned();
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "error.message missing in {body}"
    );
    (status, code)
}

fn decode(m: &rdkafka::message::OwnedMessage) -> EventMessage {
    serde_json::from_slice(m.payload().expect("payload")).expect("an event message")
}

#[tokio::test]
async fn standard_form_publishes_one_message_per_event_keyed_by_session() {
    let f = Fixture::new().await;
    let body = json!({ "events": [
        event("s-1", "impression"), event("s-2", "impression"), event("s-1", "click")
    ]});
    let response = f
        .post_keyed()
        .header("User-Agent", "Mozilla/5.0 test")
        .json(&body)
        .send()
        .await
        .expect("answer");
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    assert_eq!(
        response.json::<Value>().await.expect("JSON"),
        json!({ "accepted": 3, "rejected": [] })
    );

    let messages = f.messages(3).await;
    assert_eq!(messages.len(), 3);
    for m in &messages {
        let event = decode(m);
        assert_eq!(
            m.key(),
            Some(event.session_id.as_bytes()),
            "keyed by session"
        );
        assert_eq!(event.public_key, "pk_ingest");
        assert_eq!(event.user_agent, "Mozilla/5.0 test");
        assert_eq!(event.v, 1);
    }
    let s1: Vec<(i32, String)> = messages
        .iter()
        .map(decode)
        .zip(&messages)
        .filter(|(e, _)| e.session_id == "s-1")
        .map(|(e, m)| (m.partition(), e.event_name))
        .collect();
    assert_eq!(s1.len(), 2);
    assert_eq!(s1[0].0, s1[1].0, "one session, one partition");
    assert_eq!(
        (s1[0].1.as_str(), s1[1].1.as_str()),
        ("impression", "click"),
        "in order"
    );
    f.ingest.stop().await.expect("clean stop");
}

#[tokio::test]
async fn page_unload_form_is_accepted_with_every_beacon_content_type() {
    let f = Fixture::new().await;
    // A beacon carries no header of its own: its key is the body's `pkey`, and its events
    // are published under that key.
    for content_type in [
        Some("text/plain;charset=UTF-8"),
        Some("application/json"),
        None,
    ] {
        let body = json!({ "pkey": "pk_strict", "events": [event("beacon", "dwell_time")] });
        let mut request = f.post().body(body.to_string());
        if let Some(ct) = content_type {
            request = request.header("Content-Type", ct);
        }
        let response = request.send().await.expect("answer");
        assert_eq!(response.status(), StatusCode::ACCEPTED, "{content_type:?}");
    }
    // The same key in both places is fine.
    let response = f
        .post_keyed()
        .json(&json!({ "pkey": "pk_ingest", "events": [event("beacon", "bounce")] }))
        .send()
        .await
        .expect("answer");
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let messages = f.messages(4).await;
    let keys: Vec<(String, String)> = messages
        .iter()
        .map(decode)
        .map(|e| (e.event_name, e.public_key))
        .collect();
    assert_eq!(keys.len(), 4, "{keys:?}");
    for (name, key) in &keys {
        let want = if name == "bounce" {
            "pk_ingest"
        } else {
            "pk_strict"
        };
        assert_eq!(key, want, "the key of {name}: {keys:?}");
    }
    f.ingest.stop().await.expect("clean stop");
}

#[tokio::test]
async fn key_problems_are_refused_with_their_codes() {
    let f = Fixture::new().await;
    let body = json!({ "events": [event("s", "impression")] });
    let cases: [(Option<&str>, Option<&str>, StatusCode, &str); 5] = [
        (None, None, StatusCode::UNAUTHORIZED, "missing_public_key"),
        (
            Some("sk_nope"),
            None,
            StatusCode::UNAUTHORIZED,
            "invalid_public_key",
        ),
        (
            None,
            Some("pk bad"),
            StatusCode::UNAUTHORIZED,
            "invalid_public_key",
        ),
        (
            Some("pk_unknown"),
            None,
            StatusCode::UNAUTHORIZED,
            "unknown_public_key",
        ),
        (
            Some("pk_ingest"),
            Some("pk_strict"),
            StatusCode::BAD_REQUEST,
            "conflicting_public_keys",
        ),
    ];
    for (header, pkey, status, code) in cases {
        let mut body = body.clone();
        if let Some(p) = pkey {
            body["pkey"] = json!(p);
        }
        let mut request = f.post().json(&body);
        if let Some(h) = header {
            request = request.header("X-public-key", h);
        }
        let got = error_code(request.send().await.expect("answer")).await;
        assert_eq!(
            got,
            (status, code.to_owned()),
            "header {header:?} pkey {pkey:?}"
        );
    }
    assert!(f.messages_short_of(1).await.is_empty(), "nothing published");
    f.ingest.stop().await.expect("clean stop");
}

#[tokio::test]
async fn partial_batches_keep_the_valid_events() {
    let f = Fixture::new().await;
    let response = f
        .post_keyed()
        .json(&json!({ "events": [
            event("s", "impression"),
            { "eventName": "click", "experimentId": "exp_1", "sessionId": "s", "scrollDepth": 101 },
            "not an object"
        ]}))
        .send()
        .await
        .expect("answer");
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let body: Value = response.json().await.expect("JSON");
    assert_eq!(body["accepted"], 1);
    let rejected = body["rejected"].as_array().expect("rejected list");
    assert_eq!(rejected.len(), 2);
    assert_eq!(
        (rejected[0]["index"].as_u64(), rejected[1]["index"].as_u64()),
        (Some(1), Some(2))
    );
    assert!(
        rejected[0]["error"]
            .as_str()
            .expect("error")
            .contains("scrollDepth")
    );

    let response = f
        .post_keyed()
        .json(&json!({ "events": [{ "eventName": "x" }] }))
        .send()
        .await
        .expect("answer");
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body: Value = response.json().await.expect("JSON");
    assert_eq!(body["accepted"], 0);
    assert_eq!(body["rejected"][0]["index"], 0);
    assert_eq!(body["error"]["code"], "no_valid_events");

    assert_eq!(
        f.messages(2).await.len(),
        1,
        "only the valid event is published"
    );
    f.ingest.stop().await.expect("clean stop");
}

#[tokio::test]
async fn malformed_bodies_get_400_never_a_crash() {
    let f = Fixture::new().await;
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let cases = [
        ("{\"events\": [", "malformed_json"),
        ("", "malformed_json"),
        (deep.as_str(), "malformed_json"),
        ("[1, 2]", "invalid_body"),
        ("{\"events\": {}}", "invalid_body"),
        ("{\"events\": []}", "invalid_body"),
        ("{}", "invalid_body"),
        (
            r#"{"sentAt": "now", "events": [{"eventName": "a", "experimentId": "exp_1", "sessionId": "s"}]}"#,
            "invalid_body",
        ),
    ];
    for (body, code) in cases {
        let response = f
            .post_keyed()
            .header("Content-Type", "application/json")
            .body(body.to_owned())
            .send()
            .await
            .expect("answer");
        let shown = &body[..body.len().min(20)];
        assert_eq!(
            error_code(response).await,
            (StatusCode::BAD_REQUEST, code.to_owned()),
            "{shown}"
        );
    }
    let response = f
        .post_keyed()
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body("events=1")
        .send()
        .await
        .expect("answer");
    assert_eq!(
        error_code(response).await,
        (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type".to_owned()
        )
    );
    let response = f.http.get(f.ingest.url(URL)).send().await.expect("answer");
    assert_eq!(
        error_code(response).await,
        (
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed".to_owned()
        )
    );
    f.ingest.stop().await.expect("clean stop");
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(bytes).expect("compressed");
    encoder.finish().expect("compressed")
}

#[tokio::test]
async fn size_limit_holds_with_and_without_length_and_after_gzip() {
    let f = Fixture::new().await;
    let padding = "x".repeat(1_048_576);
    let oversized = json!({ "events": [event("s", "impression")], "padding": padding }).to_string();

    // With a Content-Length.
    let response = f
        .post_keyed()
        .body(oversized.clone())
        .send()
        .await
        .expect("answer");
    assert_eq!(
        error_code(response).await,
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large".to_owned()
        )
    );

    // Chunked, without a Content-Length.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = oversized
        .as_bytes()
        .chunks(64 * 1024)
        .map(|c| Ok(c.to_vec()))
        .collect();
    let response = f
        .post_keyed()
        .body(reqwest::Body::wrap_stream(futures::stream::iter(chunks)))
        .send()
        .await
        .expect("answer");
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);

    // Gzip: a small valid body is accepted; a bomb is refused.
    let small = json!({ "events": [event("gz", "impression")] }).to_string();
    let response = f
        .post_keyed()
        .header("Content-Encoding", "gzip")
        .body(gzip(small.as_bytes()))
        .send()
        .await
        .expect("answer");
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let bomb = gzip(&vec![b' '; 50 * 1024 * 1024]);
    assert!(bomb.len() < 100 * 1024, "the bomb is small on the wire");
    let response = f
        .post_keyed()
        .header("Content-Encoding", "gzip")
        .body(bomb)
        .send()
        .await
        .expect("answer");
    assert_eq!(
        error_code(response).await,
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large".to_owned()
        )
    );

    // Just under the limit passes.
    let fits = json!({ "events": [event("s", "impression")], "padding": "x".repeat(1_048_000) });
    let response = f.post_keyed().json(&fits).send().await.expect("answer");
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    f.ingest.stop().await.expect("clean stop");
}

#[tokio::test]
async fn cors_preflight_and_key_origin_restriction() {
    let f = Fixture::new().await;
    let response = f
        .http
        .request(reqwest::Method::OPTIONS, f.ingest.url(URL))
        .header("Origin", "https://any.example")
        .header("Access-Control-Request-Method", "POST")
        .header(
            "Access-Control-Request-Headers",
            "content-type,x-public-key",
        )
        .send()
        .await
        .expect("answer");
    assert!(response.status().is_success());
    let h = response.headers();
    assert_eq!(h["access-control-allow-origin"], "https://any.example");
    assert_eq!(h["access-control-allow-credentials"], "true");
    assert_eq!(h["access-control-max-age"], "86400");
    let allowed = h["access-control-allow-headers"]
        .to_str()
        .expect("text")
        .to_ascii_lowercase();
    for header in ["content-type", "accept", "x-public-key"] {
        assert!(allowed.contains(header), "{header} not in {allowed}");
    }

    let body = json!({ "events": [event("s", "impression")] });
    let send = |key: &'static str, origin: &'static str| {
        f.post()
            .header("X-public-key", key)
            .header("Origin", origin)
            .json(&body)
            .send()
    };
    for (key, origin) in [
        ("pk_ingest", "https://any.example"),
        ("pk_strict", "https://shop.example"),
    ] {
        let response = send(key, origin).await.expect("answer");
        assert_eq!(response.status(), StatusCode::ACCEPTED);
        assert_eq!(response.headers()["access-control-allow-origin"], origin);
    }

    let response = send("pk_strict", "https://evil.example")
        .await
        .expect("answer");
    assert!(
        response
            .headers()
            .get("access-control-allow-origin")
            .is_none()
    );
    assert_eq!(
        error_code(response).await,
        (StatusCode::FORBIDDEN, "origin_not_allowed".to_owned())
    );
    assert_eq!(f.messages_short_of(3).await.len(), 2);
    f.ingest.stop().await.expect("clean stop");
}

#[tokio::test]
async fn keys_follow_the_snapshot_file() {
    let f = Fixture::new().await;
    let post = |key: &'static str| {
        f.post()
            .header("X-public-key", key)
            .json(&json!({ "events": [event("s", "impression")] }))
            .send()
    };
    let (status, code) = error_code(post("pk_new").await.expect("answer")).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::UNAUTHORIZED, "unknown_public_key")
    );
    f.snapshot.replace(&json!({
        "version": 2,
        "experiments": [{ "id": "exp_1", "status": "live", "variants": [
            { "id": "var_1", "weight": 100, "control": true, "parts": {} }] }],
        "keys": [{ "publicKey": "pk_new", "experiments": ["exp_1"] }]
    }));
    // The snapshot is polled every 100 ms; a loaded machine may take longer to reload.
    e2e::eventually(Duration::from_secs(30), "the new key accepted", || async {
        (post("pk_new").await.ok()?.status() == StatusCode::ACCEPTED).then_some(())
    })
    .await;
    let response = post("pk_ingest").await.expect("answer");
    assert_eq!(
        response.status(),
        StatusCode::UNAUTHORIZED,
        "a removed key is refused"
    );
    f.ingest.stop().await.expect("clean stop");
}
