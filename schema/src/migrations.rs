//! The migrations of the analysts' tables, as data: what each version creates or changes,
//! in statements with placeholders that [`super`] renders for the server's version and the
//! topology. Append only: a released migration never changes what it sends to a table, a
//! new one gets the next version. A table's statement is a file of `migrations/`, named
//! after its version; one-line statements stand here.
//!
//! Plain views are not here: each is defined once, as it is now, in `views/`
//! ([`crate::views`]), and made again whenever its text changes. The view statements that
//! migrations 2 to 16 sent when they were released are left out of them: a database that
//! applied them has its views replaced by the current ones, and a new one gets only those.

/// What [`MIGRATIONS`] 4 keeps per session of an experiment. Every aggregate gives the same
/// answer when an event is counted twice (min, max, distinct values), so Kafka's
/// redeliveries and clients' retries, which the materialized view sees as new rows, change
/// nothing. "Exposure" is an `impression` that carries a `variant_id`.
pub(super) const SESSIONS_SELECT: &str = sql!("migrations/004_sessions_select.sql");

/// What [`MIGRATIONS`] 7 keeps per visitor and phase of an experiment, with aggregates that
/// absorb a row counted twice as those of 4 do. `excluded`: any test event or an event
/// from a bot (read no more since 20). `{first_conversion}` is where 11 and 20 add columns
/// (empty in 7).
pub(super) const VISITORS_SELECT: &str = sql!("migrations/007_visitors_select.sql");

/// What [`MIGRATIONS`] 11 adds to [`VISITORS_SELECT`] at `{first_conversion}` (nothing
/// before it): each visitor's first conversion beside the last, last of the columns (an
/// 18.x materialized view fills its target by position).
pub(super) const FIRST_CONVERSION_11: &str = ",
    minIfState(event_time, event_name = 'conversion' OR ifNull(conversion, 0) = 1)
        AS first_conversion";

/// What [`MIGRATIONS`] 20 adds after [`FIRST_CONVERSION_11`], last of the columns: what
/// fixes each visitor's past hour by hour, and excludes them by their exposures only.
/// `least_arm` and `greatest_arm`: of the arms they were exposed to, the first and the
/// last by a hash of the name (its 32 high bits), each with the hour (since the epoch) they
/// were first exposed to it (the low bits; `greatest_arm` keeps 2^32 - 1 - the hour), so
/// that the hour of a second arm is known: exactly for two arms, the earlier of those two
/// for more. (Numbers, not tuples: 18.x merges a tuple's min through its generic, slow
/// path.) `conversions`: every conversion's time (distinct), so that the first one at or
/// after the first exposure is known however late an earlier or later one arrives.
/// `exposure_excluded`: an impression of theirs was a test's or a bot's (a conversion sent
/// from a server, with its User-Agent, is not).
pub(super) const EXPOSURES_20: &str = ",
    minIfState(bitShiftLeft(cityHash64(toString(variant_id)) % 4294967296, 32)
        + toUInt64(intDiv({to_ms}(event_time), 3600000)),
        event_name = 'impression' AND variant_id != '') AS least_arm,
    maxIfState(toUInt64(bitShiftLeft(cityHash64(toString(variant_id)) % 4294967296, 32)
        + (4294967295 - toUInt64(intDiv({to_ms}(event_time), 3600000)))),
        event_name = 'impression' AND variant_id != '') AS greatest_arm,
    groupUniqArrayIfState(event_time, event_name = 'conversion' OR ifNull(conversion, 0) = 1)
        AS conversions,
    maxIfState(greatest(test, is_bot), event_name = 'impression' AND variant_id != '')
        AS exposure_excluded";

/// The columns of [`EXPOSURES_20`], as `ALTER TABLE ... ADD COLUMN` adds them.
pub(super) const EXPOSURES_20_COLUMNS: &str = "least_arm AggregateFunction(minIf, UInt64, UInt8),
    ADD COLUMN greatest_arm AggregateFunction(maxIf, UInt64, UInt8),
    ADD COLUMN conversions AggregateFunction(groupUniqArrayIf, {millis}, UInt8),
    ADD COLUMN exposure_excluded AggregateFunction(maxIf, UInt8, UInt8)";

/// Migration 21's column of `visitor_metric_values`: whether the visitor had any event in
/// the metric's lookback. Rows stored before it read a history where the covariate is not 0.
pub(super) const PRE_SEEN_21_COLUMN: &str = "metrics.pre_seen Array(Float64)
    DEFAULT arrayMap(v -> toFloat64(v != 0), metrics.pre_value)";

/// The sharding key of the tables of migrations 1 and 4 as they were created; migration 7
/// shards `events` by visitor ([`SHARDING_KEY`](clickhouse_kit::topology::SHARDING_KEY)).
const BY_SESSION: &str = "sipHash64(session_id)";

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
    /// A table with a row per event, visitor or session, sharded by `key` in a cluster:
    /// `CREATE TABLE IF NOT EXISTS {table} ... ENGINE = {engine} ...`.
    Sharded {
        name: &'static str,
        engine: &'static str,
        create: &'static str,
        key: &'static str,
    },
    /// In a cluster, on every server, the Distributed table of sharded table `name` made
    /// again, as it is now sharded by `key` (18.x cannot alter a Distributed engine).
    /// It holds no rows: the consumer writes each shard's part. Nothing on one server.
    Reshard {
        name: &'static str,
        key: &'static str,
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

use clickhouse_kit::topology::SHARDING_KEY;

/// Append only: a released migration never changes, a new one gets the next version.
pub(super) const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "events table",
        steps: &[Step::Sharded {
            name: "events",
            engine: "ReplacingMergeTree",
            create: sql!("migrations/001_events.sql"),
            key: BY_SESSION,
        }],
    },
    Migration {
        version: 2,
        description: "experiment_daily view",
        // The view experiment_daily (views/).
        steps: &[],
    },
    Migration {
        version: 3,
        description: "event times in milliseconds",
        // Rows stored before it read received_at's second for both. A replicated table's
        // ALTER reaches its replicas through ZooKeeper: it runs on one replica of each
        // shard, never ON CLUSTER, whose every replica runs it and where 18.16's DDL worker
        // has stopped for good on a ZooKeeper "Node exists" (the same schema either way).
        steps: &[
            Step::EachShard(
                "ALTER TABLE {db}.events{local} ADD COLUMN received_at_ms {millis} \
                 DEFAULT {received_at_ms} AFTER received_at",
            ),
            Step::EachShard(
                "ALTER TABLE {db}.events{local} ADD COLUMN event_time {millis} \
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
                create: sql!("migrations/004_experiment_sessions.sql"),
                key: BY_SESSION,
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
        steps: &[Step::Whole {
            name: "experiment_variants",
            engine: "ReplacingMergeTree",
            create: sql!("migrations/005_experiment_variants.sql"),
        }],
    },
    Migration {
        version: 6,
        description: "experiment_results views",
        // The joined subqueries are named: servers from 20.x refuse them otherwise
        // (joined_subquery_requires_alias), so this migration could not apply there as
        // first released, and servers that applied it (18.x, 19.x) never run it again.
        // The views experiment_variant_counts and experiment_results (views/).
        steps: &[],
    },
    Migration {
        version: 7,
        description: "the visitor as the unit, phases, bots, always-valid inference",
        steps: &[
            // Rows stored before it: their session is their visitor, phase 1, no bot. The
            // replicated tables' ALTERs run on one replica of each shard (migration 3).
            Step::EachShard(
                "ALTER TABLE {db}.events{local} ADD COLUMN visitor_id String DEFAULT session_id",
            ),
            Step::EachShard("ALTER TABLE {db}.events{local} ADD COLUMN phase UInt32 DEFAULT 1"),
            Step::EachShard("ALTER TABLE {db}.events{local} ADD COLUMN is_bot UInt8 DEFAULT 0"),
            Step::Reshard {
                name: "events",
                key: SHARDING_KEY,
            },
            // Replicated whole: one server's ALTER reaches every server.
            Step::Once("ALTER TABLE {db}.experiment_variants ADD COLUMN phase UInt32 DEFAULT 1"),
            // The always-valid tuning (`sequential_tuning`), a row an analyst may insert.
            Step::Whole {
                name: "results_settings",
                engine: "ReplacingMergeTree",
                create: sql!("migrations/007_results_settings.sql"),
            },
            // As 4: the view first, then the rows already stored.
            Step::Sharded {
                name: "experiment_visitors",
                engine: "AggregatingMergeTree",
                create: sql!("migrations/007_experiment_visitors.sql"),
                key: SHARDING_KEY,
            },
            Step::Once(
                "CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.experiment_visitors_mv{on_cluster} \
                 TO {db}.experiment_visitors{local} AS {visitors_select}",
            ),
            Step::EachShard("INSERT INTO {db}.experiment_visitors{local} {visitors_select}"),
            // The session aggregate is no longer read.
            Step::Once("DROP TABLE IF EXISTS {db}.experiment_sessions_mv{on_cluster}"),
            Step::Once("DROP TABLE IF EXISTS {db}.experiment_sessions{on_cluster}"),
            Step::Once("DROP TABLE IF EXISTS {db}.experiment_sessions{local}{on_cluster}"),
        ],
    },
    Migration {
        version: 8,
        description: "experiment_results_over_time, the results hour by hour",
        // The view experiment_results_over_time (views/).
        steps: &[],
    },
    Migration {
        version: 9,
        description: "the public keys that list each experiment",
        // Who may read an experiment's definitions: an analyst's copy of
        // `experiment_variants` keeps the rows of their keys' experiments
        // (`analytics-access` on 18.x). Rows written before it have none.
        // Replicated whole: one server's ALTER reaches every server (migration 3).
        steps: &[Step::Once(
            "ALTER TABLE {db}.experiment_variants ADD COLUMN public_keys Array(String)",
        )],
    },
    Migration {
        version: 10,
        description: "results refused where an arm has no variance or below the guard",
        // An arm with no conversion (or all converted) adds nothing to the unpooled
        // standard error: 0 of 108 against 13 of 972 read as significant, and A/A tests on
        // ramped splits with rare conversions went "significant" far beyond 5%.
        // The views (views/).
        steps: &[],
    },
    Migration {
        version: 11,
        description: "conversion windows, mature visitors, results as of each hour, N* per phase",
        steps: &[
            // Each visitor's first conversion beside the last: the view first, then the old
            // one dropped (an insert in between is counted by both, which the aggregates
            // absorb), then the conversions already stored.
            // A replicated table's ALTER reaches its replicas through ZooKeeper: run on
            // one replica of each shard, not ON CLUSTER (there every replica runs it and
            // 18.x has left a replica's DDL task waiting out the 180 s timeout).
            Step::EachShard(
                "ALTER TABLE {db}.experiment_visitors{local} ADD COLUMN \
                 first_conversion AggregateFunction(minIf, {millis}, UInt8)",
            ),
            Step::EachServer(
                "ALTER TABLE {db}.experiment_visitors ADD COLUMN \
                 first_conversion AggregateFunction(minIf, {millis}, UInt8)",
            ),
            Step::Once(
                "CREATE MATERIALIZED VIEW IF NOT EXISTS \
                 {db}.experiment_visitors_mv2{on_cluster} \
                 TO {db}.experiment_visitors{local} AS {visitors_select_11}",
            ),
            Step::Once("DROP TABLE IF EXISTS {db}.experiment_visitors_mv{on_cluster}"),
            Step::EachShard(
                "INSERT INTO {db}.experiment_visitors{local} \
                 (public_key, experiment_id, phase, visitor_id, first_conversion)\n\
                 SELECT public_key, experiment_id, phase, visitor_id, \
                 minIfState(event_time, event_name = 'conversion' OR ifNull(conversion, 0) = 1)\n\
                 FROM {db}.events{local} \
                 WHERE event_name = 'conversion' OR ifNull(conversion, 0) = 1 \
                 GROUP BY public_key, experiment_id, phase, visitor_id",
            ),
            // The snapshot's conversionWindowHours and sequentialTuning (0: not set); the
            // table is replicated whole, so one server's ALTER reaches every server.
            Step::Once(
                "ALTER TABLE {db}.experiment_variants \
                 ADD COLUMN conversion_window_hours Float64 DEFAULT 0",
            ),
            Step::Once(
                "ALTER TABLE {db}.experiment_variants \
                 ADD COLUMN sequential_tuning Float64 DEFAULT 0",
            ),
            // Every value results_settings has held, kept: a merge of results_settings keeps
            // its last only, and the N* of a phase is the one in force when it started.
            Step::Whole {
                name: "results_settings_log",
                engine: "MergeTree",
                create: "CREATE TABLE IF NOT EXISTS {table} \
                         (name String, value Float64, set_at DateTime)\n\
                         ENGINE = {engine} ORDER BY (name, set_at)",
            },
            Step::Once(
                "CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.results_settings_log_mv{on_cluster} \
                 TO {db}.results_settings_log AS\n SELECT name, value, set_at \
                 FROM {db}.results_settings",
            ),
            Step::Once(
                "INSERT INTO {db}.results_settings_log SELECT name, value, set_at \
                 FROM {db}.results_settings FINAL",
            ),
        ],
    },
    Migration {
        version: 12,
        description: "experiment metrics: definitions and results per metric",
        steps: &[
            // Written by the consumer at each snapshot version, like experiment_variants:
            // each experiment's metrics with their roles, the default goal included.
            Step::Whole {
                name: "experiment_metrics",
                engine: "ReplacingMergeTree",
                create: sql!("migrations/012_experiment_metrics.sql"),
            },
        ],
    },
    Migration {
        version: 13,
        description: "per-visitor metric values stored by the consumer",
        steps: &[
            // Each visitor's rows of events, counted as they are inserted: a value stored
            // from fewer rows is stale.
            Step::Sharded {
                name: "visitor_event_counts",
                engine: "SummingMergeTree",
                create: sql!("migrations/013_visitor_event_counts.sql"),
                key: SHARDING_KEY,
            },
            Step::Once(
                "CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.visitor_event_counts_mv{on_cluster} \
                 TO {db}.visitor_event_counts{local} AS\n{event_counts_select}",
            ),
            // A row inserted between the view and this is counted twice: its visitor reads
            // as stale, which costs time, not correctness.
            Step::EachShard("INSERT INTO {db}.visitor_event_counts{local} {event_counts_select}"),
            // Written by the consumer's refresh (schema::metric_values_refresh).
            Step::Sharded {
                name: "experiment_metric_values",
                engine: "ReplacingMergeTree",
                create: sql!("migrations/013_experiment_metric_values.sql"),
                key: SHARDING_KEY,
            },
        ],
    },
    Migration {
        version: 14,
        description: "metric views at scale: freshness per visitor key, arms in one pass",
        // The views (views/).
        steps: &[],
    },
    Migration {
        version: 15,
        description: "metric visitors: one side each while refreshes land during a query",
        // The views (views/).
        steps: &[],
    },
    Migration {
        version: 16,
        description: "results: no test for an arm the phase does not define",
        // The views (views/).
        steps: &[],
    },
    Migration {
        version: 17,
        description: "views kept as current definitions: the record of their text",
        // Which text each view was last made from (crate::views): a view whose current
        // text differs is made again after the migrations.
        steps: &[Step::Whole {
            name: "schema_views",
            engine: "MergeTree",
            create: "CREATE TABLE IF NOT EXISTS {table} \
                     (name String, hash String, made_at UInt64)\n\
                     ENGINE = {engine} ORDER BY (name, made_at)",
        }],
    },
    Migration {
        version: 18,
        description: "metric results as of the consumers' refreshes: their marks",
        // Per consumer process: the time up to which it had refreshed the metric values
        // of the visitors of every event it stored (consumer::refresh), and when it wrote
        // that; `experiment_metric_results`' `as_of` reads them.
        steps: &[Step::Whole {
            name: "metric_refresh_marks",
            engine: "ReplacingMergeTree",
            create: "CREATE TABLE IF NOT EXISTS {table} \
                         (consumer String, as_of DateTime, written_at DateTime)\n\
                         ENGINE = {engine} ORDER BY consumer",
        }],
    },
    Migration {
        version: 19,
        description: "stored metric values: one row per visitor, the metrics in arrays",
        // A sixth of the rows that `experiment_metric_visitors` reads with FINAL, which
        // 18.x merges in one thread: the metrics view took 1.5-1.9 times the reference.
        steps: &[
            Step::Sharded {
                name: "visitor_metric_values",
                engine: "ReplacingMergeTree",
                create: sql!("migrations/019_visitor_metric_values.sql"),
                key: SHARDING_KEY,
            },
            // The values stored so far, each visitor at their latest refresh: a row of an
            // older one (a metric dropped since) is left behind.
            Step::EachShard(
                "INSERT INTO {db}.visitor_metric_values{local} (\n    \
                 public_key, experiment_id, phase, visitor_id, variant_id, first_exposure_ms,\n    \
                 metrics.metric_id, metrics.value, metrics.denominator, metrics.pre_value,\n    \
                 events_seen, settings_hash, refresh_id)\n\
                 SELECT\n    \
                 public_key, experiment_id, phase, visitor_id, variant_id, first_exposure_ms,\n    \
                 arrayMap(m -> m.1, metrics), arrayMap(m -> m.2, metrics),\n    \
                 arrayMap(m -> m.3, metrics), arrayMap(m -> m.4, metrics),\n    \
                 events_seen, settings_hash, latest_refresh\n\
                 FROM (\n    \
                     SELECT\n        \
                         public_key, experiment_id, phase, visitor_id,\n        \
                         argMax(variant_id, refresh_id) AS variant_id,\n        \
                         argMax(first_exposure_ms, refresh_id) AS first_exposure_ms,\n        \
                         max(refresh_id) AS latest_refresh,\n        \
                         argMax(events_seen, refresh_id) AS events_seen,\n        \
                         argMax(settings_hash, refresh_id) AS settings_hash,\n        \
                         arrayFilter(m -> m.5 = latest_refresh, groupArrayIf(\n            \
                             (metric_id, value, denominator, pre_value, refresh_id),\n            \
                             metric_id != '')) AS metrics\n    \
                     FROM {db}.experiment_metric_values{local} FINAL\n    \
                     GROUP BY public_key, experiment_id, phase, visitor_id\n\
                 ) AS visitors",
            ),
            Step::Once("DROP TABLE IF EXISTS {db}.experiment_metric_values{on_cluster}"),
            Step::Once("DROP TABLE IF EXISTS {db}.experiment_metric_values{local}{on_cluster}"),
        ],
    },
    Migration {
        version: 20,
        description: "a fixed past: arms' first hours and every conversion; exclusion by exposure",
        // As 11: the columns, the view that fills them first, then the old view dropped
        // (an insert in between is counted by both, which the aggregates absorb), then
        // the rows already stored.
        steps: &[
            Step::EachShard(
                "ALTER TABLE {db}.experiment_visitors{local} ADD COLUMN {exposures_20_columns}",
            ),
            Step::EachServer(
                "ALTER TABLE {db}.experiment_visitors ADD COLUMN {exposures_20_columns}",
            ),
            Step::Once(
                "CREATE MATERIALIZED VIEW IF NOT EXISTS \
                 {db}.experiment_visitors_mv3{on_cluster} \
                 TO {db}.experiment_visitors{local} AS {visitors_select_20}",
            ),
            Step::Once("DROP TABLE IF EXISTS {db}.experiment_visitors_mv2{on_cluster}"),
            Step::EachShard(
                "INSERT INTO {db}.experiment_visitors{local} \
                 (public_key, experiment_id, phase, visitor_id, least_arm, greatest_arm, \
                 conversions, exposure_excluded)\n\
                 SELECT public_key, experiment_id, phase, visitor_id{exposures_20}\n\
                 FROM {db}.events{local} \
                 GROUP BY public_key, experiment_id, phase, visitor_id",
            ),
        ],
    },
    Migration {
        version: 21,
        description: "stored metric values: whether each visitor has a history (CUPED)",
        // The refresh writes the column from now on. A row stored before reads its
        // default, a history where the covariate is not 0, until the sweep stores it
        // again: the settings hash names this migration, so every stored row is stale.
        steps: &[
            Step::EachShard(
                "ALTER TABLE {db}.visitor_metric_values{local} ADD COLUMN {pre_seen_column}",
            ),
            Step::EachServer("ALTER TABLE {db}.visitor_metric_values ADD COLUMN {pre_seen_column}"),
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
                 (version UInt32, description String, applied_at DateTime)\n\
                 ENGINE = {engine} ORDER BY version",
    },
];
