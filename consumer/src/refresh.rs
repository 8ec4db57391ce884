//! The metric values' refresh. `experiment_metric_results` reads only each visitor's
//! stored metric values (`visitor_metric_values`), as of their latest refresh. So after
//! a batch is stored, its visitors' values are computed again and stored, every
//! `METRICS_REFRESH_MS`; and a sweep stores those of every visitor whose values are
//! missing or stale (rows inserted by anything but a consumer, a batch whose refresh
//! failed or never ran, changed metric definitions or phase settings): at start, when the
//! mirrored snapshot changes, and every `METRICS_SWEEP_SECS`.
//!
//! Each consumer process marks how far it got (`metric_refresh_marks`): after a round
//! whose refreshes all succeeded, the round's start, up to which every event it stored is
//! counted. The results' `as_of` is the earliest mark of the running consumers. A failed
//! round marks nothing until a sweep has repaired it.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use clickhouse_kit::topology::{Topology, first_answering};
use schema::ServerCaps;
use tokio::sync::{Notify, watch};

use crate::shutdown::stopped;

/// Visitors per statement by default (`--metrics-visitors-per-statement`), which bounds a
/// statement's time and memory: on 2 cores, 10 M events of 2 M visitors, about 9 s and
/// 850 MB each. A statement reads the whole `events` table, so fewer, larger ones sweep
/// faster: 20 000 a statement took 404 s, 100 000 took 206 s (docs/benchmarks.md).
pub const VISITORS_PER_STATEMENT: usize = 100_000;
/// Stale visitors a sweep lists at a time.
const STALE_PER_LIST: u64 = 200_000;
/// Visitors waiting beyond this are left to the next sweep rather than kept in memory.
const MOST_WAITING: usize = 1_000_000;
/// The longest a refresh of one statement's visitors may take: the server stops its
/// statement after `schema::REFRESH_LONGEST`; this bounds listing the visitors too.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(180);

/// The visitors of the batches stored since the last refresh, as (public key, visitor id).
#[derive(Default)]
pub(crate) struct Waiting {
    visitors: Mutex<HashSet<(String, String)>>,
    /// Set when visitors were left out (too many waiting, or a failed refresh): the next
    /// sweep comes at the next tick.
    overflowed: AtomicU64,
}

impl Waiting {
    /// Adds the visitors of a stored batch (each allocated once per batch).
    pub(crate) fn add<'a>(&self, visitors: impl Iterator<Item = (&'a str, &'a str)>) {
        let batch: HashSet<(&str, &str)> = visitors.collect();
        let mut waiting = self.visitors.lock().expect("not poisoned");
        for (key, visitor) in batch {
            if waiting.len() >= MOST_WAITING {
                self.overflowed.store(1, Ordering::Relaxed);
                return;
            }
            waiting.insert((key.to_owned(), visitor.to_owned()));
        }
    }

    fn take(&self) -> Vec<(String, String)> {
        let mut waiting = self.visitors.lock().expect("not poisoned");
        std::mem::take(&mut *waiting).into_iter().collect()
    }

    fn overflowed(&self) -> bool {
        self.overflowed.swap(0, Ordering::Relaxed) == 1
    }
}

/// When the refresh and the sweep run, and how many visitors a statement takes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Schedule {
    pub every: Duration,
    pub sweep_every: Duration,
    pub visitors_per_statement: usize,
}

/// Refreshes the waiting visitors every `schedule.every`, and sweeps at start, when
/// `changed` is notified and every `schedule.sweep_every`, until shutdown. A failed
/// statement is logged and counted; its visitors are left to the next sweep, which comes
/// at the next round. Marks each round that succeeded whole ([`Refresh::mark`]).
pub(crate) async fn run(
    topology: Topology,
    database: String,
    waiting: std::sync::Arc<Waiting>,
    changed: std::sync::Arc<Notify>,
    schedule: Schedule,
    mut stop: watch::Receiver<bool>,
) {
    let refresh = Refresh::new(topology, database, schedule.visitors_per_statement);
    let mut sweep_due = tokio::time::Instant::now();
    let mut marked: Option<tokio::time::Instant> = None;
    loop {
        let now = tokio::time::Instant::now();
        // Every batch stored before this was added to `waiting` (just after its insert).
        let started = SystemTime::now() - Duration::from_secs(1);
        let mut whole = true;
        if now >= sweep_due || waiting.overflowed() {
            sweep_due = now + schedule.sweep_every;
            match refresh.sweep(&mut stop).await {
                Ok(visitors) => tracing::info!(visitors, "Metric values swept."),
                Err(e) => {
                    refresh.failed("sweep", &e);
                    whole = false;
                }
            }
        }
        let visitors = waiting.take();
        if let Err(e) = refresh.of(&visitors).await {
            refresh.failed("batch", &e);
            waiting.overflowed.store(1, Ordering::Relaxed);
            whole = false;
        }
        let due = marked.is_none_or(|at| at.elapsed() >= schema::MARK_EVERY);
        // A sweep asked to stop returns before it is done.
        if whole && !*stop.borrow() && (!visitors.is_empty() || due) {
            match refresh.mark(started).await {
                Ok(()) => marked = Some(tokio::time::Instant::now()),
                Err(e) => refresh.failed("mark", &e),
            }
        }
        tokio::select! {
            () = tokio::time::sleep(schedule.every) => {}
            () = changed.notified() => sweep_due = tokio::time::Instant::now(),
            () = stopped(&mut stop) => return,
        }
    }
}

/// One sweep ([`run`]'s, at start): stores the metric values of every visitor of
/// `database` whose values are missing or stale, `visitors_per_statement` a statement,
/// marks its start, and returns how many visitors there were.
pub async fn sweep_once(
    topology: Topology,
    database: &str,
    visitors_per_statement: usize,
) -> anyhow::Result<u64> {
    let refresh = Refresh::new(topology, database.to_owned(), visitors_per_statement);
    let started = SystemTime::now() - Duration::from_secs(1);
    let (_never, mut stop) = watch::channel(false);
    let swept = refresh.sweep(&mut stop).await?;
    refresh.mark(started).await?;
    Ok(swept)
}

struct Refresh {
    topology: Topology,
    database: String,
    visitors_per_statement: usize,
    /// The last refresh id given.
    ids: AtomicU64,
    /// This process's name in `metric_refresh_marks`.
    name: String,
}

impl Refresh {
    fn new(topology: Topology, database: String, visitors_per_statement: usize) -> Self {
        Self {
            topology,
            database,
            visitors_per_statement,
            ids: AtomicU64::new(0),
            name: uuid::Uuid::new_v4().simple().to_string(),
        }
    }

    /// Records that every event this process stored before `as_of` is counted: the
    /// visitors of its batches are refreshed, and those of any failed refresh swept since.
    async fn mark(&self, as_of: SystemTime) -> anyhow::Result<()> {
        let seconds = as_of.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let (_, client) = self.caps_and_client().await?;
        let insert = client
            .query(
                "INSERT INTO ?.metric_refresh_marks (consumer, as_of, written_at) \
                 SELECT ?, toDateTime(?), now()",
            )
            .bind(clickhouse::sql::Identifier(&self.database))
            .bind(&self.name)
            .bind(seconds)
            .execute();
        tokio::time::timeout(STATEMENT_TIMEOUT, insert)
            .await
            .context("the refresh mark timed out")?
            .context("cannot write the refresh mark")?;
        metrics::gauge!("consumer_metric_refreshed_as_of_seconds").set(seconds as f64);
        Ok(())
    }

    /// A refresh id: larger than any this process gave before, and than any another gave
    /// a millisecond or more before (milliseconds since the epoch, times 1000).
    fn next_id(&self) -> u64 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
            * 1000;
        let last = self
            .ids
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
                Some(now.max(last + 1))
            })
            .expect("always Some");
        now.max(last + 1)
    }

    async fn caps_and_client(&self) -> anyhow::Result<(ServerCaps, clickhouse::Client)> {
        let server = first_answering(self.topology.servers()).await?;
        let client = server.client.clone();
        Ok((ServerCaps::of(&client).await?, client))
    }

    /// Stores the values of `visitors`, `visitors_per_statement` a statement.
    async fn of(&self, visitors: &[(String, String)]) -> anyhow::Result<()> {
        let (caps, client) = self.caps_and_client().await?;
        let cluster = self.topology.cluster.as_deref();
        for chunk in visitors.chunks(self.visitors_per_statement) {
            let id = || self.next_id();
            let refresh =
                schema::refresh_metric_values(&client, caps, cluster, &self.database, chunk, id);
            tokio::time::timeout(STATEMENT_TIMEOUT, refresh)
                .await
                .context("the metric values' refresh timed out")??;
            metrics::counter!("consumer_metric_visitors_refreshed_total")
                .increment(chunk.len() as u64);
        }
        Ok(())
    }

    /// Stores the values of every visitor that was stale when it began, each once: it
    /// lists up to [`STALE_PER_LIST`] of those not stored since, stores theirs, and again,
    /// until none is left or a list holds only visitors it already stored (a visitor with
    /// no event left reads as stale after its refresh). Returns how many it stored.
    async fn sweep(&self, stop: &mut watch::Receiver<bool>) -> anyhow::Result<u64> {
        let before = self.next_id();
        let mut done = std::collections::HashSet::new();
        loop {
            let (_, client) = self.caps_and_client().await?;
            let stale: Vec<(String, String)> = client
                .query(
                    "SELECT public_key, visitor_id FROM ?.experiment_metric_stale \
                     WHERE latest_refresh < ? LIMIT ?",
                )
                .bind(clickhouse::sql::Identifier(&self.database))
                .bind(before)
                .bind(STALE_PER_LIST)
                .fetch_all()
                .await
                .context("cannot list the stale visitors")?;
            let new: Vec<(String, String)> =
                stale.into_iter().filter(|v| !done.contains(v)).collect();
            if new.is_empty() || *stop.borrow() {
                return Ok(done.len() as u64);
            }
            self.of(&new).await?;
            done.extend(new);
        }
    }

    fn failed(&self, what: &'static str, error: &anyhow::Error) {
        tracing::warn!(what, error = %format!("{error:#}"), "Metric values not refreshed.");
        metrics::counter!("consumer_metric_refresh_failures_total").increment(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_visitors_are_taken_once_each() {
        let waiting = Waiting::default();
        waiting.add([("k", "a"), ("k", "b"), ("k", "a"), ("j", "a")].into_iter());
        waiting.add([("k", "b")].into_iter());
        let mut taken = waiting.take();
        taken.sort();
        let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        assert_eq!(taken, pairs(&[("j", "a"), ("k", "a"), ("k", "b")]));
        assert!(waiting.take().is_empty());
        assert!(!waiting.overflowed());
    }

    #[test]
    fn refresh_ids_only_grow() {
        let refresh = Refresh::new(
            Topology {
                cluster: None,
                shards: Vec::new(),
            },
            String::new(),
            VISITORS_PER_STATEMENT,
        );
        refresh.ids.store(u64::MAX / 2, Ordering::Relaxed);
        let a = refresh.next_id();
        let b = refresh.next_id();
        assert!(b > a && a > u64::MAX / 2);
    }
}
