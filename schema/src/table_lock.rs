//! One holder at a time, across processes and servers: a table that only one creator can
//! create.
//!
//! - **Migrations** (`schema_migrations_lock`). Consumers that start together (a rollout)
//!   would otherwise apply the same migration side by side, and the `DROP` of a view one
//!   makes again could land after the other's `CREATE`: once the other recorded the
//!   migration, the view was gone.
//! - **Analysts' access** ([`ACCESS`]). An erasure that overlaps a grant's backfill could
//!   leave the visitor in the new copy: `analytics-erase` and `analytics-access` take turns.
//!
//! Creating a table that exists fails, on one server and through a cluster's queue of DDL
//! alike, so one creator wins. The holder writes the time into it every [`BEAT`], on every
//! server, and drops it when done. A lock with no beat for [`STALE`] belongs to a holder
//! that died (killed in the middle): a waiter breaks it by renaming it away, which only one
//! waiter can do.

use std::time::Duration;

use anyhow::Context as _;
use clickhouse::Client;

use crate::caps::{ServerCaps, execute};
use clickhouse_kit::topology::Topology;

/// The migrations' lock.
pub(crate) const MIGRATIONS: &str = "schema_migrations_lock";
/// The lock of `analytics-access` and `analytics-erase`.
pub const ACCESS: &str = "analysts_access_lock";
/// How often the holder writes the time into the lock.
const BEAT: Duration = Duration::from_secs(5);
/// A lock whose last beat (or creation, before the first) is older than this is broken.
const STALE: Duration = Duration::from_secs(60);
/// How long a waiter waits for a lock that stays alive.
const WAIT: Duration = Duration::from_secs(1800);
/// How often a waiter looks again.
const POLL: Duration = Duration::from_millis(500);

/// The lock, held until [`TableLock::release`].
pub struct TableLock {
    name: &'static str,
    primary: Client,
    caps: ServerCaps,
    drop: String,
    beat: tokio::task::JoinHandle<()>,
}

impl TableLock {
    /// Takes the lock `name` of `database`, waiting while another holds it.
    pub async fn take(
        topology: &Topology,
        caps: ServerCaps,
        database: &str,
        name: &'static str,
    ) -> anyhow::Result<Self> {
        let taken = Self::take_unless(topology, caps, database, name, || async { Ok(false) });
        taken
            .await?
            .with_context(|| format!("the lock {name} was not taken"))
    }

    /// Runs `work` holding the lock `name` of `database`, and releases it however `work`
    /// ends. (`work` is a future: it starts only once the lock is taken.)
    pub async fn holding<T>(
        topology: &Topology,
        caps: ServerCaps,
        database: &str,
        name: &'static str,
        work: impl Future<Output = anyhow::Result<T>>,
    ) -> anyhow::Result<T> {
        let lock = Self::take(topology, caps, database, name).await?;
        let done = work.await;
        lock.release().await;
        done
    }

    /// [`TableLock::take`], but `None` when `nothing_left` says, before the lock is taken,
    /// that there is nothing left to do (what a consumer finds after waiting for another
    /// that migrated).
    pub(crate) async fn take_unless<F, Fut>(
        topology: &Topology,
        caps: ServerCaps,
        database: &str,
        name: &'static str,
        nothing_left: F,
    ) -> anyhow::Result<Option<Self>>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = anyhow::Result<bool>>,
    {
        let on_cluster = topology
            .cluster
            .as_ref()
            .map_or_else(String::new, |c| format!(" ON CLUSTER {c}"));
        let primary = clickhouse_kit::topology::first_answering(topology.servers())
            .await?
            .client
            .clone()
            .with_database("default");
        let create =
            format!("CREATE TABLE {database}.{name}{on_cluster} (beat DateTime) ENGINE = Log");
        let started = tokio::time::Instant::now();
        loop {
            if nothing_left().await? {
                return Ok(None);
            }
            let refused = match execute(&primary, caps, &create).await {
                Ok(()) => break,
                Err(e) => e,
            };
            // "Table ... already exists" (code 57), from this server or from one of the
            // cluster's.
            if !refused.to_string().contains("Code: 57") {
                return Err(refused).with_context(|| format!("cannot create the lock {name}"));
            }
            match silent_for(&primary, database, name).await? {
                // Released meanwhile: try again at once.
                None => continue,
                Some(silence) if silence > STALE => {
                    tracing::warn!(%database, lock = name, silent_s = silence.as_secs(),
                        "Lock without a beat; breaking it.");
                    let away = format!("{name}_broken_{}", uuid::Uuid::new_v4().simple());
                    let rename =
                        format!("RENAME TABLE {database}.{name} TO {database}.{away}{on_cluster}");
                    // Another waiter may break it first: then this fails, and that is fine.
                    if execute(&primary, caps, &rename).await.is_ok() {
                        let drop = format!("DROP TABLE IF EXISTS {database}.{away}{on_cluster}");
                        let _ = execute(&primary, caps, &drop).await;
                    }
                    continue;
                }
                Some(_) if started.elapsed() > WAIT => anyhow::bail!(
                    "another process has held {database}.{name} for more than {} s and \
                     still beats; if none is running, drop that table",
                    WAIT.as_secs()
                ),
                Some(_) => tokio::time::sleep(POLL).await,
            }
        }
        let beaters: Vec<Client> = topology
            .servers()
            .map(|s| s.client.clone().with_database("default"))
            .collect();
        let insert = format!("INSERT INTO {database}.{name} SELECT now()");
        let beat = tokio::spawn(async move {
            loop {
                for client in &beaters {
                    if let Err(e) = execute(client, caps, &insert).await {
                        tracing::warn!(error = %e, lock = name, "Lock not beaten.");
                    }
                }
                tokio::time::sleep(BEAT).await;
            }
        });
        Ok(Some(Self {
            name,
            primary,
            caps,
            drop: format!("DROP TABLE IF EXISTS {database}.{name}{on_cluster}"),
            beat,
        }))
    }

    /// Stops the beat and drops the lock. A failed drop leaves a lock that the next
    /// holder breaks once it is stale.
    pub async fn release(self) {
        self.beat.abort();
        let _ = self.beat.await;
        if let Err(e) = execute(&self.primary, self.caps, &self.drop).await {
            tracing::warn!(error = %e, lock = self.name, "Lock not dropped; it goes stale.");
        }
    }
}

/// How long the lock has gone without a beat (since its creation before the first one);
/// `None` when there is no lock.
async fn silent_for(
    client: &Client,
    database: &str,
    name: &str,
) -> anyhow::Result<Option<Duration>> {
    let created: Vec<i64> = client
        .query(
            "SELECT toInt64(now()) - toInt64(metadata_modification_time) FROM system.tables \
             WHERE database = ? AND name = ?",
        )
        .bind(database)
        .bind(name)
        .fetch_all()
        .await
        .with_context(|| format!("cannot look for the lock {name}"))?;
    let Some(since_created) = created.first() else {
        return Ok(None);
    };
    let since_beat: Option<i64> = client
        .query(&format!(
            "SELECT toInt64(now()) - toInt64(max(beat)) FROM {database}.{name} \
             HAVING count() > 0"
        ))
        .fetch_optional()
        .await
        .ok()
        .flatten();
    // Every beat comes after the creation.
    let silence = since_beat.unwrap_or(*since_created);
    Ok(Some(Duration::from_secs(silence.max(0) as u64)))
}
