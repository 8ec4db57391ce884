//! The whole router (CORS, the analytics route, the fallbacks) with a memory sink in place
//! of Kafka: every answer of `POST /api/v1/analytics` but those that need a real broker,
//! and what reaches the sink, with no server. The Kafka sink is tested end to end
//! (`e2e/tests/services/ingest.rs`, `ingest_durability.rs`, `slow_dependencies.rs`).

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, Request, StatusCode, request};
use contract::event::EventMessage;
use contract::snapshot::Snapshot;
use http_body_util::BodyExt;
use http_kit::ops::{Readiness, RequestCounter};
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::app::router;
use crate::budget::{Budget, cost};
use crate::routes::{ANALYTICS_PATH, Api};
use crate::sink::SinkError;
use crate::sink::memory::{MemorySink, Taken};
use crate::state::AppState;

const LIMIT: usize = 1_048_576;

fn snapshot(document: &Value) -> Snapshot {
    Snapshot::from_json(document.to_string().as_bytes()).expect("a valid snapshot")
}

/// The keys the tests send with; the ingest looks at a key's entry only (its experiments
/// matter to the config-api).
fn keys_snapshot() -> Snapshot {
    snapshot(&json!({
        "version": 1,
        "experiments": [],
        "keys": [
            { "publicKey": "pk_ingest", "experiments": [] },
            { "publicKey": "pk_strict", "experiments": [],
              "allowedOrigins": ["https://shop.example"] },
            { "publicKey": "pk_limited", "experiments": [], "maxEventsPerSecond": 2.5 }
        ]
    }))
}

/// The router as the ingest builds it, over a memory sink and a snapshot in memory.
struct Ingest {
    router: Api,
    sink: Arc<MemorySink>,
    snapshot: Arc<ArcSwap<Snapshot>>,
}

impl Ingest {
    fn new() -> Self {
        Self::with(|_| {})
    }

    /// With the production settings, changed by `adjust`.
    fn with(adjust: impl FnOnce(&mut AppState)) -> Self {
        let sink = Arc::new(MemorySink::default());
        let snapshot = Arc::new(ArcSwap::from_pointee(keys_snapshot()));
        let mut state = AppState {
            sink: sink.clone(),
            snapshot: snapshot.clone(),
            max_body_bytes: LIMIT,
            body_read_timeout: Duration::from_secs(10),
            requests: RequestCounter::new("ingest_requests_total", ANALYTICS_PATH),
            limiter: Arc::default(),
            default_max_events_per_second: None,
            user_agent_max_bytes: 1024,
            budget: Arc::new(Budget::new(8 << 20)),
        };
        adjust(&mut state);
        let readiness = Readiness::default();
        readiness.set(true);
        Self {
            router: router(state, readiness),
            sink,
            snapshot,
        }
    }

    async fn send(&self, request: Request<Body>) -> Reply {
        let response = self
            .router
            .clone()
            .oneshot(request)
            .await
            .expect("the router is infallible");
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("a whole answer")
            .to_bytes();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).expect("a JSON answer")
        };
        Reply {
            status,
            headers,
            body,
        }
    }

    /// Sends `body` as JSON with the test key in `X-public-key`.
    async fn post_json(&self, body: &Value) -> Reply {
        self.send(json_request(keyed(), body)).await
    }

    /// The messages the sink took, decoded, with their keys.
    fn published(&self) -> Vec<(String, EventMessage)> {
        self.sink.messages().iter().map(decode).collect()
    }
}

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Value,
}

impl Reply {
    /// The status and `error.code` of an error answer, which has a message too.
    fn error(&self) -> (StatusCode, &str) {
        let message = self.body["error"]["message"].as_str();
        assert!(
            message.is_some_and(|m| !m.is_empty()),
            "no error.message in {}",
            self.body
        );
        let code = self.body["error"]["code"].as_str();
        (self.status, code.expect("an error.code"))
    }
}

fn post() -> request::Builder {
    Request::post(ANALYTICS_PATH)
}

/// A POST with the test key in `X-public-key`.
fn keyed() -> request::Builder {
    post().header("x-public-key", "pk_ingest")
}

fn json_request(builder: request::Builder, body: &Value) -> Request<Body> {
    builder
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .expect("a request")
}

fn event(session: &str, name: &str) -> Value {
    json!({ "eventName": name, "experimentId": "exp_1", "sessionId": session })
}

fn one_event() -> Value {
    json!({ "events": [event("s", "impression")] })
}

fn decode(taken: &Taken) -> (String, EventMessage) {
    let key = String::from_utf8(taken.key.clone()).expect("a text key");
    let message = serde_json::from_slice(&taken.payload).expect("an event message");
    (key, message)
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(bytes).expect("compressed");
    encoder.finish().expect("compressed")
}

#[tokio::test]
async fn the_user_agent_is_kept_to_its_setting_and_bots_are_told_from_all_of_it() {
    for (max, want) in [
        (1024, "Googlebot/2.1 (+http://www.google.com/bot.html)"),
        (9, "Googlebot"),
        (0, ""),
    ] {
        let ingest = Ingest::with(|state| state.user_agent_max_bytes = max);
        let reply = ingest
            .send(json_request(
                keyed().header(
                    "user-agent",
                    "Googlebot/2.1 (+http://www.google.com/bot.html)",
                ),
                &one_event(),
            ))
            .await;
        assert_eq!(reply.status, StatusCode::ACCEPTED);
        let published = ingest.published();
        assert_eq!(published.len(), 1);
        assert_eq!(published[0].1.user_agent, want, "max {max}");
        assert!(published[0].1.is_bot, "max {max}: still a bot");
    }
}

#[tokio::test]
async fn a_batch_is_published_whole_one_message_per_event_keyed_by_session() {
    let ingest = Ingest::new();
    let body = json!({ "events": [
        event("s-1", "impression"), event("s-2", "impression"), event("s-1", "click")
    ]});
    let reply = ingest
        .send(json_request(
            keyed().header("user-agent", "Mozilla/5.0 test"),
            &body,
        ))
        .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED);
    assert_eq!(reply.body, json!({ "accepted": 3, "rejected": [] }));

    let batches = ingest.sink.batches();
    assert_eq!(batches.len(), 1, "one batch per request");
    let published: Vec<_> = batches[0].iter().map(decode).collect();
    let names: Vec<(&str, &str)> = published
        .iter()
        .map(|(key, m)| (key.as_str(), m.event_name.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("s-1", "impression"),
            ("s-2", "impression"),
            ("s-1", "click")
        ],
        "in order, keyed by session"
    );
    for (key, m) in &published {
        assert_eq!(key, &m.session_id);
        assert_eq!(m.public_key, "pk_ingest");
        assert_eq!(m.user_agent, "Mozilla/5.0 test");
        assert_eq!(m.v, 1);
    }
}

#[tokio::test]
async fn the_page_unload_form_is_accepted_with_every_beacon_content_type() {
    let ingest = Ingest::new();
    // A beacon carries no header of its own: its key is the body's `pkey`.
    for content_type in [
        Some("text/plain;charset=UTF-8"),
        Some("application/json"),
        Some("Application/JSON; charset=utf-8"),
        None,
    ] {
        let body = json!({ "pkey": "pk_strict", "events": [event("beacon", "dwell_time")] });
        let mut request = post();
        if let Some(ct) = content_type {
            request = request.header("content-type", ct);
        }
        let reply = ingest
            .send(
                request
                    .body(Body::from(body.to_string()))
                    .expect("a request"),
            )
            .await;
        assert_eq!(reply.status, StatusCode::ACCEPTED, "{content_type:?}");
    }
    // The same key in both places is fine.
    let reply = ingest
        .post_json(&json!({ "pkey": "pk_ingest", "events": [event("beacon", "bounce")] }))
        .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED);

    let keys: Vec<(String, String)> = ingest
        .published()
        .into_iter()
        .map(|(_, m)| (m.event_name, m.public_key))
        .collect();
    let beacon = ("dwell_time".to_owned(), "pk_strict".to_owned());
    let bounce = ("bounce".to_owned(), "pk_ingest".to_owned());
    assert_eq!(
        keys,
        [
            beacon.clone(),
            beacon.clone(),
            beacon.clone(),
            beacon,
            bounce
        ]
    );
}

#[tokio::test]
async fn key_problems_are_refused_with_their_codes_and_nothing_is_published() {
    let ingest = Ingest::new();
    let cases = [
        (None, None, StatusCode::UNAUTHORIZED, "missing_public_key"),
        (
            Some(&b"sk_nope"[..]),
            None,
            StatusCode::UNAUTHORIZED,
            "invalid_public_key",
        ),
        (
            Some(&b"pk_\xff"[..]),
            None,
            StatusCode::UNAUTHORIZED,
            "invalid_public_key",
        ),
        (
            None,
            Some(json!("pk bad")),
            StatusCode::UNAUTHORIZED,
            "invalid_public_key",
        ),
        (
            None,
            Some(json!(5)),
            StatusCode::UNAUTHORIZED,
            "invalid_public_key",
        ),
        (
            Some(&b"pk_unknown"[..]),
            None,
            StatusCode::UNAUTHORIZED,
            "unknown_public_key",
        ),
        (
            Some(&b"pk_ingest"[..]),
            Some(json!("pk_strict")),
            StatusCode::BAD_REQUEST,
            "conflicting_public_keys",
        ),
    ];
    for (header, pkey, status, code) in cases {
        let mut body = one_event();
        if let Some(p) = &pkey {
            body["pkey"] = p.clone();
        }
        let mut request = post();
        if let Some(h) = header {
            request = request.header("x-public-key", h);
        }
        let reply = ingest.send(json_request(request, &body)).await;
        assert_eq!(
            reply.error(),
            (status, code),
            "header {header:?} pkey {pkey:?}"
        );
    }
    assert!(ingest.sink.batches().is_empty(), "nothing published");
}

#[tokio::test]
async fn the_key_is_checked_before_the_events() {
    let ingest = Ingest::new();
    let reply = ingest
        .send(json_request(post(), &json!({ "events": [] })))
        .await;
    assert_eq!(
        reply.error(),
        (StatusCode::UNAUTHORIZED, "missing_public_key")
    );
}

#[tokio::test]
async fn a_partial_batch_publishes_only_its_valid_events() {
    let ingest = Ingest::new();
    let reply = ingest
        .post_json(&json!({ "events": [
            event("s", "impression"),
            { "eventName": "click", "experimentId": "exp_1", "sessionId": "s", "scrollDepth": 101 },
            "not an object"
        ]}))
        .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED);
    assert_eq!(reply.body["accepted"], 1);
    let rejected = reply.body["rejected"].as_array().expect("a rejected list");
    let indexes: Vec<_> = rejected.iter().map(|r| r["index"].as_u64()).collect();
    assert_eq!(indexes, [Some(1), Some(2)]);
    assert!(
        rejected[0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("scrollDepth")),
        "{rejected:?}"
    );
    let published = ingest.published();
    assert_eq!(published.len(), 1, "only the valid event");
    assert_eq!(published[0].1.event_name, "impression");
}

/// The usual batch is read in one pass into typed events; an event that pass cannot take
/// sends the batch through the reading of each event alone, with the same answers.
#[tokio::test]
async fn events_the_one_pass_reading_cannot_take_are_answered_each_alone() {
    let ingest = Ingest::new();
    // Raw text: a JSON object may repeat a field (the last one counts), and serde_json's
    // `json!` would not keep the repetition.
    let body = r#"{"events":[
        {"eventName":"impression","experimentId":"exp_1","sessionId":"s"},
        [null,"click","exp_1","s"],
        {"eventName":"a","eventName":"click","experimentId":"exp_1","sessionId":"s"},
        {"eventName":"click","experimentId":"exp_1","sessionId":7}
    ]}"#;
    let request = keyed()
        .header("content-type", "application/json")
        .body(Body::from(body))
        .expect("a request");
    let reply = ingest.send(request).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
    let rejected: Vec<_> = reply.body["rejected"]
        .as_array()
        .expect("a rejected list")
        .iter()
        .map(|r| (r["index"].as_u64(), r["error"].as_str().map(str::to_owned)))
        .collect();
    // An array would fill an event's fields by position: it is no event.
    assert_eq!(
        rejected,
        [
            (Some(1), Some("an event must be a JSON object".to_owned())),
            (Some(3), Some("field sessionId must be a string".to_owned())),
        ]
    );
    let names: Vec<_> = ingest
        .published()
        .into_iter()
        .map(|(_, message)| message.event_name)
        .collect();
    assert_eq!(names, ["impression", "click"]);
}

#[tokio::test]
async fn a_batch_without_a_valid_event_gets_400_with_each_reason() {
    let ingest = Ingest::new();
    let reply = ingest
        .post_json(&json!({ "events": [{ "eventName": "x" }, 7] }))
        .await;
    assert_eq!(reply.error(), (StatusCode::BAD_REQUEST, "no_valid_events"));
    assert_eq!(reply.body["accepted"], 0);
    let indexes: Vec<_> = reply.body["rejected"]
        .as_array()
        .expect("a rejected list")
        .iter()
        .map(|r| r["index"].as_u64())
        .collect();
    assert_eq!(indexes, [Some(0), Some(1)]);
    assert!(ingest.sink.batches().is_empty(), "nothing published");
}

#[tokio::test]
async fn malformed_bodies_get_400_with_what_is_wrong() {
    let ingest = Ingest::new();
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let cases = [
        ("{\"events\": [", "malformed_json"),
        ("", "malformed_json"),
        // Nested deeper than a value may be read, but JSON: not an object.
        (deep.as_str(), "invalid_body"),
        ("[1, 2", "malformed_json"),
        (r#"{"events": [{}], "\ud800": 1}"#, "malformed_json"),
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
        let request = keyed()
            .header("content-type", "application/json")
            .body(Body::from(body.to_owned()))
            .expect("a request");
        let reply = ingest.send(request).await;
        let shown = &body[..body.len().min(20)];
        assert_eq!(reply.error(), (StatusCode::BAD_REQUEST, code), "{shown}");
    }
    assert!(ingest.sink.batches().is_empty(), "nothing published");
}

#[tokio::test]
async fn only_json_and_text_bodies_are_taken() {
    let ingest = Ingest::new();
    for content_type in ["application/x-www-form-urlencoded", "text/csv", "json"] {
        let request = keyed()
            .header("content-type", content_type)
            .body(Body::from(one_event().to_string()))
            .expect("a request");
        let reply = ingest.send(request).await;
        assert_eq!(
            reply.error(),
            (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type"),
            "{content_type}"
        );
    }
    assert!(ingest.sink.batches().is_empty(), "nothing published");
}

#[tokio::test]
async fn the_analytics_path_takes_post_only_and_other_paths_are_not_found() {
    let ingest = Ingest::new();
    for method in ["GET", "PUT", "DELETE"] {
        let request = Request::builder()
            .method(method)
            .uri(ANALYTICS_PATH)
            .header("x-public-key", "pk_ingest")
            .body(Body::empty())
            .expect("a request");
        let reply = ingest.send(request).await;
        assert_eq!(
            reply.error(),
            (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            "{method}"
        );
        assert_eq!(reply.headers["allow"], "POST, OPTIONS", "{method}");
    }
    let reply = ingest
        .send(json_request(
            Request::post("/api/v1/analytic").header("x-public-key", "pk_ingest"),
            &one_event(),
        ))
        .await;
    assert_eq!(reply.error(), (StatusCode::NOT_FOUND, "not_found"));
    assert!(ingest.sink.batches().is_empty(), "nothing published");
}

/// A body of `text` in chunks of 64 KiB, with no `Content-Length`.
fn chunked(text: &str) -> Body {
    let chunks: Vec<Result<Bytes, std::io::Error>> = text
        .as_bytes()
        .chunks(64 * 1024)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    Body::from_stream(futures::stream::iter(chunks))
}

#[tokio::test]
async fn a_body_over_the_limit_gets_413_with_or_without_its_length() {
    // Short, so that a body waited for in vain ends in a 408 soon.
    let ingest = Ingest::with(|state| state.body_read_timeout = Duration::from_secs(2));
    let oversized =
        json!({ "events": [event("s", "impression")], "padding": "x".repeat(LIMIT) }).to_string();

    // Declared: refused by its length.
    let request = keyed()
        .header("content-length", oversized.len())
        .body(Body::from(oversized.clone()))
        .expect("a request");
    let reply = ingest.send(request).await;
    assert_eq!(
        reply.error(),
        (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
    );
    // A client that waits for `100 Continue` has sent nothing: refused before any of it.
    let unsent = Body::from_stream(futures::stream::pending::<Result<Bytes, std::io::Error>>());
    let request = keyed()
        .header("content-length", LIMIT + 1)
        .header("expect", "100-continue")
        .body(unsent)
        .expect("a request");
    let reply = ingest.send(request).await;
    assert_eq!(
        reply.error(),
        (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
    );

    // Undeclared: refused once the limit is read.
    let request = keyed().body(chunked(&oversized)).expect("a request");
    let reply = ingest.send(request).await;
    assert_eq!(
        reply.error(),
        (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
    );
    assert!(ingest.sink.batches().is_empty(), "nothing published");

    // Just under the limit passes, either way.
    let fits =
        json!({ "events": [event("s", "fits")], "padding": "x".repeat(LIMIT - 200) }).to_string();
    assert!(fits.len() <= LIMIT);
    let request = keyed()
        .header("content-length", fits.len())
        .body(Body::from(fits.clone()))
        .expect("a request");
    assert_eq!(ingest.send(request).await.status, StatusCode::ACCEPTED);
    let request = keyed().body(chunked(&fits)).expect("a request");
    assert_eq!(ingest.send(request).await.status, StatusCode::ACCEPTED);
    assert_eq!(ingest.published().len(), 2);
}

#[tokio::test]
async fn gzip_bodies_are_decoded_within_the_limit() {
    let ingest = Ingest::new();
    let gzipped = |encoding: &str, bytes: Vec<u8>| {
        keyed()
            .header("content-encoding", encoding)
            .body(Body::from(bytes))
            .expect("a request")
    };
    let small = json!({ "events": [event("gz", "impression")] }).to_string();
    let reply = ingest.send(gzipped("gzip", gzip(small.as_bytes()))).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED);
    let reply = ingest
        .send(gzipped("identity", small.clone().into_bytes()))
        .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED);
    // A stream of two members: the body split in two, each half compressed alone.
    let (head, tail) = small.split_at(small.len() / 2);
    let members = [gzip(head.as_bytes()), gzip(tail.as_bytes())].concat();
    let reply = ingest.send(gzipped("gzip", members)).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED);
    let sessions: Vec<String> = ingest.published().into_iter().map(|(k, _)| k).collect();
    assert_eq!(sessions, ["gz", "gz", "gz"]);
    // Bytes after the last member are no member: refused, not dropped.
    let trailing = [gzip(small.as_bytes()), b"GARBAGE".to_vec()].concat();
    let reply = ingest.send(gzipped("gzip", trailing)).await;
    assert_eq!(reply.error(), (StatusCode::BAD_REQUEST, "malformed_gzip"));

    // Small on the wire, over the limit once decoded.
    let bomb = gzip(&vec![b' '; 4 * LIMIT]);
    assert!(bomb.len() < LIMIT / 100, "the bomb is small on the wire");
    let reply = ingest.send(gzipped("gzip", bomb)).await;
    assert_eq!(
        reply.error(),
        (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
    );
    let reply = ingest
        .send(gzipped("gzip", small.clone().into_bytes()))
        .await;
    assert_eq!(reply.error(), (StatusCode::BAD_REQUEST, "malformed_gzip"));
    let reply = ingest.send(gzipped("br", small.into_bytes())).await;
    assert_eq!(
        reply.error(),
        (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_content_encoding"
        )
    );
    assert_eq!(ingest.sink.batches().len(), 3, "nothing more published");
}

#[tokio::test]
async fn a_body_that_does_not_arrive_in_time_gets_408() {
    let ingest = Ingest::with(|state| state.body_read_timeout = Duration::from_millis(50));
    let endless = Body::from_stream(futures::stream::pending::<Result<Bytes, std::io::Error>>());
    let reply = ingest.send(keyed().body(endless).expect("a request")).await;
    assert_eq!(
        reply.error(),
        (StatusCode::REQUEST_TIMEOUT, "request_timeout")
    );
}

#[tokio::test]
async fn a_body_that_breaks_off_gets_400() {
    let ingest = Ingest::new();
    let broken = futures::stream::iter([
        Ok(Bytes::from_static(b"{\"events\": [")),
        Err(std::io::Error::other("connection reset")),
    ]);
    let reply = ingest
        .send(keyed().body(Body::from_stream(broken)).expect("a request"))
        .await;
    assert_eq!(reply.error(), (StatusCode::BAD_REQUEST, "unreadable_body"));
}

#[tokio::test]
async fn a_cors_preflight_is_answered_for_any_origin_before_the_handler() {
    let ingest = Ingest::new();
    let request = Request::options(ANALYTICS_PATH)
        .header("origin", "https://any.example")
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "content-type,content-encoding,x-public-key",
        )
        .body(Body::empty())
        .expect("a request");
    let reply = ingest.send(request).await;
    assert!(reply.status.is_success(), "{}", reply.status);
    let h = &reply.headers;
    assert_eq!(h["access-control-allow-origin"], "https://any.example");
    assert_eq!(h["access-control-allow-credentials"], "true");
    assert_eq!(h["access-control-max-age"], "86400");
    assert_eq!(h["access-control-allow-methods"], "POST");
    assert_eq!(h["allow"], "POST, OPTIONS");
    let allowed = h["access-control-allow-headers"]
        .to_str()
        .expect("text")
        .to_ascii_lowercase();
    for header in ["content-type", "content-encoding", "accept", "x-public-key"] {
        assert!(allowed.contains(header), "{header} not in {allowed}");
    }
}

#[tokio::test]
async fn a_key_restricted_to_some_origins_gets_403_from_others() {
    let ingest = Ingest::new();
    let send = |key: &'static str, origin: &'static str| {
        let request = post().header("x-public-key", key).header("origin", origin);
        ingest.send(json_request(request, &one_event()))
    };
    for (key, origin) in [
        ("pk_ingest", "https://any.example"),
        ("pk_strict", "https://shop.example"),
    ] {
        let reply = send(key, origin).await;
        assert_eq!(reply.status, StatusCode::ACCEPTED, "{key} from {origin}");
        assert_eq!(reply.headers["access-control-allow-origin"], origin);
    }
    let reply = send("pk_strict", "https://evil.example").await;
    assert!(!reply.headers.contains_key("access-control-allow-origin"));
    assert_eq!(reply.error(), (StatusCode::FORBIDDEN, "origin_not_allowed"));
    // An origin that is not text, or a second one after the allowed one, is no way round.
    let not_text = HeaderValue::from_bytes(b"https://evil\xc3\xa9.example").expect("bytes");
    let request = post()
        .header("x-public-key", "pk_strict")
        .header("origin", not_text);
    let reply = ingest.send(json_request(request, &one_event())).await;
    assert_eq!(reply.error(), (StatusCode::FORBIDDEN, "origin_not_allowed"));
    let request = post()
        .header("x-public-key", "pk_strict")
        .header("origin", "https://shop.example")
        .header("origin", "https://evil.example");
    let reply = ingest.send(json_request(request, &one_event())).await;
    assert_eq!(reply.error(), (StatusCode::FORBIDDEN, "origin_not_allowed"));
    // The page-unload form names its key in the body, out of the CORS policy's sight.
    let beacon = json!({ "pkey": "pk_strict", "events": [event("s", "impression")] });
    let reply = ingest
        .send(json_request(
            post().header("origin", "https://evil.example"),
            &beacon,
        ))
        .await;
    assert_eq!(reply.error(), (StatusCode::FORBIDDEN, "origin_not_allowed"));
    assert_eq!(ingest.sink.batches().len(), 2, "only the allowed ones");
}

#[tokio::test]
async fn a_key_over_its_rate_gets_429_with_retry_after_and_nothing_of_it_is_published() {
    let ingest = Ingest::new();
    let five =
        json!({ "events": (0..5).map(|i| event("r", &format!("e{i}"))).collect::<Vec<_>>() });
    let send = |key: &'static str| {
        let request = post()
            .header("x-public-key", key)
            .header("origin", "https://site.example");
        ingest.send(json_request(request, &five))
    };
    // 2.5 events a second: a full bucket holds two seconds, 5 events.
    assert_eq!(send("pk_limited").await.status, StatusCode::ACCEPTED);
    let reply = send("pk_limited").await;
    assert_eq!(
        reply.error(),
        (StatusCode::TOO_MANY_REQUESTS, "rate_limited")
    );
    assert_eq!(reply.headers["retry-after"], "2");
    assert_eq!(
        reply.headers["access-control-expose-headers"],
        "retry-after"
    );
    assert!(
        reply.body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("2.5")),
        "{}",
        reply.body
    );
    // A key without a limit of its own is not limited by default.
    for _ in 0..3 {
        assert_eq!(send("pk_ingest").await.status, StatusCode::ACCEPTED);
    }
    let keys: Vec<String> = ingest
        .published()
        .into_iter()
        .map(|(_, m)| m.public_key)
        .collect();
    assert_eq!(keys.len(), 20, "the refused request published nothing");
    assert_eq!(keys.iter().filter(|k| *k == "pk_limited").count(), 5);
}

#[tokio::test]
async fn the_default_rate_limits_keys_without_their_own() {
    let ingest = Ingest::with(|state| state.default_max_events_per_second = Some(1.0));
    // One event a second: a full bucket holds 2.
    for _ in 0..2 {
        assert_eq!(
            ingest.post_json(&one_event()).await.status,
            StatusCode::ACCEPTED
        );
    }
    let reply = ingest.post_json(&one_event()).await;
    assert_eq!(
        reply.error(),
        (StatusCode::TOO_MANY_REQUESTS, "rate_limited")
    );
    assert_eq!(reply.headers["retry-after"], "1");
    assert_eq!(ingest.sink.batches().len(), 2);
}

#[tokio::test]
async fn a_sink_failure_gets_503_with_retry_after_and_its_reason() {
    for (failure, message) in [
        (
            SinkError::QueueFull,
            "The event queue is full; retry later.",
        ),
        (
            SinkError::TimedOut,
            "Kafka did not acknowledge the events in time; retry later.",
        ),
        (
            SinkError::ShuttingDown,
            "The producer is shutting down; retry later.",
        ),
        (
            SinkError::Failed,
            "Kafka did not take the events; retry later.",
        ),
        (
            SinkError::TopicMissing,
            "Kafka has no events topic (deleted, or not created yet); retry later.",
        ),
    ] {
        let ingest = Ingest::new();
        ingest.sink.fail_with(failure);
        let reply = ingest.post_json(&one_event()).await;
        assert_eq!(
            reply.error(),
            (StatusCode::SERVICE_UNAVAILABLE, "kafka_unavailable"),
            "{failure:?}"
        );
        assert_eq!(reply.headers["retry-after"], "5", "{failure:?}");
        assert_eq!(reply.body["error"]["message"], message);
        assert!(ingest.sink.batches().is_empty(), "{failure:?}");
    }
}

#[tokio::test]
async fn keys_follow_the_current_snapshot() {
    let ingest = Ingest::new();
    let send = |key: &'static str| {
        ingest.send(json_request(
            post().header("x-public-key", key),
            &one_event(),
        ))
    };
    assert_eq!(
        send("pk_new").await.error(),
        (StatusCode::UNAUTHORIZED, "unknown_public_key")
    );
    ingest.snapshot.store(Arc::new(snapshot(&json!({
        "version": 2,
        "experiments": [],
        "keys": [{ "publicKey": "pk_new", "experiments": [] }]
    }))));
    assert_eq!(send("pk_new").await.status, StatusCode::ACCEPTED);
    assert_eq!(
        send("pk_ingest").await.error(),
        (StatusCode::UNAUTHORIZED, "unknown_public_key"),
        "a removed key is refused"
    );
}

/// `{"events":[...]}` of `events`, written out.
fn events_body(events: &[&str]) -> Request<Body> {
    keyed()
        .header("content-type", "application/json")
        .body(Body::from(format!(
            r#"{{"events":[{}]}}"#,
            events.join(",")
        )))
        .expect("a request")
}

#[tokio::test]
async fn a_batch_of_many_refused_events_lists_the_first_hundred_and_counts_them_all() {
    let ingest = Ingest::new();
    let reply = ingest.send(events_body(&vec!["{}"; 200_000])).await;
    assert_eq!(reply.error(), (StatusCode::BAD_REQUEST, "no_valid_events"));
    let size = reply.body.to_string().len();
    assert!(size < 16 * 1024, "an answer of {size} bytes");
    assert_eq!(reply.body["rejectedCount"], 200_000);
    let listed = reply.body["rejected"].as_array().expect("a rejected list");
    assert_eq!(listed.len(), 100);
    assert_eq!(
        (&listed[0], &listed[99]["index"]),
        (
            &json!({ "index": 0, "error": "field experimentId is required" }),
            &json!(99)
        )
    );

    // A partly accepted batch: the same list and count.
    let valid = event("s", "impression").to_string();
    let mut events = vec!["7"; 150];
    events.push(&valid);
    let reply = ingest.send(events_body(&events)).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED);
    assert_eq!(reply.body["accepted"], 1);
    assert_eq!(reply.body["rejectedCount"], 150);
    assert_eq!(reply.body["rejected"].as_array().map(Vec::len), Some(100));
    assert_eq!(ingest.published().len(), 1);

    // The longest reasons, listed 100 times, still make a short answer.
    let unreadable = r#"{"eventName":"\ud800","experimentId":"exp_1","sessionId":"s"}"#;
    let reply = ingest.send(events_body(&vec![unreadable; 1000])).await;
    assert_eq!(reply.body["rejectedCount"], 1000);
    let size = reply.body.to_string().len();
    assert!(size < 16 * 1024, "an answer of {size} bytes");

    // A whole list has no count: the usual answer is as it was.
    let mut events = vec!["7"; 100];
    events.push(&valid);
    let reply = ingest.send(events_body(&events)).await;
    assert_eq!(reply.body["rejected"].as_array().map(Vec::len), Some(100));
    assert_eq!(reply.body.get("rejectedCount"), None, "{}", reply.body);
}

#[tokio::test]
async fn an_event_no_program_can_read_is_refused_as_invalid_json_not_as_no_object() {
    let ingest = Ingest::new();
    let reply = ingest
        .send(events_body(&[
            r#"{"eventName":"a","experimentId":"exp_1","sessionId":"s"}"#,
            r#"{"eventName":"\ud800","experimentId":"exp_1","sessionId":"s"}"#,
            r#"{"eventName":"a","experimentId":"exp_1","sessionId":"s","loadTime":1e400}"#,
        ]))
        .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.body);
    assert_eq!(
        reply.body["rejected"],
        json!([
            { "index": 1, "error": "an event is not valid JSON: a string holds a lone UTF-16 \
                surrogate escape (\\ud800 to \\udfff without its pair)" },
            { "index": 2, "error": "an event is not valid JSON: a number is out of range \
                (beyond a 64-bit float)" },
        ])
    );
}

/// A sink that holds every batch until it is opened, and counts the batches that reached it.
struct GatedSink {
    reached: std::sync::atomic::AtomicUsize,
    open: tokio::sync::Semaphore,
}

impl Default for GatedSink {
    fn default() -> Self {
        Self {
            reached: Default::default(),
            open: tokio::sync::Semaphore::new(0),
        }
    }
}

impl crate::sink::EventSink for GatedSink {
    fn publish<'a>(&'a self, _: &'a [crate::sink::Message<'a>]) -> crate::sink::Publishing<'a> {
        Box::pin(async move {
            self.reached
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _open = self.open.acquire().await;
            Ok(())
        })
    }
}

#[tokio::test]
async fn bodies_beyond_the_budget_wait_until_those_before_them_are_answered() {
    let body = json!({ "events": [event("s", "impression")], "padding": "x".repeat(600) });
    let sink = Arc::new(GatedSink::default());
    let gated = sink.clone();
    let ingest = Ingest::with(|state| {
        state.sink = gated;
        // Room for one such request and a half.
        state.budget = Arc::new(Budget::new(cost(body.to_string().len(), 0) as u32 * 3 / 2));
    });
    let reached = || sink.reached.load(std::sync::atomic::Ordering::SeqCst);
    let opener = async {
        while reached() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            reached(),
            1,
            "the second body waits for its share of the budget"
        );
        sink.open.add_permits(2);
    };
    let (first, second, ()) =
        tokio::join!(ingest.post_json(&body), ingest.post_json(&body), opener);
    assert_eq!(
        (first.status, second.status),
        (StatusCode::ACCEPTED, StatusCode::ACCEPTED)
    );
    assert_eq!(reached(), 2);
}
