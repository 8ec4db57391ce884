//! Every error answer of `POST /api/v1/analytics`: the match of
//! [`IngestError::status_and_code`] is the status table (docs/api.md's is checked against it).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::batch::Rejections;
use crate::sink::SinkError;

#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error("The body is not valid JSON: {0}.")]
    MalformedJson(serde_json::Error),
    #[error("{0}")]
    InvalidBody(&'static str),
    #[error("The X-public-key header and the pkey field name different keys.")]
    ConflictingPublicKeys,
    /// Every event of the batch was refused; the first ones are listed with why.
    #[error("No event of the batch is valid.")]
    NoValidEvents(Rejections),
    #[error("The gzip body could not be decoded.")]
    MalformedGzip,
    #[error("The request body could not be read.")]
    UnreadableBody,
    #[error("Send the public key in the X-public-key header or the pkey field.")]
    MissingPublicKey,
    #[error("{0}")]
    InvalidPublicKey(String),
    #[error("This public key is not known.")]
    UnknownPublicKey,
    #[error("This public key does not accept events from this origin.")]
    OriginNotAllowed,
    #[error("The request body did not arrive in time.")]
    RequestTimeout,
    #[error("The request body is larger than {0} bytes.")]
    PayloadTooLarge(usize),
    #[error("Send the body as application/json or text/plain.")]
    UnsupportedMediaType,
    #[error("Only gzip content encoding is accepted.")]
    UnsupportedContentEncoding,
    #[error("This key sends more than {rate} events per second; retry in {retry_after} s.")]
    RateLimited { rate: f64, retry_after: u32 },
    #[error("{0}")]
    KafkaUnavailable(SinkError),
    #[error("{0}")]
    Internal(String),
}

impl IngestError {
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            Self::MalformedJson(_) => (StatusCode::BAD_REQUEST, "malformed_json"),
            Self::InvalidBody(_) => (StatusCode::BAD_REQUEST, "invalid_body"),
            Self::ConflictingPublicKeys => (StatusCode::BAD_REQUEST, "conflicting_public_keys"),
            Self::NoValidEvents(_) => (StatusCode::BAD_REQUEST, "no_valid_events"),
            Self::MalformedGzip => (StatusCode::BAD_REQUEST, "malformed_gzip"),
            Self::UnreadableBody => (StatusCode::BAD_REQUEST, "unreadable_body"),
            Self::MissingPublicKey => (StatusCode::UNAUTHORIZED, "missing_public_key"),
            Self::InvalidPublicKey(_) => (StatusCode::UNAUTHORIZED, "invalid_public_key"),
            Self::UnknownPublicKey => (StatusCode::UNAUTHORIZED, "unknown_public_key"),
            Self::OriginNotAllowed => (StatusCode::FORBIDDEN, "origin_not_allowed"),
            Self::RequestTimeout => (StatusCode::REQUEST_TIMEOUT, "request_timeout"),
            Self::PayloadTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            Self::UnsupportedMediaType => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
            }
            Self::UnsupportedContentEncoding => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_content_encoding",
            ),
            Self::RateLimited { .. } => (StatusCode::TOO_MANY_REQUESTS, "rate_limited"),
            Self::KafkaUnavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "kafka_unavailable"),
            Self::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }

    /// Seconds the client should wait before it sends again.
    fn retry_after(&self) -> Option<u32> {
        match self {
            Self::RateLimited { retry_after, .. } => Some(*retry_after),
            Self::KafkaUnavailable(_) => Some(5),
            _ => None,
        }
    }

    /// One of each variant: what docs/api.md's error table is checked against.
    pub fn examples() -> Vec<Self> {
        let json = serde_json::from_str::<Value>("{").expect_err("not JSON");
        let all = vec![
            Self::MalformedJson(json),
            Self::InvalidBody(""),
            Self::ConflictingPublicKeys,
            Self::NoValidEvents(Rejections::default()),
            Self::MalformedGzip,
            Self::UnreadableBody,
            Self::MissingPublicKey,
            Self::InvalidPublicKey(String::new()),
            Self::UnknownPublicKey,
            Self::OriginNotAllowed,
            Self::RequestTimeout,
            Self::PayloadTooLarge(0),
            Self::UnsupportedMediaType,
            Self::UnsupportedContentEncoding,
            Self::RateLimited {
                rate: 0.0,
                retry_after: 0,
            },
            Self::KafkaUnavailable(SinkError::QueueFull),
            Self::Internal(String::new()),
        ];
        // A new variant breaks this match (it has no `_`): list it above as well.
        for e in &all {
            match e {
                Self::MalformedJson(_)
                | Self::InvalidBody(_)
                | Self::ConflictingPublicKeys
                | Self::NoValidEvents(_)
                | Self::MalformedGzip
                | Self::UnreadableBody
                | Self::MissingPublicKey
                | Self::InvalidPublicKey(_)
                | Self::UnknownPublicKey
                | Self::OriginNotAllowed
                | Self::RequestTimeout
                | Self::PayloadTooLarge(_)
                | Self::UnsupportedMediaType
                | Self::UnsupportedContentEncoding
                | Self::RateLimited { .. }
                | Self::KafkaUnavailable(_)
                | Self::Internal(_) => {}
            }
        }
        all
    }
}

impl IntoResponse for IngestError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let retry_after = self.retry_after();
        let mut body = http_kit::error::body(code, &self.to_string());
        // The refused events are listed (and counted) as in a partly accepted batch.
        if let Self::NoValidEvents(rejections) = self {
            body["accepted"] = 0.into();
            if let Some(count) = rejections.count_if_cut() {
                body["rejectedCount"] = count.into();
            }
            body["rejected"] = serde_json::to_value(rejections.listed).unwrap_or_default();
        }
        http_kit::error::respond(status, body, retry_after)
    }
}
