//! The consumer's wiring: it builds each stage from the configuration and joins them, and
//! holds no logic of its own. Data moves through the stages in this order: [`source`]
//! (the Kafka client in its group) → [`worker`] (the consume loop) → [`batch`] (the arena
//! a batch's messages are decoded into) → [`store`] (insert, refused rows bisected) →
//! [`sink`] (ClickHouse, retried on replicas) and [`dead_letters`]; the worker commits a
//! batch's offsets only once the store handed them back. Beside them, [`retention`] drops
//! expired partitions when `EVENTS_RETENTION_DAYS` is set.
//!
//! [`source`]: crate::source
//! [`worker`]: crate::worker
//! [`batch`]: crate::batch
//! [`store`]: crate::store
//! [`sink`]: crate::sink
//! [`dead_letters`]: crate::dead_letters
//! [`retention`]: crate::retention

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use clickhouse_kit::topology::{Server, Topology};
use http_kit::serve::Http;
use tokio::sync::Notify;

use crate::config::{CLIENT_ID, Config};
use crate::dead_letters::DeadLetters;
use crate::definitions::{self, Watched};
use crate::refresh::{self, Schedule, Waiting};
use crate::retention;
use crate::shutdown::{stop_on, stopped};
use crate::sink::Sink;
use crate::source::Source;
use crate::stats::Stats;
use crate::store::Store;
use crate::worker::Worker;

pub struct Application {
    http: Http,
    stats: Arc<Stats>,
    worker: Worker,
    /// The experiments snapshot, kept current by its task, and the servers it is mirrored
    /// to, when one is mirrored.
    snapshot: Option<(Watched, Vec<Server>)>,
    /// The servers, database and days of the retention runs, when events expire.
    retention: Option<(Topology, String, u32)>,
    /// The metric values' refresh, when it runs: its servers, database, waiting visitors
    /// and schedule, and what tells it the mirrored snapshot changed.
    refresh: Option<(Topology, String, Arc<Waiting>, Schedule)>,
    snapshot_written: Arc<Notify>,
}

impl Application {
    /// Applies the schema's migrations to the servers of `config`: what [`Self::build`]
    /// does first, alone (`--migrate-only`).
    pub async fn migrate(config: &Config) -> anyhow::Result<Topology> {
        let topology = Topology::from_args(&config.clickhouse)?;
        topology.check().await?;
        schema::migrate_topology(&topology, &config.clickhouse.clickhouse_database, u32::MAX)
            .await?;
        Ok(topology)
    }

    /// Waits until the database holds the schema this binary needs ([`schema::is_current`]),
    /// checking every 2 s, while /healthz answers 200 and /readyz 503 (the cause: waiting for
    /// the schema) on the consumer's address: a consumer that does not migrate
    /// (`CONSUMER_MIGRATE=false`) stays alive and unready until the migration Job is done.
    pub async fn wait_for_schema(config: &Config) -> anyhow::Result<Topology> {
        let topology = Topology::from_args(&config.clickhouse)?;
        let database = config.clickhouse.clickhouse_database.clone();
        let readiness = http_kit::ops::Readiness::default();
        readiness
            .dependency()
            .fail("waiting for the schema's migrations (the migration Job)");
        let listener = tokio::net::TcpListener::bind(config.listen).await?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let limits = config.http.clone();
        let server = tokio::spawn(async move {
            let router: Router = http_kit::ops::ops_router(readiness.clone());
            http_kit::serve::serve_ready(
                listener,
                router,
                &limits,
                &readiness,
                Duration::ZERO,
                async {
                    let _ = stopped.await;
                },
            )
            .await;
        });
        let mut told = false;
        loop {
            match schema::is_current(&topology, &database).await {
                Ok(true) => break,
                Ok(false) if !told => {
                    tracing::info!(%database, "Waiting for the schema's migrations.");
                    told = true;
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %format!("{e:#}"), "Cannot read the schema."),
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        let _ = stop.send(());
        let _ = server.await;
        tracing::info!(%database, "The schema is current.");
        Ok(topology)
    }

    pub async fn build(config: Config) -> anyhow::Result<Self> {
        http_kit::telemetry::install_metrics();
        let topology = if config.migrate {
            Self::migrate(&config).await?
        } else {
            Self::wait_for_schema(&config).await?
        };
        let snapshot = definitions::watch(&config)
            .await?
            .map(|watched| (watched, topology.servers().cloned().collect()));

        if let Err(e) = config
            .kafka
            .ensure_topics(CLIENT_ID, &[&config.kafka.topic, &config.dlq_topic])
            .await
        {
            tracing::warn!(error = %format!("{e:#}"), "Topics not ensured.");
        }
        let source = Source::join(&config)?;
        let stats = Arc::new(Stats::default());
        let dead_letters = DeadLetters::new(&config, stats.clone())?;
        let http = Http::bind(config.listen, config.http.clone()).await?;
        let readiness = http.readiness().clone();
        let retention = config.events_retention_days.map(|days| {
            (
                topology.clone(),
                config.clickhouse.clickhouse_database.clone(),
                days,
            )
        });
        let refresh = (config.metrics_refresh_ms > 0).then(|| {
            let schedule = Schedule {
                every: Duration::from_millis(config.metrics_refresh_ms),
                sweep_every: Duration::from_secs(config.metrics_sweep_secs),
                visitors_per_statement: config.metrics_visitors_per_statement,
            };
            (
                topology.clone(),
                config.clickhouse.clickhouse_database.clone(),
                Arc::new(Waiting::default()),
                schedule,
            )
        });
        let waiting = refresh.as_ref().map(|(_, _, waiting, _)| waiting.clone());
        let sink = Sink::new(
            topology,
            Duration::from_millis(config.insert_timeout_ms),
            readiness.dependency(),
        );
        Ok(Self {
            http,
            stats: stats.clone(),
            snapshot,
            retention,
            refresh,
            snapshot_written: Arc::new(Notify::new()),
            worker: Worker {
                group: readiness.dependency(),
                readiness,
                source,
                store: Arc::new(Store {
                    sink,
                    dead_letters,
                    stats,
                    refresh: waiting,
                }),
                config,
            },
        })
    }

    /// This consumer's counts.
    pub fn stats(&self) -> Arc<Stats> {
        self.stats.clone()
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.http.local_addr()
    }

    /// Consumes until `shutdown` resolves, then inserts the batch in hand, commits it and
    /// leaves the group. Fails when the last batch could not be stored (it will be read
    /// again by whoever gets its partitions).
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let stop = stop_on(shutdown);
        let ops: Router = http_kit::ops::ops_router(self.http.readiness().clone());
        let mut http_stop = stop.clone();
        let http = tokio::spawn(self.http.serve(ops, async move {
            stopped(&mut http_stop).await;
        }));
        let mirror = self.snapshot.map(|((current, watcher), servers)| {
            (
                tokio::spawn(definitions::mirror(
                    servers,
                    current,
                    self.snapshot_written.clone(),
                    stop.clone(),
                )),
                watcher,
            )
        });
        let retention = self.retention.map(|(topology, database, days)| {
            tokio::spawn(retention::run(topology, database, days, stop.clone()))
        });
        let refresh = self.refresh.map(|(topology, database, waiting, schedule)| {
            tokio::spawn(refresh::run(
                topology,
                database,
                waiting,
                self.snapshot_written,
                schedule,
                stop.clone(),
            ))
        });
        let result = self.worker.consume(stop).await;
        if let Some(retention) = retention {
            let _ = retention.await;
        }
        if let Some(refresh) = refresh {
            // A statement in flight may wait on a slow server: dropped, not waited for (a
            // refresh stores nothing that the next one does not store again).
            refresh.abort();
            let _ = refresh.await;
        }
        let _ = http.await;
        if let Some((mirror, watcher)) = mirror {
            let _ = mirror.await;
            watcher.abort();
        }
        result
    }
}
