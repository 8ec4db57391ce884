//! One build path for production and tests: `Application::build` binds, loads the
//! snapshot and connects the Kafka sink; `run_until` serves until a shutdown future fires,
//! then drains in-flight requests and flushes the sink. Only wiring: the handler is in
//! `routes`, what it needs in `state`, Kafka in `sink::kafka`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::http::{Method, header};
use contract::snapshot::Snapshot;
use http_kit::error::RouteError;
use http_kit::ops::Readiness;
use http_kit::reload::load_and_watch;
use http_kit::serve::Http;
use tokio::task::JoinHandle;

use crate::budget::Budget;
use crate::config::Config;
use crate::routes;
use crate::sink::kafka::KafkaSink;
use crate::state::AppState;

pub struct Application {
    http: Http,
    router: routes::Api,
    sink: Arc<KafkaSink>,
    background: Vec<JoinHandle<()>>,
    drain: Duration,
}

impl Application {
    pub async fn build(config: Config) -> anyhow::Result<Self> {
        http_kit::telemetry::install_metrics();
        let (snapshot, watcher) = load_and_watch(
            config.snapshot.watch_options("ingest"),
            Arc::new(|s: Snapshot| s),
        )
        .await?;

        let producer_config = config.kafka.events_producer_config(
            config.linger_ms,
            config.delivery_timeout_ms,
            config.producer_queue_messages,
        );
        let sink = Arc::new(
            KafkaSink::new(
                producer_config,
                config.kafka.topic.clone(),
                Duration::from_millis(config.delivery_timeout_ms),
            )
            .context("cannot create Kafka producer")?,
        );

        let http = Http::bind(config.listen, config.http).await?;
        let state = AppState {
            sink: sink.clone(),
            snapshot,
            max_body_bytes: config.max_body_bytes,
            body_read_timeout: Duration::from_millis(config.body_read_timeout_ms),
            limiter: Arc::default(),
            default_max_events_per_second: config.default_max_events_per_second,
            user_agent_max_bytes: config.user_agent_max_bytes.into(),
            budget: Arc::new(Budget::new(config.max_bytes_in_flight)),
            requests: http_kit::ops::RequestCounter::new(
                "ingest_requests_total",
                routes::ANALYTICS_PATH,
            ),
        };
        let router = router(state, http.readiness().clone());
        // Not ready until the watch found the broker and the topic.
        let broker = http.readiness().dependency();
        broker.fail("The ingest has not reached Kafka yet.");
        let checker = tokio::spawn(sink.clone().watch_broker(config.kafka, broker));
        Ok(Self {
            http,
            router,
            sink,
            background: vec![watcher, checker],
            drain: Duration::from_millis(config.shutdown_drain_ms),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.http.local_addr()
    }

    /// Serves until `shutdown` resolves; then /readyz turns 503 for the drain period while
    /// requests are still served, then it stops accepting, finishes the requests in flight
    /// and flushes what the producer still holds.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        self.http
            .serve_ready(self.router, self.drain, shutdown)
            .await;
        for task in &self.background {
            task.abort();
        }
        self.sink.flush().await?;
        tracing::info!("Ingest stopped cleanly.");
        Ok(())
    }
}

/// The whole HTTP surface: the analytics route with its CORS, the operational routes and
/// the 404 fallback.
pub(crate) fn router(state: AppState, readiness: Readiness) -> routes::Api {
    let current = state.snapshot.clone();
    routes::Api::new(
        routes::ANALYTICS_PATH,
        &[Method::POST],
        &[
            header::CONTENT_TYPE,
            // The documented gzip of a body, from a page of another origin.
            header::CONTENT_ENCODING,
            header::ACCEPT,
            contract::key::PUBLIC_KEY_HEADER,
        ],
        current,
        routes::Analytics(Arc::new(state)),
        http_kit::ops::ops_router(readiness).fallback(|| async { RouteError::NotFound }),
    )
}
