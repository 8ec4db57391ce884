//! The operational side of every service: `/healthz` (the process answers), `/readyz`
//! (serving and every dependency check passing, each check a handle of its own so that one
//! passing never hides another failing), `/metrics`, the per-route request counter, the
//! request-duration histogram of the serving loop and the shutdown signal.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::Router;
use axum::http::{StatusCode, header};
use axum::routing::get;
use serde_json::json;

/// The `…_requests_total{route, status}` counter of a route. The statuses the services
/// answer are registered once, at start (so they show at 0 before the first request);
/// looking a counter up by its labels on every request cost the config-api 4% of its
/// throughput (docs/benchmarks.md). Create it after the recorder is installed.
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

/// The paths the services serve, the `route` label of [`RequestDurations`]; any other path
/// is `other` (a raw path as a label would have no bound).
pub const ROUTES: [&str; 5] = [
    "/api/v1/analytics",
    "/api/v1/experiments",
    "/healthz",
    "/readyz",
    "/metrics",
];
const OTHER_ROUTE: &str = "other";

/// `http_request_duration_seconds{route, status}`: the time from a request's arrival in the
/// serving loop to its answer's head (a streamed body is not waited for), one histogram per
/// route and status, with the buckets of `crate::telemetry::METRICS`. The histograms are
/// registered on first use and kept, so a request looks one up in a short list, never in
/// the recorder by its labels (which cost the config-api 4%, above).
#[derive(Clone, Default)]
pub struct RequestDurations {
    known: Arc<std::sync::RwLock<Vec<RouteHistogram>>>,
}

/// A route, a status and their histogram.
type RouteHistogram = (&'static str, u16, metrics::Histogram);

impl RequestDurations {
    pub const NAME: &'static str = crate::telemetry::REQUEST_DURATIONS;

    /// The `route` label of a request's path.
    pub fn route_of(path: &str) -> &'static str {
        ROUTES
            .iter()
            .find(|route| **route == path)
            .copied()
            .unwrap_or(OTHER_ROUTE)
    }

    pub fn record(&self, route: &'static str, status: StatusCode, elapsed: std::time::Duration) {
        let code = status.as_u16();
        let seconds = elapsed.as_secs_f64();
        let find = |known: &[RouteHistogram]| {
            known
                .iter()
                .find(|(r, c, _)| *c == code && *r == route)
                .map(|(_, _, histogram)| histogram.clone())
        };
        let cached = self.known.read().ok().and_then(|known| find(&known));
        let histogram = match cached {
            Some(histogram) => histogram,
            None => {
                let histogram = metrics::histogram!(Self::NAME, "route" => route,
                    "status" => code.to_string());
                if let Ok(mut known) = self.known.write()
                    && find(&known).is_none()
                {
                    known.push((route, code, histogram.clone()));
                }
                histogram
            }
        };
        histogram.record(seconds);
    }
}

/// Liveness is the process answering. Readiness is serving (cleared while draining at
/// shutdown) and every dependency check passing: each check is a [`Dependency`] handle of
/// its own, set by the part of the service that knows (ClickHouse inserts, the consumer
/// group, the broker), so one check passing never hides another one failing. A failing
/// check says why, and `/readyz` lists every such cause.
#[derive(Clone, Default)]
pub struct Readiness(Arc<ReadinessState>);

#[derive(Default)]
struct ReadinessState {
    serving: AtomicBool,
    /// One bit per failing check: what `is_ready` reads, without a lock.
    failing: AtomicU32,
    checks: AtomicU32,
    /// The cause of each failing check, by its bit; written only when a check changes.
    causes: Mutex<BTreeMap<u32, String>>,
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

    /// Why the service is not ready: shutting down, and each failing check's cause.
    pub fn causes(&self) -> Vec<String> {
        let draining = !self.0.serving.load(Ordering::SeqCst);
        let failing = self.0.failing.load(Ordering::SeqCst);
        let causes = self.0.causes.lock().unwrap_or_else(|e| e.into_inner());
        draining
            .then(|| "The service is starting or shutting down.".to_owned())
            .into_iter()
            .chain(
                causes
                    .iter()
                    .filter(|(bit, _)| failing & **bit != 0)
                    .map(|(_, cause)| cause.clone()),
            )
            .collect()
    }
}

impl Dependency {
    /// The check passes.
    pub fn pass(&self) {
        if self.state.failing.load(Ordering::SeqCst) & self.bit != 0 {
            self.state.failing.fetch_and(!self.bit, Ordering::SeqCst);
        }
    }

    /// The check fails, for `cause` (one sentence, for `/readyz` and the operator).
    pub fn fail(&self, cause: &str) {
        let mut causes = self.state.causes.lock().unwrap_or_else(|e| e.into_inner());
        if causes.get(&self.bit).map(String::as_str) != Some(cause) {
            causes.insert(self.bit, cause.to_owned());
        }
        self.state.failing.fetch_or(self.bit, Ordering::SeqCst);
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
                let answer = if readiness.is_ready() {
                    (StatusCode::OK, Json(json!({ "status": "ready" })))
                } else {
                    (
                        StatusCode::SERVICE_UNAVAILABLE,
                        Json(json!({ "status": "not_ready", "causes": readiness.causes() })),
                    )
                };
                async move { answer }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_durations_label_known_routes_and_bound_the_rest() {
        assert_eq!(
            RequestDurations::route_of("/api/v1/analytics"),
            "/api/v1/analytics"
        );
        assert_eq!(RequestDurations::route_of("/metrics"), "/metrics");
        for unknown in [
            "/",
            "/api/v1/analytics/x",
            "/wp-admin",
            "/api/v1/experiments?x",
        ] {
            assert_eq!(RequestDurations::route_of(unknown), "other", "{unknown}");
        }
        // One histogram per route and status, reused.
        let durations = RequestDurations::default();
        for _ in 0..3 {
            durations.record(
                "other",
                StatusCode::NOT_FOUND,
                std::time::Duration::from_millis(1),
            );
        }
        durations.record(
            "/metrics",
            StatusCode::OK,
            std::time::Duration::from_millis(1),
        );
        assert_eq!(durations.known.read().expect("lock").len(), 2);
    }

    #[test]
    fn ready_needs_serving_and_every_dependency() {
        let readiness = Readiness::default();
        let (a, b) = (readiness.dependency(), readiness.dependency());
        assert!(!readiness.is_ready(), "not serving yet");
        readiness.set(true);
        assert!(readiness.is_ready());
        a.fail("A is down.");
        b.fail("B is down.");
        b.pass();
        assert!(!readiness.is_ready(), "one check passing hides no other");
        assert_eq!(
            readiness.causes(),
            ["A is down."],
            "only the failing check's cause"
        );
        a.fail("A is slow.");
        assert_eq!(readiness.causes(), ["A is slow."], "the latest cause");
        a.pass();
        assert!(readiness.is_ready());
        assert!(readiness.causes().is_empty());
        readiness.set(false);
        assert!(!readiness.is_ready());
        assert_eq!(
            readiness.causes(),
            ["The service is starting or shutting down."]
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
