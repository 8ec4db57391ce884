//! Waiting for a condition rather than for a duration. Every wait here has a deadline and
//! fails the test at it, even when the probe itself hangs.

use std::time::Duration;

/// Calls `probe` every 200 ms until it returns `Some`, for at most `timeout`: a probe
/// still running at the deadline is cut there, so a hung probe fails the test in time.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match tokio::time::timeout_at(deadline, probe()).await {
            Ok(Some(value)) => return value,
            Ok(None) => {}
            // The deadline passed while a probe ran (it may hang), or during the last pause.
            Err(_) => panic!("timed out waiting for {what} ({timeout:?})"),
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what} ({timeout:?})"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits (90 s at most) until a service's /readyz says ready (200) or not (503).
pub async fn until_ready(readyz: &str, ready: bool, what: &str) {
    eventually(Duration::from_secs(90), what, || async {
        let status = reqwest::get(readyz).await.ok()?.status();
        let answer = if ready {
            status.is_success()
        } else {
            status == reqwest::StatusCode::SERVICE_UNAVAILABLE
        };
        answer.then_some(())
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn eventually_cuts_a_hung_probe_at_its_deadline() {
        let waiting = tokio::spawn(eventually(Duration::from_millis(300), "a reply", || {
            std::future::pending::<Option<()>>()
        }));
        let ended = tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("eventually gave up by its deadline");
        let panic = ended.expect_err("it fails the test").into_panic();
        let message = panic.downcast_ref::<String>().expect("a message");
        assert!(message.contains("a reply"), "{message}");
    }
}
