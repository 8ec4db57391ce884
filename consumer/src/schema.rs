//! The analysts' schema, created and migrated at start: versioned migrations recorded in
//! `schema_migrations`, each applied once; everything that depends on the server's
//! version is decided in [`ServerCaps`] and nowhere else.

use anyhow::Context;
use clickhouse::Client;

/// What the connected server supports, read from `SELECT version()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerCaps {
    pub major: u32,
    pub minor: u32,
}

impl ServerCaps {
    pub fn parse(version: &str) -> anyhow::Result<Self> {
        let mut parts = version.trim().split('.').map(str::parse::<u32>);
        match (parts.next(), parts.next()) {
            (Some(Ok(major)), Some(Ok(minor))) => Ok(Self { major, minor }),
            _ => anyhow::bail!("cannot read ClickHouse version {version:?}"),
        }
    }

    pub async fn of(client: &Client) -> anyhow::Result<Self> {
        let version: String = client
            .query("SELECT version()")
            .fetch_one()
            .await
            .context("cannot read the ClickHouse version")?;
        Self::parse(&version)
    }

    /// Before 19.x, `LowCardinality` is behind an experimental setting (later a no-op).
    fn low_cardinality_setting(self) -> Option<(&'static str, &'static str)> {
        (self.major < 19).then_some(("allow_experimental_low_cardinality_type", "1"))
    }
}

/// One schema change. `{db}` in the statements is replaced by the database name.
struct Migration {
    version: u32,
    description: &'static str,
    statements: &'static [&'static str],
}

/// Append only: a released migration never changes, a new one gets the next version.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "events table",
        statements: &[r"
CREATE TABLE IF NOT EXISTS {db}.events (
    event_id      UUID,
    received_at   DateTime('UTC'),
    public_key    LowCardinality(String),
    event_name    LowCardinality(String),
    experiment_id LowCardinality(String),
    variant_id    LowCardinality(String),
    session_id    String,
    conversion    Nullable(UInt8),
    load_time     Nullable(Float64),
    scroll_depth  Nullable(Float64),
    time_on_page  Nullable(Float64),
    click_target  String,
    pathname      String,
    referrer      String,
    utm_source    LowCardinality(String),
    utm_medium    LowCardinality(String),
    utm_campaign  LowCardinality(String),
    utm_term      String,
    utm_content   String,
    test          UInt8,
    user_agent    String
)
ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(received_at)
ORDER BY (public_key, experiment_id, toDate(received_at), event_id)"],
    },
    Migration {
        version: 2,
        description: "experiment_daily view",
        // A plain view over FINAL: exact (each event once, test traffic left out) and
        // cheap thanks to the sorting key; a materialized view would count redeliveries.
        statements: &[r"
CREATE VIEW IF NOT EXISTS {db}.experiment_daily AS
SELECT
    public_key,
    experiment_id,
    variant_id,
    toDate(received_at) AS day,
    countIf(event_name = 'impression') AS impressions,
    countIf(conversion = 1 OR event_name = 'conversion') AS conversions,
    uniqExact(session_id) AS sessions,
    count() AS events
FROM {db}.events FINAL
WHERE test = 0
GROUP BY public_key, experiment_id, variant_id, day"],
    },
];

/// Creates the database and applies the migrations not yet recorded. Running it again,
/// or from several consumers at once, changes nothing.
pub async fn migrate(client: &Client, database: &str) -> anyhow::Result<()> {
    if !database
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        anyhow::bail!("database name {database:?} must be letters, digits and _ only");
    }
    // The database may not exist yet: talk to `default` until it does.
    let server = client.clone().with_database("default");
    let caps = ServerCaps::of(&server).await?;
    server
        .query(&format!("CREATE DATABASE IF NOT EXISTS {database}"))
        .execute()
        .await
        .with_context(|| format!("cannot create database {database}"))?;
    server
        .query(&format!(
            "CREATE TABLE IF NOT EXISTS {database}.schema_migrations \
             (version UInt32, description String, applied_at DateTime) \
             ENGINE = MergeTree() ORDER BY version"
        ))
        .execute()
        .await
        .context("cannot create schema_migrations")?;
    let applied: Vec<u32> = server
        .query(&format!(
            "SELECT DISTINCT version FROM {database}.schema_migrations"
        ))
        .fetch_all()
        .await
        .context("cannot read schema_migrations")?;

    for migration in MIGRATIONS.iter().filter(|m| !applied.contains(&m.version)) {
        for statement in migration.statements {
            let mut query = server.query(&statement.replace("{db}", database));
            if let Some((name, value)) = caps.low_cardinality_setting() {
                query = query.with_setting(name, value);
            }
            query.execute().await.with_context(|| {
                format!(
                    "migration {} ({}) failed",
                    migration.version, migration.description
                )
            })?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_and_gate_low_cardinality() {
        let old = ServerCaps::parse("18.16.1").expect("parses");
        assert_eq!(
            old,
            ServerCaps {
                major: 18,
                minor: 16
            }
        );
        assert!(old.low_cardinality_setting().is_some());
        let new = ServerCaps::parse("24.8.4.13").expect("parses");
        assert!(new.low_cardinality_setting().is_none());
        assert!(ServerCaps::parse("nope").is_err());
    }

    #[test]
    fn migration_versions_increase() {
        let versions: Vec<u32> = MIGRATIONS.iter().map(|m| m.version).collect();
        assert!(versions.windows(2).all(|w| w[0] < w[1]), "{versions:?}");
        assert_eq!(versions.first(), Some(&1));
    }
}
