//! The migrations' selects that other commands run again on a shard's own events: the
//! per-visitor event counts and the per-visitor exposures (`analytics-access`'s feeds, the
//! erasure's rebuild).

use crate::caps::ServerCaps;
use crate::layout::Layout;
use crate::migrations::{EXPOSURES_20, FIRST_CONVERSION_11, VISITORS_SELECT};

/// Migration 13: what `visitor_event_counts` counts of inserted `events` rows.
pub(crate) const EVENT_COUNTS_SELECT: &str = "SELECT public_key, visitor_id, count() AS events \
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
pub(crate) fn added_20() -> String {
    format!("{FIRST_CONVERSION_11}{EXPOSURES_20}")
}

/// The latest select of `experiment_visitors` rows (migration 20's), restricted to the
/// events `filter` keeps.
fn visitors_where(filter: &str) -> String {
    VISITORS_SELECT
        .replace("{first_conversion}", &added_20())
        .replacen("\nGROUP BY", &format!("\nWHERE {filter}\nGROUP BY"), 1)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
