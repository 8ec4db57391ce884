//! The migrations of the analysts' schema, as data: what each version creates or changes,
//! in statements with placeholders that [`super`] renders for the server's version and the
//! topology. Append only: a released migration never changes, a new one gets the next
//! version. This file is long because the SQL is; it holds no logic.

/// What [`MIGRATIONS`] 4 keeps per session of an experiment. Every aggregate gives the same
/// answer when an event is counted twice (min, max, distinct values), so Kafka's
/// redeliveries and clients' retries, which the materialized view sees as new rows, change
/// nothing. "Exposure" is an `impression` that carries a `variant_id`.
pub(super) const SESSIONS_SELECT: &str = r"
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
pub(super) struct Migration {
    pub version: u32,
    pub description: &'static str,
    pub steps: &'static [Step],
}

/// One statement of a migration. Besides the placeholders of
/// [`ServerCaps::render`](super::ServerCaps),
/// `{on_cluster}` is ` ON CLUSTER <name>` in a cluster (empty on one server), and
/// `{local}` the suffix of the per-replica part of a sharded table (`_local` in a cluster:
/// `events_local` holds a shard's rows, `events` reads them all).
pub(super) enum Step {
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

/// Append only: a released migration never changes, a new one gets the next version.
pub(super) const MIGRATIONS: &[Migration] = &[
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
pub(super) const BOOTSTRAP: &[Step] = &[
    Step::Once("CREATE DATABASE IF NOT EXISTS {db}{on_cluster}"),
    Step::Whole {
        name: "schema_migrations",
        engine: "MergeTree",
        create: "CREATE TABLE IF NOT EXISTS {table} \
                 (version UInt32, description String, applied_at DateTime) \
                 ENGINE = {engine} ORDER BY version",
    },
];
