//! The HTTP serving loop of every service: a router on a listener until shutdown, with
//! bounds that keep slow and idle clients from taking the server from the others. A
//! connection with no request under way is closed once it has been idle for the header
//! timeout (hyper's own header timeout covers a request head that arrives too slowly,
//! once it has begun); at most `max_connections` are open at once, further ones wait in
//! the listen backlog until one closes. Request bodies are bounded by whoever reads them
//! (the ingest). hyper's own answers to requests it cannot read get the JSON error body
//! (`refusals`). At shutdown the listener closes and requests in flight finish.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;
use tower::ServiceExt;

use crate::refusals::WithErrorBodies;

/// Bounds of the HTTP server, each a flag and an environment variable.
#[derive(clap::Args, Clone, Debug)]
pub struct ServeArgs {
    /// Most connections open at once; further clients wait in the listen backlog.
    #[arg(long, env = "HTTP_MAX_CONNECTIONS", default_value_t = 10_000)]
    pub max_connections: usize,

    /// A connection that has not sent a whole request head within this time (idle
    /// keep-alive connections included) is closed, in milliseconds.
    #[arg(long, env = "HTTP_HEADER_READ_TIMEOUT_MS", default_value_t = 10_000)]
    pub header_read_timeout_ms: u64,
}

/// A service's HTTP side, bound by its `build` (so that a test knows the address before
/// it serves): the listener, the bounds and the readiness `/readyz` reports.
pub struct Http {
    listener: TcpListener,
    limits: ServeArgs,
    readiness: crate::ops::Readiness,
}

impl Http {
    pub async fn bind(address: SocketAddr, limits: ServeArgs) -> anyhow::Result<Self> {
        let listener = TcpListener::bind(address)
            .await
            .with_context(|| format!("cannot listen on {address}"))?;
        Ok(Self {
            listener,
            limits,
            readiness: crate::ops::Readiness::default(),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// What `/readyz` reports: serving, and each dependency of the service.
    pub fn readiness(&self) -> &crate::ops::Readiness {
        &self.readiness
    }

    /// [`serve_ready`] on this listener.
    pub async fn serve_ready<S: HttpService>(
        self,
        router: S,
        drain: Duration,
        shutdown: impl Future<Output = ()>,
    ) {
        serve_ready(
            self.listener,
            router,
            &self.limits,
            &self.readiness,
            drain,
            shutdown,
        )
        .await;
    }

    /// [`serve`] on this listener: readiness is the service's to set.
    pub async fn serve<S: HttpService>(self, router: S, shutdown: impl Future<Output = ()>) {
        serve(self.listener, router, &self.limits, shutdown).await;
    }
}

/// Serves `router` on `listener`, ready (`/readyz` 200) until `shutdown`; then not ready
/// for `drain` while still serving (so that load balancers stop sending), then
/// [`serve`]'s graceful stop.
pub async fn serve_ready<S: HttpService>(
    listener: TcpListener,
    router: S,
    limits: &ServeArgs,
    readiness: &crate::ops::Readiness,
    drain: Duration,
    shutdown: impl Future<Output = ()>,
) {
    readiness.set(true);
    serve(listener, router, limits, async {
        shutdown.await;
        readiness.set(false);
        tokio::time::sleep(drain).await;
    })
    .await;
}

/// What can be served: an [`axum::Router`], or a service in front of one.
pub trait HttpService:
    tower::Service<
        axum::extract::Request,
        Response = axum::response::Response,
        Error = std::convert::Infallible,
        Future: Send + 'static,
    > + Clone
    + Send
    + Sync
    + 'static
{
}

impl<S> HttpService for S where
    S: tower::Service<
            axum::extract::Request,
            Response = axum::response::Response,
            Error = std::convert::Infallible,
            Future: Send + 'static,
        > + Clone
        + Send
        + Sync
        + 'static
{
}

/// Serves `router` on `listener` until `shutdown` resolves, then lets the requests in
/// flight finish.
pub async fn serve<S: HttpService>(
    listener: TcpListener,
    router: S,
    limits: &ServeArgs,
    shutdown: impl Future<Output = ()>,
) {
    let idle = Duration::from_millis(limits.header_read_timeout_ms);
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(idle);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Duration::from_secs(20));
    let builder = Arc::new(builder);
    let slots = u32::try_from(limits.max_connections.clamp(1, 1 << 20)).unwrap_or(1 << 20);
    let room = Arc::new(Semaphore::new(slots as usize));
    let (stop, stopping) = watch::channel(false);
    let durations = crate::ops::RequestDurations::default();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = room.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, say: wait rather than spin.
                    tracing::warn!(error = %e, "Cannot accept a connection.");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let connection = Connection {
            builder: builder.clone(),
            router: router.clone(),
            idle,
            stopping: stopping.clone(),
            durations: durations.clone(),
        };
        tokio::spawn(async move {
            connection.run(stream).await;
            drop(permit);
        });
    }
    drop(listener);
    let _ = stop.send(true);
    // Every connection gives its slot back when it ends.
    let _ = room.acquire_many(slots).await;
}

/// One client connection and what it needs to end itself.
struct Connection<S> {
    builder: Arc<Builder<TokioExecutor>>,
    router: S,
    idle: Duration,
    stopping: watch::Receiver<bool>,
    durations: crate::ops::RequestDurations,
}

impl<S: HttpService> Connection<S> {
    /// Serves the connection until the client closes it, it sits idle (no request under
    /// way, none begun) for `idle`, or the server stops; the last two end it gracefully.
    async fn run(mut self, stream: tokio::net::TcpStream) {
        let activity = Arc::new(Activity::default());
        let tracked = activity.clone();
        let router = self.router;
        let durations = self.durations;
        let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            let router = router.clone();
            let guard = tracked.begin();
            let durations = durations.clone();
            let route = crate::ops::RequestDurations::route_of(request.uri().path());
            let started = std::time::Instant::now();
            async move {
                let response = router.oneshot(request.map(axum::body::Body::new)).await;
                if let Ok(answer) = &response {
                    durations.record(route, answer.status(), started.elapsed());
                }
                drop(guard);
                response
            }
        });
        let connection = self
            .builder
            .serve_connection_with_upgrades(TokioIo::new(WithErrorBodies::new(stream)), service);
        let mut connection = std::pin::pin!(connection);
        let mut deadline = Instant::now() + self.idle;
        loop {
            tokio::select! {
                _ = connection.as_mut() => return,
                () = tokio::time::sleep_until(deadline) => {
                    match activity.idle_since() {
                        Some(since) if since.elapsed() >= self.idle => break,
                        Some(since) => deadline = since + self.idle,
                        None => deadline = Instant::now() + self.idle,
                    }
                }
                _ = self.stopping.wait_for(|s| *s) => break,
            }
        }
        connection.as_mut().graceful_shutdown();
        let _ = connection.await;
    }
}

/// Requests under way on a connection, and when the last one ended.
struct Activity {
    state: std::sync::Mutex<(usize, Instant)>,
}

impl Default for Activity {
    fn default() -> Self {
        Self {
            state: std::sync::Mutex::new((0, Instant::now())),
        }
    }
}

impl Activity {
    fn lock(&self) -> std::sync::MutexGuard<'_, (usize, Instant)> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn begin(self: &Arc<Self>) -> RequestGuard {
        self.lock().0 += 1;
        RequestGuard(self.clone())
    }

    /// `None` while a request is under way.
    fn idle_since(&self) -> Option<Instant> {
        let (active, since) = *self.lock();
        (active == 0).then_some(since)
    }
}

struct RequestGuard(Arc<Activity>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.0 -= 1;
        state.1 = Instant::now();
    }
}
