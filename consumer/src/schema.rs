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

    /// `DateTime64` came with 20.1. Before it, a time in milliseconds is an `Int64` of
    /// milliseconds since the Unix epoch; both read and write as the same 8 bytes.
    fn has_datetime64(self) -> bool {
        self.major >= 20
    }

    /// The statement for this server: `{db}` is the database, `{millis}` the type of a
    /// time in milliseconds and `{received_at_ms}` the one of `received_at`.
    fn render(self, statement: &str, database: &str) -> String {
        let (millis, received_at_ms) = if self.has_datetime64() {
            (
                "DateTime64(3, 'UTC')",
                "toDateTime64(received_at, 3, 'UTC')",
            )
        } else {
            ("Int64", "toInt64(received_at) * 1000")
        };
        statement
            .replace("{sessions_select}", SESSIONS_SELECT)
            .replace("{db}", database)
            .replace("{millis}", millis)
            .replace("{received_at_ms}", received_at_ms)
    }
}

/// What [`MIGRATIONS`] 4 keeps per session of an experiment. Every aggregate gives the same
/// answer when an event is counted twice (min, max, distinct values), so Kafka's
/// redeliveries and clients' retries, which the materialized view sees as new rows, change
/// nothing. "Exposure" is an `impression` that carries a `variant_id`.
const SESSIONS_SELECT: &str = r"
SELECT
    public_key,
    experiment_id,
    session_id,
    uniqExactIfState(toString(variant_id), event_name = 'impression' AND variant_id != '')
        AS variants,
    argMinIfState(toString(variant_id), event_time,
        event_name = 'impression' AND variant_id != '') AS first_variant,
    minIfState(event_time, event_name = 'impression' AND variant_id != '') AS first_exposure,
    maxIfState(event_time, event_name = 'conversion' OR ifNull(conversion, 0) = 1)
        AS last_conversion,
    maxState(test) AS tested,
    maxIfState(ifNull(time_on_page, 0), isNotNull(time_on_page)) AS max_time_on_page,
    maxState(toUInt8(isNotNull(time_on_page))) AS has_time_on_page
FROM {db}.events
GROUP BY public_key, experiment_id, session_id";

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
    Migration {
        version: 3,
        description: "event times in milliseconds",
        // Rows stored before it read received_at's second for both.
        statements: &[
            "ALTER TABLE {db}.events ADD COLUMN received_at_ms {millis} \
             DEFAULT {received_at_ms} AFTER received_at",
            "ALTER TABLE {db}.events ADD COLUMN event_time {millis} \
             DEFAULT received_at_ms AFTER received_at_ms",
        ],
    },
    Migration {
        version: 4,
        description: "experiment_sessions aggregate",
        // The view first, then the rows already stored: an insert in between is counted
        // by both, which the aggregates absorb.
        statements: &[
            r"
CREATE TABLE IF NOT EXISTS {db}.experiment_sessions (
    public_key       LowCardinality(String),
    experiment_id    LowCardinality(String),
    session_id       String,
    variants         AggregateFunction(uniqExactIf, String, UInt8),
    first_variant    AggregateFunction(argMinIf, String, {millis}, UInt8),
    first_exposure   AggregateFunction(minIf, {millis}, UInt8),
    last_conversion  AggregateFunction(maxIf, {millis}, UInt8),
    tested           AggregateFunction(max, UInt8),
    max_time_on_page AggregateFunction(maxIf, Float64, UInt8),
    has_time_on_page AggregateFunction(max, UInt8)
)
ENGINE = AggregatingMergeTree()
ORDER BY (public_key, experiment_id, session_id)",
            "CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.experiment_sessions_mv \
             TO {db}.experiment_sessions AS {sessions_select}",
            "INSERT INTO {db}.experiment_sessions {sessions_select}",
        ],
    },
    Migration {
        version: 5,
        description: "experiment_variants, the snapshot's experiments",
        // Written by the consumer at each snapshot version; a version written again (a
        // restart, another consumer) replaces its rows. The current definition of an
        // experiment is the version last written for it.
        statements: &[
            r"
CREATE TABLE IF NOT EXISTS {db}.experiment_variants (
    experiment_id String,
    variant_id    String,
    version       String,
    weight        Float64,
    is_control    UInt8,
    status        LowCardinality(String),
    start_at      Nullable(DateTime('UTC')),
    end_at        Nullable(DateTime('UTC')),
    parts         String,
    loaded_at     {millis}
)
ENGINE = ReplacingMergeTree()
ORDER BY (experiment_id, version, variant_id)",
            r"
CREATE VIEW IF NOT EXISTS {db}.experiment_variants_current AS
SELECT experiment_id, variant_id, version, weight, is_control, status, start_at, end_at, parts
FROM {db}.experiment_variants FINAL
WHERE (experiment_id, version) IN (
    SELECT experiment_id, argMax(version, loaded_at)
    FROM {db}.experiment_variants FINAL
    GROUP BY experiment_id
)",
        ],
    },
    Migration {
        version: 6,
        description: "experiment_results views",
        statements: &[
            // Exposed sessions per variant, each session once: its variant, or
            // `__multiple__` if it saw several; test sessions left out.
            r"
CREATE VIEW IF NOT EXISTS {db}.experiment_variant_counts AS
SELECT
    public_key, experiment_id, variant_id, exposed, converted,
    is_control, weight, defined
FROM (
    SELECT
        public_key,
        experiment_id,
        if(n_variants > 1, '__multiple__', v0) AS variant_id,
        count() AS exposed,
        countIf(tc >= t0) AS converted
    FROM (
        SELECT
            toString(public_key) AS public_key,
            toString(experiment_id) AS experiment_id,
            session_id,
            uniqExactIfMerge(variants) AS n_variants,
            argMinIfMerge(first_variant) AS v0,
            minIfMerge(first_exposure) AS t0,
            maxIfMerge(last_conversion) AS tc,
            maxMerge(tested) AS any_test
        FROM {db}.experiment_sessions
        GROUP BY public_key, experiment_id, session_id
    )
    WHERE n_variants > 0 AND any_test = 0
    GROUP BY public_key, experiment_id, variant_id
)
ANY LEFT JOIN (
    SELECT experiment_id, variant_id, is_control, weight, toUInt8(1) AS defined
    FROM {db}.experiment_variants_current
) USING (experiment_id, variant_id)",
            // Each variant against the experiment's control (unpooled z-test), and the
            // sample-ratio check of the exposed sessions against the weights: chi-square,
            // in closed form for 1 to 9 degrees of freedom.
            r"
CREATE VIEW IF NOT EXISTS {db}.experiment_results AS
SELECT
    public_key, experiment_id, variant_id, is_control, exposed, converted, conversion_rate,
    if(comparable, if(is_control = 1, 0, raw_diff), NULL) AS diff,
    if(comparable, if(is_control = 1, 0, raw_diff - 1.959963984540054 * se), NULL) AS ci_low,
    if(comparable, if(is_control = 1, 0, raw_diff + 1.959963984540054 * se), NULL) AS ci_high,
    if(comparable AND is_control = 0 AND se > 0, erfc(abs(raw_diff / se) / sqrt(2)), NULL)
        AS p_value,
    if(srm_k BETWEEN 2 AND 10 AND srm_n > 0,
        if(srm_df % 2 = 0,
            exp(-srm_x / 2) * (1 + (srm_df >= 4) * (srm_x / 2)
                + (srm_df >= 6) * pow(srm_x / 2, 2) / 2 + (srm_df >= 8) * pow(srm_x / 2, 3) / 6),
            erfc(sqrt(srm_x / 2)) + sqrt(2 / pi()) * exp(-srm_x / 2) * ((srm_df >= 3) * sqrt(srm_x)
                + (srm_df >= 5) * pow(srm_x, 1.5) / 3 + (srm_df >= 7) * pow(srm_x, 2.5) / 15
                + (srm_df >= 9) * pow(srm_x, 3.5) / 105)),
        NULL) AS srm_p_value
FROM (
    SELECT
        *,
        converted / exposed AS conversion_rate,
        control_converted / control_exposed AS control_rate,
        conversion_rate - control_rate AS raw_diff,
        sqrt(conversion_rate * (1 - conversion_rate) / exposed
            + control_rate * (1 - control_rate) / control_exposed) AS se,
        controls = 1 AND control_exposed > 0 AND variant_id != '__multiple__' AS comparable,
        srm_k - 1 AS srm_df,
        greatest(srm_w / srm_n * srm_sum - srm_n, 0) AS srm_x
    FROM (
        SELECT *
        FROM {db}.experiment_variant_counts
        ANY LEFT JOIN (
            SELECT
                public_key,
                experiment_id,
                countIf(is_control = 1) AS controls,
                sumIf(exposed, is_control = 1) AS control_exposed,
                sumIf(converted, is_control = 1) AS control_converted,
                sumIf(exposed, weight > 0) AS srm_n,
                sumIf(exposed * exposed / weight, weight > 0) AS srm_sum
            FROM {db}.experiment_variant_counts
            GROUP BY public_key, experiment_id
        ) USING (public_key, experiment_id)
    )
    ANY LEFT JOIN (
        SELECT experiment_id, sum(weight) AS srm_w, count() AS srm_k
        FROM {db}.experiment_variants_current
        WHERE weight > 0
        GROUP BY experiment_id
    ) USING (experiment_id)
)",
        ],
    },
];

/// Creates the database and applies the migrations not yet recorded. Running it again,
/// or from several consumers at once, changes nothing.
pub async fn migrate(client: &Client, database: &str) -> anyhow::Result<()> {
    migrate_up_to(client, database, u32::MAX).await
}

/// [`migrate`], without the migrations after version `last`: the schema of an older
/// release, for tests of the upgrade.
pub async fn migrate_up_to(client: &Client, database: &str, last: u32) -> anyhow::Result<()> {
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

    let pending = MIGRATIONS
        .iter()
        .filter(|m| m.version <= last && !applied.contains(&m.version));
    for migration in pending {
        for statement in migration.statements {
            let mut query = server.query(&caps.render(statement, database));
            if let Some((name, value)) = caps.low_cardinality_setting() {
                query = query.with_setting(name, value);
            }
            match query.execute().await {
                Ok(()) => {}
                // Another consumer migrating at the same time added it (18.x has no
                // `ADD COLUMN IF NOT EXISTS`).
                Err(e) if statement.contains("ADD COLUMN") && is_existing_column(&e) => {}
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!(
                            "migration {} ({}) failed",
                            migration.version, migration.description
                        )
                    });
                }
            }
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

/// ClickHouse's answer to adding a column that exists: code 44, "already exists".
fn is_existing_column(error: &clickhouse::error::Error) -> bool {
    let text = error.to_string();
    text.contains("Code: 44") && text.contains("already exists")
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
