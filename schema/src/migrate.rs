//! The migration runner: the migrations applied once each, under a lock, on every server
//! that needs them; the views made again when they changed; the analysts' copies; and
//! whether a database is current.

use anyhow::Context;
use clickhouse::Client;

use crate::caps::{ServerCaps, execute};
use crate::layout::{Layout, Target};
use crate::migrations::{BOOTSTRAP, MIGRATIONS};
use crate::row::EventRow;
use crate::{table_lock, views};
use clickhouse_kit::topology::{Server, Topology, first_answering, is_sql_name};

/// The setting a statement that names a `LowCardinality` column needs on this server, if
/// any.
pub fn required_settings(caps: ServerCaps) -> Option<(&'static str, &'static str)> {
    caps.low_cardinality_setting()
}

/// The columns of `events` as a server of version `caps` has them once migrated, in the
/// row's order: [`EventRow::COLUMNS`], name and type.
pub fn event_columns(caps: ServerCaps) -> Vec<(&'static str, String)> {
    EventRow::<String>::COLUMNS
        .iter()
        .map(|&(name, ty)| (name, ty.replace("{millis}", caps.millis())))
        .collect()
}

/// Every view's name, in the order of creation.
pub fn view_names() -> Vec<&'static str> {
    views::VIEWS.iter().map(|v| v.name).collect()
}

/// Every migration's version, in order.
pub fn migration_versions() -> Vec<u32> {
    MIGRATIONS.iter().map(|m| m.version).collect()
}

/// Creates the database and applies the migrations not yet recorded on one server.
/// Running it again, or from several consumers at once, changes nothing.
pub async fn migrate(client: &Client, database: &str) -> anyhow::Result<()> {
    migrate_topology(&Topology::single(client.clone()), database, u32::MAX).await
}

/// [`migrate`], without the migrations after version `last`: the schema of an older
/// release, for tests of the upgrade.
pub async fn migrate_up_to(client: &Client, database: &str, last: u32) -> anyhow::Result<()> {
    migrate_topology(&Topology::single(client.clone()), database, last).await
}

/// Creates the database and applies the migrations up to version `last` not yet
/// recorded, on one server or across a cluster. In a cluster every statement is
/// idempotent (`IF NOT EXISTS`, an existing column taken as added), so consumers
/// starting together are safe there too; a cluster-wide statement waits for every server
/// (`distributed_ddl_task_timeout`), so migrations need them all up.
pub async fn migrate_topology(
    topology: &Topology,
    database: &str,
    last: u32,
) -> anyhow::Result<()> {
    let layout = Layout::new(topology.cluster.as_deref());
    migrate_layout(topology, &layout, database, last).await
}

/// Creates `database` as a copy of the schema: every table and view of the migrations, each
/// table whole on every server of a cluster (replicated across all of them) rather than
/// sharded. It holds what something else writes into it (`analytics-access` on 18.x: an
/// analyst's rows), and reads on any server without a Distributed table.
pub async fn migrate_copy(topology: &Topology, database: &str) -> anyhow::Result<()> {
    let layout = Layout::whole(topology.cluster.as_deref());
    migrate_layout(topology, &layout, database, u32::MAX).await
}

async fn migrate_layout(
    topology: &Topology,
    layout: &Layout,
    database: &str,
    last: u32,
) -> anyhow::Result<()> {
    if !is_sql_name(database) {
        anyhow::bail!("database name {database:?} must be letters, digits and _ only");
    }
    // The database may not exist yet: talk to `default` until it does.
    let primary = first_answering(topology.servers()).await?;
    let server = primary.client.clone().with_database("default");
    let caps = ServerCaps::of(&server).await?;
    if !has_record(&server, database).await? {
        for step in BOOTSTRAP {
            for (target, sql) in step.render(layout, caps, database) {
                for target in servers_of(topology, primary, target).await? {
                    execute(&target.client.clone().with_database("default"), caps, &sql)
                        .await
                        .context("cannot create the database and schema_migrations")?;
                }
            }
        }
    }
    let applied = || applied(&server, database);
    // The views are made as they are now only on the schema as it is now, and never by a
    // binary older than the one that migrated the database (during a rolling update, the
    // old consumers would otherwise put their views back at each start).
    let latest = MIGRATIONS.last().map_or(0, |m| m.version);
    let with_views = last >= latest;
    let ours = |applied: &[u32]| applied.iter().all(|v| *v <= latest);
    let nothing_left = || async {
        let applied = applied().await?;
        up_to(&server, caps, layout, database, &applied, last).await
    };
    let lock = table_lock::TableLock::take_unless(
        topology,
        caps,
        database,
        table_lock::MIGRATIONS,
        nothing_left,
    )
    .await?;
    let Some(lock) = lock else {
        return Ok(());
    };
    let migrated = match applied().await {
        Ok(applied) => apply_pending(topology, layout, database, last, &applied).await,
        Err(e) => Err(e),
    };
    let migrated = match migrated {
        Ok(()) if with_views => match applied().await {
            Ok(applied) if ours(&applied) => match caps_of_tables(&server, database, caps).await {
                Ok(caps) => views::apply(&server, caps, database, layout).await,
                Err(e) => Err(e),
            },
            Ok(_) => {
                tracing::warn!(%database, "A newer consumer migrated the database: its views are kept.");
                Ok(())
            }
            Err(e) => Err(e),
        },
        other => other,
    };
    lock.release().await;
    migrated
}

/// Whether `database` has its record of migrations (`schema_migrations`). In a cluster the
/// record is replicated to every server, so any of them can tell.
async fn has_record(server: &Client, database: &str) -> anyhow::Result<bool> {
    let tables: u64 = server
        .query(
            "SELECT count() FROM system.tables WHERE database = ? AND name = 'schema_migrations'",
        )
        .bind(database)
        .fetch_one()
        .await
        .context("cannot look for schema_migrations")?;
    Ok(tables > 0)
}

/// The migrations `database` records as applied.
async fn applied(server: &Client, database: &str) -> anyhow::Result<Vec<u32>> {
    server
        .query(&format!(
            "SELECT DISTINCT version FROM {database}.schema_migrations"
        ))
        .fetch_all()
        .await
        .context("cannot read schema_migrations")
}

/// Whether `database`, whose `schema_migrations` holds `applied`, needs nothing more up to
/// migration `last`: each applied, and (up to the latest) its views as this binary makes
/// them, unless a newer binary migrated it (its views are then kept).
async fn up_to(
    server: &Client,
    caps: ServerCaps,
    layout: &Layout,
    database: &str,
    applied: &[u32],
    last: u32,
) -> anyhow::Result<bool> {
    let latest = MIGRATIONS.last().map_or(0, |m| m.version);
    let migrated = MIGRATIONS
        .iter()
        .all(|m| m.version > last || applied.contains(&m.version));
    let newer = applied.iter().any(|v| *v > latest);
    Ok(migrated
        && (last < latest || newer || {
            let caps = caps_of_tables(server, database, caps).await?;
            let (pending, retired) = views::pending(server, caps, database, layout).await?;
            pending.is_empty() && retired.is_empty()
        }))
}

/// Whether `database` on `topology` holds the schema this binary needs, every migration
/// applied and its views made (or a newer binary's schema), without changing anything:
/// what a consumer that does not migrate waits for.
pub async fn is_current(topology: &Topology, database: &str) -> anyhow::Result<bool> {
    let layout = Layout::new(topology.cluster.as_deref());
    let primary = first_answering(topology.servers()).await?;
    let server = primary.client.clone().with_database("default");
    let caps = ServerCaps::of(&server).await?;
    if !has_record(&server, database).await? {
        return Ok(false);
    }
    let applied = applied(&server, database).await?;
    up_to(&server, caps, &layout, database, &applied, u32::MAX).await
}

/// `caps` as the views of `database` must see its tables: a server upgraded from before
/// 20.1 keeps the times in milliseconds of the tables it made as `Int64`, which the views
/// must read as such (`{to_ms}`, `{millis}`), not as `DateTime64`.
async fn caps_of_tables(
    server: &Client,
    database: &str,
    caps: ServerCaps,
) -> anyhow::Result<ServerCaps> {
    let types: Vec<String> = server
        .query(
            "SELECT type FROM system.columns \
             WHERE database = ? AND table = 'events' AND name = 'event_time'",
        )
        .bind(database)
        .fetch_all()
        .await
        .context("cannot read the type of events.event_time")?;
    Ok(
        if caps.has_datetime64() && types.iter().any(|t| t == "Int64") {
            ServerCaps {
                major: caps.major.min(19),
            }
        } else {
            caps
        },
    )
}

/// [`migrate`] by a consumer that read `schema_migrations` when it held only `applied`, and
/// applies the rest now: what a consumer slower than another one starting beside it does.
#[doc(hidden)]
pub async fn migrate_as_read_when(
    client: &Client,
    database: &str,
    applied: &[u32],
) -> anyhow::Result<()> {
    let topology = Topology::single(client.clone());
    apply_pending(&topology, &Layout::new(None), database, u32::MAX, applied).await
}

/// The servers a statement for `target` runs on, `primary` the one of [`Target::Once`].
async fn servers_of<'a>(
    topology: &'a Topology,
    primary: &'a Server,
    target: Target,
) -> anyhow::Result<Vec<&'a Server>> {
    Ok(match target {
        Target::Once => vec![primary],
        Target::EachServer => topology.servers().collect(),
        Target::EachShard => {
            let mut firsts = Vec::new();
            for replicas in &topology.shards {
                firsts.push(first_answering(replicas).await?);
            }
            firsts
        }
    })
}

/// Applies, in order, the migrations up to `last` not in `applied`. The migration lock
/// keeps other migrators out, but one may still be ahead of this one (this one read
/// `applied` before it, or broke its lock while it was only slow): a migration it has
/// recorded since is skipped, checked before each statement and after each failure, so a
/// consumer behind never runs an old statement over a newer schema (an old backfill into a
/// table with more columns, a view a later migration dropped made again).
async fn apply_pending(
    topology: &Topology,
    layout: &Layout,
    database: &str,
    last: u32,
    applied: &[u32],
) -> anyhow::Result<()> {
    let primary = first_answering(topology.servers()).await?;
    let server = primary.client.clone().with_database("default");
    let caps = ServerCaps::of(&server).await?;
    let recorded = |version: u32| {
        let server = server.clone();
        async move {
            let count: u64 = server
                .query(&format!(
                    "SELECT count() FROM {database}.schema_migrations WHERE version = ?"
                ))
                .bind(version)
                .fetch_one()
                .await
                .context("cannot read schema_migrations")?;
            anyhow::Ok(count > 0)
        }
    };
    let pending = MIGRATIONS
        .iter()
        .filter(|m| m.version <= last && !applied.contains(&m.version));
    'migration: for migration in pending {
        // Checked before the statements too: a migration may have none left (its views
        // moved to `views/`).
        if recorded(migration.version).await? {
            continue;
        }
        let mut backoff = clickhouse_kit::backoff::Backoff::new(
            std::time::Duration::from_millis(200),
            std::time::Duration::from_secs(2),
        )
        .jittered();
        let mut attempt = 0;
        'attempt: loop {
            attempt += 1;
            let statements = migration
                .steps
                .iter()
                .flat_map(|s| s.render(layout, caps, database));
            for (target, sql) in statements {
                if recorded(migration.version).await? {
                    continue 'migration;
                }
                for target in servers_of(topology, primary, target).await? {
                    let client = target.client.clone().with_database("default");
                    match execute(&client, caps, &sql).await {
                        Ok(()) => {}
                        // Another consumer migrating at the same time added it (18.x has no
                        // `ADD COLUMN IF NOT EXISTS`).
                        Err(e) if sql.contains("ADD COLUMN") && is_existing_column(&e) => {}
                        // Another consumer finished this migration meanwhile, and may have
                        // gone on to change what this statement expected.
                        Err(_) if recorded(migration.version).await? => continue 'migration,
                        // Another consumer migrating at the same time dropped a view this one
                        // depends on (views are made again by DROP then CREATE): the
                        // migration's statements are idempotent in sequence, so start it over,
                        // after a wait that differs between consumers.
                        Err(e) if attempt < MIGRATION_ATTEMPTS => {
                            tracing::warn!(version = migration.version, attempt,
                            error = %format!("{e:#}"), "Migration failed; starting it over.");
                            tokio::time::sleep(backoff.next_wait()).await;
                            continue 'attempt;
                        }
                        Err(e) => {
                            return Err(e).with_context(|| {
                                format!(
                                    "migration {} ({}) failed on {}",
                                    migration.version, migration.description, target.url
                                )
                            });
                        }
                    }
                }
            }
            break;
        }
        server
            .query(&format!(
                "INSERT INTO {database}.schema_migrations (version, description, applied_at) \
                 VALUES (?, ?, now())"
            ))
            .bind(migration.version)
            .bind(migration.description)
            .execute()
            .await
            .context("cannot record migration")?;
        tracing::info!(version = migration.version, description = migration.description,
            %database, "Migration applied.");
    }
    Ok(())
}

/// How many times a migration is started before its failure is final.
const MIGRATION_ATTEMPTS: u32 = 5;

/// ClickHouse's answer to adding a column that exists: code 44, "already exists".
fn is_existing_column(error: &clickhouse::error::Error) -> bool {
    let text = error.to_string();
    text.contains("Code: 44") && text.contains("already exists")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migration_versions_increase() {
        let versions: Vec<u32> = MIGRATIONS.iter().map(|m| m.version).collect();
        assert!(versions.windows(2).all(|w| w[0] < w[1]), "{versions:?}");
        assert_eq!(versions.first(), Some(&1));
    }
}
