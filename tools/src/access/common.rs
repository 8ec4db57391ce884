//! What the command's two mechanisms share: the caps, the record of grants, the analysts'
//! role and the statements run on a server.

use anyhow::Context;
use clickhouse::Client;
use clickhouse_kit::topology::Server;
use sha2::{Digest, Sha256};

/// A name, password or key the command refuses.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("refusing {what} {value:?}: {reason}")]
pub struct Refused {
    pub(super) what: &'static str,
    pub(super) value: String,
    pub(super) reason: &'static str,
}

/// What one analyst may take of the servers, so that no analyst can hold up the others,
/// the consumer's inserts or the operators. Every cap is at least 1 (ClickHouse reads 0 as
/// no limit).
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct Caps {
    /// Longest run of one query, in seconds: then it fails. It also ends the query of a
    /// client that has gone (on 18.x, which cannot tell over HTTP).
    #[arg(long, default_value_t = 60)]
    pub max_execution_secs: u64,
    /// Most memory of one query, and of all the analyst's queries together, in MiB.
    #[arg(long, default_value_t = 1024)]
    pub max_memory_mib: u64,
    /// Most queries of the analyst running at once: more are refused at once.
    #[arg(long, default_value_t = 4)]
    pub max_concurrent_queries: u64,
    /// Most rows in one answer (more fail the query); its bytes are capped at the memory.
    #[arg(long, default_value_t = 1_000_000)]
    pub max_result_rows: u64,
    /// Most queries per hour.
    #[arg(long, default_value_t = 3600)]
    pub queries_per_hour: u64,
    /// Most seconds of execution per hour, all queries added.
    #[arg(long, default_value_t = 1800)]
    pub execution_secs_per_hour: u64,
}

impl Caps {
    /// The analyst's settings: read-only (no writes, DDL, settings or table functions)
    /// within the caps.
    pub(super) fn settings(&self) -> Vec<(&'static str, String)> {
        let bytes = self.max_memory_mib * 1024 * 1024;
        vec![
            ("readonly", "1".to_owned()),
            ("max_execution_time", self.max_execution_secs.to_string()),
            ("timeout_overflow_mode", "throw".to_owned()),
            ("max_memory_usage", bytes.to_string()),
            ("max_memory_usage_for_user", bytes.to_string()),
            (
                "max_concurrent_queries_for_user",
                self.max_concurrent_queries.to_string(),
            ),
            ("max_result_rows", self.max_result_rows.to_string()),
            ("max_result_bytes", bytes.to_string()),
            ("result_overflow_mode", "throw".to_owned()),
        ]
    }

    pub(super) fn check(&self) -> Result<(), Refused> {
        let caps = [
            ("--max-execution-secs", self.max_execution_secs),
            ("--max-memory-mib", self.max_memory_mib),
            ("--max-concurrent-queries", self.max_concurrent_queries),
            ("--max-result-rows", self.max_result_rows),
            ("--queries-per-hour", self.queries_per_hour),
            ("--execution-secs-per-hour", self.execution_secs_per_hour),
        ];
        match caps.iter().find(|(_, v)| *v == 0 || *v > 1 << 40) {
            Some((what, value)) => Err(Refused {
                what,
                value: value.to_string(),
                reason: "a cap is from 1 to 2^40 (0 would mean no limit)",
            }),
            None => Ok(()),
        }
    }
}

/// The database of the grants and (18.x) of the filtering views.
pub(super) const ACCESS_DB: &str = "analytics_access";

/// The role every analyst has (SQL access control): the other users' policy excludes it.
pub(super) const ANALYST_ROLE: &str = "analytics_analyst";

pub(super) fn sha256_hex(password: &str) -> String {
    Sha256::digest(password.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

pub(super) fn key_list(keys: &[String]) -> String {
    keys.iter()
        .map(|k| format!("'{k}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The statements that make the grants table.
pub(super) fn grants_table() -> [String; 2] {
    [
        format!("CREATE DATABASE IF NOT EXISTS {ACCESS_DB}"),
        format!(
            "CREATE TABLE IF NOT EXISTS {ACCESS_DB}.grants (user String, keys Array(String), \
             revoked UInt8, version UInt64) ENGINE = ReplacingMergeTree(version) ORDER BY user"
        ),
    ]
}

pub(super) async fn run_all(server: &Server, statements: &[String]) -> anyhow::Result<()> {
    for sql in statements {
        server
            .client
            .query(sql)
            .execute()
            .await
            .with_context(|| format!("{}: {sql}", server.url))?;
    }
    Ok(())
}

/// Whether `user` logs in with `password` on `server` and reads `table` (or why not).
pub(super) async fn lets_in(
    server: &Server,
    user: &str,
    password: &str,
    table: &str,
) -> Result<(), String> {
    Client::default()
        .with_url(&server.url)
        .with_user(user)
        .with_password(password)
        .with_validation(false)
        .query(&format!("SELECT count() FROM {table}"))
        .fetch_one::<u64>()
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

/// The caps a grant takes when none is given.
pub fn default_caps() -> Caps {
    #[derive(clap::Parser)]
    struct Only {
        #[command(flatten)]
        caps: Caps,
    }
    <Only as clap::Parser>::parse_from(["caps"]).caps
}
