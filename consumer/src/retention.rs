//! Retention (`EVENTS_RETENTION_DAYS`): the monthly partitions of `events` whose every row
//! was received more than that many days ago are dropped, at start and then hourly, on one
//! replica of each shard (a replicated table drops them on every replica). A partition is
//! a month, `toYYYYMM(received_at)`: it goes once its month is older than the month of
//! the cutoff, so the current month's partition never goes and rows live between `days`
//! and `days` + one month. The aggregate `experiment_visitors` has no partitions: it is
//! left as it is (docs/privacy.md, Retention).

use std::time::Duration;

use anyhow::Context;
use clickhouse_kit::topology::{Topology, first_answering};
use tokio::sync::watch;

use crate::shutdown::stopped;

/// How often the partitions are looked at.
const EVERY: Duration = Duration::from_secs(3600);

/// One run: drops the partitions of `events` older than `days` on every shard and returns
/// them (`YYYYMM`, per shard, in order), each logged and counted
/// (`consumer_partitions_dropped_total`).
pub async fn drop_expired(
    topology: &Topology,
    database: &str,
    days: u32,
) -> anyhow::Result<Vec<u32>> {
    let table = format!("events{}", topology.local());
    let mut dropped = Vec::new();
    for replicas in &topology.shards {
        let server = first_answering(replicas).await?;
        let client = server.client.clone();
        // The server's clock, the one that stamps the partitions' months when it reads
        // received_at (the ingest's clock stamps the rows).
        let cutoff: u32 = client
            .query("SELECT toYYYYMM(now() - toIntervalDay(?))")
            .bind(days)
            .fetch_one()
            .await
            .context("cannot read the retention cutoff")?;
        let partitions: Vec<String> = client
            .query(
                "SELECT DISTINCT partition FROM system.parts \
                 WHERE database = ? AND table = ? AND active",
            )
            .bind(database)
            .bind(&table)
            .fetch_all()
            .await
            .context("cannot list the partitions of events")?;
        for month in expired(&partitions, cutoff) {
            client
                .query(&drop_statement(database, &table, month))
                .execute()
                .await
                .with_context(|| format!("cannot drop partition {month} on {}", server.url))?;
            tracing::info!(partition = month, %table, url = %server.url, days,
                "Expired events partition dropped.");
            metrics::counter!("consumer_partitions_dropped_total").increment(1);
            dropped.push(month);
        }
    }
    Ok(dropped)
}

/// The statement that drops month `month` (`YYYYMM`) of `table`.
pub fn drop_statement(database: &str, table: &str, month: u32) -> String {
    format!("ALTER TABLE {database}.{table} DROP PARTITION {month}")
}

/// The months of `partitions` (as `system.parts` names them) before `cutoff` (`YYYYMM`).
/// Anything that is not a month (a table partitioned otherwise) is never dropped.
fn expired(partitions: &[String], cutoff: u32) -> Vec<u32> {
    let mut months: Vec<u32> = partitions
        .iter()
        .filter_map(|p| p.trim_matches('\'').parse::<u32>().ok())
        .filter(|&m| (100_000..1_000_000).contains(&m) && m % 100 >= 1 && m % 100 <= 12)
        .filter(|&m| m < cutoff)
        .collect();
    months.sort_unstable();
    months.dedup();
    months
}

/// Runs [`drop_expired`] at once and then every hour until shutdown. A failed run is
/// logged and tried again at the next.
pub(crate) async fn run(
    topology: Topology,
    database: String,
    days: u32,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        match drop_expired(&topology, &database, days).await {
            Ok(dropped) => tracing::info!(dropped = dropped.len(), days, "Retention run done."),
            Err(e) => tracing::warn!(error = %format!("{e:#}"), "Retention run failed."),
        }
        tokio::select! {
            () = tokio::time::sleep(EVERY) => {}
            () = stopped(&mut stop) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_months_before_the_cutoff_month_expire() {
        let parts: Vec<String> = ["202611", "202610", "202609", "202512", "tuple()", "20261"]
            .map(str::to_owned)
            .into();
        assert_eq!(expired(&parts, 202610), [202512, 202609]);
        assert_eq!(expired(&parts, 202512), Vec::<u32>::new());
        assert_eq!(expired(&["'202401'".to_owned()], 202402), [202401]);
    }
}
