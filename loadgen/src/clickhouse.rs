//! ClickHouse side of the benchmarks: the reference insert (`INSERT … FORMAT JSONEachRow`
//! over HTTP into a table of the consumer's own schema), row counting while the consumer
//! drains a backlog, and verification that a run's accepted events all landed.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use reqwest::Client;
use schema::EventRow;

/// A ClickHouse HTTP endpoint.
#[derive(Clone)]
pub struct ClickHouse {
    url: String,
    http: Client,
}

impl ClickHouse {
    pub fn new(url: &str) -> Self {
        Self {
            url: url.trim_end_matches('/').to_owned(),
            http: Client::new(),
        }
    }

    /// Runs `query` and returns the answer's text.
    pub async fn query(&self, query: &str) -> anyhow::Result<String> {
        self.send(query, self.http.post(&self.url).body(query.to_owned()))
            .await
    }

    /// Runs an `INSERT` with `data` as its rows.
    pub async fn insert(&self, query: &str, data: Vec<u8>) -> anyhow::Result<String> {
        let request = self.http.post(&self.url).query(&[("query", query)]);
        self.send(query, request.body(data)).await
    }

    async fn send(&self, query: &str, request: reqwest::RequestBuilder) -> anyhow::Result<String> {
        let response = request
            .send()
            .await
            .with_context(|| format!("ClickHouse at {} did not answer", self.url))?;
        let status = response.status();
        let text = response.text().await?;
        anyhow::ensure!(
            status.is_success(),
            "ClickHouse refused {query:.80}: {text}"
        );
        Ok(text)
    }

    pub async fn count(&self, query: &str) -> anyhow::Result<u64> {
        let text = self.query(query).await?;
        text.trim()
            .parse()
            .with_context(|| format!("not a count: {text:?}"))
    }

    /// A fresh `database` with the consumer's schema.
    pub async fn recreate(&self, database: &str) -> anyhow::Result<()> {
        self.query(&format!("DROP DATABASE IF EXISTS {database}"))
            .await?;
        // Validation asks the server for a setting that ClickHouse 18.16 lacks.
        let client = ::clickhouse::Client::default()
            .with_url(&self.url)
            .with_validation(false);
        schema::migrate(&client, database).await
    }
}

/// Inserts `rows` into `database.events`, `batch` rows per `INSERT … FORMAT JSONEachRow`,
/// one insert at a time as the consumer does. The bodies are encoded before the clock
/// starts: the figure is ClickHouse's own cost. Returns the time the inserts took.
pub async fn reference_insert(
    clickhouse: &ClickHouse,
    database: &str,
    rows: &[EventRow],
    batch: usize,
) -> anyhow::Result<Duration> {
    let bodies = rows
        .chunks(batch.max(1))
        .map(|chunk| {
            let mut body = Vec::with_capacity(chunk.len() * 512);
            for row in chunk {
                serde_json::to_writer(&mut body, row)?;
                body.push(b'\n');
            }
            Ok(body)
        })
        .collect::<Result<Vec<_>, serde_json::Error>>()?;
    let query = format!("INSERT INTO {database}.events FORMAT JSONEachRow");
    let started = Instant::now();
    for body in bodies {
        clickhouse.insert(&query, body).await?;
    }
    Ok(started.elapsed())
}

/// How fast rows arrived while another process inserted them.
pub struct Drain {
    /// Rows per second from the first row seen until `target` rows were there.
    pub rate: f64,
    pub rows: u64,
}

/// Polls the row count of `table` until it reaches `target` or `timeout` passes. The
/// rate is measured from the first count above zero, so start-up (migrations, joining
/// the consumer group) is left out, and the first batch is too.
pub async fn wait_rows(
    clickhouse: &ClickHouse,
    table: &str,
    target: u64,
    timeout: Duration,
    watch: &crate::watch::Watch,
) -> anyhow::Result<(Drain, BTreeMap<String, f64>)> {
    let deadline = Instant::now() + timeout;
    let query = format!("SELECT count() FROM {table}");
    // When the first rows were seen, how many, and the CPU then: rate and CPU both run
    // from there to the last row.
    let mut first: Option<(Instant, u64, crate::watch::Sample)> = None;
    loop {
        let rows = clickhouse.count(&query).await.unwrap_or(0);
        let now = Instant::now();
        if rows > 0 && first.is_none() {
            first = Some((now, rows, watch.sample()));
        }
        if rows >= target
            && let Some((t0, n0, cpu0)) = &first
        {
            let secs = (now - *t0).as_secs_f64();
            anyhow::ensure!(
                secs > 0.0 && rows > *n0,
                "{table} received all {rows} rows at once: a backlog of several batches \
                 is needed to measure a rate"
            );
            let cpu = watch.usage(cpu0, &watch.sample());
            let rate = (rows - n0) as f64 / secs;
            return Ok((Drain { rate, rows }, cpu));
        }
        anyhow::ensure!(
            now < deadline,
            "{table} holds {rows} of {target} rows after {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A run id prefixes session ids and goes into a `LIKE` pattern: letters and digits only.
/// The rows of `database.events` and the compressed bytes of every active part of every
/// table of `database` (what the events cost on disk, views included), from
/// `system.parts`.
pub async fn disk_bytes(clickhouse: &ClickHouse, database: &str) -> anyhow::Result<(u64, u64)> {
    anyhow::ensure!(
        database
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_'),
        "not a database name: {database:?}"
    );
    let rows = clickhouse
        .count(&format!(
            "SELECT sum(rows) FROM system.parts WHERE active AND database = '{database}' AND table = 'events'"
        ))
        .await?;
    let bytes = clickhouse
        .count(&format!(
            "SELECT sum(data_compressed_bytes) FROM system.parts WHERE active AND database = '{database}'"
        ))
        .await?;
    Ok((rows, bytes))
}

pub fn check_run_id(run: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        !run.is_empty() && run.bytes().all(|b| b.is_ascii_alphanumeric()),
        "a run id must be letters and digits (it prefixes the session ids): {run:?}"
    );
    Ok(())
}

/// Row count and an order-free checksum of every row of `database.table`.
pub async fn checksum(
    clickhouse: &ClickHouse,
    database: &str,
    table: &str,
) -> anyhow::Result<String> {
    let answer = clickhouse
        .query(&format!(
            "SELECT count(), sum(cityHash64(toString(tuple(*)))) FROM {database}.{table} FORMAT TSV"
        ))
        .await?;
    Ok(answer.trim().to_owned())
}

/// Waits until `database.events` holds `ids` distinct event ids or `timeout` passes (a
/// server that does not answer, restarting after a crash, counts as none), then returns
/// its rows and distinct ids, tab-separated.
pub async fn wait_ids(
    clickhouse: &ClickHouse,
    database: &str,
    ids: u64,
    timeout: Duration,
) -> anyhow::Result<String> {
    let deadline = Instant::now() + timeout;
    let count = format!("SELECT uniqExact(event_id) FROM {database}.events");
    while clickhouse.count(&count).await.unwrap_or(0) < ids && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let answer = clickhouse
        .query(&format!(
            "SELECT count(), uniqExact(event_id) FROM {database}.events FORMAT TSV"
        ))
        .await?;
    Ok(answer.trim().to_owned())
}

/// Waits until the events of sessions starting with `run` number `expected` (distinct
/// event ids), and fails if they do not within `timeout` or if there are more.
pub async fn verify_landed(
    clickhouse: &ClickHouse,
    database: &str,
    run: &str,
    expected: u64,
    timeout: Duration,
) -> anyhow::Result<()> {
    check_run_id(run)?;
    let query = format!(
        "SELECT uniqExact(event_id) FROM {database}.events WHERE session_id LIKE '{run}-%'"
    );
    let deadline = Instant::now() + timeout;
    loop {
        let landed = clickhouse.count(&query).await?;
        anyhow::ensure!(
            landed <= expected,
            "{landed} events of run {run} in ClickHouse, more than the {expected} accepted"
        );
        if landed == expected {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {landed} of the {expected} accepted events of run {run} reached ClickHouse within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
