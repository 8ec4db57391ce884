//! Logging and the process-wide Prometheus recorder.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;

/// Logs to stderr, filtered by `RUST_LOG` (default `info`); JSON when `LOG_FORMAT=json`.
pub fn init_logging() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = if std::env::var("LOG_FORMAT").is_ok_and(|f| f == "json") {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
    // Already set (tests start several services in one process): keep the first.
    let _ = result;
}

/// Logging for tests: captured by the test harness, shown for failing tests only.
pub fn init_test_logging() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}

/// Installs the Prometheus recorder, if no service of this process did: what is recorded
/// before it is lost, so each service calls it first thing in its `build`.
pub fn install_metrics() {
    metrics_handle();
}

/// The recorder, installed on first use; services of one process share it. `/metrics`
/// renders it.
pub fn metrics_handle() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        if metrics::set_global_recorder(recorder).is_err() {
            tracing::warn!("A metrics recorder was already installed; /metrics will be empty.");
        }
        handle
    })
}
