//! What every section of a benchmark run shares: the repository, the run's folder, the
//! settings, the snapshot and its key, the measuring context, the processes started and the
//! refusals.

use std::path::{Path, PathBuf};

use super::broker::Refusals;
use super::measure::{Bench, Stderr, Stdout, strings};
use super::services::Services;
use super::settings::Settings;

pub struct Run<'a> {
    pub repo: &'a Path,
    /// `.run/bench/STAMP`.
    pub out: &'a Path,
    pub settings: &'a Settings,
    pub bench: &'a Bench,
    pub services: &'a Services,
    pub refusals: &'a Refusals,
    /// The snapshot the services serve, absolute.
    pub snapshot: PathBuf,
    /// Its first public key.
    pub key: String,
}

impl Run<'_> {
    /// The snapshot as an argument.
    pub fn snapshot(&self) -> String {
        self.snapshot.display().to_string()
    }

    /// A `loadgen` tool whose output goes to the terminal (stdout and stderr).
    pub async fn tool(&self, args: &[&str]) -> anyhow::Result<()> {
        self.bench
            .tool(&strings(args), Stdout::Inherit, Stderr::Inherit)
            .await
            .map(drop)
    }

    /// An SQL statement to scripts/up's ClickHouse, its answer dropped.
    pub async fn clickhouse_sql(&self, sql: &str) -> anyhow::Result<()> {
        sql_to("http://127.0.0.1:8123", sql).await
    }
}

/// An SQL statement to a ClickHouse, which must succeed.
pub async fn sql_to(url: &str, sql: &str) -> anyhow::Result<()> {
    reqwest::Client::new()
        .post(format!("{url}/"))
        .body(sql.to_owned())
        .send()
        .await?
        .error_for_status()?;
    Ok(())
}

pub use stack_kit::log;
