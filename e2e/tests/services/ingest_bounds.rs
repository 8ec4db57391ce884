//! The ingest's answers and memory stay bounded whatever a client sends, checked on the
//! real binary (a process of its own, so that its peak memory is its own) against the
//! real broker: a batch of 200 000 empty events gets a short 400 that lists the first
//! rejections and counts them all, sixteen such batches at once keep the process under
//! the peak memory that docs/ingest-limits.md states, and the requests hyper refuses before
//! the ingest sees them get the house JSON error body.
//!
//! `TEST_INGEST_BIN` runs the tests against another build of the ingest (to measure an
//! older one); by default the workspace's, built by `cargo build --release --bins`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use e2e::{ChildProcess, SnapshotFile};
use reqwest::StatusCode;
use serde_json::{Value, json};

const URL: &str = "/api/v1/analytics";
const KEY: &str = "pk_bounds";
/// Empty events per body: about 600 KB, within the 1 MiB body limit.
const EMPTY_EVENTS: usize = 200_000;
/// Requests sent at once.
const AT_ONCE: usize = 16;
/// Most bytes of an error answer, whatever the batch.
const MAX_ANSWER_BYTES: usize = 16 * 1024;

/// The ingest binary as a process of its own, killed when dropped.
struct IngestProcess {
    child: ChildProcess,
    addr: SocketAddr,
    _snapshot: SnapshotFile,
}

impl IngestProcess {
    /// Started with its default settings (test addresses aside) and ready.
    async fn start() -> Self {
        let snapshot = e2e::one_experiment_snapshot(KEY);
        let addr: SocketAddr = format!("127.0.0.1:{}", e2e::free_port())
            .parse()
            .expect("an address");
        let binary = std::env::var_os("TEST_INGEST_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| e2e::workspace_binary("ingest"));
        let child = Command::new(binary)
            .arg(format!("--listen={addr}"))
            .arg(format!("--kafka-brokers={}", e2e::kafka_brokers()))
            .arg(format!("--topic={}", e2e::unique("bounds-")))
            .arg(format!("--snapshot={}", snapshot.path.display()))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .expect("the ingest starts");
        let ingest = Self {
            child: ChildProcess(child),
            addr,
            _snapshot: snapshot,
        };
        e2e::until_ready(&ingest.url("/readyz"), true, "the ingest process").await;
        ingest
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// A line of `/proc/PID/status` (`VmHWM`: the most resident memory the process ever
    /// had; `VmRSS`: now), in MiB.
    fn memory_mib(&self, field: &str) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.0.id()))
            .expect("the ingest is running");
        let kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no {field} in /proc/PID/status"));
        kib / 1024.0
    }
}

/// The peak resident memory docs/ingest-limits.md promises for [`AT_ONCE`] such bodies.
fn documented_peak_mib() -> f64 {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/ingest-limits.md");
    let page = std::fs::read_to_string(&path).expect("docs/ingest-limits.md");
    page.lines()
        .find(|l| l.starts_with("| peak resident memory"))
        .and_then(|l| l.split("under ").nth(1)?.split(" MiB").next()?.parse().ok())
        .expect("a row `| peak resident memory ... | under N MiB |` in docs/ingest-limits.md")
}

/// `{"events":[{},{},...]}`.
fn empty_events(n: usize) -> String {
    let mut body = String::with_capacity(n * 3 + 16);
    body.push_str(r#"{"events":["#);
    for i in 0..n {
        if i > 0 {
            body.push(',');
        }
        body.push_str("{}");
    }
    body.push_str("]}");
    body
}

/// Sends `body` and returns the status, the answer's size and the answer.
async fn post(http: &reqwest::Client, url: &str, body: String) -> (StatusCode, usize, Value) {
    let response = http
        .post(url)
        .header("X-public-key", KEY)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("an answer");
    let status = response.status();
    let bytes = response.bytes().await.expect("a whole answer");
    let answer = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, bytes.len(), answer)
}

fn check_refused(status: StatusCode, size: usize, answer: &Value) {
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        size < MAX_ANSWER_BYTES,
        "the answer is {size} bytes, over {MAX_ANSWER_BYTES}"
    );
    assert_eq!(answer["error"]["code"], "no_valid_events", "{answer}");
    assert_eq!(answer["accepted"], 0);
    assert_eq!(
        answer["rejectedCount"], EMPTY_EVENTS,
        "every rejection counted"
    );
    let listed = answer["rejected"].as_array().expect("a rejected list");
    assert_eq!(listed.len(), 100, "the first 100 listed");
    assert_eq!(listed[0]["index"], 0);
    assert_eq!(listed[99]["index"], 99);
    assert_eq!(listed[0]["error"], "field experimentId is required");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_of_empty_events_get_short_answers_within_the_documented_memory() {
    let ingest = IngestProcess::start().await;
    let url = ingest.url(URL);
    let http = reqwest::Client::new();
    let body = empty_events(EMPTY_EVENTS);
    let idle = ingest.memory_mib("VmRSS");
    println!(
        "body: {} bytes, {EMPTY_EVENTS} empty events; ingest idle: {idle:.1} MiB resident",
        body.len()
    );

    let started = Instant::now();
    let (status, size, answer) = post(&http, &url, body.clone()).await;
    println!(
        "one request: {status}, answer {size} bytes, in {:.2} s; peak resident {:.1} MiB",
        started.elapsed().as_secs_f64(),
        ingest.memory_mib("VmHWM")
    );
    let one = (status, size, answer);

    let started = Instant::now();
    let answers =
        futures::future::join_all((0..AT_ONCE).map(|_| post(&http, &url, body.clone()))).await;
    let peak = ingest.memory_mib("VmHWM");
    let sizes: Vec<usize> = answers.iter().map(|(_, size, _)| *size).collect();
    println!(
        "{AT_ONCE} at once: answers of {:?} bytes, in {:.2} s; peak resident {peak:.1} MiB, \
         now {:.1} MiB",
        sizes,
        started.elapsed().as_secs_f64(),
        ingest.memory_mib("VmRSS")
    );
    for (status, size, answer) in std::iter::once(&one).chain(&answers) {
        check_refused(*status, *size, answer);
    }
    let documented = documented_peak_mib();
    assert!(
        peak < documented,
        "peak resident memory {peak:.1} MiB, over the documented {documented} MiB"
    );
}

/// Sends `request` on a connection of its own and reads the answer to its end: status,
/// the JSON body (or `Null`) and the head.
async fn raw(addr: SocketAddr, request: &[u8]) -> (u16, Value, String) {
    let answer = e2e::raw_exchange(addr, request).await;
    let body = serde_json::from_str(&answer.body).unwrap_or(Value::Null);
    (answer.status, body, answer.head)
}

/// What hyper refuses before the ingest sees the request (a malformed request line or
/// header, a head too large, a URI too long) is answered with the house JSON error body,
/// as every other error is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_hyper_cannot_read_get_the_json_error_body() {
    let ingest = IngestProcess::start().await;
    let many_headers: String = (0..150).map(|i| format!("x-h{i}: v\r\n")).collect();
    // hyper's head buffer holds 408 KiB (a head it has read whole by then is taken).
    let long_header = format!("x-long: {}\r\n", "v".repeat(1024 * 1024));
    let long_uri = format!("/api/v1/analytics?{}", "q".repeat(70 * 1024));
    let cases: Vec<(String, u16, &str)> = vec![
        ("NOT HTTP AT ALL\r\n\r\n".into(), 400, "malformed_request"),
        (
            "POST /api/v1/analytics HTTP/1.1\r\nhost: x\r\nbad header: v\r\n\r\n".into(),
            400,
            "malformed_request",
        ),
        (
            "POST /api/v1/analytics HTTP/1.1\r\nhost: x\r\ncontent-length: ten\r\n\r\n".into(),
            400,
            "malformed_request",
        ),
        (
            format!("GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n{many_headers}\r\n"),
            431,
            "request_headers_too_large",
        ),
        (
            format!("GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n{long_header}\r\n"),
            431,
            "request_headers_too_large",
        ),
        (
            format!("GET {long_uri} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"),
            414,
            "uri_too_long",
        ),
    ];
    for (request, status, code) in cases {
        let shown: String = request.chars().take(40).collect();
        let (answered, body, head) = raw(ingest.addr, request.as_bytes()).await;
        println!("{shown:?}: {answered} {body}");
        assert_eq!(answered, status, "{shown:?}: {head}");
        assert_eq!(body["error"]["code"], code, "{shown:?}: {head}");
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| m.ends_with('.')),
            "{shown:?}: {body}"
        );
        assert!(
            head.to_ascii_lowercase()
                .contains("content-type: application/json"),
            "{head}"
        );
    }

    // The ingest's own answers are left as they are, on the same kind of connection.
    let (status, body, _) = raw(
        ingest.addr,
        b"GET /nowhere HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert_eq!((status, &body["error"]["code"]), (404, &json!("not_found")));
    // A body that is not UTF-8, or not JSON: the ingest's own 400, with its body.
    let request =
        b"POST /api/v1/analytics HTTP/1.1\r\nhost: x\r\nx-public-key: pk_bounds\r\nconnection: close\r\ncontent-length: 16\r\n\r\n{\"events\":[\"\xff\"]}".to_vec();
    let (status, body, _) = raw(ingest.addr, &request).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!("malformed_json")),
        "{body}"
    );
}

/// An event with a lone UTF-16 surrogate escape or a number beyond a float is refused for
/// what it is, not as "no JSON object"; the valid events of its batch reach Kafka.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_no_program_can_read_are_refused_as_invalid_json() {
    let ingest = IngestProcess::start().await;
    let body = r#"{"events":[
        {"eventName":"impression","experimentId":"exp_1","sessionId":"s"},
        {"eventName":"\ud800","experimentId":"exp_1","sessionId":"s"},
        {"eventName":"click","experimentId":"exp_1","sessionId":"s","loadTime":1e400}
    ]}"#;
    let (status, _, answer) = post(&reqwest::Client::new(), &ingest.url(URL), body.into()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    assert_eq!(answer["accepted"], 1);
    let reasons: Vec<&str> = answer["rejected"]
        .as_array()
        .expect("a rejected list")
        .iter()
        .filter_map(|r| r["error"].as_str())
        .collect();
    assert_eq!(
        reasons,
        [
            "an event is not valid JSON: a string holds a lone UTF-16 surrogate escape \
             (\\ud800 to \\udfff without its pair)",
            "an event is not valid JSON: a number is out of range (beyond a 64-bit float)",
        ]
    );
}
