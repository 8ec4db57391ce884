//! What the experiments route needs, built by `app` and read by `routes`.

use std::sync::Arc;

use arc_swap::ArcSwap;
use axum::http::HeaderValue;

use crate::prepared::Prepared;

/// What the route's handler needs.
#[derive(Clone)]
pub(crate) struct AppState {
    pub prepared: Arc<ArcSwap<Prepared>>,
    /// `Cache-Control` of answers outside test mode.
    pub cache_control: HeaderValue,
    pub requests: http_kit::ops::RequestCounter,
}
