//! `POST /api/v1/analytics`: read the body within its limit, find the key, validate each
//! event, publish the valid ones and answer once Kafka has acknowledged all of them. The
//! body's reading is in `body`, its events' checking and encoding in `batch`.

use std::borrow::Cow;
use std::io::Read;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::BytesMut;
use contract::event::{Envelope, EventMessage};
use contract::key::{PUBLIC_KEY_HEADER, PublicKey};
use contract::snapshot::Snapshot;
use http_body_util::BodyExt;
use http_kit::route::{Handler, Route};
use serde::Serialize;

use crate::batch::{Batch, Rejected};
use crate::body::{Event, Parsed};
use crate::budget;
use crate::error::IngestError;
use crate::state::AppState;

pub(crate) const ANALYTICS_PATH: &str = "/api/v1/analytics";

/// The ingest's whole HTTP service: the analytics route answered in front of the router
/// (operations endpoints, 404), as in the config-api.
pub(crate) type Api = Route<Analytics, Snapshot>;

/// The handler of the route's POSTs.
pub(crate) struct Analytics(pub Arc<AppState>);

impl Handler for Analytics {
    type Future = Pin<Box<dyn Future<Output = Response> + Send>>;

    fn call(&self, request: Request) -> Self::Future {
        let state = self.0.clone();
        Box::pin(async move { analytics(&state, request).await })
    }
}

/// A POST of the route, its answer counted by status.
async fn analytics(state: &AppState, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let result = handle(state, &parts.headers, body).await;
    let response = match result {
        Ok(response) => response,
        Err(e) => e.into_response(),
    };
    state.requests.increment(response.status());
    response
}

async fn handle(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, IngestError> {
    let deadline = tokio::time::Instant::now() + state.body_read_timeout;
    if let Err(e) = check_content_type(headers) {
        discard_unread(headers, body, deadline).await;
        return Err(e);
    }
    let bytes = read_body(headers, body, state.max_body_bytes, deadline).await?;
    let user_agent_bytes = headers
        .get(header::USER_AGENT)
        .map_or(0, |ua| ua.len().min(state.user_agent_max_bytes));
    // Held until the answer: the memory of the requests worked on at once is bounded.
    let _share = state
        .budget
        .take(budget::cost(bytes.len(), user_agent_bytes))
        .await;
    let parsed = Parsed::from_bytes(&bytes)?;

    let key = public_key(headers, parsed.pkey?)?;
    let snapshot = state.snapshot.load();
    let Some(entry) = snapshot.key(key.as_str()) else {
        return Err(IngestError::UnknownPublicKey);
    };
    // Every `Origin` the request carries, whatever its bytes.
    if headers
        .get_all(header::ORIGIN)
        .iter()
        .any(|origin| !entry.allows_origin(origin.as_bytes()))
    {
        return Err(IngestError::OriginNotAllowed);
    }
    let events = parsed.events?;

    let envelope = Envelope::new(
        contract::event::now_millis(),
        key.to_string(),
        headers
            .get(header::USER_AGENT)
            .map(|ua| String::from_utf8_lossy(ua.as_bytes()).into_owned())
            .unwrap_or_default(),
        parsed.sent_at?,
    )
    .keeping_user_agent(state.user_agent_max_bytes);
    let mut batch = Batch::default();
    let mut index = 0;
    let mut encoded = Ok(());
    events.for_each(|event| {
        let checked = match event {
            Event::Typed(event) => EventMessage::from_client_event(event, &envelope),
            Event::Text(text) => EventMessage::from_client_json(text, &envelope),
        };
        let checked = checked.map(|mut message| {
            // An event that does not say its phase belongs to the one live now.
            message
                .phase
                .get_or_insert_with(|| snapshot.phase_of(entry, &message.experiment_id));
            message
        });
        if encoded.is_ok() {
            encoded = batch.add(index, checked);
        }
        index += 1;
    });
    encoded.map_err(|e| IngestError::Internal(e.to_string()))?;
    batch.rejections.record();
    if batch.accepted() == 0 {
        return Err(IngestError::NoValidEvents(batch.rejections));
    }

    let rate = entry
        .max_events_per_second
        .or(state.default_max_events_per_second);
    if let Err(wait) = state
        .limiter
        .admit(key.as_str(), rate, batch.accepted(), Instant::now())
    {
        metrics::counter!("ingest_rate_limited_requests_total").increment(1);
        metrics::counter!("ingest_rate_limited_events_total").increment(batch.accepted() as u64);
        return Err(IngestError::RateLimited {
            rate: rate.unwrap_or_default(),
            retry_after: wait.as_secs_f64().ceil().max(1.0) as u32,
        });
    }
    state
        .sink
        .publish(&batch.messages())
        .await
        .map_err(IngestError::KafkaUnavailable)?;
    metrics::counter!("ingest_events_accepted_total").increment(batch.accepted() as u64);
    let answer = Answer {
        accepted: batch.accepted(),
        rejected_count: batch.rejections.count_if_cut(),
        rejected: batch.rejections.listed,
    };
    Ok((StatusCode::ACCEPTED, Json(answer)).into_response())
}

/// The 202's body: the refused events, the first of them listed and, when more were
/// refused, all of them counted.
#[derive(Serialize)]
struct Answer {
    accepted: usize,
    rejected: Vec<Rejected>,
    #[serde(rename = "rejectedCount", skip_serializing_if = "Option::is_none")]
    rejected_count: Option<usize>,
}

/// `application/json`, `text/plain` (what `sendBeacon` sends for a string) or none.
fn check_content_type(headers: &HeaderMap) -> Result<(), IngestError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Ok(());
    };
    let essence = value
        .to_str()
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if matches!(essence.as_str(), "application/json" | "text/plain") {
        Ok(())
    } else {
        Err(IngestError::UnsupportedMediaType)
    }
}

/// Reads at most `limit` bytes off the wire, and at most `limit` after gzip decoding, by
/// `deadline`. A body over the limit is read to its end before the 413 (see [`discard`]).
async fn read_body(
    headers: &HeaderMap,
    mut body: Body,
    limit: usize,
    deadline: tokio::time::Instant,
) -> Result<Bytes, IngestError> {
    if declared_length(headers).is_some_and(|length| length > limit as u64) {
        discard_unread(headers, body, deadline).await;
        return Err(IngestError::PayloadTooLarge(limit));
    }
    let declared = declared_length(headers).map_or(0, |length| length as usize);
    let read = tokio::time::timeout_at(deadline, collect(&mut body, limit, declared)).await;
    let bytes = match read {
        Err(_) => return Err(IngestError::RequestTimeout),
        Ok(Ok(bytes)) => bytes,
        Ok(Err(Unread::TooLarge)) => {
            discard(body, deadline).await;
            return Err(IngestError::PayloadTooLarge(limit));
        }
        Ok(Err(Unread::Broken)) => return Err(IngestError::UnreadableBody),
    };
    let encoding = headers
        .get(header::CONTENT_ENCODING)
        .map(|v| v.to_str().unwrap_or("").trim().to_ascii_lowercase());
    match encoding.as_deref() {
        None | Some("identity") => Ok(bytes),
        Some("gzip") => {
            let mut decoded = Vec::new();
            // Every member of the stream (RFC 1952), and nothing after the last: bytes
            // that are not another member refuse the body rather than being dropped.
            flate2::read::MultiGzDecoder::new(&bytes[..])
                .take(limit as u64 + 1)
                .read_to_end(&mut decoded)
                .map_err(|_| IngestError::MalformedGzip)?;
            if decoded.len() > limit {
                return Err(IngestError::PayloadTooLarge(limit));
            }
            Ok(Bytes::from(decoded))
        }
        Some(_) => Err(IngestError::UnsupportedContentEncoding),
    }
}

/// Why a body was not read whole.
enum Unread {
    TooLarge,
    Broken,
}

/// The body's bytes, at most `limit` of them, in one buffer of the `declared` length: a
/// body of one chunk as it came, a larger one copied chunk by chunk as it arrives, so that
/// it is never held twice (its chunks, and hyper's buffers behind them, then their copy).
async fn collect(body: &mut Body, limit: usize, declared: usize) -> Result<Bytes, Unread> {
    let mut first: Option<Bytes> = None;
    let mut joined = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(|_| Unread::Broken)?.into_data() else {
            continue; // trailers
        };
        let read = first.as_ref().map_or(joined.len(), Bytes::len);
        if read + data.len() > limit {
            return Err(Unread::TooLarge);
        }
        match first.take() {
            None if joined.is_empty() => first = Some(data),
            None => joined.extend_from_slice(&data),
            Some(first) => {
                joined.reserve(declared.min(limit).max(first.len() + data.len()));
                joined.extend_from_slice(&first);
                joined.extend_from_slice(&data);
            }
        }
    }
    Ok(first.unwrap_or_else(|| joined.freeze()))
}

/// Most bytes of a refused body read and thrown away (beyond what was read before it was
/// refused): more than the front passes on (`client_max_body_size` in
/// `deploy/nginx/routes.conf` and the k8s ingress), and than any client means to send.
const DISCARD_MAX_BYTES: u64 = 16 * 1024 * 1024;

/// The request's `Content-Length`.
fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse().ok())
}

/// [`discard`] for a body refused before any of it was read. A client that waits for
/// `100 Continue` has sent nothing: it is answered at once (hyper sends the 100 only when
/// the body is read). A declared length beyond [`DISCARD_MAX_BYTES`] is not read at all.
async fn discard_unread(headers: &HeaderMap, body: Body, deadline: tokio::time::Instant) {
    let awaits_continue = headers
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let beyond = declared_length(headers).is_some_and(|length| length > DISCARD_MAX_BYTES);
    if !awaits_continue && !beyond {
        discard(body, deadline).await;
    }
}

/// Reads the rest of a refused body and throws it away before the answer, like nginx's
/// lingering close. A connection closed with bytes of the request still unread is reset by
/// the kernel, and a peer still sending then loses the answer: nginx answers 502 (which
/// clients retry for ever) and a direct client sees a reset connection. Bounded so that a
/// huge or endless body cannot hold the ingest: at most [`DISCARD_MAX_BYTES`], and only
/// until the body's `deadline`; past either it gives up, and the connection closes.
async fn discard(mut body: Body, deadline: tokio::time::Instant) {
    let mut left = DISCARD_MAX_BYTES;
    let drain = async {
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else { return false };
            let size = frame.data_ref().map_or(0, |data| data.len() as u64);
            let Some(rest) = left.checked_sub(size) else {
                return false;
            };
            left = rest;
        }
        true
    };
    if !tokio::time::timeout_at(deadline, drain)
        .await
        .unwrap_or(false)
    {
        tracing::debug!("A refused body was not read to its end; the connection closes.");
    }
}

/// The key from `X-public-key` or the body's `pkey`; both present must agree.
fn public_key(headers: &HeaderMap, pkey: Option<Cow<'_, str>>) -> Result<PublicKey, IngestError> {
    let header = match headers.get(PUBLIC_KEY_HEADER) {
        None => None,
        Some(v) => Some(v.to_str().map_err(|_| {
            IngestError::InvalidPublicKey("The X-public-key header is not a valid key.".into())
        })?),
    };
    let body = pkey.as_deref();
    let raw = match (header, body) {
        (Some(h), Some(b)) if h != b => {
            return Err(IngestError::ConflictingPublicKeys);
        }
        (Some(k), _) | (None, Some(k)) => k,
        (None, None) => {
            return Err(IngestError::MissingPublicKey);
        }
    };
    PublicKey::parse(raw)
        .map_err(|e| IngestError::InvalidPublicKey(format!("The public key is malformed: {e}.")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use futures::StreamExt;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    static CHUNK: [u8; 64 * 1024] = [b' '; 64 * 1024];

    /// A body of `chunks` chunks of 64 KiB, and the count of its bytes read so far.
    fn counted(chunks: usize) -> (Body, Arc<AtomicU64>) {
        let read = Arc::new(AtomicU64::default());
        let counter = read.clone();
        let stream = futures::stream::iter(0..chunks).map(move |_| {
            counter.fetch_add(CHUNK.len() as u64, Ordering::Relaxed);
            Ok::<_, std::io::Error>(Bytes::from_static(&CHUNK))
        });
        (Body::from_stream(stream), read)
    }

    #[tokio::test]
    async fn a_refused_body_is_read_to_its_end_up_to_the_bound() {
        let later = tokio::time::Instant::now() + Duration::from_secs(60);
        let (body, read) = counted(128); // 8 MiB
        discard(body, later).await;
        assert_eq!(read.load(Ordering::Relaxed), 8 << 20);

        let (body, read) = counted(1024); // 64 MiB
        discard(body, later).await;
        let read = read.load(Ordering::Relaxed);
        assert!(read > DISCARD_MAX_BYTES && read <= DISCARD_MAX_BYTES + 64 * 1024);
    }

    #[tokio::test]
    async fn a_refused_body_is_read_until_its_deadline_only() {
        let endless =
            Body::from_stream(futures::stream::pending::<Result<Bytes, std::io::Error>>());
        let started = tokio::time::Instant::now();
        discard(endless, started + Duration::from_millis(50)).await;
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn a_client_awaiting_100_continue_is_answered_before_its_body() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("8000000"));
        headers.insert(header::EXPECT, HeaderValue::from_static("100-continue"));
        let later = tokio::time::Instant::now() + Duration::from_secs(60);
        let (body, read) = counted(128);
        discard_unread(&headers, body, later).await;
        assert_eq!(read.load(Ordering::Relaxed), 0);

        headers.remove(header::EXPECT);
        let (body, read) = counted(128);
        discard_unread(&headers, body, later).await;
        assert_eq!(read.load(Ordering::Relaxed), 8 << 20);

        // Declared beyond the bound: not worth reading.
        headers.insert(
            header::CONTENT_LENGTH,
            HeaderValue::from_static("100000000"),
        );
        let (body, read) = counted(128);
        discard_unread(&headers, body, later).await;
        assert_eq!(read.load(Ordering::Relaxed), 0);
    }
}
