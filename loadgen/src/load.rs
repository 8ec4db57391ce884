//! The HTTP load loop: one keep-alive HTTP/1.1 connection per worker. Closed loop (the
//! next request leaves when the answer to the last one arrived) or open loop (requests are
//! due at a fixed rate, and a request's latency counts from when it was due, so a server
//! that falls behind is charged for the wait it causes).
//!
//! A request counts once its whole response has arrived; only requests answered within the
//! measured window (after the warm-up, before the end) count.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use loadgen::stats::Tally;

/// How a worker builds its requests and judges the answers.
pub trait Workload: Send + 'static {
    /// The next request; the runner adds `Host`.
    fn request(&mut self) -> Request<Full<Bytes>>;
    /// The number of events (or other units) a 2xx answer stands for.
    fn units(&mut self, status: StatusCode, body: &[u8]) -> u64;
}

#[derive(Clone, Debug)]
pub struct LoadOptions {
    pub addr: SocketAddr,
    pub connections: usize,
    pub warmup: Duration,
    pub duration: Duration,
    /// Requests per second for an open loop; `None` runs closed loop at full speed.
    pub rate: Option<f64>,
}

/// Runs the load and returns the merged tally of all workers.
pub async fn run<W: Workload>(
    options: &LoadOptions,
    mut make: impl FnMut(usize) -> W,
) -> anyhow::Result<Tally> {
    anyhow::ensure!(options.connections > 0, "at least one connection is needed");
    let start = Instant::now();
    let window = (
        start + options.warmup,
        start + options.warmup + options.duration,
    );
    let tickets = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::with_capacity(options.connections);
    for index in 0..options.connections {
        let worker = Worker {
            addr: options.addr,
            host: HeaderValue::try_from(options.addr.to_string()).context("host header")?,
            rate: options.rate,
            start,
            window,
            tickets: Arc::clone(&tickets),
        };
        workers.push(tokio::spawn(worker.run(make(index))));
    }
    let mut total = Tally::new(options.duration);
    for worker in workers {
        total.merge(&worker.await.context("load worker panicked")??);
    }
    Ok(total)
}

struct Worker {
    addr: SocketAddr,
    host: HeaderValue,
    rate: Option<f64>,
    start: Instant,
    window: (Instant, Instant),
    tickets: Arc<AtomicU64>,
}

impl Worker {
    async fn run<W: Workload>(self, mut workload: W) -> anyhow::Result<Tally> {
        let mut tally = Tally::new(self.window.1 - self.window.0);
        let mut sender: Option<SendRequest<Full<Bytes>>> = None;
        loop {
            let due = match self.rate {
                Some(rate) => {
                    let ticket = self.tickets.fetch_add(1, Ordering::Relaxed);
                    let due = self.start + Duration::from_secs_f64(ticket as f64 / rate);
                    if due >= self.window.1 {
                        break;
                    }
                    tokio::time::sleep_until(due.into()).await;
                    due
                }
                None => Instant::now(),
            };
            if due >= self.window.1 {
                break;
            }
            let mut live = match sender.take() {
                Some(s) if !s.is_closed() => s,
                _ => match self.connect().await {
                    Ok(s) => s,
                    Err(_) => {
                        tally.transport_error(due >= self.window.0);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let mut request = workload.request();
            request
                .headers_mut()
                .insert(hyper::header::HOST, self.host.clone());
            let answer = async {
                let response = live.send_request(request).await?;
                let status = response.status();
                let body = response.into_body().collect().await?.to_bytes();
                Ok::<_, hyper::Error>((status, body))
            }
            .await;
            let done = Instant::now();
            let counted = due >= self.window.0 && done <= self.window.1;
            match answer {
                Ok((status, body)) => {
                    sender = Some(live);
                    let units = workload.units(status, &body);
                    tally.answer(status, units, done - due, counted);
                }
                Err(_) => tally.transport_error(counted),
            }
        }
        Ok(tally)
    }

    async fn connect(&self) -> anyhow::Result<SendRequest<Full<Bytes>>> {
        let stream = TcpStream::connect(self.addr).await?;
        stream.set_nodelay(true)?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .context("HTTP handshake")?;
        tokio::spawn(connection);
        Ok(sender)
    }
}

/// A GET of one URL path with fixed headers, parsed once; a 200 counts one unit.
pub struct Get {
    pub uri: Uri,
    pub headers: HeaderMap,
}

impl Get {
    /// `headers` are `Name: value` lines.
    pub fn new(path: &str, headers: &[String]) -> anyhow::Result<Self> {
        let mut map = HeaderMap::new();
        for line in headers {
            let (name, value) = line.split_once(':').context("a header is `Name: value`")?;
            let name = HeaderName::try_from(name.trim()).context("header name")?;
            map.append(
                name,
                HeaderValue::try_from(value.trim()).context("header value")?,
            );
        }
        Ok(Self {
            uri: path.parse().context("request path")?,
            headers: map,
        })
    }
}

impl Workload for Get {
    fn request(&mut self) -> Request<Full<Bytes>> {
        let mut request = Request::new(Full::new(Bytes::new()));
        *request.uri_mut() = self.uri.clone();
        *request.headers_mut() = self.headers.clone();
        request
    }

    fn units(&mut self, status: StatusCode, _body: &[u8]) -> u64 {
        u64::from(status == StatusCode::OK)
    }
}

/// The socket address and path of an `http://` URL.
pub async fn target(url: &str) -> anyhow::Result<(SocketAddr, String)> {
    let uri: Uri = url.parse().with_context(|| format!("not a URL: {url}"))?;
    anyhow::ensure!(uri.scheme_str() == Some("http"), "only http:// URLs: {url}");
    let host = uri.host().context("URL without host")?;
    let port = uri.port_u16().unwrap_or(80);
    let addr = tokio::net::lookup_host((host, port))
        .await?
        .next()
        .with_context(|| format!("{host} has no address"))?;
    let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
    Ok((addr, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_requests_carry_the_parsed_headers() {
        let lines = [
            "X-public-key: pk_a".to_owned(),
            "Accept:application/json".to_owned(),
        ];
        let mut get = Get::new("/api/v1/experiments?x=1", &lines).unwrap();
        let request = get.request();
        assert_eq!(request.uri(), "/api/v1/experiments?x=1");
        assert_eq!(request.headers()["x-public-key"], "pk_a");
        assert_eq!(request.headers()["accept"], "application/json");
        assert!(Get::new("/", &["no colon".to_owned()]).is_err());
        assert!(Get::new("/", &["Bad Name: x".to_owned()]).is_err());
    }
}
