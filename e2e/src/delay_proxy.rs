//! The delaying TCP proxy of the tests of slow dependencies (a broker behind it, or any
//! server). It only ever delays: each direction keeps its order and loses no byte.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::oneshot;

/// A TCP proxy that forwards everything, both ways, a delay after it arrived, in order; the
/// delay may change while it runs. A server behind it answers slowly rather than not at all.
/// It runs on a thread of its own, so that a test blocking its runtime does not stop it.
pub struct DelayProxy {
    pub addr: SocketAddr,
    delay_ms: Arc<AtomicU64>,
    stop: Option<oneshot::Sender<()>>,
}

impl DelayProxy {
    /// Forwards the connections `listener` accepts to `target`.
    pub fn serve(listener: std::net::TcpListener, target: SocketAddr) -> Self {
        let addr = listener.local_addr().expect("the proxy's address");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let delay_ms = Arc::new(AtomicU64::new(0));
        let delay = delay_ms.clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("the proxy's runtime");
        std::thread::spawn(move || {
            runtime.block_on(async move {
                let listener =
                    tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
                let accept = async {
                    while let Ok((client, _)) = listener.accept().await {
                        let delay = delay.clone();
                        tokio::spawn(async move {
                            let Ok(server) = tokio::net::TcpStream::connect(target).await else {
                                return;
                            };
                            let (from_client, to_client) = client.into_split();
                            let (from_server, to_server) = server.into_split();
                            tokio::join!(
                                forward_late(from_client, to_server, delay.clone()),
                                forward_late(from_server, to_client, delay),
                            );
                        });
                    }
                };
                tokio::select! {
                    () = accept => {}
                    _ = stopped => {}
                }
            });
        });
        Self {
            addr,
            delay_ms,
            stop: Some(stop),
        }
    }

    pub fn set_delay(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.delay_ms.store(ms, Ordering::Relaxed);
    }
}

impl Drop for DelayProxy {
    /// Stops the proxy and closes its connections.
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Copies `from` to `to`, writing each chunk the delay after it was read, in order.
async fn forward_late(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay_ms: Arc<AtomicU64>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (chunks, mut due) = tokio::sync::mpsc::unbounded_channel();
    let read = async move {
        let mut buffer = vec![0; 64 * 1024];
        while let Ok(n @ 1..) = from.read(&mut buffer).await {
            let delay = delay_ms.load(Ordering::Relaxed);
            let at = tokio::time::Instant::now() + Duration::from_millis(delay);
            if chunks.send((at, buffer[..n].to_vec())).is_err() {
                break;
            }
        }
    };
    let write = async move {
        while let Some((at, chunk)) = due.recv().await {
            tokio::time::sleep_until(at).await;
            if to.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(read, write);
}
