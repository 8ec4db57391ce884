//! `analytics-gate`: the analysts' only way in to ClickHouse, in front of its HTTP
//! interface. It counts and bounds their queries, whatever their shape, so that no
//! analyst can take the server from the consumer, the operators or the other analysts.
//!
//! Invariants:
//! - **Analysts reach the server through the gate only.** The gate connects from its own
//!   address (`--source-address`), and `analytics-access grant --network` lets the
//!   analysts' users in from that address only. Service users (`default`…) are refused
//!   here, and the server refuses them from that address too.
//! - **At most `--max-concurrent` analysts' queries run at once, and at most
//!   `--max-concurrent-per-analyst` of one analyst**, counted here and not by the server,
//!   so no query shape escapes the count (18.x lets `SELECT … FROM system.processes`
//!   past its own caps). A query holds its place until the server's answer ends, even
//!   after its client has gone: the place is the server's work, not the connection.
//! - **Every query's time is charged** to its analyst's hour
//!   (`--execution-secs-per-hour`), however it ended: answered, failed, timed out or
//!   abandoned. Only answers that refuse the user's login are free, and a name is kept
//!   only while it has queries running or time charged: names that never log in leave
//!   nothing behind.
//! - **A query runs at most `--max-query-secs`**: then the gate answers 504 and stops it
//!   on the server (`KILL QUERY`, as the analyst), and it still holds its place until
//!   the server ends it.
//! - **The query text is screened** ([`screen`]): functions and system tables that reach
//!   other databases, other servers or other users' queries are refused. The text goes
//!   to the server whole in the body; URL parameters other than the format and the
//!   database are refused, so no setting, session or external table gets through.
//! - Every refusal is a JSON error body with a code and a sentence.

mod screen;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use base64::Engine;
use http_kit::error::{RouteError, body as error_body, respond};
use http_kit::serve::{Http, ServeArgs};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::time::Instant;

pub use screen::{Refusal, screen};

pub use crate::access::GATE_SOURCE_ADDRESS as SOURCE_ADDRESS;

/// The gate's settings.
#[derive(clap::Parser, Clone, Debug)]
#[command(
    version,
    about = "The analysts' entry point to ClickHouse's HTTP interface: counts, bounds and \
             screens their queries."
)]
pub struct GateConfig {
    /// Where analysts connect.
    #[arg(long, env = "GATE_LISTEN", default_value = "127.0.0.1:8084")]
    pub listen: SocketAddr,
    /// The ClickHouse server the analysts read (HTTP); of a list, the first.
    #[arg(long, env = "CLICKHOUSE_URL", default_value = "http://127.0.0.1:8123")]
    pub clickhouse_url: String,
    /// The address the gate connects to ClickHouse from: the only one the analysts'
    /// users accept (`analytics-access grant --network`).
    #[arg(long, env = "GATE_SOURCE_ADDRESS", default_value = SOURCE_ADDRESS)]
    pub source_address: IpAddr,
    /// Most analysts' queries running at once, all analysts together.
    #[arg(long, env = "GATE_MAX_CONCURRENT", default_value_t = 4)]
    pub max_concurrent: usize,
    /// Most queries of one analyst running at once.
    #[arg(long, env = "GATE_MAX_CONCURRENT_PER_ANALYST", default_value_t = 2)]
    pub max_concurrent_per_analyst: usize,
    /// Longest run of one query, in seconds: then it is stopped and answered 504.
    #[arg(long, env = "GATE_MAX_QUERY_SECS", default_value_t = 90)]
    pub max_query_secs: u64,
    /// Seconds of queries per analyst and clock hour, every query charged.
    #[arg(long, env = "GATE_EXECUTION_SECS_PER_HOUR", default_value_t = 1800)]
    pub execution_secs_per_hour: u64,
    /// Longest wait for a request's body, in seconds: a client that sends it slower is
    /// answered 408 (it holds no place meanwhile, only its connection).
    #[arg(long, env = "GATE_BODY_READ_SECS", default_value_t = 10)]
    pub body_read_secs: u64,
    /// Largest query text (URL parameter and body together), in bytes.
    #[arg(long, env = "GATE_MAX_QUERY_BYTES", default_value_t = 256 * 1024)]
    pub max_query_bytes: usize,
    #[command(flatten)]
    pub serve: ServeArgs,
}

/// Why the gate refuses a query itself.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error("Give a user and password (HTTP basic authentication).")]
    NoUser,
    #[error("Give the user and password once (basic authentication, headers or parameters).")]
    CredentialsTwice,
    #[error("User {0:?} does not query through the gate: it is not an analyst's.")]
    UserRefused(String),
    #[error("URL parameter {0:?} is refused: only query, database and default_format are taken.")]
    ParameterRefused(String),
    #[error("Database {0:?} is refused: give your own.")]
    DatabaseRefused(String),
    #[error("Request bodies are taken as plain text only (no encoding, no external tables).")]
    BodyRefused,
    #[error("The query is longer than {0} bytes.")]
    QueryTooLarge(usize),
    #[error("The request's body did not arrive within {0} s.")]
    BodyTooSlow(u64),
    #[error("The query is empty.")]
    EmptyQuery,
    #[error("The query uses {}, which is refused: {}.", .0.name, .0.why)]
    NameRefused(Refusal),
    #[error("Too many queries are running; try again when one has ended.")]
    Busy,
    #[error("This hour's query time is spent; it renews at the next hour.")]
    QuotaSpent(u32),
    #[error("The query ran past {0} s and was stopped.")]
    Timeout(u64),
    #[error("ClickHouse cannot be reached.")]
    Unreachable,
}

impl GateError {
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            Self::NoUser => (StatusCode::UNAUTHORIZED, "no_user"),
            Self::CredentialsTwice => (StatusCode::BAD_REQUEST, "credentials_twice"),
            Self::UserRefused(_) => (StatusCode::FORBIDDEN, "user_refused"),
            Self::ParameterRefused(_) => (StatusCode::BAD_REQUEST, "parameter_refused"),
            Self::DatabaseRefused(_) => (StatusCode::FORBIDDEN, "database_refused"),
            Self::BodyRefused => (StatusCode::UNSUPPORTED_MEDIA_TYPE, "body_refused"),
            Self::QueryTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "query_too_large"),
            Self::BodyTooSlow(_) => (StatusCode::REQUEST_TIMEOUT, "body_too_slow"),
            Self::EmptyQuery => (StatusCode::BAD_REQUEST, "empty_query"),
            Self::NameRefused(_) => (StatusCode::FORBIDDEN, "name_refused"),
            Self::Busy => (StatusCode::TOO_MANY_REQUESTS, "too_many_queries"),
            Self::QuotaSpent(_) => (StatusCode::TOO_MANY_REQUESTS, "quota_spent"),
            Self::Timeout(_) => (StatusCode::GATEWAY_TIMEOUT, "query_timeout"),
            Self::Unreachable => (StatusCode::BAD_GATEWAY, "clickhouse_unreachable"),
        }
    }
}

impl IntoResponse for GateError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let retry = match self {
            Self::Busy => Some(1),
            Self::QuotaSpent(secs) => Some(secs),
            _ => None,
        };
        respond(status, error_body(code, &self.to_string()), retry)
    }
}

/// One analyst's use: queries running, and seconds charged in the clock hour `hour`.
#[derive(Default)]
struct Use {
    running: usize,
    hour: u64,
    charged: Duration,
}

impl Use {
    /// Nothing to remember: the name can be forgotten.
    fn idle(&self) -> bool {
        self.running == 0 && self.charged.is_zero()
    }
}

struct Gate {
    config: GateConfig,
    url: String,
    client: reqwest::Client,
    all: Arc<Semaphore>,
    analysts: Mutex<HashMap<String, Use>>,
}

/// An admitted query's place, given back (and its time charged) when dropped.
struct Place {
    gate: Arc<Gate>,
    user: String,
    started: Instant,
    charge: bool,
    _all: OwnedSemaphorePermit,
}

impl Drop for Place {
    fn drop(&mut self) {
        let spent = self.started.elapsed();
        let mut analysts = self.gate.analysts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(used) = analysts.get_mut(&self.user) {
            used.running -= 1;
            if self.charge {
                used.charged += spent;
            }
            if used.idle() {
                analysts.remove(&self.user);
            }
        }
    }
}

fn hour_now() -> (u64, u32) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    (now / 3600, (3600 - now % 3600) as u32)
}

impl Gate {
    /// Takes a place for `user`'s query, or says why not. The count of all analysts comes
    /// first, so that a refused name leaves nothing behind.
    fn admit(self: &Arc<Self>, user: &str) -> Result<Place, GateError> {
        let all = self
            .all
            .clone()
            .try_acquire_owned()
            .map_err(|_| GateError::Busy)?;
        let (hour, left) = hour_now();
        let mut analysts = self.analysts.lock().unwrap_or_else(|e| e.into_inner());
        let used = analysts.entry(user.to_owned()).or_default();
        if used.hour != hour {
            used.hour = hour;
            used.charged = Duration::ZERO;
        }
        let refused = if used.charged.as_secs() >= self.config.execution_secs_per_hour {
            Some(GateError::QuotaSpent(left))
        } else if used.running >= self.config.max_concurrent_per_analyst {
            Some(GateError::Busy)
        } else {
            None
        };
        if let Some(refused) = refused {
            if used.idle() {
                analysts.remove(user);
            }
            return Err(refused);
        }
        used.running += 1;
        Ok(Place {
            gate: self.clone(),
            user: user.to_owned(),
            started: Instant::now(),
            charge: true,
            _all: all,
        })
    }
}

/// Whether an answer refuses the login (wrong user, password or address): such a query
/// costs the server nothing and is not charged, so that nobody spends another's hour by
/// sending their name. `first` is the start of the answer's body.
pub fn login_refused(status: StatusCode, first: &[u8]) -> bool {
    if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
        return true;
    }
    // "Code: 193, e.displayText() = …" (18.x), "Code: 516. DB::Exception: …" (modern).
    let code: String = first
        .strip_prefix(b"Code: ")
        .unwrap_or_default()
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .map(|&b| char::from(b))
        .collect();
    !status.is_success() && matches!(code.as_str(), "192" | "193" | "194" | "195" | "516")
}

/// The analyst's user and password, from wherever the client put them (once).
fn credentials(
    headers: &HeaderMap,
    params: &[(String, String)],
) -> Result<(String, String), GateError> {
    let mut found = Vec::new();
    if let Some(basic) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
    {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(basic.trim())
            .map_err(|_| GateError::NoUser)?;
        let decoded = String::from_utf8(decoded).map_err(|_| GateError::NoUser)?;
        let (user, password) = decoded.split_once(':').ok_or(GateError::NoUser)?;
        found.push((user.to_owned(), password.to_owned()));
    }
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(user) = header("x-clickhouse-user") {
        let key = header("x-clickhouse-key").unwrap_or_default();
        found.push((user.to_owned(), key.to_owned()));
    }
    let param = |name: &str| params.iter().find(|(k, _)| k == name).map(|(_, v)| v);
    if let Some(user) = param("user") {
        found.push((user.clone(), param("password").cloned().unwrap_or_default()));
    }
    match found.len() {
        0 => Err(GateError::NoUser),
        1 => Ok(found.remove(0)),
        _ => Err(GateError::CredentialsTwice),
    }
}

/// What the gate sends on: user, password, query text and the parameters it keeps.
struct Query {
    user: String,
    password: String,
    text: String,
    params: Vec<(&'static str, String)>,
}

/// Reads and checks a request into the query it sends on.
fn read_query(
    config: &GateConfig,
    raw: Option<&str>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Query, GateError> {
    let params: Vec<(String, String)> = url_params(raw.unwrap_or_default());
    let (user, password) = credentials(headers, &params)?;
    if crate::access::check_user(&user).is_err() {
        return Err(GateError::UserRefused(user));
    }
    let mut seen = std::collections::HashSet::new();
    if let Some((name, _)) = params.iter().find(|(name, _)| !seen.insert(name)) {
        return Err(GateError::ParameterRefused(name.clone()));
    }
    let mut kept = Vec::new();
    let mut text = String::new();
    for (name, value) in &params {
        match name.as_str() {
            "user" | "password" => {}
            "query" => text.push_str(value),
            "database" => {
                let ok = !value.eq_ignore_ascii_case("system")
                    && !value.is_empty()
                    && value
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_');
                if !ok {
                    return Err(GateError::DatabaseRefused(value.clone()));
                }
                kept.push(("database", value.clone()));
            }
            "default_format" if value.bytes().all(|b| b.is_ascii_alphanumeric()) => {
                kept.push(("default_format", value.clone()));
            }
            _ => return Err(GateError::ParameterRefused(name.clone())),
        }
    }
    let plain = headers
        .get(header::CONTENT_ENCODING)
        .is_none_or(|v| v.as_bytes().eq_ignore_ascii_case(b"identity"));
    let multipart = headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"multipart/"));
    if !plain || multipart {
        return Err(GateError::BodyRefused);
    }
    let body = std::str::from_utf8(body).map_err(|_| GateError::BodyRefused)?;
    if !text.is_empty() && !body.is_empty() {
        // ClickHouse reads the parameter, a newline, then the body.
        text.push('\n');
    }
    text.push_str(body);
    if text.len() > config.max_query_bytes {
        return Err(GateError::QueryTooLarge(config.max_query_bytes));
    }
    if text.trim().is_empty() {
        return Err(GateError::EmptyQuery);
    }
    screen(&text).map_err(GateError::NameRefused)?;
    Ok(Query {
        user,
        password,
        text,
        params: kept,
    })
}

fn url_params(raw: &str) -> Vec<(String, String)> {
    reqwest::Url::parse(&format!("http://gate/?{raw}"))
        .map(|url| url.query_pairs().into_owned().collect())
        .unwrap_or_default()
}

/// The answer's head as the server gave it, with the headers kept.
type Head = Result<(StatusCode, Vec<(header::HeaderName, HeaderValue)>), GateError>;

/// The one route: a query.
async fn query(
    State(gate): State<Arc<Gate>>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let limit = gate.config.max_query_bytes + 1;
    let wait = Duration::from_secs(gate.config.body_read_secs);
    let body = match tokio::time::timeout(wait, axum::body::to_bytes(body, limit)).await {
        Ok(Ok(body)) => body,
        Ok(Err(_)) => return GateError::QueryTooLarge(gate.config.max_query_bytes).into_response(),
        Err(_) => return GateError::BodyTooSlow(gate.config.body_read_secs).into_response(),
    };
    let query = match read_query(&gate.config, raw.as_deref(), &headers, &body) {
        Ok(query) => query,
        Err(refused) => return refused.into_response(),
    };
    let place = match gate.admit(&query.user) {
        Ok(place) => place,
        Err(refused) => return refused.into_response(),
    };
    let (head_tx, head_rx) = oneshot::channel();
    let (body_tx, body_rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(8);
    tokio::spawn(run(gate, query, place, head_tx, body_tx));
    match head_rx.await {
        Ok(Ok((status, kept))) => {
            let stream = futures::stream::unfold(body_rx, |mut rx| async move {
                rx.recv().await.map(|chunk| (chunk, rx))
            });
            let mut response = Response::new(Body::from_stream(stream));
            *response.status_mut() = status;
            response.headers_mut().extend(kept);
            response
        }
        Ok(Err(refused)) => refused.into_response(),
        Err(_) => GateError::Unreachable.into_response(),
    }
}

/// Sends `query` on and passes its answer back, holding `place` until the server's
/// answer ends; stops the query at the time cap or when its client has gone.
async fn run(
    gate: Arc<Gate>,
    query: Query,
    mut place: Place,
    head_tx: oneshot::Sender<Head>,
    body_tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
) {
    let id = uuid::Uuid::new_v4().to_string();
    let mut params = query.params.clone();
    params.push(("query_id", id.clone()));
    let request = gate
        .client
        .post(&gate.url)
        .query(&params)
        .basic_auth(&query.user, Some(&query.password))
        .body(query.text.clone());
    let head_tx = Mutex::new(Some(head_tx));
    let free = std::sync::atomic::AtomicBool::new(false);
    let give_head = |head: Head| {
        if let Some(tx) = head_tx.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = tx.send(head);
        }
    };
    let forward = async {
        let response = match request.send().await {
            Ok(response) => response,
            Err(e) => {
                tracing::warn!(error = %e, "ClickHouse cannot be reached.");
                give_head(Err(GateError::Unreachable));
                return;
            }
        };
        let status = response.status();
        if login_refused(status, b"") {
            free.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        let kept = response
            .headers()
            .iter()
            .filter(|(name, _)| {
                name.as_str().starts_with("x-clickhouse-") || *name == header::CONTENT_TYPE
            })
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        give_head(Ok((status, kept)));
        let mut response = response;
        let mut first = true;
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    if std::mem::take(&mut first) && login_refused(status, &chunk) {
                        free.store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                    // A client that has gone takes nothing; the answer is read to its end.
                    let _ = body_tx.send(Ok(chunk)).await;
                }
                Ok(None) => break,
                Err(e) => {
                    let _ = body_tx.send(Err(std::io::Error::other(e))).await;
                    break;
                }
            }
        }
    };
    tokio::pin!(forward);
    let deadline = place.started + Duration::from_secs(gate.config.max_query_secs);
    let ending = tokio::select! {
        () = &mut forward => "answered",
        () = tokio::time::sleep_until(deadline) => "timed out",
        () = body_tx.closed() => "abandoned",
    };
    if ending != "answered" {
        give_head(Err(GateError::Timeout(gate.config.max_query_secs)));
        let _ = body_tx.try_send(Err(std::io::Error::other("the query was stopped")));
        kill(&gate, &query, &id).await;
        // The place is held until the server has ended the query (bounded: a server
        // that never ends it must not hold the gate for ever).
        let grace = Duration::from_secs(gate.config.max_query_secs.max(60));
        if tokio::time::timeout(grace, &mut forward).await.is_err() {
            tracing::warn!(query_id = %id, "The server did not end a stopped query.");
        }
    }
    place.charge = !free.load(std::sync::atomic::Ordering::Relaxed);
    tracing::info!(
        user = %query.user,
        query_id = %id,
        charged = place.charge,
        ending,
        millis = place.started.elapsed().as_millis() as u64,
        "Query."
    );
}

/// Stops query `id` on the server, as its analyst (a read-only user may stop its own).
async fn kill(gate: &Gate, query: &Query, id: &str) {
    let sql = format!("KILL QUERY WHERE query_id = '{id}' ASYNC");
    let answer = gate
        .client
        .post(&gate.url)
        .basic_auth(&query.user, Some(&query.password))
        .body(sql)
        .timeout(Duration::from_secs(10))
        .send()
        .await;
    match answer {
        Ok(r) if r.status().is_success() => {}
        Ok(r) => tracing::warn!(query_id = %id, status = %r.status(), "KILL QUERY refused."),
        Err(e) => tracing::warn!(query_id = %id, error = %e, "KILL QUERY failed."),
    }
}

/// The gate, bound (so that a test knows its address) and ready to serve.
pub struct Application {
    http: Http,
    router: Router,
}

impl Application {
    pub async fn build(config: GateConfig) -> anyhow::Result<Self> {
        anyhow::ensure!(
            config.max_concurrent > 0
                && config.max_concurrent_per_analyst > 0
                && config.max_query_secs > 0,
            "the gate's caps are at least 1"
        );
        let url = config
            .clickhouse_url
            .split(',')
            .next()
            .unwrap_or_default()
            .trim()
            .trim_end_matches('/')
            .to_owned()
            + "/";
        let client = reqwest::Client::builder()
            .local_address(config.source_address)
            .connect_timeout(Duration::from_secs(5))
            .no_proxy()
            .build()?;
        let http = Http::bind(config.listen, config.serve.clone()).await?;
        let gate = Arc::new(Gate {
            all: Arc::new(Semaphore::new(config.max_concurrent)),
            analysts: Mutex::new(HashMap::new()),
            config,
            url,
            client,
        });
        let router = Router::new()
            .route("/", get(query).post(query))
            .route("/ping", get(|| async { "Ok.\n" }))
            .with_state(gate)
            .merge(
                http_kit::ops::ops_router(http.readiness().clone())
                    .fallback(|| async { RouteError::NotFound }),
            );
        Ok(Self { http, router })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.http.local_addr()
    }

    /// Serves until `shutdown`, then lets the queries in flight finish.
    pub async fn run_until(self, shutdown: impl Future<Output = ()> + Send + 'static) {
        self.http
            .serve_ready(self.router, Duration::ZERO, shutdown)
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn config() -> GateConfig {
        GateConfig::parse_from(["analytics-gate"])
    }

    fn basic(user: &str, password: &str) -> HeaderMap {
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Basic {token}")).expect("a header value"),
        );
        headers
    }

    fn code(result: Result<Query, GateError>) -> &'static str {
        result.err().map_or("ok", |e| e.status_and_code().1)
    }

    #[test]
    fn only_a_refused_login_is_free() {
        let error = StatusCode::INTERNAL_SERVER_ERROR;
        for (status, body, free) in [
            (StatusCode::FORBIDDEN, &b""[..], true),
            (
                error,
                b"Code: 193, e.displayText() = DB::Exception: Wrong password",
                true,
            ),
            (
                error,
                b"Code: 195, e.displayText() = DB::Exception: User alice is not allowed",
                true,
            ),
            (
                error,
                b"Code: 516. DB::Exception: alice: Authentication failed",
                true,
            ),
            (
                error,
                b"Code: 159, e.displayText() = DB::Exception: Timeout exceeded",
                false,
            ),
            (error, b"Code: 1934", false),
            (StatusCode::OK, b"Code: 193", false),
        ] {
            assert_eq!(login_refused(status, body), free, "{status} {body:?}");
        }
    }

    #[test]
    fn a_request_is_read_into_one_text_and_the_parameters_kept() {
        let query = read_query(
            &config(),
            Some("query=SELECT%201&default_format=JSON&database=analyst_alice"),
            &basic("alice", "secret"),
            b"FROM system.one",
        )
        .expect("taken");
        assert_eq!(query.text, "SELECT 1\nFROM system.one");
        assert_eq!(
            (query.user.as_str(), query.password.as_str()),
            ("alice", "secret")
        );
        assert_eq!(
            query.params,
            vec![
                ("default_format", "JSON".to_owned()),
                ("database", "analyst_alice".to_owned())
            ]
        );
    }

    #[test]
    fn what_could_change_a_setting_a_session_or_the_user_is_refused() {
        let alice = basic("alice", "secret");
        let cfg = config();
        let read = |raw: &str, headers: &HeaderMap, body: &[u8]| {
            code(read_query(&cfg, Some(raw), headers, body))
        };
        assert_eq!(read("", &HeaderMap::new(), b"SELECT 1"), "no_user");
        assert_eq!(
            read("user=default", &HeaderMap::new(), b"SELECT 1"),
            "user_refused"
        );
        assert_eq!(
            read("", &basic("consumer", "x"), b"SELECT 1"),
            "user_refused"
        );
        assert_eq!(read("user=alice", &alice, b"SELECT 1"), "credentials_twice");
        for raw in [
            "session_id=1",
            "max_execution_time=0",
            "readonly=0",
            "wait_end_of_query=1",
            "query_id=mine",
            "decompress=1",
            "query=SELECT%201&query=SELECT%202",
        ] {
            assert_eq!(read(raw, &alice, b""), "parameter_refused", "{raw}");
        }
        assert_eq!(
            read("database=system", &alice, b"SELECT 1"),
            "database_refused"
        );
        assert_eq!(
            read("database=SYSTEM", &alice, b"SELECT 1"),
            "database_refused"
        );
        assert_eq!(read("", &alice, b"  "), "empty_query");
        assert_eq!(read("", &alice, &[b'x'; 300 * 1024]), "query_too_large");
        let mut gzip = alice.clone();
        gzip.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        assert_eq!(read("", &gzip, b"SELECT 1"), "body_refused");
        let mut multipart = alice.clone();
        multipart.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("multipart/form-data; boundary=x"),
        );
        assert_eq!(read("", &multipart, b"SELECT 1"), "body_refused");
        // Split between the parameter and the body, the text is screened whole.
        assert_eq!(
            read("query=SELECT%20*%20FROM%20system.", &alice, b"processes"),
            "name_refused"
        );
        assert_eq!(
            read("query=SELECT%20*%20FROM%20system", &alice, b".processes"),
            "name_refused"
        );
    }
}
