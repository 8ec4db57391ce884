//! The one shape of every error answer of every service:
//! `{"error": {"code": "snake_case_code", "message": "A sentence."}}`, with `Retry-After`
//! when the client should wait. Each HTTP surface has its own error enum whose
//! `status_and_code` match is its status table; they all answer through [`respond`].

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// The body of an error answer.
pub fn body(code: &str, message: &str) -> Value {
    json!({ "error": { "code": code, "message": message } })
}

/// An error answer with `body` (an error body, perhaps with more fields).
pub fn respond(status: StatusCode, body: Value, retry_after: Option<u32>) -> Response {
    let mut response = (status, Json(body)).into_response();
    if let Some(seconds) = retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// What any path of any service can answer: the last three before any service sees the
/// request, from hyper (answered with this body by the `refusals` module).
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    #[error("There is nothing at this path.")]
    NotFound,
    #[error("This method is not allowed on this path.")]
    MethodNotAllowed,
    #[error("The request is not valid HTTP: its request line or a header is malformed.")]
    MalformedRequest,
    #[error("The request's URI is too long.")]
    UriTooLong,
    #[error("The request's headers are too large: too many of them, or too long.")]
    HeadersTooLarge,
}

impl RouteError {
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            Self::NotFound => (StatusCode::NOT_FOUND, "not_found"),
            Self::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            Self::MalformedRequest => (StatusCode::BAD_REQUEST, "malformed_request"),
            Self::UriTooLong => (StatusCode::URI_TOO_LONG, "uri_too_long"),
            Self::HeadersTooLarge => (
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                "request_headers_too_large",
            ),
        }
    }

    /// The error body of this answer.
    pub fn body(&self) -> Value {
        body(self.status_and_code().1, &self.to_string())
    }

    /// One of each variant: what docs/api.md's error table is checked against.
    pub fn examples() -> Vec<Self> {
        vec![
            Self::NotFound,
            Self::MethodNotAllowed,
            Self::MalformedRequest,
            Self::UriTooLong,
            Self::HeadersTooLarge,
        ]
    }
}

impl IntoResponse for RouteError {
    fn into_response(self) -> Response {
        respond(self.status_and_code().0, self.body(), None)
    }
}
