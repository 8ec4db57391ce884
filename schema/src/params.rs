//! The parameters every statement is rendered with on a server ([`ServerCaps::params`]):
//! the server's version, the topology's mark ([`Layout`]), the tables' selects and the
//! views' shared parts.

use crate::caps::ServerCaps;
use crate::layout::Layout;
use crate::migrations::{
    EXPOSURES_20, EXPOSURES_20_COLUMNS, FIRST_CONVERSION_11, PRE_SEEN_21_COLUMN, SESSIONS_SELECT,
    VISITORS_SELECT,
};
use crate::selects::{EVENT_COUNTS_SELECT, added_20};
use crate::{template, views};

impl ServerCaps {
    /// The parameters of every statement on this server: `{db}` is the database, `{millis}`
    /// the type of a time in milliseconds, `{received_at_ms}` the one of `received_at` and
    /// `{to_ms}` what makes milliseconds since the epoch (an `Int64`) of a time in
    /// milliseconds; with the topology's (`Layout`), the tables' selects and the views'
    /// shared parameters ([`views::shared`]).
    pub(crate) fn params(self, database: &str, layout: &Layout) -> template::Params<'static> {
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
    pub(crate) fn render(self, statement: &str, database: &str, layout: &Layout) -> String {
        self.params(database, layout).render(statement)
    }
}
