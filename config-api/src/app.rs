//! One build path for production and tests: `Application::build` loads the snapshot and
//! binds; `run_until` serves until a shutdown future fires.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use arc_swap::ArcSwap;
use axum::http::{HeaderName, HeaderValue, Method, header};
use common::cors::CorsPolicy;
use common::error::RouteError;
use common::ops::Readiness;
use common::reload::load_and_watch;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::config::Config;
use crate::prepared::Prepared;
use crate::routes;

#[derive(Clone)]
pub(crate) struct AppState {
    pub prepared: Arc<ArcSwap<Prepared>>,
    /// `Cache-Control` of answers outside test mode.
    pub cache_control: HeaderValue,
    pub requests: common::ops::RequestCounter,
}

pub struct Application {
    listener: TcpListener,
    api: routes::Api,
    readiness: Readiness,
    watcher: JoinHandle<()>,
    http: common::serve::ServeArgs,
}

impl Application {
    pub async fn build(config: Config) -> anyhow::Result<Self> {
        common::telemetry::metrics_handle();
        let (prepared, watcher) = load_and_watch(
            config.snapshot.watch_options("config_api"),
            Arc::new(Prepared::new),
        )
        .await?;
        let listener = TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("cannot listen on {}", config.listen))?;
        let state = AppState {
            prepared,
            cache_control: HeaderValue::try_from(format!(
                "public, max-age={}",
                config.cache_max_age
            ))
            .context("Cache-Control value")?,
            requests: common::ops::RequestCounter::new(
                "config_api_requests_total",
                routes::EXPERIMENTS_PATH,
            ),
        };
        let readiness = Readiness::default();
        let cors = CorsPolicy::new(
            state.prepared.clone(),
            &[Method::GET, Method::HEAD],
            &[
                header::ACCEPT,
                common::key::PUBLIC_KEY_HEADER,
                HeaderName::from_static("x-experiment-ids"),
                HeaderName::from_static("x-service-test"),
            ],
        );
        let api = routes::Api {
            state,
            cors: Arc::new(cors),
            rest: common::ops::ops_router(readiness.clone())
                .fallback(|| async { RouteError::NotFound }),
        };
        Ok(Self {
            listener,
            api,
            readiness,
            watcher,
            http: config.http,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// Serves until `shutdown` resolves, then finishes the requests in flight.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        common::serve::serve_ready(
            self.listener,
            self.api,
            &self.http,
            &self.readiness,
            std::time::Duration::ZERO,
            shutdown,
        )
        .await;
        self.watcher.abort();
        tracing::info!("Config-api stopped cleanly.");
        Ok(())
    }
}
