//! One build path for production and tests: `Application::build` binds, loads the
//! snapshot and connects the producer; `run_until` serves until a shutdown future fires,
//! then drains in-flight requests and flushes the producer.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use arc_swap::ArcSwap;
use axum::Router;
use axum::http::{Method, header};
use common::error::RouteError;
use common::ops::{Dependency, Readiness};
use common::reload::load_and_watch;
use common::serve::Http;
use common::snapshot::Snapshot;
use rdkafka::ClientConfig;
use rdkafka::producer::Producer;
use tokio::task::JoinHandle;

use crate::config::Config;
use crate::routes;
use common::producer::BatchProducer;

use crate::limits::RateLimiter;

/// The ingest's Kafka `client.id`.
const CLIENT_ID: &str = env!("CARGO_PKG_NAME");

/// What every request handler needs.
#[derive(Clone)]
pub(crate) struct AppState {
    pub producer: Arc<BatchProducer>,
    pub snapshot: Arc<ArcSwap<Snapshot>>,
    pub topic: Arc<str>,
    pub delivery_timeout: Duration,
    pub max_body_bytes: usize,
    pub body_read_timeout: Duration,
    pub requests: common::ops::RequestCounter,
    pub limiter: Arc<RateLimiter>,
    pub default_max_events_per_second: Option<f64>,
}

pub struct Application {
    http: Http,
    router: Router,
    state: AppState,
    background: Vec<JoinHandle<()>>,
    drain: Duration,
}

impl Application {
    pub async fn build(config: Config) -> anyhow::Result<Self> {
        common::telemetry::install_metrics();
        let (snapshot, watcher) = load_and_watch(
            config.snapshot.watch_options("ingest"),
            Arc::new(|s: Snapshot| s),
        )
        .await?;

        if let Err(e) = config
            .kafka
            .ensure_topics(CLIENT_ID, &[&config.kafka.topic])
            .await
        {
            tracing::warn!(error = %format!("{e:#}"), "Topics not ensured; publishing will tell.");
        }
        let delivery_timeout = Duration::from_millis(config.delivery_timeout_ms);
        let producer_config = producer_config(
            &config.kafka,
            config.linger_ms,
            config.delivery_timeout_ms,
            config.producer_queue_messages,
        );
        let producer = Arc::new(
            BatchProducer::new(producer_config, "ingest_producer_replacements_total")
                .context("cannot create Kafka producer")?,
        );

        let http = Http::bind(config.listen, config.http).await?;
        let state = AppState {
            producer,
            snapshot,
            topic: config.kafka.topic.into(),
            delivery_timeout,
            max_body_bytes: config.max_body_bytes,
            body_read_timeout: Duration::from_millis(config.body_read_timeout_ms),
            limiter: Arc::default(),
            default_max_events_per_second: config.default_max_events_per_second,
            requests: common::ops::RequestCounter::new(
                "ingest_requests_total",
                routes::ANALYTICS_PATH,
            ),
        };
        let router = router(state.clone(), http.readiness().clone());
        let checker = tokio::spawn(watch_broker(
            state.producer.clone(),
            state.topic.clone(),
            http.readiness().dependency(),
        ));
        Ok(Self {
            http,
            router,
            state,
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
        let producer = self.state.producer.get();
        let timeout = self.state.delivery_timeout;
        tokio::task::spawn_blocking(move || producer.flush(timeout))
            .await
            .context("flush task failed")?
            .context("producer flush did not complete")?;
        tracing::info!("Ingest stopped cleanly.");
        Ok(())
    }
}

/// Every few seconds: is the broker reachable (readiness), and how many messages wait in
/// the producer (a gauge).
async fn watch_broker(producer: Arc<BatchProducer>, topic: Arc<str>, broker: Dependency) {
    let mut ticker = tokio::time::interval(Duration::from_secs(2));
    loop {
        ticker.tick().await;
        producer.replace_if_broken(None);
        let probe = producer.get();
        metrics::gauge!("ingest_producer_queue_depth").set(f64::from(probe.in_flight_count()));
        let topic = topic.clone();
        let reachable = tokio::task::spawn_blocking(move || {
            probe
                .client()
                .fetch_metadata(Some(&topic), Duration::from_secs(2))
                .is_ok()
        })
        .await
        .unwrap_or(false);
        if !reachable {
            tracing::warn!("Kafka is not reachable; /readyz answers 503.");
        }
        broker.set_ok(reachable);
    }
}

fn router(state: AppState, readiness: Readiness) -> Router {
    let cors = common::cors::cors_layer(
        state.snapshot.clone(),
        &[Method::POST],
        &[
            header::CONTENT_TYPE,
            header::ACCEPT,
            common::key::PUBLIC_KEY_HEADER,
        ],
    );
    Router::new()
        .merge(routes::analytics_router())
        .layer(cors)
        .layer(common::cors::allow_layer(routes::ALLOW))
        .with_state(Arc::new(state))
        .merge(common::ops::ops_router(readiness))
        .fallback(|| async { RouteError::NotFound })
}

/// The producer settings of the ingest: every event acknowledged by all in-sync replicas
/// before the client hears 202. Not idempotent: a retry of librdkafka's own may write an
/// event twice, with the same `event_id`, which the `events` table collapses like any
/// other redelivery; and the idempotent producer cost 2.3 times the CPU for 7% fewer
/// events per second (BENCHMARKS.md). `KAFKA_PROPERTIES=enable.idempotence=true` turns it
/// back on. `queue_messages` bounds the messages waiting in the producer (a request waits
/// for room for all its events before enqueuing any). Public so that the benchmark's
/// reference producer runs with the same settings.
pub fn producer_config(
    kafka: &common::kafka::KafkaArgs,
    linger_ms: u64,
    delivery_timeout_ms: u64,
    queue_messages: usize,
) -> ClientConfig {
    kafka.producer_config(
        CLIENT_ID,
        false,
        &[
            ("queue.buffering.max.messages", queue_messages.to_string()),
            ("linger.ms", linger_ms.to_string()),
            ("message.timeout.ms", delivery_timeout_ms.to_string()),
        ],
    )
}
