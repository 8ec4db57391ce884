//! The insertion of rows into `events`: one RowBinary INSERT per batch and shard. Failures
//! that may pass (network, timeouts, server overload, schema being fixed) are retried on
//! the shard's next replica, with capped exponential backoff after each round, until
//! ClickHouse acknowledges or shutdown is asked for; a refusal of the data itself is
//! returned to the caller, which sets the rows aside.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use clickhouse::Client;
use clickhouse_kit::topology::Topology;
use schema::row::{EventRow, RawText, Span};
use tokio::sync::watch;

use crate::shutdown::stopped;

/// How an insert ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Inserted,
    /// ClickHouse refused the data itself; retrying the same rows cannot succeed.
    Rejected(String),
    /// Shutdown came before ClickHouse acknowledged: nothing may be committed.
    Stopped,
}

/// ClickHouse error codes that blame the inserted data, not the server or the schema:
/// CANNOT_PARSE_TEXT, CANNOT_PARSE_QUOTED_STRING, CANNOT_PARSE_INPUT_ASSERTION_FAILED,
/// CANNOT_PARSE_DATE, CANNOT_PARSE_DATETIME, TYPE_MISMATCH, ARGUMENT_OUT_OF_BOUND,
/// CANNOT_CONVERT_TYPE, CANNOT_PARSE_NUMBER, INCORRECT_DATA, TOO_LARGE_STRING_SIZE.
const DATA_ERROR_CODES: &[u32] = &[6, 26, 27, 38, 41, 53, 69, 70, 72, 117, 131];

/// Whether an insert error blames the rows (permanent) rather than the moment.
pub(crate) fn is_permanent(error: &clickhouse::error::Error) -> bool {
    use clickhouse::error::Error;
    match error {
        Error::BadResponse(text) => {
            exception_code(text).is_some_and(|c| DATA_ERROR_CODES.contains(&c))
        }
        // Our rows could not even be encoded.
        Error::Custom(_) | Error::SequenceMustHaveLength | Error::InvalidUtf8Encoding(_) => true,
        _ => false,
    }
}

/// The number after `Code: ` in a ClickHouse exception text.
fn exception_code(text: &str) -> Option<u32> {
    let rest = &text[text.find("Code: ")? + "Code: ".len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

pub(crate) struct Sink {
    pub topology: Topology,
    /// `events`, or `events_local` in a cluster.
    table: String,
    /// Per shard, the replica that took the last insert: tried first next time, so a
    /// replica that hangs costs one timeout, not one per batch.
    preferred: Vec<AtomicUsize>,
    insert_timeout: Duration,
    /// Not ready while an insert fails, until a whole batch is stored again: ClickHouse
    /// is the consumer's dependency.
    clickhouse: http_kit::ops::Dependency,
}

impl Sink {
    pub fn new(
        topology: Topology,
        insert_timeout: Duration,
        clickhouse: http_kit::ops::Dependency,
    ) -> Self {
        Self {
            preferred: topology
                .shards
                .iter()
                .map(|_| AtomicUsize::new(0))
                .collect(),
            table: format!("events{}", topology.local()),
            topology,
            insert_timeout,
            clickhouse,
        }
    }

    async fn insert_once(
        &self,
        client: &Client,
        rows: &[&EventRow<Span>],
        bytes: &[u8],
    ) -> clickhouse::error::Result<()> {
        let mut insert = client
            .insert::<EventRow<RawText<'_>>>(&self.table)
            .await?
            .with_timeouts(Some(self.insert_timeout), Some(self.insert_timeout));
        for row in rows {
            insert
                .write(&row.map(|span| RawText(&bytes[span.clone()])))
                .await?;
        }
        insert.end().await
    }

    /// Inserts `rows`, whose texts are spans of `bytes`, each on its session's shard,
    /// retrying what may pass until it does. Inserted only when every shard acknowledged
    /// its rows.
    pub async fn insert(
        &self,
        rows: &[EventRow<Span>],
        bytes: &[u8],
        shutdown: &watch::Receiver<bool>,
    ) -> Outcome {
        let mut by_shard: Vec<Vec<&EventRow<Span>>> = vec![Vec::new(); self.topology.shards.len()];
        for row in rows {
            by_shard[self.topology.shard_of(&bytes[row.visitor_id.clone()])].push(row);
        }
        let outcomes = futures::future::join_all(
            by_shard
                .iter()
                .enumerate()
                .filter(|(_, rows)| !rows.is_empty())
                .map(|(shard, rows)| self.insert_shard(shard, rows, bytes, shutdown.clone())),
        )
        .await;
        let mut result = Outcome::Inserted;
        for outcome in outcomes {
            match outcome {
                Outcome::Stopped => return Outcome::Stopped,
                rejected @ Outcome::Rejected(_) => result = rejected,
                Outcome::Inserted => {}
            }
        }
        if result == Outcome::Inserted && !rows.is_empty() {
            self.clickhouse.pass();
            metrics::histogram!("consumer_batch_rows").record(rows.len() as f64);
            metrics::counter!("consumer_rows_inserted_total").increment(rows.len() as u64);
        }
        result
    }

    /// Inserts one shard's rows on one of its replicas: on a failure that may pass, the
    /// next replica; after a round of failures, a pause. A retried insert is the same
    /// rows in the same order, so a replica that did store the first attempt (whose answer
    /// was lost) drops the copy as a duplicate block.
    async fn insert_shard(
        &self,
        shard: usize,
        rows: &[&EventRow<Span>],
        bytes: &[u8],
        mut shutdown: watch::Receiver<bool>,
    ) -> Outcome {
        let replicas = &self.topology.shards[shard];
        let mut backoff = clickhouse_kit::backoff::Backoff::standard();
        let mut failures = 0;
        loop {
            let replica = self.preferred[shard].load(Ordering::Relaxed) % replicas.len();
            let server = &replicas[replica];
            let started = Instant::now();
            match self.insert_once(&server.client, rows, bytes).await {
                Ok(()) => {
                    metrics::histogram!("consumer_insert_seconds")
                        .record(started.elapsed().as_secs_f64());
                    return Outcome::Inserted;
                }
                Err(e) if is_permanent(&e) => {
                    tracing::warn!(error = %e, rows = rows.len(), "ClickHouse refused the rows.");
                    return Outcome::Rejected(e.to_string());
                }
                Err(e) => {
                    self.clickhouse
                        .fail("Inserts into ClickHouse are failing; the consumer retries them.");
                    metrics::counter!("consumer_insert_retries_total").increment(1);
                    tracing::warn!(error = %e, rows = rows.len(), shard = shard + 1,
                        url = %server.url, "Insert failed; retrying.");
                    self.preferred[shard].store(replica + 1, Ordering::Relaxed);
                    failures += 1;
                }
            }
            if failures % replicas.len() == 0 {
                tokio::select! {
                    () = tokio::time::sleep(backoff.next_wait()) => {}
                    () = stopped(&mut shutdown) => return Outcome::Stopped,
                }
            } else if *shutdown.borrow() {
                return Outcome::Stopped;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clickhouse::error::Error;

    #[test]
    fn data_errors_are_permanent_and_the_rest_retryable() {
        let bad = |text: &str| Error::BadResponse(text.to_owned());
        assert!(is_permanent(&bad(
            "Code: 27, e.displayText() = DB::Exception: Cannot parse input"
        )));
        assert!(is_permanent(&bad("Code: 53. DB::Exception: Type mismatch")));
        assert!(!is_permanent(&bad(
            "Code: 60, e.displayText() = DB::Exception: Table doesn't exist"
        )));
        assert!(!is_permanent(&bad(
            "Code: 241. DB::Exception: Memory limit exceeded"
        )));
        assert!(!is_permanent(&bad("502 Bad Gateway")));
        assert!(!is_permanent(&Error::TimedOut));
        assert!(is_permanent(&Error::Custom("cannot serialize".into())));
        assert_eq!(exception_code("Code: 123456"), Some(123_456));
        assert_eq!(exception_code("no code"), None);
    }
}
