//! The metric values' refresh: the statement that stores a visitor's values again, run in
//! a session of its own with the visitors in a temporary table, and its time bounds.

use anyhow::Context;
use clickhouse::Client;

use crate::caps::ServerCaps;
use crate::layout::Layout;
use crate::views;

/// The longest a refresh statement runs: the server stops it then
/// ([`refresh_metric_values`]), which bounds the consumer's wait.
pub const REFRESH_LONGEST: std::time::Duration = std::time::Duration::from_secs(60);

/// The temporary table of a refresh's visitors, in the refresh's own session: (public key,
/// visitor id), both `String`.
pub const REFRESH_VISITORS: &str = "refresh_visitors";

/// The statement that stores again the metric values of the visitors in the session's
/// temporary table `refresh_visitors` (public key, visitor id), computed from their events
/// as `experiment_metric_visitors` computes them, as refresh `refresh_id` (larger than any
/// before it for them), in `visitor_metric_values`. `cluster` names the cluster (its
/// Distributed table then), `None` one server.
pub fn metric_values_refresh(
    caps: ServerCaps,
    cluster: Option<&str>,
    database: &str,
    refresh_id: u64,
) -> String {
    // `GLOBAL`: the list is read once (and sent to each shard of a cluster).
    let filter = format!(
        "(toString(public_key), visitor_id) GLOBAL IN \
         (SELECT public_key, visitor_id FROM {REFRESH_VISITORS})"
    );
    let layout = Layout::new(cluster);
    let globals = caps.params(database, &layout);
    let params = globals
        .scope()
        .sql("rows", views::METRIC_VALUES_SELECT)
        .sql("visitor_filter", filter);
    // A row per visitor, experiment and phase, its metrics in arrays (the select's row
    // of metric '' records a visitor with none). The metrics go through one array of
    // tuples, so that the five arrays keep one order: by metric id, the order in which
    // `experiment_metric_results` lists the definitions (parts/metric_arms.sql). One
    // SELECT: 18.x analyzes the select below again for each level above it.
    params.render(&format!(
        "INSERT INTO {{db}}.visitor_metric_values (public_key, experiment_id, phase, \
         visitor_id, variant_id, first_exposure_ms, metrics.metric_id, metrics.value, \
         metrics.denominator, metrics.pre_value, metrics.pre_seen, events_seen, \
         settings_hash, refresh_id) \
         SELECT public_key, experiment_id, phase, visitor_id, any(variant_id), \
         any(first_exposure_ms), \
         arrayMap(m -> m.1, arraySort(groupArrayIf((metric_id, value, denominator, \
         pre_value, pre_seen), metric_id != '')) AS metrics), arrayMap(m -> m.2, metrics), \
         arrayMap(m -> m.3, metrics), arrayMap(m -> m.4, metrics), \
         arrayMap(m -> m.5, metrics), any(events_seen), \
         any(current_settings_hash), {refresh_id} FROM ({}) AS refreshed \
         GROUP BY public_key, experiment_id, phase, visitor_id",
        views::WITH_SETTINGS_HASH
    ))
}

/// A row of `refresh_visitors`.
#[derive(clickhouse::Row, serde::Serialize)]
struct RefreshVisitor<'a> {
    public_key: &'a str,
    visitor_id: &'a str,
}

/// Stores again the metric values of `visitors` (public key, visitor id) through
/// `client`, for a server of version `caps` ([`metric_values_refresh`]).
///
/// The visitors go into a temporary table of a session of the refresh's own, not into the
/// statement: 18.x analyses a list written in the statement again at each level of SELECT
/// around it, and 20 000 visitors took 20 s where the table takes 0.05 s.
///
/// `refresh_id` gives the refresh's id (its start, in microseconds since the epoch, larger
/// than any before for these visitors) as the statement starts; the server stops the
/// statement after [`REFRESH_LONGEST`]. The rows land whole: one block (the insert's
/// squashing has no size limit), so one part per shard, a visitor's on one shard.
pub async fn refresh_metric_values(
    client: &Client,
    caps: ServerCaps,
    cluster: Option<&str>,
    database: &str,
    visitors: &[(String, String)],
    refresh_id: impl FnOnce() -> u64,
) -> anyhow::Result<()> {
    if visitors.is_empty() {
        return Ok(());
    }
    let session_id = format!("metric-refresh-{}", uuid::Uuid::new_v4().simple());
    let session = client.clone().with_setting("session_id", session_id);
    session
        .query(&format!(
            "CREATE TEMPORARY TABLE {REFRESH_VISITORS} \
             (public_key String, visitor_id String) ENGINE = Memory"
        ))
        .execute()
        .await
        .context("cannot create the table of the refresh's visitors")?;
    let mut insert = session
        .insert::<RefreshVisitor<'_>>(REFRESH_VISITORS)
        .await
        .context("cannot list the refresh's visitors")?;
    for (public_key, visitor_id) in visitors {
        insert
            .write(&RefreshVisitor {
                public_key,
                visitor_id,
            })
            .await
            .context("cannot list the refresh's visitors")?;
    }
    insert
        .end()
        .await
        .context("cannot list the refresh's visitors")?;
    let sql = metric_values_refresh(caps, cluster, database, refresh_id());
    let mut query = session
        .query_raw(&sql)
        .with_setting("max_execution_time", REFRESH_LONGEST.as_secs().to_string())
        // One block, whatever its size (experiment_metric_visitors reads each visitor at
        // one refresh, whole): squashed up to a billion rows, not by bytes (both 0 would
        // squash nothing).
        .with_setting("min_insert_block_size_rows", "1000000000")
        .with_setting("min_insert_block_size_bytes", "0");
    if let Some((name, value)) = caps.low_cardinality_setting() {
        query = query.with_setting(name, value);
    }
    if cluster.is_some() {
        // Stored on every shard when the statement returns, as on one server.
        query = query.with_setting("insert_distributed_sync", "1");
    }
    let stored = query
        .execute()
        .await
        .context("cannot store the metric values");
    // The session's end would drop it too, once the session times out.
    let drop = format!("DROP TEMPORARY TABLE IF EXISTS {REFRESH_VISITORS}");
    let _ = session.query(&drop).execute().await;
    stored
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refresh_reads_its_visitors_from_its_table_once() {
        let caps = ServerCaps::parse("18.16.1").expect("parses");
        let sql = metric_values_refresh(caps, None, "analytics", 7);
        let filter = "(toString(public_key), visitor_id) GLOBAL IN \
                      (SELECT public_key, visitor_id FROM refresh_visitors)";
        assert!(sql.contains(filter), "{sql}");
        assert!(!sql.contains("{visitor_filter}"), "{sql}");
        assert!(!sql.contains("{local}"), "{sql}");
    }
}
