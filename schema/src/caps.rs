//! What the connected server supports ([`ServerCaps`]): everything that depends on the
//! server's version is decided here, and the parameters every statement is rendered with.

use anyhow::Context;
use clickhouse::Client;

use crate::migrations::{
    EXPOSURES_20, EXPOSURES_20_COLUMNS, FIRST_CONVERSION_11, PRE_SEEN_21_COLUMN, SESSIONS_SELECT,
    VISITORS_SELECT,
};
use crate::render::Layout;
use crate::selects::{EVENT_COUNTS_SELECT, added_20};
use crate::{template, views};

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
    pub(crate) fn low_cardinality_setting(self) -> Option<(&'static str, &'static str)> {
        (self.major < 19).then_some(("allow_experimental_low_cardinality_type", "1"))
    }

    /// `DateTime64` came with 20.1. Before it, a time in milliseconds is an `Int64` of
    /// milliseconds since the Unix epoch; both read and write as the same 8 bytes.
    pub(crate) fn has_datetime64(self) -> bool {
        self.major >= 20
    }

    /// The type of a time in milliseconds.
    pub(crate) fn millis(self) -> &'static str {
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
}
