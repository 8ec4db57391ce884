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

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
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

    /// Threads serving the connections, each with a single-threaded runtime of its own
    /// that keeps a connection from its first request to its last; 0: one per core.
    #[arg(long, env = "HTTP_WORKERS", default_value_t = 0)]
    pub workers: usize,
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
    let workers = Workers::start(limits.workers);
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
        workers.serve(connection, stream, permit);
    }
    drop(listener);
    drop(workers);
    let _ = stop.send(true);
    // Every connection gives its slot back when it ends.
    let _ = room.acquire_many(slots).await;
}

/// The threads that serve the connections the listener accepts, each a current-thread
/// runtime: a connection is handed over once, at accept, and its requests are then read,
/// answered and written on one thread, which sleeps in its own poll when there is nothing
/// to do. A multi-threaded runtime moves work between its threads and wakes a parked one
/// for it, several times per request when the load is light (docs/benchmarks.md, "What
/// limits each figure"). Dropped, the threads finish their connections and end.
struct Workers<S> {
    threads: Vec<mpsc::UnboundedSender<Job<S>>>,
    next: std::cell::Cell<usize>,
}

/// An accepted connection on its way to a worker, with its slot among `max_connections`.
type Job<S> = (Connection<S>, std::net::TcpStream, OwnedSemaphorePermit);

impl<S: HttpService> Workers<S> {
    /// `count` threads (0: one per core); those that cannot start are left out, and with
    /// none the connections are served on the caller's runtime.
    fn start(count: usize) -> Self {
        let count = if count == 0 {
            std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
        } else {
            count
        };
        let threads = (0..count)
            .filter_map(|index| match Self::thread(index) {
                Ok(sender) => Some(sender),
                Err(e) => {
                    tracing::warn!(error = %e, "Cannot start an HTTP worker thread.");
                    None
                }
            })
            .collect();
        Self {
            threads,
            next: std::cell::Cell::new(0),
        }
    }

    fn thread(index: usize) -> std::io::Result<mpsc::UnboundedSender<Job<S>>> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (sender, mut jobs) = mpsc::unbounded_channel::<Job<S>>();
        std::thread::Builder::new()
            .name(format!("http-worker-{index}"))
            .spawn(move || {
                runtime.block_on(async move {
                    let mut connections = tokio::task::JoinSet::new();
                    loop {
                        tokio::select! {
                            job = jobs.recv() => match job {
                                Some((connection, stream, permit)) => {
                                    connections.spawn(run(connection, stream, permit));
                                }
                                None => break,
                            },
                            Some(_) = connections.join_next(), if !connections.is_empty() => {}
                        }
                    }
                    while connections.join_next().await.is_some() {}
                });
            })?;
        Ok(sender)
    }

    /// Hands the connection to the next worker in turn.
    fn serve(&self, connection: Connection<S>, stream: TcpStream, permit: OwnedSemaphorePermit) {
        let job = match stream.into_std() {
            Ok(stream) if !self.threads.is_empty() => {
                let index = self.next.get() % self.threads.len();
                self.next.set((index + 1) % self.threads.len());
                match self.threads[index].send((connection, stream, permit)) {
                    Ok(()) => return,
                    Err(mpsc::error::SendError(job)) => job,
                }
            }
            Ok(stream) => (connection, stream, permit),
            Err(e) => {
                tracing::warn!(error = %e, "Cannot hand a connection over.");
                return;
            }
        };
        tokio::spawn(run(job.0, job.1, job.2));
    }
}

/// Serves one connection on the runtime that runs this, then gives its slot back.
async fn run<S: HttpService>(
    connection: Connection<S>,
    stream: std::net::TcpStream,
    permit: OwnedSemaphorePermit,
) {
    match TcpStream::from_std(stream) {
        Ok(stream) => connection.run(stream).await,
        Err(e) => tracing::warn!(error = %e, "Cannot serve a connection."),
    }
    drop(permit);
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
    async fn run(mut self, stream: TcpStream) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Sends a GET on `stream` and returns the answer's body (the answer is read by its
    /// `content-length`).
    async fn get(stream: &mut tokio::net::TcpStream) -> String {
        stream
            .write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .expect("written");
        let mut answer = Vec::new();
        loop {
            let mut chunk = [0u8; 1024];
            let n = stream.read(&mut chunk).await.expect("read");
            assert!(n > 0, "closed: {}", String::from_utf8_lossy(&answer));
            answer.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&answer).into_owned();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length: "))
                    .and_then(|l| l.trim().parse().ok())
                    .expect("a content-length");
                if body.len() >= length {
                    return body.to_owned();
                }
            }
        }
    }

    #[tokio::test]
    async fn each_connection_is_served_on_one_worker_thread_and_they_take_turns() {
        let router = axum::Router::new().route(
            "/",
            axum::routing::get(|| async {
                std::thread::current()
                    .name()
                    .unwrap_or("unnamed")
                    .to_owned()
            }),
        );
        let limits = ServeArgs {
            max_connections: 16,
            header_read_timeout_ms: 10_000,
            workers: 2,
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bound");
        let addr = listener.local_addr().expect("address");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            serve(listener, router, &limits, async {
                let _ = stopped.await;
            })
            .await;
        });
        let mut threads = Vec::new();
        for _ in 0..2 {
            let mut stream = tokio::net::TcpStream::connect(addr)
                .await
                .expect("connected");
            let answers = [
                get(&mut stream).await,
                get(&mut stream).await,
                get(&mut stream).await,
            ];
            assert!(answers[0].starts_with("http-worker-"), "{answers:?}");
            assert!(answers.iter().all(|a| *a == answers[0]), "{answers:?}");
            threads.push(answers[0].clone());
        }
        assert_ne!(
            threads[0], threads[1],
            "the second connection went to the same worker"
        );
        let _ = stop.send(());
        tokio::time::timeout(Duration::from_secs(20), server)
            .await
            .expect("the server stopped")
            .expect("no panic");
    }
}
