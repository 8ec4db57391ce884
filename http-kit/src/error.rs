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

/// What any path of any service can answer.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    #[error("There is nothing at this path.")]
    NotFound,
    #[error("This method is not allowed on this path.")]
    MethodNotAllowed,
}

impl RouteError {
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            Self::NotFound => (StatusCode::NOT_FOUND, "not_found"),
            Self::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
        }
    }

    /// One of each variant: what the README's error table is checked against.
    pub fn examples() -> Vec<Self> {
        vec![Self::NotFound, Self::MethodNotAllowed]
    }
}

impl IntoResponse for RouteError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        respond(status, body(code, &self.to_string()), None)
    }
}
