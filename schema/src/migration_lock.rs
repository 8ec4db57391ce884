//! One migrator at a time. Consumers that start together (a rollout) would otherwise apply
//! the same migration side by side, and the `DROP` of a view one makes again could land
//! after the other's `CREATE`: once the other recorded the migration, the view was gone.
//!
//! The lock is the table `schema_migrations_lock`. Creating a table that exists fails, on
//! one server and through a cluster's queue of DDL alike, so one creator wins. The holder
//! writes the time into it every [`BEAT`], on every server, and drops it when done. A lock
//! with no beat for [`STALE`] belongs to a migrator that died (killed in the middle of a
//! migration): a waiter breaks it by renaming it away, which only one waiter can do.

use std::time::Duration;

use anyhow::Context as _;
use clickhouse::Client;

use crate::topology::Topology;
use crate::{Layout, ServerCaps, execute};

const NAME: &str = "schema_migrations_lock";
/// How often the holder writes the time into the lock.
const BEAT: Duration = Duration::from_secs(5);
/// A lock whose last beat (or creation, before the first) is older than this is broken.
const STALE: Duration = Duration::from_secs(60);
/// How long a migrator waits for a lock that stays alive.
const WAIT: Duration = Duration::from_secs(1800);
/// How often a waiter looks again.
const POLL: Duration = Duration::from_millis(500);

/// The lock, held until [`MigrationLock::release`].
pub(crate) struct MigrationLock {
    primary: Client,
    caps: ServerCaps,
    drop: String,
    beat: tokio::task::JoinHandle<()>,
}

impl MigrationLock {
    /// Takes the lock of `database`, waiting while another migrator holds it. `None` when
    /// `nothing_left` says, before the lock is taken, that there is nothing to migrate
    /// (what a consumer finds after waiting for another that migrated).
    pub(crate) async fn take<F, Fut>(
        topology: &Topology,
        layout: &Layout,
        caps: ServerCaps,
        database: &str,
        nothing_left: F,
    ) -> anyhow::Result<Option<Self>>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = anyhow::Result<bool>>,
    {
        let on_cluster = &layout.on_cluster;
        let primary = crate::first_answering(topology.servers())
            .await?
            .client
            .clone()
            .with_database("default");
        let create =
            format!("CREATE TABLE {database}.{NAME}{on_cluster} (beat DateTime) ENGINE = Log");
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
                return Err(refused).context("cannot create the migration lock");
            }
            match silent_for(&primary, database).await? {
                // Released meanwhile: try again at once.
                None => continue,
                Some(silence) if silence > STALE => {
                    tracing::warn!(%database, silent_s = silence.as_secs(),
                        "Migration lock without a beat; breaking it.");
                    let away = format!("{NAME}_broken_{}", uuid::Uuid::new_v4().simple());
                    let rename =
                        format!("RENAME TABLE {database}.{NAME} TO {database}.{away}{on_cluster}");
                    // Another waiter may break it first: then this fails, and that is fine.
                    if execute(&primary, caps, &rename).await.is_ok() {
                        let drop = format!("DROP TABLE IF EXISTS {database}.{away}{on_cluster}");
                        let _ = execute(&primary, caps, &drop).await;
                    }
                    continue;
                }
                Some(_) if started.elapsed() > WAIT => anyhow::bail!(
                    "another migrator has held {database}.{NAME} for more than {} s and \
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
        let insert = format!("INSERT INTO {database}.{NAME} SELECT now()");
        let beat = tokio::spawn(async move {
            loop {
                for client in &beaters {
                    if let Err(e) = execute(client, caps, &insert).await {
                        tracing::warn!(error = %e, "Migration lock not beaten.");
                    }
                }
                tokio::time::sleep(BEAT).await;
            }
        });
        Ok(Some(Self {
            primary,
            caps,
            drop: format!("DROP TABLE IF EXISTS {database}.{NAME}{on_cluster}"),
            beat,
        }))
    }

    /// Stops the beat and drops the lock. A failed drop leaves a lock that the next
    /// migrator breaks once it is stale.
    pub(crate) async fn release(self) {
        self.beat.abort();
        let _ = self.beat.await;
        if let Err(e) = execute(&self.primary, self.caps, &self.drop).await {
            tracing::warn!(error = %e, "Migration lock not dropped; it goes stale.");
        }
    }
}

/// How long the lock has gone without a beat (since its creation before the first one);
/// `None` when there is no lock.
async fn silent_for(client: &Client, database: &str) -> anyhow::Result<Option<Duration>> {
    let created: Vec<i64> = client
        .query(
            "SELECT toInt64(now()) - toInt64(metadata_modification_time) FROM system.tables \
             WHERE database = ? AND name = ?",
        )
        .bind(database)
        .bind(NAME)
        .fetch_all()
        .await
        .context("cannot look for the migration lock")?;
    let Some(since_created) = created.first() else {
        return Ok(None);
    };
    let since_beat: Option<i64> = client
        .query(&format!(
            "SELECT toInt64(now()) - toInt64(max(beat)) FROM {database}.{NAME} \
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
