//! HTTP pieces every service uses: the operational routes (`/healthz`, `/readyz`,
//! `/metrics`) and the shutdown signal.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use axum::Json;
use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use axum::routing::get;
use serde_json::json;

/// The `…_requests_total{route, status}` counter of a route. The statuses the services
/// answer are registered once, at start (so they show at 0 before the first request);
/// looking a counter up by its labels on every request cost the config-api 4% of its
/// throughput (BENCHMARKS.md). Create it after the recorder is installed.
#[derive(Clone)]
pub struct RequestCounter {
    name: &'static str,
    route: &'static str,
    known: Arc<[(u16, metrics::Counter)]>,
}

impl RequestCounter {
    const STATUSES: [u16; 15] = [
        200, 202, 204, 304, 400, 401, 403, 404, 405, 408, 413, 415, 429, 500, 503,
    ];

    pub fn new(name: &'static str, route: &'static str) -> Self {
        let known = Self::STATUSES
            .iter()
            .map(|&code| {
                let counter =
                    metrics::counter!(name, "route" => route, "status" => code.to_string());
                (code, counter)
            })
            .collect();
        Self { name, route, known }
    }

    pub fn increment(&self, status: StatusCode) {
        match self.known.iter().find(|(code, _)| *code == status.as_u16()) {
            Some((_, counter)) => counter.increment(1),
            None => metrics::counter!(self.name, "route" => self.route,
                "status" => status.as_str().to_owned())
            .increment(1),
        }
    }
}

/// Liveness is the process answering. Readiness is serving (cleared while draining at
/// shutdown) and every dependency check passing: each check is a [`Dependency`] handle of
/// its own, set by the part of the service that knows (ClickHouse inserts, the consumer
/// group, the broker), so one check passing never hides another one failing.
#[derive(Clone, Default)]
pub struct Readiness(Arc<ReadinessState>);

#[derive(Default)]
struct ReadinessState {
    serving: AtomicBool,
    /// One bit per failing check.
    failing: AtomicU32,
    checks: AtomicU32,
}

/// One dependency check of a [`Readiness`]; passing until it says otherwise.
#[derive(Clone)]
pub struct Dependency {
    state: Arc<ReadinessState>,
    bit: u32,
}

impl Readiness {
    pub fn set(&self, serving: bool) {
        self.0.serving.store(serving, Ordering::SeqCst);
    }

    /// A new check that readiness also waits for. At most 32 per service.
    pub fn dependency(&self) -> Dependency {
        let index = self.0.checks.fetch_add(1, Ordering::SeqCst);
        Dependency {
            state: self.0.clone(),
            bit: 1u32
                .checked_shl(index)
                .expect("at most 32 readiness checks"),
        }
    }

    pub fn is_ready(&self) -> bool {
        self.0.serving.load(Ordering::SeqCst) && self.0.failing.load(Ordering::SeqCst) == 0
    }
}

impl Dependency {
    pub fn set_ok(&self, ok: bool) {
        if ok {
            self.state.failing.fetch_and(!self.bit, Ordering::SeqCst);
        } else {
            self.state.failing.fetch_or(self.bit, Ordering::SeqCst);
        }
    }
}

/// `/healthz`, `/readyz` and `/metrics`, to merge into a service's router.
pub fn ops_router<S: Clone + Send + Sync + 'static>(readiness: Readiness) -> Router<S> {
    Router::new()
        .route(
            "/healthz",
            get(|| async { Json(json!({ "status": "ok" })) }),
        )
        .route(
            "/readyz",
            get(move || {
                let ready = readiness.is_ready();
                async move {
                    if ready {
                        (StatusCode::OK, Json(json!({ "status": "ready" })))
                    } else {
                        (
                            StatusCode::SERVICE_UNAVAILABLE,
                            Json(json!({ "status": "not_ready" })),
                        )
                    }
                }
            }),
        )
        .route(
            "/metrics",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                    crate::telemetry::metrics_handle().render(),
                )
            }),
        )
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "Cannot listen for SIGINT.");
            std::future::pending::<()>().await;
        }
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "Cannot listen for SIGTERM.");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("Shutdown signal received.");
}

/// Names the allowed methods on every answer of a route, those of OPTIONS requests too
/// (the CORS layer answers them before any handler).
pub fn allow_layer(
    methods: &'static str,
) -> tower_http::set_header::SetResponseHeaderLayer<HeaderValue> {
    tower_http::set_header::SetResponseHeaderLayer::if_not_present(
        header::ALLOW,
        HeaderValue::from_static(methods),
    )
}

/// A value served from the snapshot that can tell which origins a key accepts.
pub trait KeyOrigins: Send + Sync + 'static {
    fn snapshot(&self) -> &crate::snapshot::Snapshot;
}

impl KeyOrigins for crate::snapshot::Snapshot {
    fn snapshot(&self) -> &crate::snapshot::Snapshot {
        self
    }
}

/// CORS for browsers on any site: the request's origin is mirrored with credentials
/// allowed (a beacon with a JSON Blob is credentialed, and a wildcard answer makes the
/// browser drop it silently), except that a request naming a key in `X-public-key` whose
/// `allowedOrigins` leave the origin out gets no allow header. Preflights carry no key
/// value, so they are answered for any origin, with a day-long `Max-Age`.
///
/// Written here rather than taken from tower-http: its `CorsLayer` cost the config-api 12%
/// of its throughput (BENCHMARKS.md), building and merging header maps on every request;
/// this one adds three prepared headers.
pub fn cors_layer<T: KeyOrigins>(
    current: Arc<arc_swap::ArcSwap<T>>,
    methods: &[axum::http::Method],
    headers: &[axum::http::HeaderName],
) -> CorsLayer<T> {
    let list = |items: Vec<&str>| {
        HeaderValue::try_from(items.join(",")).expect("method and header names are tokens")
    };
    CorsLayer {
        config: Arc::new(CorsConfig {
            current,
            allow_methods: list(methods.iter().map(axum::http::Method::as_str).collect()),
            allow_headers: list(headers.iter().map(axum::http::HeaderName::as_str).collect()),
        }),
    }
}

struct CorsConfig<T> {
    current: Arc<arc_swap::ArcSwap<T>>,
    allow_methods: HeaderValue,
    allow_headers: HeaderValue,
}

impl<T: KeyOrigins> CorsConfig<T> {
    /// The `Access-Control-Allow-Origin` value for this request, if any.
    fn allow_origin(&self, headers: &axum::http::HeaderMap) -> Option<HeaderValue> {
        let origin = headers.get(header::ORIGIN)?;
        let Some(key) = headers
            .get(crate::key::PUBLIC_KEY_HEADER)
            .and_then(|k| k.to_str().ok())
        else {
            return Some(origin.clone());
        };
        let text = origin.to_str().ok()?;
        let current = self.current.load();
        let allowed = current
            .snapshot()
            .key(key)
            .is_none_or(|entry| entry.allows_origin(text));
        allowed.then(|| origin.clone())
    }
}

/// See [`cors_layer`].
pub struct CorsLayer<T> {
    config: Arc<CorsConfig<T>>,
}

impl<T> Clone for CorsLayer<T> {
    fn clone(&self) -> Self {
        Self {
            config: Arc::clone(&self.config),
        }
    }
}

impl<S, T> tower::Layer<S> for CorsLayer<T> {
    type Service = Cors<S, T>;

    fn layer(&self, inner: S) -> Self::Service {
        Cors {
            inner,
            config: Arc::clone(&self.config),
        }
    }
}

/// The service of [`CorsLayer`]: answers `OPTIONS` itself (the preflight), and adds the
/// allow headers to the inner service's answers.
pub struct Cors<S, T> {
    inner: S,
    config: Arc<CorsConfig<T>>,
}

impl<S: Clone, T> Clone for Cors<S, T> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            config: Arc::clone(&self.config),
        }
    }
}

const CORS_VARY: HeaderValue = HeaderValue::from_static(
    "origin, access-control-request-method, access-control-request-headers",
);

fn add_cors_headers(headers: &mut axum::http::HeaderMap, allow_origin: Option<HeaderValue>) {
    if let Some(origin) = allow_origin {
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    }
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
        HeaderValue::from_static("true"),
    );
    headers.append(header::VARY, CORS_VARY);
    // A browser's script reads Retry-After (429, 503) only if it is exposed.
    if headers.contains_key(header::RETRY_AFTER) {
        headers.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static("retry-after"),
        );
    }
}

impl<S, T, B> tower::Service<axum::http::Request<B>> for Cors<S, T>
where
    S: tower::Service<axum::http::Request<B>, Response = Response>,
    T: KeyOrigins,
{
    type Response = Response;
    type Error = S::Error;
    type Future = CorsFuture<S::Future>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: axum::http::Request<B>) -> Self::Future {
        let allow_origin = self.config.allow_origin(request.headers());
        if request.method() == axum::http::Method::OPTIONS {
            let mut response = Response::new(axum::body::Body::empty());
            let headers = response.headers_mut();
            add_cors_headers(headers, allow_origin);
            headers.insert(
                header::ACCESS_CONTROL_ALLOW_METHODS,
                self.config.allow_methods.clone(),
            );
            headers.insert(
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                self.config.allow_headers.clone(),
            );
            headers.insert(
                header::ACCESS_CONTROL_MAX_AGE,
                HeaderValue::from_static("86400"),
            );
            return CorsFuture::Preflight {
                response: Some(response),
            };
        }
        CorsFuture::Call {
            inner: self.inner.call(request),
            allow_origin,
        }
    }
}

pin_project_lite::pin_project! {
    /// The answer of [`Cors`].
    #[project = CorsFutureProj]
    pub enum CorsFuture<F> {
        Preflight { response: Option<Response> },
        Call { #[pin] inner: F, allow_origin: Option<HeaderValue> },
    }
}

impl<F, E> Future for CorsFuture<F>
where
    F: Future<Output = Result<Response, E>>,
{
    type Output = Result<Response, E>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        match self.project() {
            CorsFutureProj::Preflight { response } => std::task::Poll::Ready(Ok(response
                .take()
                .expect("a CORS answer is not polled after it completed"))),
            CorsFutureProj::Call {
                inner,
                allow_origin,
            } => {
                let mut response = std::task::ready!(inner.poll(cx))?;
                add_cors_headers(response.headers_mut(), allow_origin.take());
                std::task::Poll::Ready(Ok(response))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::response::IntoResponse;
    use tower::{Layer, ServiceExt};

    #[test]
    fn ready_needs_serving_and_every_dependency() {
        let readiness = Readiness::default();
        let (a, b) = (readiness.dependency(), readiness.dependency());
        assert!(!readiness.is_ready(), "not serving yet");
        readiness.set(true);
        assert!(readiness.is_ready());
        a.set_ok(false);
        b.set_ok(false);
        b.set_ok(true);
        assert!(!readiness.is_ready(), "one check passing hides no other");
        a.set_ok(true);
        assert!(readiness.is_ready());
        readiness.set(false);
        assert!(!readiness.is_ready());
    }

    async fn through_cors(request: axum::http::Request<axum::body::Body>) -> Response {
        let snapshot = crate::snapshot::Snapshot::from_json(
            br#"{"version": "1", "experiments": [],
                 "keys": [{ "publicKey": "pk_open", "experiments": [] },
                          { "publicKey": "pk_strict", "experiments": [],
                            "allowedOrigins": ["https://shop.example"] }]}"#,
        )
        .expect("snapshot");
        let layer = cors_layer(
            Arc::new(arc_swap::ArcSwap::from_pointee(snapshot)),
            &[axum::http::Method::GET, axum::http::Method::HEAD],
            &[header::ACCEPT, crate::key::PUBLIC_KEY_HEADER],
        );
        let inner = tower::service_fn(|_: axum::http::Request<axum::body::Body>| async {
            Ok::<_, std::convert::Infallible>(StatusCode::IM_A_TEAPOT.into_response())
        });
        layer
            .layer(inner)
            .oneshot(request)
            .await
            .expect("infallible")
    }

    fn request(method: &str, headers: &[(&str, &str)]) -> axum::http::Request<axum::body::Body> {
        let mut builder = axum::http::Request::builder().method(method).uri("/x");
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(axum::body::Body::empty()).expect("request")
    }

    #[tokio::test]
    async fn cors_preflight_is_answered_for_any_origin() {
        let response = through_cors(request(
            "OPTIONS",
            &[
                ("origin", "https://a.example"),
                ("access-control-request-method", "GET"),
            ],
        ))
        .await;
        assert_eq!(response.status(), StatusCode::OK, "answered, not passed on");
        let h = response.headers();
        assert_eq!(h["access-control-allow-origin"], "https://a.example");
        assert_eq!(h["access-control-allow-credentials"], "true");
        assert_eq!(h["access-control-allow-methods"], "GET,HEAD");
        assert_eq!(h["access-control-allow-headers"], "accept,x-public-key");
        assert_eq!(h["access-control-max-age"], "86400");
        assert!(h["vary"].to_str().expect("text").contains("origin"));
    }

    #[tokio::test]
    async fn cors_mirrors_the_origin_unless_the_key_leaves_it_out() {
        for (key, origin, allowed) in [
            (None, "https://a.example", true),
            (Some("pk_open"), "https://a.example", true),
            (Some("pk_unknown"), "https://a.example", true),
            (Some("pk_strict"), "https://shop.example", true),
            (Some("pk_strict"), "https://evil.example", false),
        ] {
            let mut headers = vec![("origin", origin)];
            headers.extend(key.map(|k| ("x-public-key", k)));
            let response = through_cors(request("GET", &headers)).await;
            assert_eq!(response.status(), StatusCode::IM_A_TEAPOT, "passed on");
            let h = response.headers();
            assert_eq!(
                h.get("access-control-allow-origin")
                    .is_some_and(|o| o == origin),
                allowed,
                "{key:?} from {origin}"
            );
            assert_eq!(h["access-control-allow-credentials"], "true");
            assert!(h.contains_key("vary"));
        }
        let response = through_cors(request("GET", &[])).await;
        assert!(
            !response
                .headers()
                .contains_key("access-control-allow-origin")
        );
    }

    #[test]
    fn request_counter_counts_by_status_known_or_not() {
        let handle = crate::telemetry::metrics_handle();
        let counter = RequestCounter::new("test_requests_total", "/t");
        for code in [200, 200, 418, 503] {
            counter.increment(StatusCode::from_u16(code).expect("valid code"));
        }
        let text = handle.render();
        for (status, n) in [("200", 2), ("418", 1), ("503", 1), ("404", 0)] {
            let line = format!("test_requests_total{{route=\"/t\",status=\"{status}\"}} {n}");
            assert!(text.contains(&line), "no {line} in\n{text}");
        }
    }
}
