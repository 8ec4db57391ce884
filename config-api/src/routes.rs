//! `GET /api/v1/experiments`.

use std::future::Ready;

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use contract::key::{PUBLIC_KEY_HEADER, PublicKey};
use http_kit::route::{Handler, Route};
use time::OffsetDateTime;

use crate::error::ConfigApiError;
use crate::prepared::{Prepared, Selection};
use crate::state::AppState;

pub(crate) const EXPERIMENTS_PATH: &str = "/api/v1/experiments";
/// Which experiments to answer: a comma-separated list of ids (all when absent).
pub(crate) const EXPERIMENT_IDS_HEADER: HeaderName = HeaderName::from_static("x-experiment-ids");
/// `true`: answer in test mode (draft experiments too, never cached).
pub(crate) const SERVICE_TEST_HEADER: HeaderName = HeaderName::from_static("x-service-test");
/// The three request headers above and the public key, as the answers have always
/// spelled them.
const VARY: &str = "X-public-key, X-experiment-ids, X-service-test";

/// The config-api's whole HTTP service: its one API route answered in front of the router
/// (operations endpoints, 404), at once: its future is never boxed.
pub(crate) type Api = Route<Experiments, Prepared>;

/// The handler of the route's GETs and HEADs.
pub(crate) struct Experiments(pub AppState);

impl Handler for Experiments {
    type Future = Ready<Response>;

    fn call(&self, request: Request) -> Self::Future {
        std::future::ready(get_experiments(&self.0, request.headers()))
    }
}

/// A GET or HEAD of the experiments, counted by status.
fn get_experiments(state: &AppState, headers: &HeaderMap) -> Response {
    let response = match answer(state, headers) {
        Ok(response) => response,
        Err(e) => {
            if matches!(e, ConfigApiError::UnknownPublicKey) {
                metrics::counter!("config_api_unknown_key_requests_total").increment(1);
            }
            e.into_response()
        }
    };
    state.requests.increment(response.status());
    response
}

fn answer(state: &AppState, headers: &HeaderMap) -> Result<Response, ConfigApiError> {
    let Some(raw_key) = headers.get(PUBLIC_KEY_HEADER) else {
        return Err(ConfigApiError::MissingPublicKey);
    };
    let key = raw_key
        .to_str()
        .map_err(|_| "not text".to_owned())
        .and_then(PublicKey::parse)
        .map_err(ConfigApiError::InvalidPublicKey)?;
    let prepared = state.prepared.load();
    let Some(entry) = http_kit::cors::HasSnapshot::snapshot(&**prepared).key(key.as_str()) else {
        return Err(ConfigApiError::UnknownPublicKey);
    };
    let test_mode = headers
        .get(SERVICE_TEST_HEADER)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"));
    let selection = Selection {
        ids: Selection::parse_ids(
            headers
                .get(EXPERIMENT_IDS_HEADER)
                .and_then(|v| v.to_str().ok()),
        ),
        test_mode,
        now: OffsetDateTime::now_utc(),
    };
    let body = prepared.render(entry, &selection);

    // xxh3: stable across builds and Rust versions, so every replica gives one body one tag.
    let etag = format!("\"{:016x}\"", xxhash_rust::xxh3::xxh3_64(&body));
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| etag_matches(v, &etag));
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, "application/json")], body).into_response()
    };
    let h = response.headers_mut();
    let cache_control = if test_mode {
        HeaderValue::from_static("no-store")
    } else {
        state.cache_control.clone()
    };
    h.insert(header::CACHE_CONTROL, cache_control);
    h.insert(header::VARY, HeaderValue::from_static(VARY));
    if let Ok(etag) = HeaderValue::try_from(etag) {
        h.insert(header::ETAG, etag);
    }
    Ok(response)
}

/// `If-None-Match` uses weak comparison: `*`, or any listed tag equal ignoring `W/`.
fn etag_matches(if_none_match: &str, etag: &str) -> bool {
    if_none_match
        .split(',')
        .map(str::trim)
        .any(|tag| tag == "*" || tag.trim_start_matches("W/") == etag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn if_none_match_lists_and_weak_tags() {
        assert!(etag_matches("\"a\"", "\"a\""));
        assert!(etag_matches("\"b\", W/\"a\"", "\"a\""));
        assert!(etag_matches("*", "\"a\""));
        assert!(!etag_matches("\"b\"", "\"a\""));
    }
}
