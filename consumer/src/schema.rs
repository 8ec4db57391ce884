//! The analysts' schema, created and migrated at start: versioned migrations recorded in
//! `schema_migrations`, each applied once; everything that depends on the server's
//! version is decided in [`ServerCaps`] and nowhere else, everything that depends on the
//! topology (one server or a cluster) in [`Step::render`].

use anyhow::Context;
use clickhouse::Client;

use crate::topology::{LOCAL_SUFFIX, SHARDING_KEY, Server, Topology, first_answering};

/// What the connected server supports, read from `SELECT version()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerCaps {
    /// Every feature the schema depends on came with a major version.
    pub major: u32,
}

impl ServerCaps {
    pub fn parse(version: &str) -> anyhow::Result<Self> {
        let mut parts = version.trim().split('.').map(str::parse::<u32>);
        match (parts.next(), parts.next()) {
            (Some(Ok(major)), Some(Ok(_minor))) => Ok(Self { major }),
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
    fn render(self, statement: &str, database: &str, layout: &Layout) -> String {
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
            .replace("{on_cluster}", &layout.on_cluster)
            .replace("{local}", layout.local)
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
FROM {db}.events{local}
GROUP BY public_key, experiment_id, session_id";

/// One schema change.
struct Migration {
    version: u32,
    description: &'static str,
    steps: &'static [Step],
}

/// One statement of a migration. Besides the placeholders of [`ServerCaps::render`],
/// `{on_cluster}` is ` ON CLUSTER <name>` in a cluster (empty on one server), and
/// `{local}` the suffix of the per-replica part of a sharded table (`_local` in a cluster:
/// `events_local` holds a shard's rows, `events` reads them all).
enum Step {
    /// A table with a row per event or per session, sharded by session in a cluster:
    /// `CREATE TABLE IF NOT EXISTS {table} ... ENGINE = {engine} ...`.
    Sharded {
        name: &'static str,
        engine: &'static str,
        create: &'static str,
    },
    /// A small table kept whole on every server of a cluster.
    Whole {
        name: &'static str,
        engine: &'static str,
        create: &'static str,
    },
    /// A statement run once, on one server (cluster-wide ones say `{on_cluster}`).
    Once(&'static str),
    /// In a cluster, run on every server, what `ON CLUSTER` cannot do on 18.x: altering a
    /// Distributed table ("isn't replicated, but shard is replicated", code 371).
    /// Nothing on one server.
    EachServer(&'static str),
    /// Run on one replica of each shard: moving rows between a shard's own tables.
    EachShard(&'static str),
}

/// What the topology changes in the statements.
struct Layout {
    cluster: Option<String>,
    on_cluster: String,
    local: &'static str,
}

impl Layout {
    fn new(cluster: Option<&str>) -> Self {
        Self {
            on_cluster: cluster.map_or_else(String::new, |c| format!(" ON CLUSTER {c}")),
            cluster: cluster.map(str::to_owned),
            local: if cluster.is_some() { LOCAL_SUFFIX } else { "" },
        }
    }

    /// A table's engine: replicated in a cluster, across each shard (`{shard}` macro) or
    /// across every server (`all`). The `{replica}` macro must name each server uniquely.
    fn engine(&self, engine: &str, name: &str, shards: &str) -> String {
        match self.cluster {
            None => format!("{engine}()"),
            Some(_) => format!(
                "Replicated{engine}('/clickhouse/tables/{shards}/{{db}}/{name}', '{{replica}}')"
            ),
        }
    }
}

/// Where a rendered statement runs.
#[derive(Debug, PartialEq, Eq)]
enum Target {
    Once,
    EachServer,
    EachShard,
}

impl Step {
    /// The statements of this step for a server of version `caps` and `layout`.
    fn render(&self, layout: &Layout, caps: ServerCaps, database: &str) -> Vec<(Target, String)> {
        self.templates(layout)
            .into_iter()
            .map(|(target, sql)| (target, caps.render(&sql, database, layout)))
            .collect()
    }

    fn templates(&self, layout: &Layout) -> Vec<(Target, String)> {
        match self {
            Step::Sharded {
                name,
                engine,
                create,
            } => {
                let local = create
                    .replace("{table}", &format!("{{db}}.{name}{{local}}{{on_cluster}}"))
                    .replace("{engine}", &layout.engine(engine, name, "{shard}"));
                let mut statements = vec![(Target::Once, local)];
                if let Some(cluster) = &layout.cluster {
                    statements.push((
                        Target::Once,
                        format!(
                            "CREATE TABLE IF NOT EXISTS {{db}}.{name}{{on_cluster}} \
                             AS {{db}}.{name}{{local}} \
                             ENGINE = Distributed({cluster}, {{db}}, {name}{{local}}, {SHARDING_KEY})"
                        ),
                    ));
                }
                statements
            }
            Step::Whole {
                name,
                engine,
                create,
            } => vec![(
                Target::Once,
                create
                    .replace("{table}", &format!("{{db}}.{name}{{on_cluster}}"))
                    .replace("{engine}", &layout.engine(engine, name, "all")),
            )],
            Step::Once(sql) => vec![(Target::Once, (*sql).to_owned())],
            Step::EachServer(sql) if layout.cluster.is_some() => {
                vec![(Target::EachServer, (*sql).to_owned())]
            }
            Step::EachServer(_) => Vec::new(),
            Step::EachShard(sql) => vec![(Target::EachShard, (*sql).to_owned())],
        }
    }
}

/// Append only: a released migration never changes, a new one gets the next version.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "events table",
        steps: &[Step::Sharded {
            name: "events",
            engine: "ReplacingMergeTree",
            create: r"
CREATE TABLE IF NOT EXISTS {table} (
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
ENGINE = {engine}
PARTITION BY toYYYYMM(received_at)
ORDER BY (public_key, experiment_id, toDate(received_at), event_id)",
        }],
    },
    Migration {
        version: 2,
        description: "experiment_daily view",
        // A plain view over FINAL: exact (each event once, test traffic left out) and
        // cheap thanks to the sorting key; a materialized view would count redeliveries.
        steps: &[Step::Once(
            r"
CREATE VIEW IF NOT EXISTS {db}.experiment_daily{on_cluster} AS
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
GROUP BY public_key, experiment_id, variant_id, day",
        )],
    },
    Migration {
        version: 3,
        description: "event times in milliseconds",
        // Rows stored before it read received_at's second for both.
        steps: &[
            Step::Once(
                "ALTER TABLE {db}.events{local}{on_cluster} ADD COLUMN received_at_ms {millis} \
                 DEFAULT {received_at_ms} AFTER received_at",
            ),
            Step::Once(
                "ALTER TABLE {db}.events{local}{on_cluster} ADD COLUMN event_time {millis} \
                 DEFAULT received_at_ms AFTER received_at_ms",
            ),
            Step::EachServer(
                "ALTER TABLE {db}.events ADD COLUMN received_at_ms {millis} \
                 DEFAULT {received_at_ms} AFTER received_at",
            ),
            Step::EachServer(
                "ALTER TABLE {db}.events ADD COLUMN event_time {millis} \
                 DEFAULT received_at_ms AFTER received_at_ms",
            ),
        ],
    },
    Migration {
        version: 4,
        description: "experiment_sessions aggregate",
        // The view first, then the rows already stored: an insert in between is counted
        // by both, which the aggregates absorb.
        steps: &[
            Step::Sharded {
                name: "experiment_sessions",
                engine: "AggregatingMergeTree",
                create: r"
CREATE TABLE IF NOT EXISTS {table} (
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
ENGINE = {engine}
ORDER BY (public_key, experiment_id, session_id)",
            },
            Step::Once(
                "CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.experiment_sessions_mv{on_cluster} \
                 TO {db}.experiment_sessions{local} AS {sessions_select}",
            ),
            Step::EachShard("INSERT INTO {db}.experiment_sessions{local} {sessions_select}"),
        ],
    },
    Migration {
        version: 5,
        description: "experiment_variants, the snapshot's experiments",
        // Written by the consumer at each snapshot version; a version written again (a
        // restart, another consumer) replaces its rows. The current definition of an
        // experiment is the version last written for it.
        steps: &[
            Step::Whole {
                name: "experiment_variants",
                engine: "ReplacingMergeTree",
                create: r"
CREATE TABLE IF NOT EXISTS {table} (
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
ENGINE = {engine}
ORDER BY (experiment_id, version, variant_id)",
            },
            Step::Once(
                r"
CREATE VIEW IF NOT EXISTS {db}.experiment_variants_current{on_cluster} AS
SELECT experiment_id, variant_id, version, weight, is_control, status, start_at, end_at, parts
FROM {db}.experiment_variants FINAL
WHERE (experiment_id, version) IN (
    SELECT experiment_id, argMax(version, loaded_at)
    FROM {db}.experiment_variants FINAL
    GROUP BY experiment_id
)",
            ),
        ],
    },
    Migration {
        version: 6,
        description: "experiment_results views",
        // The joined subqueries are named: servers from 20.x refuse them otherwise
        // (joined_subquery_requires_alias), so this migration could not apply there as
        // first released, and servers that applied it (18.x, 19.x) never run it again.
        steps: &[
            // Exposed sessions per variant, each session once: its variant, or
            // `__multiple__` if it saw several; test sessions left out.
            Step::Once(
                r"
CREATE VIEW IF NOT EXISTS {db}.experiment_variant_counts{on_cluster} AS
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
) AS counts
ANY LEFT JOIN (
    SELECT experiment_id, variant_id, is_control, weight, toUInt8(1) AS defined
    FROM {db}.experiment_variants_current
) AS definitions USING (experiment_id, variant_id)",
            ),
            // Each variant against the experiment's control (unpooled z-test), and the
            // sample-ratio check of the exposed sessions against the weights: chi-square,
            // in closed form for 1 to 9 degrees of freedom.
            Step::Once(
                r"
CREATE VIEW IF NOT EXISTS {db}.experiment_results{on_cluster} AS
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
        ) AS per_experiment USING (public_key, experiment_id)
    ) AS counts
    ANY LEFT JOIN (
        SELECT experiment_id, sum(weight) AS srm_w, count() AS srm_k
        FROM {db}.experiment_variants_current
        WHERE weight > 0
        GROUP BY experiment_id
    ) AS weights USING (experiment_id)
)",
            ),
        ],
    },
];

/// What exists before the first migration: the database and the record of migrations.
const BOOTSTRAP: &[Step] = &[
    Step::Once("CREATE DATABASE IF NOT EXISTS {db}{on_cluster}"),
    Step::Whole {
        name: "schema_migrations",
        engine: "MergeTree",
        create: "CREATE TABLE IF NOT EXISTS {table} \
                 (version UInt32, description String, applied_at DateTime) \
                 ENGINE = {engine} ORDER BY version",
    },
];

/// One statement of the schema as it runs against a given server.
#[derive(Debug, serde::Serialize)]
pub struct Statement {
    /// `once`, `each_server` or `each_shard`.
    pub runs: &'static str,
    pub sql: String,
    /// Settings sent with it.
    pub settings: Vec<(&'static str, &'static str)>,
}

/// Every statement of the schema, bootstrap and migrations in order, as the consumer
/// would send them to a server of version `caps`, on one server (`cluster` `None`) or
/// across the named cluster: for checking them against servers that cannot run here.
pub fn statements(caps: ServerCaps, cluster: Option<&str>, database: &str) -> Vec<Statement> {
    let layout = Layout::new(cluster);
    BOOTSTRAP
        .iter()
        .chain(MIGRATIONS.iter().flat_map(|m| m.steps))
        .flat_map(|step| step.render(&layout, caps, database))
        .map(|(target, sql)| Statement {
            runs: match target {
                Target::Once => "once",
                Target::EachServer => "each_server",
                Target::EachShard => "each_shard",
            },
            sql,
            settings: caps.low_cardinality_setting().into_iter().collect(),
        })
        .collect()
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
    if !database
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        anyhow::bail!("database name {database:?} must be letters, digits and _ only");
    }
    let layout = Layout::new(topology.cluster.as_deref());
    // The database may not exist yet: talk to `default` until it does.
    let primary = first_answering(topology.servers()).await?;
    let server = primary.client.clone().with_database("default");
    let caps = ServerCaps::of(&server).await?;
    let run = |client: &Client, sql: &str| {
        let mut query = client.query(sql);
        if let Some((name, value)) = caps.low_cardinality_setting() {
            query = query.with_setting(name, value);
        }
        query.execute()
    };
    // In a cluster the record is replicated to every server, so any of them can tell.
    let has_record: u64 = server
        .query(
            "SELECT count() FROM system.tables WHERE database = ? AND name = 'schema_migrations'",
        )
        .bind(database)
        .fetch_one()
        .await
        .context("cannot look for schema_migrations")?;
    if has_record == 0 {
        for step in BOOTSTRAP {
            for (_, sql) in step.render(&layout, caps, database) {
                run(&server, &sql)
                    .await
                    .context("cannot create the database and schema_migrations")?;
            }
        }
    }
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
        let statements = migration
            .steps
            .iter()
            .flat_map(|s| s.render(&layout, caps, database));
        for (target, sql) in statements {
            let servers: Vec<&Server> = match target {
                Target::Once => vec![primary],
                Target::EachServer => topology.servers().collect(),
                Target::EachShard => {
                    let mut firsts = Vec::new();
                    for replicas in &topology.shards {
                        firsts.push(first_answering(replicas).await?);
                    }
                    firsts
                }
            };
            for target in servers {
                let client = target.client.clone().with_database("default");
                match run(&client, &sql).await {
                    Ok(()) => {}
                    // Another consumer migrating at the same time added it (18.x has no
                    // `ADD COLUMN IF NOT EXISTS`).
                    Err(e) if sql.contains("ADD COLUMN") && is_existing_column(&e) => {}
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
        assert_eq!(old, ServerCaps { major: 18 });
        assert!(old.low_cardinality_setting().is_some());
        let new = ServerCaps::parse("24.8.4.13").expect("parses");
        assert!(new.low_cardinality_setting().is_none());
        assert!(ServerCaps::parse("nope").is_err());
    }

    #[test]
    fn the_topology_decides_engines_names_and_where_statements_run() {
        let old = ServerCaps::parse("18.16.1").expect("parses");
        let single = statements(old, None, "analytics");
        let events = &single[2].sql;
        assert!(
            events.contains("CREATE TABLE IF NOT EXISTS analytics.events ("),
            "{events}"
        );
        assert!(events.contains("ENGINE = ReplacingMergeTree()"), "{events}");
        assert!(
            single
                .iter()
                .all(|s| s.runs != "each_server" && !s.sql.contains("CLUSTER"))
        );
        assert!(
            single.iter().all(|s| !s.settings.is_empty()),
            "18.x gets its setting"
        );

        let cluster = statements(old, Some("analytics"), "analytics");
        let sql: Vec<&str> = cluster.iter().map(|s| s.sql.as_str()).collect();
        assert!(
            sql[2].contains("analytics.events_local ON CLUSTER analytics (\n    event_id"),
            "{}",
            sql[2]
        );
        assert!(sql[2].contains(
            "ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/analytics/events', '{replica}')"
        ));
        assert!(
            sql[3].contains(
                "ENGINE = Distributed(analytics, analytics, events_local, sipHash64(session_id))"
            ),
            "{}",
            sql[3]
        );
        assert!(sql.iter().any(|s| s.contains(
            "ReplicatedReplacingMergeTree('/clickhouse/tables/all/analytics/experiment_variants', '{replica}')"
        )));
        // The Distributed table is altered on each server; the rest runs once, cluster-wide
        // where it creates something, except the backfill, once per shard.
        let each_server: Vec<&str> = cluster
            .iter()
            .filter(|s| s.runs == "each_server")
            .map(|s| s.sql.as_str())
            .collect();
        assert_eq!(each_server.len(), 2);
        assert!(
            each_server
                .iter()
                .all(|s| s.starts_with("ALTER TABLE analytics.events ADD"))
        );
        let backfill: Vec<&Statement> = cluster.iter().filter(|s| s.runs == "each_shard").collect();
        assert_eq!(backfill.len(), 1);
        assert!(
            backfill[0]
                .sql
                .starts_with("INSERT INTO analytics.experiment_sessions_local")
        );
        assert!(backfill[0].sql.contains("FROM analytics.events_local"));
        assert!(
            cluster
                .iter()
                .filter(|s| s.runs == "once" && s.sql.contains("CREATE"))
                .all(|s| s.sql.contains(" ON CLUSTER analytics"))
        );

        let new = ServerCaps::parse("26.9.2.1").expect("parses");
        assert!(
            statements(new, Some("analytics"), "analytics")
                .iter()
                .all(|s| s.settings.is_empty())
        );
    }

    #[test]
    fn migration_versions_increase() {
        let versions: Vec<u32> = MIGRATIONS.iter().map(|m| m.version).collect();
        assert!(versions.windows(2).all(|w| w[0] < w[1]), "{versions:?}");
        assert_eq!(versions.first(), Some(&1));
    }
}
