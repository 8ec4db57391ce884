//! Shutdown, as every stage sees it: one `watch` channel that turns `true` once, when the
//! process was asked to stop. Stages wait on it with [`stopped`] and never import it from
//! their callers, so that the wiring in `app.rs` depends on the stages and not the other
//! way round.

use tokio::sync::watch;

/// A receiver that turns `true` once `shutdown` resolves: what every stage is handed.
pub(crate) fn stop_on(
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> watch::Receiver<bool> {
    let (stop_tx, stop) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    stop
}

/// Resolves once shutdown was asked for (or its sender is gone).
pub(crate) async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}
