//! CORS of the API routes. The invariant: a browser is let read an answer (or send a
//! beacon) from any site, except where the key it names restricts its origins; preflights
//! are answered before any handler runs.

use std::sync::Arc;

use axum::http::{HeaderValue, header};
use axum::response::Response;

/// A value built from a snapshot that gives it back: the CORS policy reads the keys'
/// allowed origins from it.
pub trait HasSnapshot: Send + Sync + 'static {
    fn snapshot(&self) -> &contract::snapshot::Snapshot;
}

impl HasSnapshot for contract::snapshot::Snapshot {
    fn snapshot(&self) -> &contract::snapshot::Snapshot {
        self
    }
}

/// CORS for browsers on any site: the request's origin is mirrored with credentials
/// allowed (a beacon with a JSON Blob is credentialed, and a wildcard answer makes the
/// browser drop it silently), except that a request naming a key in `X-public-key` whose
/// `allowedOrigins` leave the origin out gets no allow header. Preflights carry no key
/// value, so they are answered for any origin, with a day-long `Max-Age`.
///
/// Written here rather than taken from tower-http: its `CorsLayer` cost the config-api 12%
/// of its throughput (docs/benchmarks.md), building and merging header maps on every request;
/// this one adds three prepared headers. The services' one API route has it in front of
/// their routers (`route::Route`).
pub struct CorsPolicy<T> {
    current: Arc<arc_swap::ArcSwap<T>>,
    allow_methods: HeaderValue,
    allow_headers: HeaderValue,
}

impl<T: HasSnapshot> CorsPolicy<T> {
    pub fn new(
        current: Arc<arc_swap::ArcSwap<T>>,
        methods: &[axum::http::Method],
        headers: &[axum::http::HeaderName],
    ) -> Self {
        let list = |items: Vec<&str>| {
            HeaderValue::try_from(items.join(",")).expect("method and header names are tokens")
        };
        Self {
            current,
            allow_methods: list(methods.iter().map(axum::http::Method::as_str).collect()),
            allow_headers: list(headers.iter().map(axum::http::HeaderName::as_str).collect()),
        }
    }

    /// The `Access-Control-Allow-Origin` value for this request, if any.
    pub(crate) fn allow_origin(&self, headers: &axum::http::HeaderMap) -> Option<HeaderValue> {
        let origin = headers.get(header::ORIGIN)?;
        let Some(key) = headers
            .get(contract::key::PUBLIC_KEY_HEADER)
            .and_then(|k| k.to_str().ok())
        else {
            return Some(origin.clone());
        };
        let current = self.current.load();
        let allowed = current
            .snapshot()
            .key(key)
            .is_none_or(|entry| entry.allows_origin(origin.as_bytes()));
        allowed.then(|| origin.clone())
    }

    /// The whole answer to an `OPTIONS` request (the preflight).
    pub(crate) fn preflight(&self, allow_origin: Option<HeaderValue>) -> Response {
        let mut response = Response::new(axum::body::Body::empty());
        let headers = response.headers_mut();
        add_cors_headers(headers, allow_origin);
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            self.allow_methods.clone(),
        );
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            self.allow_headers.clone(),
        );
        headers.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("86400"),
        );
        response
    }
}

const CORS_VARY: HeaderValue = HeaderValue::from_static(
    "origin, access-control-request-method, access-control-request-headers",
);

/// `response` with the allow headers and `Vary`.
pub(crate) fn with_cors_headers(
    mut response: Response,
    allow_origin: Option<HeaderValue>,
) -> Response {
    add_cors_headers(response.headers_mut(), allow_origin);
    response
}

/// What every answer but a preflight gets: the allow headers and `Vary`.
fn add_cors_headers(headers: &mut axum::http::HeaderMap, allow_origin: Option<HeaderValue>) {
    if let Some(origin) = allow_origin {
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    }
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
        HeaderValue::from_static("true"),
    );
    headers.append(header::VARY, CORS_VARY);
    // A browser's script reads Retry-After (429, 503) only if it is exposed.
    if headers.contains_key(header::RETRY_AFTER) {
        headers.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static("retry-after"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;
    use axum::response::IntoResponse;

    fn through_cors(request: axum::http::Request<axum::body::Body>) -> Response {
        let snapshot = contract::snapshot::Snapshot::from_json(
            br#"{"version": "1", "experiments": [],
                 "keys": [{ "publicKey": "pk_open", "experiments": [] },
                          { "publicKey": "pk_strict", "experiments": [],
                            "allowedOrigins": ["https://shop.example"] }]}"#,
        )
        .expect("snapshot");
        let policy = CorsPolicy::new(
            Arc::new(arc_swap::ArcSwap::from_pointee(snapshot)),
            &[axum::http::Method::GET, axum::http::Method::HEAD],
            &[header::ACCEPT, contract::key::PUBLIC_KEY_HEADER],
        );
        let allow_origin = policy.allow_origin(request.headers());
        if request.method() == axum::http::Method::OPTIONS {
            return policy.preflight(allow_origin);
        }
        with_cors_headers(StatusCode::IM_A_TEAPOT.into_response(), allow_origin)
    }

    fn request(method: &str, headers: &[(&str, &str)]) -> axum::http::Request<axum::body::Body> {
        let mut builder = axum::http::Request::builder().method(method).uri("/x");
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(axum::body::Body::empty()).expect("request")
    }

    #[tokio::test]
    async fn cors_preflight_is_answered_for_any_origin() {
        let response = through_cors(request(
            "OPTIONS",
            &[
                ("origin", "https://a.example"),
                ("access-control-request-method", "GET"),
            ],
        ));
        assert_eq!(response.status(), StatusCode::OK, "answered, not passed on");
        let h = response.headers();
        assert_eq!(h["access-control-allow-origin"], "https://a.example");
        assert_eq!(h["access-control-allow-credentials"], "true");
        assert_eq!(h["access-control-allow-methods"], "GET,HEAD");
        assert_eq!(h["access-control-allow-headers"], "accept,x-public-key");
        assert_eq!(h["access-control-max-age"], "86400");
        assert!(h["vary"].to_str().expect("text").contains("origin"));
    }

    #[tokio::test]
    async fn cors_mirrors_the_origin_unless_the_key_leaves_it_out() {
        for (key, origin, allowed) in [
            (None, "https://a.example", true),
            (Some("pk_open"), "https://a.example", true),
            (Some("pk_unknown"), "https://a.example", true),
            (Some("pk_strict"), "https://shop.example", true),
            (Some("pk_strict"), "https://evil.example", false),
        ] {
            let mut headers = vec![("origin", origin)];
            headers.extend(key.map(|k| ("x-public-key", k)));
            let response = through_cors(request("GET", &headers));
            assert_eq!(response.status(), StatusCode::IM_A_TEAPOT, "passed on");
            let h = response.headers();
            assert_eq!(
                h.get("access-control-allow-origin")
                    .is_some_and(|o| o == origin),
                allowed,
                "{key:?} from {origin}"
            );
            assert_eq!(h["access-control-allow-credentials"], "true");
            assert!(h.contains_key("vary"));
        }
        let response = through_cors(request("GET", &[]));
        assert!(
            !response
                .headers()
                .contains_key("access-control-allow-origin")
        );
    }
}
