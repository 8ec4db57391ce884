//! Keeps `experiment_variants` in step with the experiments snapshot, so that analysts
//! join events to the weights, controls and texts they were served under. Every version
//! the consumer loads is written once (again after a restart, which replaces the same
//! rows); older versions stay. A failed write is retried until it lands or shutdown.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use arc_swap::ArcSwap;
use clickhouse::{Client, Row};
use contract::snapshot::{Snapshot, Status};
use http_kit::reload::{Build, load_and_watch};
use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::backoff::Backoff;
use crate::config::Config;
use crate::shutdown::stopped;
use crate::topology::Server;

/// How often the loaded snapshot is compared with the one last written.
const LOOK_EVERY: Duration = Duration::from_millis(500);

/// The snapshot as last loaded, and the task that keeps it current.
pub(crate) type Watched = (Arc<ArcSwap<Snapshot>>, JoinHandle<()>);

/// Loads the experiments snapshot and watches it for changes, when one is mirrored.
pub(crate) async fn watch(config: &Config) -> anyhow::Result<Option<Watched>> {
    let Some(source) = &config.experiments_snapshot else {
        return Ok(None);
    };
    let options = config.snapshot_watch.watch_options(source, "consumer");
    let build: Build<Snapshot> = Arc::new(|snapshot| snapshot);
    Ok(Some(load_and_watch(options, build).await?))
}

/// One row of `experiment_variants`.
#[derive(Clone, Debug, PartialEq, Row, Serialize)]
pub struct VariantRow {
    pub experiment_id: String,
    pub variant_id: String,
    pub version: String,
    pub weight: f64,
    pub is_control: u8,
    pub status: &'static str,
    /// Seconds since the Unix epoch.
    pub start_at: Option<u32>,
    pub end_at: Option<u32>,
    /// The variant's parts as a JSON object, in the snapshot's order.
    pub parts: String,
    /// Milliseconds since the Unix epoch.
    pub loaded_at: i64,
    pub phase: u32,
    /// The keys that list the experiment, sorted.
    pub public_keys: Vec<String>,
    /// The snapshot's `conversionWindowHours`; 0: not set.
    pub conversion_window_hours: f64,
    /// The snapshot's `sequentialTuning`; 0: not set.
    pub sequential_tuning: f64,
}

/// The rows of every variant of every experiment of `snapshot`.
pub fn rows(snapshot: &Snapshot, loaded_at: i64) -> Vec<VariantRow> {
    let seconds =
        |t: Option<time::OffsetDateTime>| t.map(|t| u32::try_from(t.unix_timestamp()).unwrap_or(0));
    let mut keys_of: Vec<Vec<String>> = vec![Vec::new(); snapshot.experiments.len()];
    for key in snapshot.keys() {
        for &i in &key.experiments {
            keys_of[i].push(key.public_key.as_str().to_owned());
        }
    }
    keys_of.iter_mut().for_each(|keys| keys.sort_unstable());
    snapshot
        .experiments
        .iter()
        .zip(keys_of)
        .flat_map(|(e, public_keys)| {
            e.variants.iter().map(move |v| VariantRow {
                experiment_id: e.id.clone(),
                variant_id: v.id.clone(),
                version: snapshot.version.clone(),
                weight: v.weight.as_f64().unwrap_or(0.0),
                is_control: u8::from(v.control),
                status: match e.status {
                    Status::Draft => "draft",
                    Status::Live => "live",
                    Status::Paused => "paused",
                    Status::Ended => "ended",
                },
                start_at: seconds(e.start_at),
                end_at: seconds(e.end_at),
                parts: serde_json::to_string(&v.parts).unwrap_or_default(),
                loaded_at,
                phase: e.phase,
                public_keys: public_keys.clone(),
                conversion_window_hours: e.conversion_window_hours.unwrap_or(0.0),
                sequential_tuning: e.sequential_tuning.unwrap_or(0.0),
            })
        })
        .collect()
}

async fn write(client: &Client, snapshot: &Snapshot) -> anyhow::Result<usize> {
    let rows = rows(snapshot, contract::event::now_millis());
    let mut insert = client
        .insert::<VariantRow>("experiment_variants")
        .await
        .context("cannot start the insert")?;
    for row in &rows {
        insert.write(row).await.context("cannot write a row")?;
    }
    insert.end().await.context("cannot end the insert")?;
    Ok(rows.len())
}

/// Writes each snapshot `current` holds, until `stop`, to one of `servers` (in a cluster
/// the table is replicated to all): the next one after a failure.
pub(crate) async fn mirror(
    servers: Vec<Server>,
    current: Arc<ArcSwap<Snapshot>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut written: Option<Arc<Snapshot>> = None;
    let mut backoff = Backoff::standard();
    let mut next = 0;
    loop {
        let snapshot = current.load_full();
        let wait = if written.as_ref().is_some_and(|w| Arc::ptr_eq(w, &snapshot)) {
            LOOK_EVERY
        } else {
            let server = &servers[next % servers.len()];
            match write(&server.client, &snapshot).await {
                Ok(count) => {
                    tracing::info!(version = %snapshot.version, variants = count,
                        "Experiment definitions written.");
                    metrics::counter!("consumer_definitions_written_total").increment(1);
                    written = Some(snapshot);
                    backoff = Backoff::standard();
                    LOOK_EVERY
                }
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), version = %snapshot.version,
                        url = %server.url, "Experiment definitions not written; retrying.");
                    next += 1;
                    backoff.next_wait()
                }
            }
        };
        tokio::select! {
            () = stopped(&mut stop) => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
}
