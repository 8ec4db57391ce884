//! The three services run inside the test process: their test settings and their start,
//! through the same `Application::build` path as production, on port 0. A started service
//! is a [`Running`], which stops it within [`STOP_TIMEOUT`] or reports that it did not.

use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::clickhouse::clickhouse_url;
use crate::fixtures::ConsumerNames;
use crate::kafka::kafka_brokers;

/// A service running in this process; `stop` asks it to shut down and waits.
pub struct Running {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Running {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Asks the service to stop and waits for it, [`STOP_TIMEOUT`] at most: a service that
    /// does not stop by then is aborted and reported as an error.
    pub async fn stop(self) -> anyhow::Result<()> {
        self.stop_within(STOP_TIMEOUT).await
    }

    async fn stop_within(mut self, limit: Duration) -> anyhow::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match tokio::time::timeout(limit, &mut self.task).await {
            Ok(ended) => ended?,
            Err(_) => {
                self.task.abort();
                anyhow::bail!("the service on {} did not stop within {limit:?}", self.addr)
            }
        }
    }
}

/// How long [`Running::stop`] waits: a drain, a last insert and a commit, on a busy machine.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(60);

/// A built service run until [`Running::stop`]; `run` is its `run_until`.
fn running<F>(
    addr: SocketAddr,
    run: impl FnOnce(Pin<Box<dyn Future<Output = ()> + Send>>) -> F,
) -> Running
where
    F: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(run(Box::pin(async move {
        let _ = stopped.await;
    })));
    Running {
        addr,
        stop: Some(stop),
        task,
    }
}

/// `base` flags (`--name=value`) with `extra` added; an extra flag replaces a base one of
/// the same name.
fn with_overrides(base: Vec<String>, extra: &[&str]) -> Vec<String> {
    let name = |arg: &str| arg.split('=').next().unwrap_or(arg).to_owned();
    let overridden: Vec<String> = extra.iter().map(|e| name(e)).collect();
    base.into_iter()
        .filter(|arg| !overridden.contains(&name(arg)))
        .chain(extra.iter().map(|e| e.to_string()))
        .collect()
}

/// Ingest settings for tests: port 0, the test broker, `topic`, `snapshot`.
pub fn ingest_config(snapshot: &Path, topic: &str, extra: &[&str]) -> ingest::Config {
    let args = vec![
        "ingest".to_owned(),
        "--listen=127.0.0.1:0".into(),
        format!("--kafka-brokers={}", kafka_brokers()),
        format!("--topic={topic}"),
        format!("--snapshot={}", snapshot.display()),
        "--snapshot-poll-interval-ms=100".into(),
    ];
    ingest::Config::parse_from(with_overrides(args, extra))
}

/// An ingest, once ready: its broker answered and its topic exists (the ingest creates it
/// in the background, as in production, where readiness holds traffic back until then).
pub async fn start_ingest(config: ingest::Config) -> Running {
    let ingest = start_ingest_unready(config).await;
    crate::wait::eventually(Duration::from_secs(30), "the ingest ready", || async {
        let status = reqwest::get(ingest.url("/readyz")).await.ok()?.status();
        status.is_success().then_some(())
    })
    .await;
    ingest
}

/// An ingest as soon as it listens, ready or not (its broker may be down).
pub async fn start_ingest_unready(config: ingest::Config) -> Running {
    http_kit::telemetry::init_test_logging();
    let app = ingest::Application::build(config)
        .await
        .expect("ingest builds");
    running(app.local_addr(), |shutdown| app.run_until(shutdown))
}

pub async fn start_config_api(snapshot: &Path) -> Running {
    start_config_api_with(config_api::Config::parse_from([
        "config-api".to_owned(),
        "--listen=127.0.0.1:0".into(),
        format!("--snapshot={}", snapshot.display()),
        "--snapshot-poll-interval-ms=100".into(),
    ]))
    .await
}

pub async fn start_config_api_with(config: config_api::Config) -> Running {
    http_kit::telemetry::init_test_logging();
    let app = config_api::Application::build(config)
        .await
        .expect("config-api builds");
    running(app.local_addr(), |shutdown| app.run_until(shutdown))
}

pub fn consumer_config(names: &ConsumerNames, extra: &[&str]) -> consumer::Config {
    let args = vec![
        "consumer".to_owned(),
        "--listen=127.0.0.1:0".into(),
        format!("--kafka-brokers={}", kafka_brokers()),
        format!("--topic={}", names.topic),
        format!("--dlq-topic={}", names.dlq_topic),
        format!("--group-id={}", names.group),
        format!("--clickhouse-url={}", clickhouse_url()),
        format!("--clickhouse-database={}", names.database),
        "--batch-max-wait-ms=200".into(),
    ];
    consumer::Config::parse_from(with_overrides(args, extra))
}

pub async fn start_consumer(config: consumer::Config) -> Running {
    start_consumer_counted(config).await.0
}

/// A started consumer and its counts.
pub async fn start_consumer_counted(config: consumer::Config) -> (Running, Arc<consumer::Stats>) {
    http_kit::telemetry::init_test_logging();
    let app = consumer::Application::build(config)
        .await
        .expect("consumer builds");
    let stats = app.stats();
    (
        running(app.local_addr(), |shutdown| app.run_until(shutdown)),
        stats,
    )
}

/// The Prometheus text a service serves at `url` (its `/metrics`).
pub async fn metrics_text(url: &str) -> String {
    reqwest::get(url)
        .await
        .and_then(reqwest::Response::error_for_status)
        .unwrap_or_else(|e| panic!("{url}: {e}"))
        .text()
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"))
}

/// The value of an unlabelled metric in a Prometheus text (a service's `/metrics`),
/// `None` when it is absent (never recorded).
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_service_that_does_not_stop_is_reported_within_the_limit() {
        let addr = "127.0.0.1:9".parse().expect("an address");
        let deaf = running(addr, |_shutdown| async {
            std::future::pending::<()>().await;
            Ok(())
        });
        let stopped = tokio::time::timeout(
            Duration::from_secs(10),
            deaf.stop_within(Duration::from_millis(300)),
        )
        .await
        .expect("stop gave up within its limit");
        let error = stopped.expect_err("reported as an error").to_string();
        assert!(error.contains("did not stop"), "{error}");
    }
}
