//! A service's one API route answered in front of its router: the path compared, the
//! route's CORS, its methods and its `Allow` header applied here, and every other request
//! (operations endpoints, 404) passed to the router.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, Method, header};
use axum::response::{IntoResponse, Response};
use futures::future::Either;
use tower::ServiceExt;
use tower::util::Oneshot;

use crate::cors::{CorsPolicy, HasSnapshot};
use crate::error::RouteError;

/// What answers the route's requests of its methods (preflights and other methods never
/// reach it). `Future` is the handler's own: [`std::future::Ready`] for one that answers
/// at once (nothing is boxed then), a boxed future for one that reads the body.
pub trait Handler: Send + Sync + 'static {
    type Future: Future<Output = Response> + Send + Unpin + 'static;

    fn call(&self, request: Request) -> Self::Future;
}

/// A service's whole HTTP service: its one API route answered here directly, everything
/// else by the router (`rest`).
///
/// The route is kept out of the router: the router's matching, its boxed route and its
/// layers' futures cost more than a route's own answer takes. Measured
/// (docs/benchmarks.md): 12% of the config-api's CPU time and +9% requests/s without them,
/// −3.7% instructions per event in the ingest. Shared, it costs what a copy in each
/// service costs: instructions per request (callgrind, whole process, `wrk -t1 -c16` for
/// 20-30 s after a warm-up), config-api 24 232-24 322 against 24 224-24 265 with a copy of
/// its own, ingest (five events a request) 154 454-155 235 against 154 311-157 538.
///
/// A request of the path is answered: `OPTIONS` with the CORS preflight, the route's
/// methods by the handler, any other method with 405; each of them with the CORS headers
/// and `Allow` (the methods and `OPTIONS`).
pub struct Route<H, T> {
    /// One pointer: the service is cloned for every request and moved with its future. Six
    /// fields cloned and moved instead cost the config-api 1.7% more instructions.
    inner: Arc<Inner<H, T>>,
}

struct Inner<H, T> {
    path: &'static str,
    methods: Vec<Method>,
    allow: HeaderValue,
    handler: H,
    cors: CorsPolicy<T>,
    rest: Router,
}

impl<H, T> Clone for Route<H, T> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<H: Handler, T: HasSnapshot> Route<H, T> {
    /// The route at `path` taking `methods` (`OPTIONS` aside), with the CORS of the keys in
    /// `current` letting browsers send the request headers `cors_headers`; `rest` answers
    /// every other path.
    pub fn new(
        path: &'static str,
        methods: &[Method],
        cors_headers: &[HeaderName],
        current: Arc<arc_swap::ArcSwap<T>>,
        handler: H,
        rest: Router,
    ) -> Self {
        let allow = methods
            .iter()
            .map(Method::as_str)
            .chain(["OPTIONS"])
            .collect::<Vec<_>>()
            .join(", ");
        let inner = Inner {
            path,
            methods: methods.to_vec(),
            allow: HeaderValue::try_from(allow).expect("method names are tokens"),
            handler,
            cors: CorsPolicy::new(current, methods, cors_headers),
            rest,
        };
        Self {
            inner: Arc::new(inner),
        }
    }
}

impl<H: Handler, T: HasSnapshot> Inner<H, T> {
    /// The answer to a request of the path: at once for a preflight or another method,
    /// later for the handler's.
    fn answer(&self, request: Request) -> Answer<H::Future> {
        let allow_origin = self.cors.allow_origin(request.headers());
        let allow = self.allow.clone();
        if request.method() == Method::OPTIONS {
            let preflight = self.cors.preflight(allow_origin);
            return Answer::Done(Some(with_allow(preflight, allow)));
        }
        if !self.methods.contains(request.method()) {
            let refused = RouteError::MethodNotAllowed.into_response();
            let refused = crate::cors::with_cors_headers(refused, allow_origin);
            return Answer::Done(Some(with_allow(refused, allow)));
        }
        Answer::Handling {
            handling: self.handler.call(request),
            allow_origin,
            allow,
        }
    }
}

impl<H: Handler, T: HasSnapshot> tower::Service<Request> for Route<H, T> {
    type Response = Response;
    type Error = Infallible;
    type Future = Either<Answer<H::Future>, Oneshot<Router, Request>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        if request.uri().path() == self.inner.path {
            Either::Left(self.inner.answer(request))
        } else {
            Either::Right(self.inner.rest.clone().oneshot(request))
        }
    }
}

/// The future of [`Route`]'s answer to a request of its path.
pub enum Answer<F> {
    /// Answered already (a preflight, a method the route does not take).
    Done(Option<Response>),
    /// The handler's answer, still to get the CORS headers and `Allow`.
    Handling {
        handling: F,
        allow_origin: Option<HeaderValue>,
        allow: HeaderValue,
    },
}

impl<F: Future<Output = Response> + Unpin> Future for Answer<F> {
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Self::Done(response) => {
                Poll::Ready(Ok(response.take().expect("an answer is polled once")))
            }
            Self::Handling {
                handling,
                allow_origin,
                allow,
            } => {
                let response = std::task::ready!(Pin::new(handling).poll(cx));
                let response = crate::cors::with_cors_headers(response, allow_origin.take());
                Poll::Ready(Ok(with_allow(response, allow.clone())))
            }
        }
    }
}

fn with_allow(mut response: Response, allow: HeaderValue) -> Response {
    response.headers_mut().insert(header::ALLOW, allow);
    response
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::http::StatusCode;

    use super::*;

    /// Answers 418, counting its calls.
    #[derive(Default)]
    struct Teapot(AtomicUsize);

    impl Handler for Arc<Teapot> {
        type Future = std::future::Ready<Response>;

        fn call(&self, _: Request) -> Self::Future {
            self.0.fetch_add(1, Ordering::Relaxed);
            std::future::ready(StatusCode::IM_A_TEAPOT.into_response())
        }
    }

    fn route(handler: Arc<Teapot>) -> Route<Arc<Teapot>, contract::snapshot::Snapshot> {
        let snapshot = contract::snapshot::Snapshot::from_json(
            br#"{"version": "1", "experiments": [], "keys": []}"#,
        )
        .expect("snapshot");
        Route::new(
            "/api/x",
            &[Method::GET, Method::HEAD],
            &[header::ACCEPT],
            Arc::new(arc_swap::ArcSwap::from_pointee(snapshot)),
            handler,
            Router::new().fallback(|| async { StatusCode::NOT_FOUND }),
        )
    }

    async fn send(
        route: &Route<Arc<Teapot>, contract::snapshot::Snapshot>,
        method: &str,
        path: &str,
    ) -> Response {
        let request = axum::http::Request::builder()
            .method(method)
            .uri(path)
            .header(header::ORIGIN, "https://a.example")
            .body(axum::body::Body::empty())
            .expect("request");
        route.clone().oneshot(request).await.expect("infallible")
    }

    #[tokio::test]
    async fn the_path_is_answered_with_cors_and_allow_and_the_rest_passed_on() {
        let handler = Arc::new(Teapot::default());
        let route = route(handler.clone());
        for method in ["GET", "HEAD"] {
            let response = send(&route, method, "/api/x").await;
            assert_eq!(response.status(), StatusCode::IM_A_TEAPOT);
            let h = response.headers();
            assert_eq!(h[header::ALLOW], "GET, HEAD, OPTIONS");
            assert_eq!(h[header::ACCESS_CONTROL_ALLOW_ORIGIN], "https://a.example");
            assert!(h.contains_key(header::VARY));
        }
        assert_eq!(handler.0.load(Ordering::Relaxed), 2);

        let preflight = send(&route, "OPTIONS", "/api/x").await;
        assert_eq!(preflight.status(), StatusCode::OK);
        assert_eq!(preflight.headers()[header::ALLOW], "GET, HEAD, OPTIONS");
        assert_eq!(
            preflight.headers()[header::ACCESS_CONTROL_ALLOW_METHODS],
            "GET,HEAD"
        );

        let refused = send(&route, "POST", "/api/x").await;
        assert_eq!(refused.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(refused.headers()[header::ALLOW], "GET, HEAD, OPTIONS");
        assert!(
            refused
                .headers()
                .contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN)
        );
        assert_eq!(
            handler.0.load(Ordering::Relaxed),
            2,
            "the handler saw neither"
        );

        let other = send(&route, "GET", "/api/x/more").await;
        assert_eq!(other.status(), StatusCode::NOT_FOUND);
        assert!(!other.headers().contains_key(header::ALLOW));
        assert!(
            !other
                .headers()
                .contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN)
        );
        assert_eq!(handler.0.load(Ordering::Relaxed), 2);
    }
}
