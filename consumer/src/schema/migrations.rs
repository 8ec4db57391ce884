//! The migrations of the analysts' schema, as data: what each version creates or changes,
//! in statements with placeholders that [`super`] renders for the server's version and the
//! topology. Append only: a released migration never changes, a new one gets the next
//! version. A table's or a view's statement is a file of `migrations/`, named after its
//! version; one-line statements stand here.

/// The text of a statement in `migrations/`, without the blanks around it.
macro_rules! sql {
    ($file:literal) => {
        include_str!($file).trim_ascii()
    };
}

/// What [`MIGRATIONS`] 4 keeps per session of an experiment. Every aggregate gives the same
/// answer when an event is counted twice (min, max, distinct values), so Kafka's
/// redeliveries and clients' retries, which the materialized view sees as new rows, change
/// nothing. "Exposure" is an `impression` that carries a `variant_id`.
pub(super) const SESSIONS_SELECT: &str = sql!("migrations/004_sessions_select.sql");

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
            create: sql!("migrations/001_events.sql"),
        }],
    },
    Migration {
        version: 2,
        description: "experiment_daily view",
        // A plain view over FINAL: exact (each event once, test traffic left out) and
        // cheap thanks to the sorting key; a materialized view would count redeliveries.
        steps: &[Step::Once(sql!("migrations/002_experiment_daily.sql"))],
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
                create: sql!("migrations/004_experiment_sessions.sql"),
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
                create: sql!("migrations/005_experiment_variants.sql"),
            },
            Step::Once(sql!("migrations/005_experiment_variants_current.sql")),
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
            Step::Once(sql!("migrations/006_experiment_variant_counts.sql")),
            // Each variant against the experiment's control (unpooled z-test), and the
            // sample-ratio check of the exposed sessions against the weights: chi-square,
            // in closed form for 1 to 9 degrees of freedom.
            Step::Once(sql!("migrations/006_experiment_results.sql")),
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
