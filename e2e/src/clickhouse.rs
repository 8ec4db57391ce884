//! The test ClickHouse from a test's side: where it is, clients on a test's database,
//! waiting for rows and dropping the database at the end. A test works in a database of
//! its own (`ConsumerNames::database`) and reads through these clients only.

use std::time::Duration;

use crate::wait::eventually;

/// ClickHouse of the tests: `TEST_CLICKHOUSE_URL`, default the one `scripts/test` starts.
pub fn clickhouse_url() -> String {
    std::env::var("TEST_CLICKHOUSE_URL").unwrap_or_else(|_| "http://127.0.0.1:18123".into())
}

pub fn clickhouse(database: &str) -> clickhouse::Client {
    clickhouse_at(&clickhouse_url(), database)
}

pub fn clickhouse_at(url: &str, database: &str) -> clickhouse::Client {
    clickhouse::Client::default()
        .with_url(url)
        .with_database(database)
        .with_validation(false)
}

/// `(rows, rows counted once with FINAL)` of `events`, once `FINAL` counts `want`.
pub async fn wait_for_events(
    client: &clickhouse::Client,
    want: u64,
    timeout: Duration,
) -> (u64, u64) {
    eventually(timeout, &format!("{want} events in ClickHouse"), || async {
        let once: u64 = client
            .query("SELECT count() FROM events FINAL")
            .fetch_one()
            .await
            .ok()?;
        if once < want {
            return None;
        }
        let raw: u64 = client
            .query("SELECT count() FROM events")
            .fetch_one()
            .await
            .ok()?;
        Some((raw, once))
    })
    .await
}

/// Drops a test database; for the end of a test.
pub async fn drop_database(database: &str) {
    let _ = clickhouse("default")
        .query(&format!("DROP DATABASE IF EXISTS {database}"))
        .execute()
        .await;
}
