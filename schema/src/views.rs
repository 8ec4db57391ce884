//! The plain views of the analysts' schema, each defined once, as it is now: a file of
//! `views/` holds its query, with named placeholders ([`crate::template`]) for what depends
//! on the server, the topology and the database, and for the fragments of `views/parts/`
//! that several views share. Nothing here is versioned: after the migrations, every view
//! whose rendered text differs from the one it was last made from (`schema_views` keeps a
//! hash of each) is dropped and made again, and a view no longer listed here is dropped.
//! `schema/rendered/` shows every view as each kind of server gets it.
//!
//! The order is the order of creation: a view comes after those it reads (18.x analyses a
//! view's query when it is created).

use anyhow::Context as _;
use clickhouse::Client;
use std::hash::Hasher as _;

use crate::bounds::{
    MARK_ALIVE, MIN_CONVERSIONS, MIN_VISITORS, SRM_PRIOR, UNDEFINED_ARM, t_p_value, t_quantile_975,
};
use crate::caps::{ServerCaps, execute};
use crate::layout::Layout;
use crate::template::{Params, Value};

/// A plain view: its name, its query and the parameters of its own.
pub(crate) struct View {
    pub name: &'static str,
    query: &'static str,
    locals: fn() -> Vec<(&'static str, Value)>,
}

fn none() -> Vec<(&'static str, Value)> {
    Vec::new()
}

/// Every view, in the order of creation.
pub(crate) const VIEWS: &[View] = &[
    // Events per day, each once (FINAL), test traffic left out: exact and cheap thanks to
    // the sorting key (a materialized view would count redeliveries).
    View {
        name: "experiment_daily",
        query: sql!("views/experiment_daily.sql"),
        locals: none,
    },
    // Each experiment as the snapshot version last written for it defines it.
    View {
        name: "experiment_variants_current",
        query: sql!("views/experiment_variants_current.sql"),
        locals: none,
    },
    // The weights of each phase: its last written version.
    View {
        name: "experiment_phase_variants",
        query: sql!("views/experiment_phase_variants.sql"),
        locals: none,
    },
    // Per phase: its window, its N* and when it ended.
    View {
        name: "experiment_phase_settings",
        query: sql!("views/experiment_phase_settings.sql"),
        locals: none,
    },
    // Each visitor's first exposure per phase, their conversion counted within their
    // window, and whether the window is past (mature). A refresh restricts the same query
    // to its visitors (`visitor_filter`).
    View {
        name: "experiment_visitor_exposures",
        query: EXPOSURES,
        locals: || vec![("visitor_filter", Value::Text("1".into()))],
    },
    // Exposed visitors per phase and variant, each once, with the phase's weights.
    View {
        name: "experiment_variant_counts",
        query: sql!("views/experiment_variant_counts.sql"),
        locals: none,
    },
    // As of each hour: a visitor counts from their first exposure's hour, their conversion
    // from its hour, their maturity from the end of their window.
    View {
        name: "experiment_variant_counts_over_time",
        query: sql!("views/experiment_variant_counts_over_time.sql"),
        locals: none,
    },
    // Each arm against the control, on all visitors and again on the mature ones, with
    // the always-valid verdicts and the sample-ratio check (chi-square for one look).
    View {
        name: "experiment_results",
        query: sql!("views/experiment_results.sql"),
        locals: || {
            results_locals(
                "experiment_variant_counts",
                "",
                "",
                Value::Sql("{srm_chi_square}".into()),
                "",
            )
        },
    },
    // The same statistics on the counts as of each hour, the sample-ratio check
    // sequential hour by hour.
    View {
        name: "experiment_results_over_time",
        query: sql!("views/experiment_results.sql"),
        locals: || {
            results_locals(
                "experiment_variant_counts_over_time",
                ", hour",
                "toDate(hour) AS day, hour, ",
                Value::Text("if(srm_k >= 2 AND srm_n > 0, srm_sequential_p, NULL)".into()),
                SRM_SEQUENTIAL,
            )
        },
    },
    // Each experiment's metrics with their roles, from its current definition.
    View {
        name: "experiment_metric_definitions",
        query: sql!("views/experiment_metric_definitions.sql"),
        locals: none,
    },
    // Per visitor key: their latest refresh, and whether its values are fresh.
    View {
        name: "experiment_metric_freshness",
        query: sql!("views/experiment_metric_freshness.sql"),
        locals: || {
            vec![
                ("current_settings", Value::Sql(WITH_SETTINGS_HASH.into())),
                ("rows", Value::Sql(CURRENT_SETTINGS_ROWS.into())),
            ]
        },
    },
    View {
        name: "experiment_metric_stored",
        query: sql!("views/experiment_metric_stored.sql"),
        locals: none,
    },
    View {
        name: "experiment_metric_stale",
        query: sql!("views/experiment_metric_stale.sql"),
        locals: none,
    },
    // One row per exposed visitor and metric: the values of their latest refresh.
    View {
        name: "experiment_metric_visitors",
        query: sql!("views/experiment_metric_visitors.sql"),
        locals: none,
    },
    // The per-metric statistics over every visitor (`experiment-results --by`: per
    // segment, with [`metric_results_by`](crate::metric_results_by)).
    View {
        name: "experiment_metric_results",
        query: METRIC_RESULTS,
        locals: || metric_results_locals(None),
    },
];

/// The query of `experiment_visitor_exposures`, which a refresh restricts to its visitors.
const EXPOSURES: &str = sql!("views/experiment_visitor_exposures.sql");

/// The query of `experiment_metric_results`.
pub(crate) const METRIC_RESULTS: &str = sql!("views/experiment_metric_results.sql");

/// A visitor's metric values from their events, for the visitors `{visitor_filter}` keeps
/// (a condition on `events`' columns, and on `experiment_visitors`' of the same names).
pub(crate) const METRIC_VALUES_SELECT: &str = sql!("views/parts/metric_values_select.sql");
/// `{rows}` (with `experiment_id` and `phase`) and the hash of the metric definitions and
/// phase settings their values depend on, as `current_settings_hash`.
pub(crate) const WITH_SETTINGS_HASH: &str = sql!("views/parts/with_settings_hash.sql");
const RESULTS_DERIVED: &str = sql!("views/parts/results_derived.sql");
const RESULTS_HEAD: &str = sql!("views/parts/results_head.sql");
const RESULTS_TAIL: &str = sql!("views/parts/results_tail.sql");
/// The lift and its intervals, fixed and always-valid.
const RESULTS_LIFT: &str = sql!("views/parts/results_lift.sql");
const SRM_SEQUENTIAL: &str = sql!("views/parts/srm_sequential.sql");
const SRM_CHI_SQUARE: &str = sql!("views/parts/srm_chi_square.sql");
const METRIC_ARRAYS: &str = sql!("views/parts/metric_arrays.sql");
const METRIC_VALUE: &str = sql!("views/parts/metric_value.sql");
const ARM_STATISTICS: &str = sql!("views/parts/arm_statistics.sql");
const STORED_VISITORS: &str = sql!("views/parts/stored_visitors.sql");
const METRIC_ARMS: &str = sql!("views/parts/metric_arms.sql");

/// How many streams read `visitor_metric_values FINAL` ([`STORED_VISITORS`]). On 2 cores,
/// 2 M visitors of five metrics, the view as it was took 10.4-11.6 s in one stream and
/// 7.7-8.0 s in four; two were a tenth faster than four there, four are kept for larger
/// servers (docs/benchmarks.md).
const FINAL_STREAMS: u32 = 4;

/// The streams of [`STORED_VISITORS`], each a share of the visitors.
fn final_streams_union() -> String {
    (0..FINAL_STREAMS)
        .map(|k| {
            format!(
                "SELECT
    CAST(public_key AS String) AS public_key, experiment_id, phase, visitor_id, variant_id,
    first_exposure_ms, metrics.metric_id AS stored_ids, metrics.value AS stored_values,
    metrics.denominator AS stored_denominators, metrics.pre_value AS stored_pre_values,
    metrics.pre_seen AS stored_pre_seen
FROM {{db}}.visitor_metric_values FINAL
PREWHERE cityHash64(visitor_id) % {FINAL_STREAMS} = {k}"
            )
        })
        .collect::<Vec<_>>()
        .join("\nUNION ALL\n")
}

/// The current hash of what stored metric values depend on besides the events, for each
/// experiment and phase that has any (read from the exposures, a fifth of the stored rows).
/// A visitor's rows are of their exposures (experiment_visitors), or of none: a pair
/// missing here reads as changed, which costs time, not correctness.
const CURRENT_SETTINGS_ROWS: &str = "
    SELECT DISTINCT CAST(experiment_id AS String) AS experiment_id, phase
    FROM {db}.experiment_visitors
    UNION ALL SELECT '' AS experiment_id, toUInt32(0) AS phase";

/// `experiment_results`' and `experiment_results_over_time`'s `as_of`: the time up to
/// which the events they count were stored, in UTC. They read aggregates that the
/// materialized views keep as rows are inserted, so it is the query's own time.
const AS_OF: &str = "toDateTime(now(), 'UTC')";

/// `experiment_metric_results`' `as_of` (`refreshed_as_of`, one row): the time up to which
/// the consumers had refreshed the values of the visitors of every event they stored, the
/// earliest of the running consumers' marks (`metric_refresh_marks`); with none running,
/// the latest mark; with none ever written, 1970.
pub(crate) const REFRESHED_AS_OF: &str = "
    SELECT toDateTime(if(countIf(alive) > 0, minIf(mark, alive), max(mark)), 'UTC')
        AS refreshed_as_of
    FROM (
        SELECT consumer, max(as_of) AS mark,
            max(written_at) >= now() - {mark_alive} AS alive
        FROM {db}.metric_refresh_marks
        GROUP BY consumer
    ) AS consumers";

/// A visitor's key, of the columns `public_key` and `visitor_id` of any table. Two
/// visitors of one key are both read as stale (experiment_metric_freshness), and only the
/// one refreshed last is read (experiment_metric_visitors). A chosen collision drops a
/// visitor of a site whose public key (public, in its pages) the sender uses, which
/// sending events with that key can do anyway; so it needs no resistance to chosen
/// inputs: CityHash, a third of SipHash's time on 18.16.
const VISITOR_KEY: &str = "cityHash64(public_key, visitor_id)";

/// The parameters every view may use, besides the server's, topology's and database's.
pub(crate) fn shared(p: Params<'_>) -> Params<'_> {
    let value = |x: &str, agg: &str| {
        Value::Scoped(
            METRIC_VALUE.into(),
            vec![
                ("x", Value::Text(x.into())),
                ("agg", Value::Text(agg.into())),
            ],
        )
    };
    p.text("min_visitors", MIN_VISITORS.to_string())
        .text("min_conversions", MIN_CONVERSIONS.to_string())
        .text("srm_prior", format!("{SRM_PRIOR:?}"))
        .text("undefined_arm", UNDEFINED_ARM)
        .text("visitor_key", VISITOR_KEY)
        .text("as_of", AS_OF)
        .text("mark_alive", MARK_ALIVE.as_secs().to_string())
        .sql("refreshed_as_of", REFRESHED_AS_OF)
        .sql("srm_chi_square", SRM_CHI_SQUARE)
        .sql("metric_arrays", METRIC_ARRAYS)
        .text("final_streams", FINAL_STREAMS.to_string())
        .sql("final_streams_union", final_streams_union())
        .sql("stored_visitors", STORED_VISITORS)
        .with(vec![
            ("value_of_n", value("n", "n_agg")),
            ("value_of_d", value("d", "d_agg")),
            ("value_of_p", value("p", "n_agg")),
        ])
        .sql("exposures_of_visitors", EXPOSURES)
}

/// The statistics' parameters of `experiment_results` and `experiment_results_over_time`:
/// `counts` the view of variant counts read, `by` the grouping beyond (public key,
/// experiment, phase) and `time_columns` the columns that come of it; the sample-ratio
/// check's p-value and the join it needs. The derived columns, head and tail are rendered
/// once per prefix: none for all visitors, `mature_` for the mature ones.
fn results_locals(
    counts: &str,
    by: &str,
    time_columns: &str,
    srm_p_value: Value,
    srm_join: &str,
) -> Vec<(&'static str, Value)> {
    let per_prefix = |part: &str, prefix: &str| {
        Value::Scoped(part.into(), vec![("p", Value::Text(prefix.into()))])
    };
    vec![
        ("counts", Value::Text(counts.into())),
        ("by", Value::Text(by.into())),
        ("time_columns", Value::Text(time_columns.into())),
        ("srm_p_value", srm_p_value),
        ("srm_join", Value::Sql(srm_join.into())),
        ("derived", per_prefix(RESULTS_DERIVED, "")),
        ("mature_derived", per_prefix(RESULTS_DERIVED, "mature_")),
        ("head", per_prefix(RESULTS_HEAD, "")),
        ("mature_head", per_prefix(RESULTS_HEAD, "mature_")),
        ("tail", per_prefix(RESULTS_TAIL, "")),
        ("mature_tail", per_prefix(RESULTS_TAIL, "mature_")),
        ("lift", per_prefix(RESULTS_LIFT, "")),
    ]
}

/// The parameters of [`METRIC_RESULTS`]: over every visitor (the view), or with `segment`
/// (an expression of an `events` row) per segment, each visitor's taken from the
/// impression of their first exposure. The cap stays the metric's over every segment.
pub(crate) fn metric_results_locals(segment: Option<&str>) -> Vec<(&'static str, Value)> {
    let text = |s: &str| Value::Text(s.to_owned());
    let arm = |c: &str, arm: &str| {
        Value::Scoped(
            ARM_STATISTICS.into(),
            vec![("c", text(c)), ("arm", text(arm))],
        )
    };
    let mut locals = vec![
        ("arm_statistics_b", arm("", "b")),
        ("arm_statistics_a", arm("_a", "a")),
        ("t_p_value", Value::Text(t_p_value("t_stat", "dof"))),
        (
            "cuped_t_p_value",
            Value::Text(t_p_value("cuped_t_stat", "cuped_dof")),
        ),
    ];
    locals.push(("t_quantile", text(&t_quantile_975("dof", "t_quantile"))));
    locals.push((
        "cuped_t_quantile",
        text(&t_quantile_975("cuped_dof", "cuped_t_quantile")),
    ));
    // Each stored visitor row with its segment (`arm_segment`).
    let visitor_rows = match segment {
        None => {
            locals.push(("segment", text("")));
            "(SELECT *, '' AS arm_segment FROM ({stored_visitors}) AS stored)".to_owned()
        }
        Some(segment) => {
            locals.push(("segment", text(", segment")));
            format!(
                "(SELECT * FROM ({{stored_visitors}}) AS stored \
                 ALL INNER JOIN (SELECT toString(public_key) AS public_key, \
                 toString(experiment_id) AS experiment_id, phase, visitor_id, \
                 argMin(toString({segment}), event_time) AS arm_segment FROM {{db}}.events \
                 WHERE event_name = 'impression' AND variant_id != '' \
                 GROUP BY public_key, experiment_id, phase, visitor_id) AS segments \
                 USING (public_key, experiment_id, phase, visitor_id))"
            )
        }
    };
    locals.extend([
        ("metric_arms", Value::Sql(METRIC_ARMS.into())),
        ("visitor_rows", Value::Sql(visitor_rows)),
    ]);
    locals
}

impl View {
    /// The statement that makes this view.
    pub(crate) fn create(&self, caps: ServerCaps, database: &str, layout: &Layout) -> String {
        let globals = caps.params(database, layout);
        let scope = globals.scope().with((self.locals)());
        scope.render(&format!(
            "CREATE VIEW IF NOT EXISTS {{db}}.{}{{on_cluster}} AS\n{}",
            self.name, self.query
        ))
    }
}

/// The hash `schema_views` records of a view's statement.
fn hash(statement: &str) -> String {
    let mut hasher = siphasher::sip::SipHasher13::new();
    hasher.write(statement.as_bytes());
    format!("{:016x}", hasher.finish())
}

/// A view to make (again), and whether it exists now (then it is dropped first).
pub(crate) struct Pending {
    name: &'static str,
    create: String,
    hash: String,
    exists: bool,
}

/// The views whose current statement differs from the one recorded, or that are missing,
/// in the order of creation; and the views recorded but no longer defined.
pub(crate) async fn pending(
    server: &Client,
    caps: ServerCaps,
    database: &str,
    layout: &Layout,
) -> anyhow::Result<(Vec<Pending>, Vec<String>)> {
    let recorded: Vec<(String, String)> = server
        .query(&format!(
            "SELECT name, argMax(hash, made_at) FROM {database}.schema_views GROUP BY name"
        ))
        .fetch_all()
        .await
        .context("cannot read schema_views")?;
    let existing: Vec<String> = server
        .query("SELECT name FROM system.tables WHERE database = ?")
        .bind(database)
        .fetch_all()
        .await
        .context("cannot list the tables")?;
    let mut pending = Vec::new();
    for view in VIEWS {
        let create = view.create(caps, database, layout);
        let hash = hash(&create);
        let exists = existing.iter().any(|n| n == view.name);
        let current = recorded.iter().any(|(n, h)| n == view.name && *h == hash);
        if !(exists && current) {
            pending.push(Pending {
                name: view.name,
                create,
                hash,
                exists,
            });
        }
    }
    let retired = recorded
        .into_iter()
        .map(|(name, _)| name)
        .filter(|name| VIEWS.iter().all(|v| v.name != name) && existing.contains(name))
        .collect();
    Ok((pending, retired))
}

/// Makes the pending views (again) and drops the retired ones, on `server` (cluster-wide
/// statements in a cluster), recording each view's hash once it is made.
pub(crate) async fn apply(
    server: &Client,
    caps: ServerCaps,
    database: &str,
    layout: &Layout,
) -> anyhow::Result<()> {
    let (pending, retired) = pending(server, caps, database, layout).await?;
    let drop = |name: &str| {
        format!(
            "DROP TABLE IF EXISTS {database}.{name}{}",
            layout.on_cluster
        )
    };
    for name in retired {
        execute(server, caps, &drop(&name))
            .await
            .with_context(|| format!("cannot drop the retired view {name}"))?;
        tracing::info!(view = %name, %database, "Retired view dropped.");
    }
    for view in pending {
        if view.exists {
            execute(server, caps, &drop(view.name))
                .await
                .with_context(|| format!("cannot drop view {} to make it again", view.name))?;
        }
        execute(server, caps, &view.create)
            .await
            .with_context(|| format!("cannot make view {}", view.name))?;
        server
            // After every record of the view, whatever the clocks of the consumers that
            // wrote them (the lock keeps other writers out meanwhile).
            .query(&format!(
                "INSERT INTO {database}.schema_views (name, hash, made_at) \
                 SELECT ?, ?, greatest(?, max(made_at) + 1) FROM {database}.schema_views"
            ))
            .bind(view.name)
            .bind(&view.hash)
            .bind(made_at())
            .execute()
            .await
            .context("cannot record the view")?;
        tracing::info!(view = view.name, %database, "View made.");
    }
    Ok(())
}

/// Microseconds since the epoch: the record's order.
fn made_at() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}
