//! HTTP pieces every service uses: the one JSON error shape, the operational routes
//! (`/healthz`, `/readyz`, `/metrics`) and the shutdown signal.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Json;
use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
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
    const STATUSES: [u16; 13] = [
        200, 202, 204, 304, 400, 401, 403, 404, 405, 413, 415, 500, 503,
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

/// An error answer: `{"error": {"code": "snake_case_code", "message": "A sentence."}}`.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// Seconds, sent as `Retry-After`.
    pub retry_after: Option<u32>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    pub fn body(&self) -> serde_json::Value {
        json!({ "error": { "code": self.code, "message": self.message } })
    }

    pub fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "This method is not allowed on this path.",
        )
    }

    pub fn not_found() -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "There is nothing at this path.",
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body())).into_response();
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

/// Liveness is the process answering. Readiness is two flags: serving (cleared while
/// draining at shutdown) and dependencies reachable (set by the service's own checks;
/// true until a check says otherwise).
#[derive(Clone)]
pub struct Readiness(Arc<[AtomicBool; 2]>);

impl Default for Readiness {
    fn default() -> Self {
        Self(Arc::new([AtomicBool::new(false), AtomicBool::new(true)]))
    }
}

impl Readiness {
    pub fn set(&self, serving: bool) {
        self.0[0].store(serving, Ordering::SeqCst);
    }

    pub fn set_dependencies_ok(&self, ok: bool) {
        self.0[1].store(ok, Ordering::SeqCst);
    }

    pub fn is_ready(&self) -> bool {
        self.0.iter().all(|flag| flag.load(Ordering::SeqCst))
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
pub fn cors_layer<T: KeyOrigins>(
    current: Arc<arc_swap::ArcSwap<T>>,
    methods: &[axum::http::Method],
    headers: &[axum::http::HeaderName],
) -> tower_http::cors::CorsLayer {
    use tower_http::cors::{AllowOrigin, CorsLayer};
    CorsLayer::new()
        .allow_origin(AllowOrigin::predicate(move |origin, parts| {
            let Some(key) = parts
                .headers
                .get("x-public-key")
                .and_then(|k| k.to_str().ok())
            else {
                return true;
            };
            let Ok(origin) = origin.to_str() else {
                return false;
            };
            let current = current.load();
            current
                .snapshot()
                .key(key)
                .is_none_or(|entry| entry.allows_origin(origin))
        }))
        .allow_credentials(true)
        .allow_methods(methods.to_vec())
        .allow_headers(headers.to_vec())
        .max_age(std::time::Duration::from_secs(86_400))
}

#[cfg(test)]
mod tests {
    use super::*;

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
