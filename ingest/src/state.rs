//! What the analytics route needs, built by `app` and read by `routes`.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use contract::snapshot::Snapshot;

use crate::budget::Budget;
use crate::limits::RateLimiter;
use crate::sink::EventSink;

/// What every request handler needs.
#[derive(Clone)]
pub(crate) struct AppState {
    /// Where accepted events go: Kafka, or memory in the router's unit tests.
    pub sink: Arc<dyn EventSink>,
    pub snapshot: Arc<ArcSwap<Snapshot>>,
    pub max_body_bytes: usize,
    pub body_read_timeout: Duration,
    pub requests: http_kit::ops::RequestCounter,
    pub limiter: Arc<RateLimiter>,
    pub default_max_events_per_second: Option<f64>,
    /// Bytes of the User-Agent stored (`INGEST_USER_AGENT_MAX_BYTES`).
    pub user_agent_max_bytes: usize,
    /// The memory of the requests worked on at once (`INGEST_MAX_BYTES_IN_FLIGHT`).
    pub budget: Arc<Budget>,
}
