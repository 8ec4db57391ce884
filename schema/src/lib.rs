//! The analysts' schema, created and migrated at start: versioned migrations recorded in
//! `schema_migrations`, each applied once; everything that depends on the server's
//! version is decided in [`ServerCaps`] and nowhere else, everything that depends on the
//! topology (one server or a cluster) in `Step::render`.
//!
//! The crate is the ClickHouse side that the consumer, the operators' commands, the load
//! generator and the tests share, so that the commands do not depend on the consumer: the
//! schema and its migrations (here and `migrations.rs`), the row of `events` ([`row`]), the
//! servers and their flags ([`topology`]), and the retries' waits ([`backoff`]). It has
//! no Kafka and no service in it.

use anyhow::Context;
use clickhouse::Client;

use crate::topology::{LOCAL_SUFFIX, Server, Topology, first_answering, is_sql_name};

/// The text of a file of the crate's SQL (`migrations/`, `views/`), without the blanks
/// around it.
macro_rules! sql {
    ($file:literal) => {
        include_str!($file).trim_ascii()
    };
}

pub mod backoff;
mod migrations;
pub mod profile;
pub mod row;
pub mod table_lock;
mod template;
pub mod topology;
pub mod view_rows;
mod views;

pub use row::EventRow;
pub use topology::ClickHouseArgs;
pub use view_rows::{MetricResultsRow, ResultsOverTimeRow, ResultsRow};

use migrations::{
    BOOTSTRAP, EXPOSURES_20, EXPOSURES_20_COLUMNS, FIRST_CONVERSION_11, MIGRATIONS,
    PRE_SEEN_21_COLUMN, SESSIONS_SELECT, Step, VISITORS_SELECT,
};

/// The minimum-data guard of the results views and of `experiment-results`: fewest exposed
/// visitors in each arm.
pub const MIN_VISITORS: u64 = 50;
/// The guard's fewest conversions, and fewest non-conversions, of an arm and the control
/// together (pooled, so a variant that converts nobody is still seen).
pub const MIN_CONVERSIONS: u64 = 5;

/// The concentration of the sequential sample-ratio check's Dirichlet prior, centred on the
/// weights: it detects a 48/52 split of 10,000 visitors at p = 0.002 (chi-square: 6e-5).
pub const SRM_PRIOR: f64 = 1000.0;

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

    /// SQL users, roles, grants and row policies (`analytics-access`): 20.x had them in
    /// parts; every 21.x has them whole, with `sha256_hash` passwords.
    pub fn has_sql_access(self) -> bool {
        self.major >= 21
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

    /// The type of a time in milliseconds.
    fn millis(self) -> &'static str {
        if self.has_datetime64() {
            "DateTime64(3, 'UTC')"
        } else {
            "Int64"
        }
    }

    /// The parameters of every statement on this server: `{db}` is the database, `{millis}`
    /// the type of a time in milliseconds, `{received_at_ms}` the one of `received_at` and
    /// `{to_ms}` what makes milliseconds since the epoch (an `Int64`) of a time in
    /// milliseconds; with the topology's (`Layout`), the tables' selects and the views'
    /// shared parameters ([`views::shared`]).
    fn params(self, database: &str, layout: &Layout) -> template::Params<'static> {
        let (received_at_ms, to_ms) = if self.has_datetime64() {
            (
                "toDateTime64(received_at, 3, 'UTC')",
                "toUnixTimestamp64Milli",
            )
        } else {
            ("toInt64(received_at) * 1000", "")
        };
        let visitors_select = |added: &str| {
            template::Value::Scoped(
                VISITORS_SELECT.to_owned(),
                vec![("first_conversion", template::Value::Sql(added.to_owned()))],
            )
        };
        let base = template::Params::new()
            .text("db", database)
            .text("on_cluster", layout.on_cluster.clone())
            .text("local", layout.local)
            .text("millis", self.millis())
            .text("received_at_ms", received_at_ms)
            .text("to_ms", to_ms)
            .sql("sessions_select", SESSIONS_SELECT)
            .with(vec![
                ("visitors_select", visitors_select("")),
                ("visitors_select_11", visitors_select(FIRST_CONVERSION_11)),
                ("visitors_select_20", visitors_select(&added_20())),
            ])
            .sql("exposures_20", EXPOSURES_20)
            .sql("exposures_20_columns", EXPOSURES_20_COLUMNS)
            .sql("pre_seen_column", PRE_SEEN_21_COLUMN)
            .sql("event_counts_select", EVENT_COUNTS_SELECT)
            // ClickHouse's own macros, in a replicated table's path: each server fills them.
            .text("shard", "{shard}")
            .text("replica", "{replica}");
        views::shared(base)
    }

    /// `statement` with its placeholders filled for this server, `database` and `layout`.
    fn render(self, statement: &str, database: &str, layout: &Layout) -> String {
        self.params(database, layout).render(statement)
    }
}

/// Migration 13: what `visitor_event_counts` counts of inserted `events` rows.
const EVENT_COUNTS_SELECT: &str = "SELECT public_key, visitor_id, count() AS events \
     FROM {db}.events{local} GROUP BY public_key, visitor_id";

/// Migration 13's select of `visitor_event_counts` rows, from the events of `database` (a
/// shard's own in a cluster) that `filter` keeps: what a copy's feed computes
/// (`analytics-access`), and what rebuilds a visitor's count after an erasure.
pub fn event_counts_select(
    caps: ServerCaps,
    cluster: Option<&str>,
    database: &str,
    filter: &str,
) -> String {
    let select = EVENT_COUNTS_SELECT.replacen(" GROUP BY", &format!(" WHERE {filter} GROUP BY"), 1);
    caps.render(&select, database, &Layout::new(cluster))
}

/// The longest a refresh statement runs: the server stops it then
/// ([`refresh_metric_values`]), which bounds the consumer's wait.
pub const REFRESH_LONGEST: std::time::Duration = std::time::Duration::from_secs(60);

/// How long a consumer's refresh mark counts for `experiment_metric_results`' `as_of`
/// after it was written: a consumer writes one at least every [`MARK_EVERY`] while it
/// runs, so one silent longer has stopped.
pub const MARK_ALIVE: std::time::Duration = std::time::Duration::from_secs(120);

/// The longest a running consumer goes without writing a refresh mark.
pub const MARK_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// The temporary table of a refresh's visitors, in the refresh's own session: (public key,
/// visitor id), both `String`.
pub const REFRESH_VISITORS: &str = "refresh_visitors";

/// The statement that stores again the metric values of the visitors in the session's
/// temporary table `refresh_visitors` (public key, visitor id), computed from their events
/// as `experiment_metric_visitors` computes them, as refresh `refresh_id` (larger than any
/// before it for them), in `visitor_metric_values`. `cluster` names the cluster (its
/// Distributed table then), `None` one server.
pub fn metric_values_refresh(
    caps: ServerCaps,
    cluster: Option<&str>,
    database: &str,
    refresh_id: u64,
) -> String {
    // `GLOBAL`: the list is read once (and sent to each shard of a cluster).
    let filter = format!(
        "(toString(public_key), visitor_id) GLOBAL IN \
         (SELECT public_key, visitor_id FROM {REFRESH_VISITORS})"
    );
    let layout = Layout::new(cluster);
    let globals = caps.params(database, &layout);
    let params = globals
        .scope()
        .sql("rows", views::METRIC_VALUES_SELECT)
        .sql("visitor_filter", filter);
    // A row per visitor, experiment and phase, its metrics in arrays (the select's row
    // of metric '' records a visitor with none). The metrics go through one array of
    // tuples, so that the five arrays keep one order: by metric id, the order in which
    // `experiment_metric_results` lists the definitions (parts/metric_arms.sql). One
    // SELECT: 18.x analyzes the select below again for each level above it.
    params.render(&format!(
        "INSERT INTO {{db}}.visitor_metric_values (public_key, experiment_id, phase, \
         visitor_id, variant_id, first_exposure_ms, metrics.metric_id, metrics.value, \
         metrics.denominator, metrics.pre_value, metrics.pre_seen, events_seen, \
         settings_hash, refresh_id) \
         SELECT public_key, experiment_id, phase, visitor_id, any(variant_id), \
         any(first_exposure_ms), \
         arrayMap(m -> m.1, arraySort(groupArrayIf((metric_id, value, denominator, \
         pre_value, pre_seen), metric_id != '')) AS metrics), arrayMap(m -> m.2, metrics), \
         arrayMap(m -> m.3, metrics), arrayMap(m -> m.4, metrics), \
         arrayMap(m -> m.5, metrics), any(events_seen), \
         any(current_settings_hash), {refresh_id} FROM ({}) AS refreshed \
         GROUP BY public_key, experiment_id, phase, visitor_id",
        views::WITH_SETTINGS_HASH
    ))
}

/// A row of `refresh_visitors`.
#[derive(clickhouse::Row, serde::Serialize)]
struct RefreshVisitor<'a> {
    public_key: &'a str,
    visitor_id: &'a str,
}

/// Stores again the metric values of `visitors` (public key, visitor id) through
/// `client`, for a server of version `caps` ([`metric_values_refresh`]).
///
/// The visitors go into a temporary table of a session of the refresh's own, not into the
/// statement: 18.x analyses a list written in the statement again at each level of SELECT
/// around it, and 20 000 visitors took 20 s where the table takes 0.05 s.
///
/// `refresh_id` gives the refresh's id (its start, in microseconds since the epoch, larger
/// than any before for these visitors) as the statement starts; the server stops the
/// statement after [`REFRESH_LONGEST`]. The rows land whole: one block (the insert's
/// squashing has no size limit), so one part per shard, a visitor's on one shard.
pub async fn refresh_metric_values(
    client: &Client,
    caps: ServerCaps,
    cluster: Option<&str>,
    database: &str,
    visitors: &[(String, String)],
    refresh_id: impl FnOnce() -> u64,
) -> anyhow::Result<()> {
    if visitors.is_empty() {
        return Ok(());
    }
    let session_id = format!("metric-refresh-{}", uuid::Uuid::new_v4().simple());
    let session = client.clone().with_setting("session_id", session_id);
    session
        .query(&format!(
            "CREATE TEMPORARY TABLE {REFRESH_VISITORS} \
             (public_key String, visitor_id String) ENGINE = Memory"
        ))
        .execute()
        .await
        .context("cannot create the table of the refresh's visitors")?;
    let mut insert = session
        .insert::<RefreshVisitor<'_>>(REFRESH_VISITORS)
        .await
        .context("cannot list the refresh's visitors")?;
    for (public_key, visitor_id) in visitors {
        insert
            .write(&RefreshVisitor {
                public_key,
                visitor_id,
            })
            .await
            .context("cannot list the refresh's visitors")?;
    }
    insert
        .end()
        .await
        .context("cannot list the refresh's visitors")?;
    let sql = metric_values_refresh(caps, cluster, database, refresh_id());
    let mut query = session
        .query_raw(&sql)
        .with_setting("max_execution_time", REFRESH_LONGEST.as_secs().to_string())
        // One block, whatever its size (experiment_metric_visitors reads each visitor at
        // one refresh, whole): squashed up to a billion rows, not by bytes (both 0 would
        // squash nothing).
        .with_setting("min_insert_block_size_rows", "1000000000")
        .with_setting("min_insert_block_size_bytes", "0");
    if let Some((name, value)) = caps.low_cardinality_setting() {
        query = query.with_setting(name, value);
    }
    if cluster.is_some() {
        // Stored on every shard when the statement returns, as on one server.
        query = query.with_setting("insert_distributed_sync", "1");
    }
    let stored = query
        .execute()
        .await
        .context("cannot store the metric values");
    // The session's end would drop it too, once the session times out.
    let drop = format!("DROP TEMPORARY TABLE IF EXISTS {REFRESH_VISITORS}");
    let _ = session.query(&drop).execute().await;
    stored
}

/// The results views' `no_test_reason` of an arm that the phase does not define (since
/// migration 16).
pub const UNDEFINED_ARM: &str = "the phase does not define this variant";

/// `experiment_metric_results` per segment: its columns with `segment` after `phase`,
/// for a server of version `caps` and the analysts' `database`. `segment` is an
/// expression of an `events` row (a column, or a function of one), trusted.
pub fn metric_results_by(caps: ServerCaps, database: &str, segment: &str) -> String {
    let globals = caps.params(database, &Layout::new(None));
    globals
        .scope()
        .with(views::metric_results_locals(Some(segment)))
        .render(views::METRIC_RESULTS)
}

/// `experiment_metric_results`' `as_of` alone, one row of one column: the time up to
/// which the consumers had refreshed the metric values of the events they stored. It reads
/// only `metric_refresh_marks`, so it is cheap to ask often (`loadgen pipeline` does).
pub fn metric_results_as_of(database: &str) -> String {
    views::shared(template::Params::new().text("db", database)).render(views::REFRESHED_AS_OF)
}

/// Student's t with `nu` degrees of freedom: P(0 < T < t) for t >= 0, with `terms` terms of
/// the series. ClickHouse has no t distribution; this is
/// `t Γ((ν+1)/2) / (√(νπ) Γ(ν/2)) (1 + t²/ν)^(-(ν+1)/2) ₂F₁(1, (ν+1)/2; 3/2; t²/(ν+t²))`
/// (the hypergeometric form of the t CDF after Pfaff's transformation), whose series has
/// positive terms only. The terms are cumulative sums of logarithms (an `lgamma` of a large
/// ν loses digits), the gamma ratio is its asymptotic series from ν = 1000 on, and log1p
/// (not in 18.x) its series for small arguments. Against scipy: within 1e-9 relative or
/// 1e-12 absolute for ν >= 49 (the guard's fewest visitors) and |t| <= 40 with 4000 terms.
fn t_half(t: &str, nu: &str, terms: u32) -> String {
    let x = format!("(pow({t}, 2) / ({nu}))");
    let log1p = format!(
        "if({x} < 1e-4,\n        {x}\n        - pow({x}, 2) / 2\n        + pow({x}, 3) / 3\n        \
         - pow({x}, 4) / 4,\n        log(1 + {x}))"
    );
    let half_nu = format!("(({nu}) / 2)");
    let gamma_ratio = format!(
        "if({half_nu} < 500, exp(lgamma({half_nu} + 0.5) - lgamma({half_nu})),\n        \
         sqrt({half_nu}) * (1 - 1 / (8 * {half_nu}) + 1 / (128 * pow({half_nu}, 2))\n        \
         + 5 / (1024 * pow({half_nu}, 3)) - 21 / (32768 * pow({half_nu}, 4))))"
    );
    let log_w = format!("log(pow({t}, 2) / (({nu}) + pow({t}, 2)))");
    let b = format!("((({nu}) + 1) / 2)");
    format!(
        "(({t})\n    * {gamma_ratio}\n    / sqrt(({nu}) * pi())\n    * exp(-{b} * {log1p})\n    \
         * arraySum(arrayMap(l -> exp(l), arrayCumSum(arrayMap(\n        \
         (k, b, lw) -> if(k = 0, 0, log(b + k - 1) - log(0.5 + k) + lw),\n        \
         range({terms}),\n        arrayResize([{b}], {terms}, {b}),\n        \
         arrayResize([{log_w}], {terms},\n            {log_w}))))))"
    )
}

/// The two-sided p-value of Student's t statistic `t` with `nu` degrees of freedom (0
/// beyond |t| = 40, where it is below 1e-40 for ν >= 49).
fn t_p_value(t: &str, nu: &str) -> String {
    let half = t_half(&format!("abs({t})"), nu, 4000);
    format!("if(abs({t}) > 40, 0, greatest(0, 1 - 2 * {half}))")
}

/// The 97.5% quantile of Student's t with `nu` degrees of freedom, as the column `name`:
/// the Cornish-Fisher expansion, then two Newton steps on [`t_half`]. Within 1e-12 of scipy
/// for ν >= 49. Each step is a lambda over the one before, in one expression: 18.x expands
/// an alias into every place that names it (the steps as aliases outgrow its limit), and
/// analyzes a query's subqueries again at each level above them (the steps as SELECTs over
/// one another made the metric view's analysis 4 times as long: 2.3 s per query).
fn t_quantile_975(nu: &str, name: &str) -> String {
    let z = "1.959963984540054";
    let start = format!(
        "{z}\n    + (pow({z}, 3) + {z}) / (4 * ({nu}))\n    \
         + (5 * pow({z}, 5) + 16 * pow({z}, 3) + 3 * {z}) / (96 * pow({nu}, 2))"
    );
    let pdf = "(exp(lgamma((nu + 1) / 2) - lgamma(nu / 2)) / sqrt(nu * pi())\n    \
               * pow(1 + pow(t, 2) / nu, -(nu + 1) / 2))";
    let step = |before: String| {
        format!(
            "arrayMap((t, nu) -> t - ({}\n    - 0.475) / {pdf},\n    {before},\n    [{nu}])",
            t_half("t", "nu", 100)
        )
    };
    format!(
        "{}[1]\n    AS {name}",
        step(step(format!("[{start}\n    ]")))
    )
}

/// What the topology changes in the statements.
struct Layout {
    cluster: Option<String>,
    on_cluster: String,
    local: &'static str,
    /// Every table whole on every server of the cluster (a copy: [`migrate_copy`]), the
    /// sharded ones too: no `_local` part, no Distributed table.
    whole: bool,
}

impl Layout {
    fn new(cluster: Option<&str>) -> Self {
        Self {
            on_cluster: cluster.map_or_else(String::new, |c| format!(" ON CLUSTER {c}")),
            cluster: cluster.map(str::to_owned),
            local: if cluster.is_some() { LOCAL_SUFFIX } else { "" },
            whole: false,
        }
    }

    /// The layout of a copy: as [`Layout::new`], every table kept whole.
    fn whole(cluster: Option<&str>) -> Self {
        Self {
            local: "",
            whole: true,
            ..Self::new(cluster)
        }
    }

    /// Where a table's `CREATE` runs: in a cluster, on each server in turn, never
    /// `ON CLUSTER`. There 18.16 creates a table's replicas at the same moment; a replica
    /// that loses the race ("Retrying createReplica(), because some other replicas were
    /// created at the same time") can leave its server's DDL worker stuck, and every later
    /// `ON CLUSTER` statement then waits for that server until its timeout.
    fn create_target(&self) -> Target {
        match self.cluster {
            None => Target::Once,
            Some(_) => Target::EachServer,
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
                ..
            } if layout.whole => Step::Whole {
                name,
                engine,
                create,
            }
            .templates(layout),
            Step::Sharded {
                name,
                engine,
                create,
                key,
            } => {
                let local = create
                    .replace("{table}", &format!("{{db}}.{name}{{local}}"))
                    .replace("{engine}", &layout.engine(engine, name, "{shard}"));
                let mut statements = vec![(layout.create_target(), local)];
                if let Some(cluster) = &layout.cluster {
                    statements.push((
                        Target::Once,
                        format!(
                            "CREATE TABLE IF NOT EXISTS {{db}}.{name}{{on_cluster}} \
                             AS {{db}}.{name}{{local}}\n\
                             ENGINE = Distributed({cluster}, {{db}}, {name}{{local}}, {key})"
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
                layout.create_target(),
                create
                    .replace("{table}", &format!("{{db}}.{name}"))
                    .replace("{engine}", &layout.engine(engine, name, "all")),
            )],
            Step::Reshard { .. } if layout.whole => Vec::new(),
            Step::Reshard { name, key } => match &layout.cluster {
                Some(cluster) => vec![
                    (
                        Target::EachServer,
                        format!("DROP TABLE IF EXISTS {{db}}.{name}"),
                    ),
                    (
                        Target::EachServer,
                        format!(
                            "CREATE TABLE IF NOT EXISTS {{db}}.{name} AS {{db}}.{name}{{local}} \
                             ENGINE = Distributed({cluster}, {{db}}, {name}{{local}}, {key})"
                        ),
                    ),
                ],
                None => Vec::new(),
            },
            Step::Once(sql) => vec![(Target::Once, (*sql).to_owned())],
            Step::EachServer(sql) if layout.cluster.is_some() && !layout.whole => {
                vec![(Target::EachServer, (*sql).to_owned())]
            }
            Step::EachServer(_) => Vec::new(),
            Step::EachShard(sql) if layout.whole => vec![(Target::Once, (*sql).to_owned())],
            Step::EachShard(sql) => vec![(Target::EachShard, (*sql).to_owned())],
        }
    }
}

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
    statements_of(&Layout::new(cluster), caps, database)
}

fn statements_of(layout: &Layout, caps: ServerCaps, database: &str) -> Vec<Statement> {
    let views = views::VIEWS
        .iter()
        .map(|view| (Target::Once, view.create(caps, database, layout)));
    BOOTSTRAP
        .iter()
        .chain(MIGRATIONS.iter().flat_map(|m| m.steps))
        .flat_map(|step| step.render(layout, caps, database))
        .chain(views)
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

/// The statement that builds again, from the events a server holds, the
/// `experiment_visitors` rows of the visitors `filter` selects (a condition on the events'
/// columns): the latest select ([`visitors_select`]), restricted. Erasing a session deletes its visitors'
/// aggregate rows and re-inserts them with it, without the session's events. `cluster`
/// names the cluster (the shard's own tables then), `None` one server.
pub fn visitors_rebuild(
    caps: ServerCaps,
    cluster: Option<&str>,
    database: &str,
    filter: &str,
) -> String {
    let layout = Layout::new(cluster);
    caps.render(
        &format!(
            "INSERT INTO {{db}}.experiment_visitors{{local}} {}",
            visitors_where(filter)
        ),
        database,
        &layout,
    )
}

/// The latest select of `experiment_visitors` rows, from the events of `database` (a
/// shard's own in a cluster) that `filter` keeps: what a copy's feed computes
/// (`analytics-access`).
pub fn visitors_select(
    caps: ServerCaps,
    cluster: Option<&str>,
    database: &str,
    filter: &str,
) -> String {
    caps.render(&visitors_where(filter), database, &Layout::new(cluster))
}

/// What migrations 11 and 20 add to migration 7's select of `experiment_visitors` rows, in
/// the table's order of columns.
fn added_20() -> String {
    format!("{FIRST_CONVERSION_11}{EXPOSURES_20}")
}

/// The latest select of `experiment_visitors` rows (migration 20's), restricted to the
/// events `filter` keeps.
fn visitors_where(filter: &str) -> String {
    VISITORS_SELECT
        .replace("{first_conversion}", &added_20())
        .replacen("\nGROUP BY", &format!("\nWHERE {filter}\nGROUP BY"), 1)
}

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
            for (target, sql) in step.render(layout, caps, database) {
                for target in servers_of(topology, primary, target).await? {
                    execute(&target.client.clone().with_database("default"), caps, &sql)
                        .await
                        .context("cannot create the database and schema_migrations")?;
                }
            }
        }
    }
    let applied = || async {
        server
            .query(&format!(
                "SELECT DISTINCT version FROM {database}.schema_migrations"
            ))
            .fetch_all::<u32>()
            .await
            .context("cannot read schema_migrations")
    };
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
    let has_record: u64 = server
        .query(
            "SELECT count() FROM system.tables WHERE database = ? AND name = 'schema_migrations'",
        )
        .bind(database)
        .fetch_one()
        .await
        .context("cannot look for schema_migrations")?;
    if has_record == 0 {
        return Ok(false);
    }
    let applied: Vec<u32> = server
        .query(&format!(
            "SELECT DISTINCT version FROM {database}.schema_migrations"
        ))
        .fetch_all()
        .await
        .context("cannot read schema_migrations")?;
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
        let mut backoff = crate::backoff::Backoff::new(
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

/// Runs one statement with the setting a server of version `caps` needs.
async fn execute(client: &Client, caps: ServerCaps, sql: &str) -> clickhouse::error::Result<()> {
    let mut query = client.query(sql);
    if let Some((name, value)) = caps.low_cardinality_setting() {
        query = query.with_setting(name, value);
    }
    query.execute().await
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
    fn a_refresh_reads_its_visitors_from_its_table_once() {
        let caps = ServerCaps::parse("18.16.1").expect("parses");
        let sql = metric_values_refresh(caps, None, "analytics", 7);
        let filter = "(toString(public_key), visitor_id) GLOBAL IN \
                      (SELECT public_key, visitor_id FROM refresh_visitors)";
        assert!(sql.contains(filter), "{sql}");
        assert!(!sql.contains("{visitor_filter}"), "{sql}");
        assert!(!sql.contains("{local}"), "{sql}");
    }

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
            sql[2].contains("analytics.events_local (\n    event_id"),
            "{}",
            sql[2]
        );
        // A replicated table is made on each server in turn: ON CLUSTER makes its
        // replicas race, which can leave a server's DDL worker stuck on 18.16.
        let replicated: Vec<&Statement> = cluster
            .iter()
            .filter(|s| s.sql.contains("ENGINE = Replicated"))
            .collect();
        assert!(replicated.len() >= 8, "{}", replicated.len());
        assert!(
            replicated
                .iter()
                .all(|s| s.runs == "each_server" && !s.sql.contains("ON CLUSTER")),
            "{replicated:#?}"
        );
        // So is every ALTER (of a replicated table through one replica per shard or of
        // the whole one, of a Distributed one on each server): ON CLUSTER has stopped a
        // server's DDL worker for good.
        let alters: Vec<&Statement> = cluster
            .iter()
            .filter(|s| s.sql.starts_with("ALTER"))
            .collect();
        assert!(alters.len() >= 10, "{}", alters.len());
        assert!(
            alters.iter().all(|s| !s.sql.contains("ON CLUSTER")),
            "{alters:#?}"
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
        // The replicated tables are made and the Distributed table altered on each server;
        // the rest runs once, cluster-wide where it creates something, except the backfill,
        // once per shard.
        let each_server: Vec<&str> = cluster
            .iter()
            .filter(|s| s.runs == "each_server" && !s.sql.contains("ENGINE = Replicated"))
            .map(|s| s.sql.as_str())
            .collect();
        assert_eq!(each_server.len(), 7);
        assert!(
            each_server[..2]
                .iter()
                .all(|s| s.starts_with("ALTER TABLE analytics.events ADD"))
        );
        // Migration 7 shards events by visitor: its Distributed table made again.
        assert_eq!(each_server[2], "DROP TABLE IF EXISTS analytics.events");
        assert_eq!(
            each_server[3],
            "CREATE TABLE IF NOT EXISTS analytics.events AS analytics.events_local \
             ENGINE = Distributed(analytics, analytics, events_local, sipHash64(visitor_id))"
        );
        // Migration 11 adds each visitor's first conversion to the Distributed table too.
        assert!(
            each_server[4].starts_with(
                "ALTER TABLE analytics.experiment_visitors ADD COLUMN first_conversion"
            ),
            "{}",
            each_server[4]
        );
        // So does migration 20 its arms' hours, conversions and exposures' exclusion.
        assert!(
            each_server[5]
                .starts_with("ALTER TABLE analytics.experiment_visitors ADD COLUMN least_arm"),
            "{}",
            each_server[5]
        );
        // And migration 21 the stored metric values' history.
        assert!(
            each_server[6].starts_with(
                "ALTER TABLE analytics.visitor_metric_values ADD COLUMN metrics.pre_seen"
            ),
            "{}",
            each_server[6]
        );
        assert!(sql.iter().any(|s| s.ends_with(
            "ENGINE = Distributed(analytics, analytics, experiment_visitors_local, sipHash64(visitor_id))"
        )));
        let each_shard = || cluster.iter().filter(|s| s.runs == "each_shard");
        // Migrations 11 and 20 alter each shard's replicated table on one of its replicas.
        assert_eq!(
            each_shard()
                .filter(|s| s
                    .sql
                    .starts_with("ALTER TABLE analytics.experiment_visitors_local"))
                .count(),
            2
        );
        let backfill: Vec<&Statement> = each_shard()
            .filter(|s| s.sql.starts_with("INSERT"))
            .collect();
        assert_eq!(backfill.len(), 6);
        for (statement, (table, source)) in backfill.iter().zip([
            ("experiment_sessions", "events"),
            ("experiment_visitors", "events"),
            ("experiment_visitors", "events"),
            ("visitor_event_counts", "events"),
            ("visitor_metric_values", "experiment_metric_values"),
            ("experiment_visitors", "events"),
        ]) {
            assert!(
                statement
                    .sql
                    .starts_with(&format!("INSERT INTO analytics.{table}_local")),
                "{}",
                statement.sql
            );
            assert!(
                statement
                    .sql
                    .contains(&format!("FROM analytics.{source}_local")),
                "{}",
                statement.sql
            );
        }
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
    fn a_copy_keeps_every_table_whole_on_every_server() {
        let old = ServerCaps::parse("18.16.1").expect("parses");
        let copy = statements_of(&Layout::whole(Some("analytics")), old, "analyst_a");
        let sql: Vec<&str> = copy.iter().map(|s| s.sql.as_str()).collect();
        assert!(
            sql.iter()
                .all(|s| !s.contains("Distributed") && !s.contains("_local"))
        );
        assert!(
            copy.iter()
                .all(|s| if s.sql.contains("ENGINE = Replicated") {
                    s.runs == "each_server" && !s.sql.contains("ON CLUSTER")
                } else {
                    s.runs == "once"
                }),
            "the tables on each server in turn, no per-shard step"
        );
        assert!(sql.iter().any(|s| {
            s.contains(
            "analyst_a.events (\n    event_id"
        ) && s.contains(
            "ReplicatedReplacingMergeTree('/clickhouse/tables/all/analyst_a/events', '{replica}')"
        )
        }));
        assert!(sql.iter().any(|s| s.starts_with(
            "CREATE MATERIALIZED VIEW IF NOT EXISTS analyst_a.experiment_visitors_mv ON CLUSTER \
             analytics TO analyst_a.experiment_visitors AS"
        )));
        let single = statements_of(&Layout::whole(None), old, "analyst_a");
        let plain = statements(old, None, "analyst_a");
        assert_eq!(
            single.iter().map(|s| &s.sql).collect::<Vec<_>>(),
            plain.iter().map(|s| &s.sql).collect::<Vec<_>>(),
            "on one server a copy is the schema itself"
        );
    }

    #[test]
    fn the_visitors_rebuild_is_the_migrations_select_restricted() {
        let old = ServerCaps::parse("18.16.1").expect("parses");
        let sql = visitors_rebuild(old, Some("analytics"), "db", "has(?, visitor_id)");
        assert!(
            sql.starts_with("INSERT INTO db.experiment_visitors_local SELECT"),
            "{sql}"
        );
        assert!(
            sql.contains("FROM db.events_local\nWHERE has(?, visitor_id)\nGROUP BY"),
            "{sql}"
        );
        let single = visitors_rebuild(old, None, "db", "1");
        assert!(
            single.contains("FROM db.events\nWHERE 1\nGROUP BY"),
            "{single}"
        );
    }

    #[test]
    fn migration_versions_increase() {
        let versions: Vec<u32> = MIGRATIONS.iter().map(|m| m.version).collect();
        assert!(versions.windows(2).all(|w| w[0] < w[1]), "{versions:?}");
        assert_eq!(versions.first(), Some(&1));
    }
}
