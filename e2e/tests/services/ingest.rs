//! The ingest against the real broker, over real connections: events reach Kafka keyed by
//! session and in order, the size limit holds on the wire, keys follow the snapshot file.
//! Every other answer (each refusal, the page-unload form, gzip, CORS, rate limits, 503s)
//! is unit-tested on the router with a memory sink, in `ingest/src/router_tests.rs`.

use std::time::Duration;

use contract::event::EventMessage;
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
async fn size_limit_holds_on_the_wire_with_and_without_length() {
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

    // Just under the limit passes.
    let fits = json!({ "events": [event("s", "impression")], "padding": "x".repeat(1_048_000) });
    let response = f.post_keyed().json(&fits).send().await.expect("answer");
    assert_eq!(response.status(), StatusCode::ACCEPTED);
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
