//! What the connected server supports ([`ServerCaps`]): everything that depends on the
//! server's version is decided here (the parameters it gives each statement: `params.rs`).

use anyhow::Context;
use clickhouse::Client;

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
}

/// Runs one statement with the setting a server of version `caps` needs.
pub(crate) async fn execute(
    client: &Client,
    caps: ServerCaps,
    sql: &str,
) -> clickhouse::error::Result<()> {
    let mut query = client.query(sql);
    if let Some((name, value)) = caps.low_cardinality_setting() {
        query = query.with_setting(name, value);
    }
    query.execute().await
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
