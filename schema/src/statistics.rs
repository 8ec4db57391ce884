//! The statistics' SQL: the guards the results views share, the Student-t p-value and
//! quantile written as ClickHouse expressions, and `experiment_metric_results` per segment.

use crate::caps::ServerCaps;
use crate::layout::Layout;
use crate::{template, views};

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
