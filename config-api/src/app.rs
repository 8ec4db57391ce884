//! One build path for production and tests: `Application::build` loads the snapshot and
//! binds; `run_until` serves until a shutdown future fires.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use axum::http::{HeaderValue, Method, header};
use http_kit::error::RouteError;
use http_kit::reload::load_and_watch;
use http_kit::serve::Http;
use tokio::task::JoinHandle;

use crate::config::Config;
use crate::prepared::Prepared;
use crate::routes;
use crate::state::AppState;

pub struct Application {
    http: Http,
    api: routes::Api,
    watcher: JoinHandle<()>,
    /// How long /readyz answers 503 at shutdown while requests are still served.
    drain: std::time::Duration,
}

impl Application {
    pub async fn build(config: Config) -> anyhow::Result<Self> {
        http_kit::telemetry::install_metrics();
        let (prepared, watcher) = load_and_watch(
            config.snapshot.watch_options("config_api"),
            Arc::new(Prepared::new),
        )
        .await?;
        let http = Http::bind(config.listen, config.http).await?;
        let state = AppState {
            prepared,
            cache_control: HeaderValue::try_from(format!(
                "public, max-age={}",
                config.cache_max_age
            ))
            .context("Cache-Control value")?,
            requests: http_kit::ops::RequestCounter::new(
                "config_api_requests_total",
                routes::EXPERIMENTS_PATH,
            ),
        };
        let current = state.prepared.clone();
        let api = routes::Api::new(
            routes::EXPERIMENTS_PATH,
            &[Method::GET, Method::HEAD],
            &[
                header::ACCEPT,
                contract::key::PUBLIC_KEY_HEADER,
                routes::EXPERIMENT_IDS_HEADER,
                routes::SERVICE_TEST_HEADER,
            ],
            current,
            routes::Experiments(state),
            http_kit::ops::ops_router(http.readiness().clone())
                .fallback(|| async { RouteError::NotFound }),
        );
        Ok(Self {
            http,
            api,
            watcher,
            drain: std::time::Duration::from_millis(config.shutdown_drain_ms),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.http.local_addr()
    }

    /// Serves until `shutdown` resolves; then /readyz turns 503 for the drain period while
    /// requests are still served, and the requests in flight finish.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        self.http.serve_ready(self.api, self.drain, shutdown).await;
        self.watcher.abort();
        tracing::info!("Config-api stopped cleanly.");
        Ok(())
    }
}
