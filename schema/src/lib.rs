//! The analysts' schema, created and migrated at start: versioned migrations recorded in
//! `schema_migrations`, each applied once; everything that depends on the server's
//! version is decided in [`ServerCaps`] and nowhere else, everything that depends on the
//! topology (one server or a cluster) in `Step::render`.
//!
//! The crate is the ClickHouse side that the consumer, the operators' commands, the load
//! generator and the tests share, so that the commands do not depend on the consumer. By
//! job: the migrations (`migrations.rs`, their SQL in `migrations/`) and their runner
//! (`migrate.rs`); the views (`views.rs`, `views/`), the statistics' SQL (`statistics.rs`)
//! and the numbers they share (`bounds.rs`); the server's version (`caps.rs`) and the
//! parameters it gives each statement (`params.rs`, `template.rs`); the topology's mark
//! (`layout.rs`) and every statement of a migration (`render.rs`); the metric values'
//! refresh (`refresh.rs`); the selects other commands run again (`selects.rs`); the row of
//! `events` ([`row`]). The servers, their flags and the retries' waits are
//! `clickhouse-kit`'s. It has no Kafka and no service in it. This file only declares and
//! re-exports. No module imports one above it (`e2e/tests/services/imports.rs`).

/// The text of a file of the crate's SQL (`migrations/`, `views/`), without the blanks
/// around it.
macro_rules! sql {
    ($file:literal) => {
        include_str!($file).trim_ascii()
    };
}

mod bounds;
mod caps;
mod layout;
mod migrate;
mod migrations;
mod params;
pub mod profile;
mod refresh;
mod render;
pub mod row;
mod selects;
mod statistics;
pub mod table_lock;
mod template;
pub mod view_rows;
mod views;

pub use row::EventRow;
pub use view_rows::{MetricResultsRow, ResultsOverTimeRow, ResultsRow};

pub use bounds::{MARK_ALIVE, MARK_EVERY, MIN_CONVERSIONS, MIN_VISITORS, SRM_PRIOR, UNDEFINED_ARM};
pub use caps::ServerCaps;
pub use migrate::{
    event_columns, is_current, migrate, migrate_as_read_when, migrate_copy, migrate_topology,
    migrate_up_to, migration_versions, required_settings, view_names,
};
pub use refresh::{
    REFRESH_LONGEST, REFRESH_VISITORS, metric_values_refresh, refresh_metric_values,
};
pub use render::{Statement, statements};
pub use selects::{event_counts_select, visitors_rebuild, visitors_select};
pub use statistics::{metric_results_as_of, metric_results_by};
