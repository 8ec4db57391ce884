//! Keeps `experiment_variants` and `experiment_metrics` in step with the experiments
//! snapshot, so that analysts join events to the weights, controls and texts they were
//! served under, and the results views read each experiment's metrics. Every version the
//! consumer loads is written once (again after a restart, which replaces the same rows);
//! older versions stay. A failed write is retried, both tables again, until it lands or
//! shutdown.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use arc_swap::ArcSwap;
use clickhouse::{Client, Row};
use clickhouse_kit::backoff::Backoff;
use clickhouse_kit::topology::Server;
use contract::metric::{Cap, Events, Field, Metric};
use contract::snapshot::{Snapshot, Status};
use http_kit::reload::{Build, load_and_watch};
use serde::Serialize;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use crate::config::Config;
use crate::shutdown::stopped;

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

/// One row of `experiment_metrics`: a metric of an experiment's list.
#[derive(Clone, Debug, PartialEq, Row, Serialize)]
pub struct MetricRow {
    pub experiment_id: String,
    pub version: String,
    pub phase: u32,
    pub metric_id: String,
    pub role: &'static str,
    /// The place in the experiment's list, the default goal (when it has no goal) first.
    pub position: u32,
    pub kind: &'static str,
    pub num_event: String,
    pub num_click_target: String,
    pub num_conversion: u8,
    /// The events' column; '' none.
    pub num_field: &'static str,
    /// `any` for a proportion.
    pub num_aggregate: &'static str,
    pub den_event: String,
    pub den_click_target: String,
    pub den_conversion: u8,
    pub den_field: &'static str,
    /// '' but for a ratio.
    pub den_aggregate: &'static str,
    /// 0: none.
    pub cap_value: f64,
    pub cap_percentile: f64,
    pub higher_is_better: u8,
    pub cuped_lookback_days: f64,
    /// The definition as loaded (the same JSON value, written compact).
    pub definition: String,
    /// Milliseconds since the Unix epoch, as the variants' rows of the same write.
    pub loaded_at: i64,
    /// The keys that list the experiment, sorted.
    pub public_keys: Vec<String>,
}

/// The column of `events` that holds `field`.
fn column(field: Option<Field>) -> &'static str {
    match field {
        None => "",
        Some(Field::TimeOnPage) => "time_on_page",
        Some(Field::ScrollDepth) => "scroll_depth",
        Some(Field::LoadTime) => "load_time",
    }
}

/// Each experiment's keys, sorted, indexed as `snapshot.experiments`.
fn keys_of(snapshot: &Snapshot) -> Vec<Vec<String>> {
    let mut keys_of: Vec<Vec<String>> = vec![Vec::new(); snapshot.experiments.len()];
    for key in snapshot.keys() {
        for &i in &key.experiments {
            keys_of[i].push(key.public_key.as_str().to_owned());
        }
    }
    keys_of.iter_mut().for_each(|keys| keys.sort_unstable());
    keys_of
}

/// The rows of every metric of every experiment of `snapshot`.
pub fn metric_rows(snapshot: &Snapshot, loaded_at: i64) -> Vec<MetricRow> {
    let events = |e: Option<&Events>| {
        let text = |t: Option<&String>| t.cloned().unwrap_or_default();
        (
            text(e.and_then(|e| e.event_name.as_ref())),
            text(e.and_then(|e| e.click_target.as_ref())),
            u8::from(e.is_some_and(|e| e.conversion)),
            column(e.and_then(|e| e.field)),
            e.map_or("", |e| e.aggregate.map_or("any", |a| a.as_str())),
        )
    };
    let mut rows = Vec::new();
    for (e, public_keys) in snapshot.experiments.iter().zip(keys_of(snapshot)) {
        for (position, (role, metric)) in snapshot.metrics_of(e).into_iter().enumerate() {
            let Metric {
                id,
                kind,
                numerator,
                denominator,
                cap,
                higher_is_better,
                cuped_lookback_days,
                definition,
            } = metric;
            let num = events(Some(numerator));
            let den = events(denominator.as_ref());
            rows.push(MetricRow {
                experiment_id: e.id.clone(),
                version: snapshot.version.clone(),
                phase: e.phase,
                metric_id: id.clone(),
                role: role.as_str(),
                position: u32::try_from(position).unwrap_or(u32::MAX),
                kind: kind.as_str(),
                num_event: num.0,
                num_click_target: num.1,
                num_conversion: num.2,
                num_field: num.3,
                num_aggregate: num.4,
                den_event: den.0,
                den_click_target: den.1,
                den_conversion: den.2,
                den_field: den.3,
                den_aggregate: den.4,
                cap_value: match cap {
                    Some(Cap::Value(v)) => *v,
                    _ => 0.0,
                },
                cap_percentile: match cap {
                    Some(Cap::Percentile(p)) => *p,
                    _ => 0.0,
                },
                higher_is_better: u8::from(*higher_is_better),
                cuped_lookback_days: *cuped_lookback_days,
                definition: definition.clone(),
                loaded_at,
                public_keys: public_keys.clone(),
            });
        }
    }
    rows
}

/// The rows of every variant of every experiment of `snapshot`.
pub fn rows(snapshot: &Snapshot, loaded_at: i64) -> Vec<VariantRow> {
    let seconds =
        |t: Option<time::OffsetDateTime>| t.map(|t| u32::try_from(t.unix_timestamp()).unwrap_or(0));
    let keys_of = keys_of(snapshot);
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

/// Inserts `rows` into `table`, whole.
async fn insert<T: clickhouse::RowOwned + clickhouse::RowWrite>(
    client: &Client,
    table: &str,
    rows: &[T],
) -> anyhow::Result<()> {
    let mut insert = client
        .insert::<T>(table)
        .await
        .with_context(|| format!("cannot start the insert into {table}"))?;
    for row in rows {
        insert
            .write(row)
            .await
            .with_context(|| format!("cannot write a row of {table}"))?;
    }
    insert
        .end()
        .await
        .with_context(|| format!("cannot end the insert into {table}"))
}

/// Writes the variants, then the metrics, of `snapshot`, both stamped with one time:
/// how many of each.
async fn write(client: &Client, snapshot: &Snapshot) -> anyhow::Result<(usize, usize)> {
    let loaded_at = contract::event::now_millis();
    let variants = rows(snapshot, loaded_at);
    insert(client, "experiment_variants", &variants).await?;
    let metrics = metric_rows(snapshot, loaded_at);
    insert(client, "experiment_metrics", &metrics).await?;
    Ok((variants.len(), metrics.len()))
}

/// Writes each snapshot `current` holds, until `stop`, to one of `servers` (in a cluster
/// the table is replicated to all): the next one after a failure.
pub(crate) async fn mirror(
    servers: Vec<Server>,
    current: Arc<ArcSwap<Snapshot>>,
    written_one: Arc<Notify>,
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
                Ok((variants, metrics)) => {
                    tracing::info!(version = %snapshot.version, variants, metrics,
                        "Experiment definitions written.");
                    metrics::counter!("consumer_definitions_written_total").increment(1);
                    written = Some(snapshot);
                    written_one.notify_one();
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
