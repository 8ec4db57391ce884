//! The nginx front relays the ingest's answers: a body over the limit gets the JSON 413
//! every time, through the front and directly, never a 502 (which a client retries for
//! ever) nor a reset connection. The ingest used to answer after reading the first MiB and
//! close the socket with the rest of the body unread, so the kernel reset the connection
//! while nginx was still writing the body ("writev() failed (32: Broken pipe) while
//! sending request to upstream"): a race, hence the repeated requests.
//!
//! While a service behind it is down or restarting, the front answers like the services
//! do when they cannot serve: a JSON 503 with a code and `Retry-After`, never nginx's own
//! 502 HTML page; the services' own answers still pass through untouched.

use std::collections::BTreeMap;

use ingest::error::IngestError;

const KEY: &str = "pk_front";
const TOO_LARGE: IngestError = IngestError::PayloadTooLarge(1_048_576);

/// Bodies over the limit: just over it, the most the front passes on (its
/// `client_max_body_size 2m`, beyond which it answers the same 413 itself, checked here to
/// be the ingest's very JSON), and far beyond.
const SIZES: [(&str, usize); 3] = [
    ("1.1 MB", 1_100_000),
    ("2 MiB", 2 * 1024 * 1024),
    ("8 MB", 8_000_000),
];

/// Requests per size and path, `CONCURRENT` at a time: without the ingest's fix, a third
/// to nearly all of those of 1.1 MB and 2 MiB through the front got a 502 on a 2-core
/// machine, and a quarter of the direct 8 MB ones a broken connection.
const ROUNDS: usize = 40;
const CONCURRENT: usize = 4;

/// A valid batch padded to `size` bytes: refused for its size alone.
fn oversized(size: usize) -> Vec<u8> {
    let event = r#"{"eventName":"impression","experimentId":"exp_1","sessionId":"s"}"#;
    let mut body = format!(r#"{{"events":[{event}],"padding":""#).into_bytes();
    body.resize(size - 2, b'x');
    body.extend_from_slice(b"\"}");
    body
}

/// `"413 payload_too_large"` (say) when the answer is the ingest's own JSON answer of
/// `expected`, else what came.
async fn outcome(
    client: &reqwest::Client,
    url: &str,
    content_type: &str,
    body: Vec<u8>,
    expected: &IngestError,
) -> String {
    let response = match client
        .post(url)
        .header("X-public-key", KEY)
        .header("Content-Type", content_type)
        .body(body)
        .send()
        .await
    {
        Ok(response) => response,
        Err(e) => return format!("no answer: {}", root_cause(&e)),
    };
    let status = response.status();
    let json = response
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    let body = match response.bytes().await {
        Ok(body) => body,
        Err(e) => return format!("{status}, body cut: {}", root_cause(&e)),
    };
    let (want_status, code) = expected.status_and_code();
    let want_body = http_kit::error::body(code, &expected.to_string());
    match serde_json::from_slice::<serde_json::Value>(&body) {
        Ok(value) if json && status == want_status && value == want_body => {
            format!("{} {code}", status.as_u16())
        }
        _ => format!("{status} {}", String::from_utf8_lossy(&body)),
    }
}

fn root_cause(e: &dyn std::error::Error) -> String {
    let mut cause = e;
    while let Some(source) = cause.source() {
        cause = source;
    }
    cause.to_string()
}

/// `ROUNDS` posts of each of `sizes` to `url`, `CONCURRENT` at a time, each expecting the
/// ingest's answer `expected`: each size's outcomes and their counts.
async fn tally(
    url: &str,
    content_type: &str,
    sizes: &[(&str, usize)],
    expected: &IngestError,
) -> BTreeMap<String, BTreeMap<String, usize>> {
    let client = reqwest::Client::new();
    let mut all = BTreeMap::new();
    for &(name, size) in sizes {
        let body = oversized(size);
        let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
        for _ in 0..ROUNDS / CONCURRENT {
            let wave = (0..CONCURRENT)
                .map(|_| outcome(&client, url, content_type, body.clone(), expected));
            for answer in futures::future::join_all(wave).await {
                *outcomes.entry(answer).or_default() += 1;
            }
        }
        all.insert(name.to_owned(), outcomes);
    }
    all
}

/// Fails unless every outcome of `tallies` is `want`.
fn assert_always(tallies: &BTreeMap<String, BTreeMap<String, usize>>, want: &str, what: &str) {
    for (size, outcomes) in tallies {
        let every_time: BTreeMap<String, usize> = [(want.to_owned(), ROUNDS)].into();
        assert_eq!(outcomes, &every_time, "{size} {what}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_body_always_gets_the_json_413_through_the_front_and_directly() {
    let file = e2e::one_experiment_snapshot(KEY);
    let topic = e2e::unique("front-");
    let ingest = e2e::start_ingest(e2e::ingest_config(&file.path, &topic, &[])).await;
    let config_api = e2e::start_config_api(&file.path).await;
    let front = e2e::Front::start(ingest.addr, config_api.addr).await;
    let through_front = format!("{}/api/v1/analytics", front.url());
    let json = "application/json";

    let front_413 = tally(&through_front, json, &SIZES, &TOO_LARGE).await;
    let direct_413 = tally(&ingest.url("/api/v1/analytics"), json, &SIZES, &TOO_LARGE).await;
    // Another answer given before the body is read: the same race, the same cure.
    let unsupported = IngestError::UnsupportedMediaType;
    let front_415 = tally(&through_front, "text/csv", &SIZES[..1], &unsupported).await;
    eprintln!(
        "through the front: {front_413:#?}\ndirect: {direct_413:#?}\n\
         text/csv through the front: {front_415:#?}"
    );
    // nginx wrote every body it passed on to its end: the ingest read them.
    let errors =
        std::fs::read_to_string(front.access_log().with_file_name("error.log")).unwrap_or_default();
    let broken: Vec<&str> = errors
        .lines()
        .filter(|l| l.contains("while sending request to upstream"))
        .collect();
    eprintln!("the front's errors writing to the ingest: {}", broken.len());

    assert_always(&front_413, "413 payload_too_large", "through the front");
    assert_always(&direct_413, "413 payload_too_large", "direct");
    assert_always(
        &front_415,
        "415 unsupported_media_type",
        "text/csv through the front",
    );
    assert!(broken.is_empty(), "{broken:#?}");

    drop(front);
    config_api.stop().await.expect("clean stop");
    ingest.stop().await.expect("clean stop");
}

/// What the front answered: status, `Retry-After`, the mirrored origin, and the body.
struct Answer {
    status: u16,
    retry_after: Option<String>,
    allow_origin: Option<String>,
    content_type: String,
    body: String,
}

async fn answer(request: reqwest::RequestBuilder) -> Answer {
    let response = request.send().await.expect("the front answers");
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let retry_after = header("retry-after");
    let allow_origin = header("access-control-allow-origin");
    let content_type = header("content-type").unwrap_or_default();
    let status = response.status().as_u16();
    let body = response.text().await.expect("a body");
    Answer {
        status,
        retry_after,
        allow_origin,
        content_type,
        body,
    }
}

/// Both API paths through `front`, as a browser on `ORIGIN` sends them.
async fn both_paths(client: &reqwest::Client, front: &e2e::Front) -> [(&'static str, Answer); 2] {
    let analytics = client
        .post(format!("{}/api/v1/analytics", front.url()))
        .header("X-public-key", KEY)
        .header("Origin", ORIGIN)
        .header("Content-Type", "application/json")
        .body(r#"{"events":[{"eventName":"impression","experimentId":"exp_1","sessionId":"s"}]}"#);
    let experiments = client
        .get(format!("{}/api/v1/experiments", front.url()))
        .header("X-public-key", KEY)
        .header("Origin", ORIGIN);
    [
        ("analytics", answer(analytics).await),
        ("experiments", answer(experiments).await),
    ]
}

const ORIGIN: &str = "https://shop.example";

/// The front's answer when the service behind a path does not answer.
fn assert_unavailable(path: &str, answer: &Answer) {
    assert_eq!(answer.status, 503, "{path}: {}", answer.body);
    assert!(
        answer.content_type.starts_with("application/json"),
        "{path}: {}",
        answer.content_type
    );
    let body: serde_json::Value = serde_json::from_str(&answer.body)
        .unwrap_or_else(|e| panic!("{path}: not JSON ({e}): {}", answer.body));
    assert_eq!(
        body["error"]["code"], "service_unavailable",
        "{path}: {body}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{path}: {body}"
    );
    let seconds: u32 = answer
        .retry_after
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{path}: Retry-After {:?}", answer.retry_after));
    assert!(seconds >= 1, "{path}: Retry-After {seconds}");
    // A page's script can read it: the origin mirrored, as the services do.
    assert_eq!(answer.allow_origin.as_deref(), Some(ORIGIN), "{path}");
}

/// Nothing listens behind the front (a service that is down, or between its stop and its
/// start): both paths get the JSON 503 with `Retry-After`.
#[tokio::test]
async fn with_nothing_behind_it_the_front_answers_the_json_503_with_retry_after() {
    let dead = |port: u16| std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let front = e2e::Front::start(dead(e2e::free_port()), dead(e2e::free_port())).await;
    let client = reqwest::Client::new();
    for (path, answer) in both_paths(&client, &front).await {
        assert_unavailable(path, &answer);
    }
}

/// Services that answer, then stop: first their own answers pass through as they are (a
/// 401 is the ingest's, not the front's), then, once stopped, the front's JSON 503. The
/// front keeps connections to the services open (`keepalive`): those die with the service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_that_stops_behind_the_front_gives_the_json_503_not_nginx_s_502() {
    let file = e2e::one_experiment_snapshot(KEY);
    let topic = e2e::unique("front-stop-");
    let ingest = e2e::start_ingest(e2e::ingest_config(&file.path, &topic, &[])).await;
    let config_api = e2e::start_config_api(&file.path).await;
    let front = e2e::Front::start(ingest.addr, config_api.addr).await;
    let client = reqwest::Client::new();

    let [(_, accepted), (_, served)] = both_paths(&client, &front).await;
    assert_eq!(accepted.status, 202, "{}", accepted.body);
    assert_eq!(served.status, 200, "{}", served.body);
    // A service's error passes through untouched: no key is the ingest's own 401.
    let unauthorized = answer(
        client
            .post(format!("{}/api/v1/analytics", front.url()))
            .header("Content-Type", "application/json")
            .body(r#"{"events":[]}"#),
    )
    .await;
    assert_eq!(unauthorized.status, 401, "{}", unauthorized.body);
    let body: serde_json::Value = serde_json::from_str(&unauthorized.body).expect("JSON");
    assert_eq!(body["error"]["code"], "missing_public_key", "{body}");
    assert_eq!(unauthorized.retry_after, None);

    ingest.stop().await.expect("clean stop");
    config_api.stop().await.expect("clean stop");
    for (path, answer) in both_paths(&client, &front).await {
        assert_unavailable(path, &answer);
    }
    // nginx logged the failed connections: the 503s are the front's, for a dead upstream.
    let errors =
        std::fs::read_to_string(front.access_log().with_file_name("error.log")).unwrap_or_default();
    assert!(
        errors.contains("connect() failed") || errors.contains("upstream prematurely closed"),
        "{errors}"
    );
}

/// What nginx refuses itself, before or instead of a service, gets the services' JSON
/// error shape rather than nginx's HTML page, and a page's origin gets the answer (a
/// network error instead is what the SDK retries) wherever nginx has read the headers.
#[tokio::test]
async fn the_front_s_own_refusals_are_json_with_a_code() {
    // Nothing behind it: each of these is answered by the front alone.
    let dead = |port: u16| std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let front = e2e::Front::start(dead(e2e::free_port()), dead(e2e::free_port())).await;
    let front_addr = std::net::SocketAddr::from(([127, 0, 0, 1], front.port));
    let long = "a".repeat(9000);
    let origin = format!("Origin: {ORIGIN}\r\n");
    let cases: Vec<(String, u16, &str, bool)> = vec![
        ("GARBAGE\r\n\r\n".into(), 400, "malformed_request", false),
        (
            format!(
                "POST /api/v1/analytics HTTP/1.1\r\nHost: f\r\n{origin}\
                 Transfer-Encoding: chunked\r\nConnection: close\r\n\r\nzz\r\n"
            ),
            400,
            "malformed_request",
            true,
        ),
        (
            format!("GET /nowhere HTTP/1.1\r\nHost: f\r\n{origin}Connection: close\r\n\r\n"),
            404,
            "not_found",
            true,
        ),
        (
            format!(
                "TRACE /api/v1/analytics HTTP/1.1\r\nHost: f\r\n{origin}Connection: close\r\n\r\n"
            ),
            405,
            "method_not_allowed",
            true,
        ),
        (
            format!(
                "POST /api/v1/analytics HTTP/1.1\r\nHost: f\r\n{origin}\
                 Content-Length: 3000000\r\nConnection: close\r\n\r\n"
            ),
            413,
            "payload_too_large",
            true,
        ),
        (
            format!("GET /{long} HTTP/1.1\r\nHost: f\r\n\r\n"),
            414,
            "uri_too_long",
            false,
        ),
        (
            format!("GET /api/v1/experiments HTTP/1.1\r\nHost: f\r\nCookie: {long}\r\n\r\n"),
            431,
            "request_headers_too_large",
            false,
        ),
        (
            "POST /api/v1/analytics HTTP/1.1\r\nHost: f\r\nTransfer-Encoding: gzip\r\n\r\n".into(),
            501,
            "unsupported_transfer_encoding",
            false,
        ),
        (
            "GET / HTTP/2.0\r\nHost: f\r\n\r\n".into(),
            505,
            "http_version_not_supported",
            false,
        ),
    ];
    for (request, status, code, mirrored) in cases {
        let what = request.lines().next().unwrap_or_default().chars().take(60);
        let what: String = what.collect();
        let answer = e2e::raw_exchange(front_addr, request.as_bytes()).await;
        let (got, head, body) = (answer.status, &answer.head, &answer.body);
        assert_eq!(got, status, "{what}: {body}");
        assert!(
            answer
                .header("content-type")
                .is_some_and(|t| t.starts_with("application/json")),
            "{what}: {head}"
        );
        let body: serde_json::Value =
            serde_json::from_str(body).unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {body}"));
        assert_eq!(body["error"]["code"], code, "{what}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{what}: {body}"
        );
        if mirrored {
            assert_eq!(
                answer.header("access-control-allow-origin"),
                Some(ORIGIN),
                "{what}: {head}"
            );
        }
    }
}
