//! Every error answer of `GET /api/v1/experiments`: the match of
//! [`ConfigApiError::status_and_code`] is the status table (docs/api.md's is checked
//! against it).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

#[derive(Debug, thiserror::Error)]
pub enum ConfigApiError {
    #[error("Send the public key in the X-public-key header.")]
    MissingPublicKey,
    #[error("The public key is malformed: {0}.")]
    InvalidPublicKey(String),
    #[error("This public key is not known.")]
    UnknownPublicKey,
}

impl ConfigApiError {
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            Self::MissingPublicKey => (StatusCode::UNAUTHORIZED, "missing_public_key"),
            Self::InvalidPublicKey(_) => (StatusCode::UNAUTHORIZED, "invalid_public_key"),
            Self::UnknownPublicKey => (StatusCode::UNAUTHORIZED, "unknown_public_key"),
        }
    }

    /// One of each variant: what docs/api.md's error table is checked against.
    pub fn examples() -> Vec<Self> {
        let all = vec![
            Self::MissingPublicKey,
            Self::InvalidPublicKey(String::new()),
            Self::UnknownPublicKey,
        ];
        // A new variant breaks this match (it has no `_`): list it above as well.
        for e in &all {
            match e {
                Self::MissingPublicKey | Self::InvalidPublicKey(_) | Self::UnknownPublicKey => {}
            }
        }
        all
    }
}

impl IntoResponse for ConfigApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        http_kit::error::respond(status, http_kit::error::body(code, &self.to_string()), None)
    }
}
