//! Rows of `events` and their insertion: one RowBinary INSERT per batch and shard. Failures
//! that may pass (network, timeouts, server overload, schema being fixed) are retried on
//! the shard's next replica, with capped exponential backoff after each round, until
//! ClickHouse acknowledges or shutdown is asked for; a refusal of the data itself is
//! returned to the caller, which sets the rows aside.

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use clickhouse::{Client, Row};
use common::event::EventMessage;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use uuid::Uuid;

use crate::topology::Topology;

/// One row of `analytics.events`. Absent optional text is stored as `''`, absent
/// numbers and `conversion` as NULL, an absent `test` as 0. Its texts are `String`s, or
/// in the consumer's batches [`Span`]s of the batch's bytes, written as [`RawText`].
#[derive(Clone, Debug, PartialEq, Row, Serialize, Deserialize)]
pub struct EventRow<T = String> {
    #[serde(with = "clickhouse::serde::uuid")]
    pub event_id: Uuid,
    /// Seconds since the Unix epoch (a `DateTime`).
    pub received_at: u32,
    /// Milliseconds since the Unix epoch (`Int64`, or `DateTime64(3)` on servers with it).
    pub received_at_ms: i64,
    /// When the event happened, in milliseconds: the client's corrected time, or
    /// `received_at_ms`.
    pub event_time: i64,
    pub public_key: T,
    pub event_name: T,
    pub experiment_id: T,
    pub variant_id: T,
    pub session_id: T,
    pub conversion: Option<u8>,
    pub load_time: Option<f64>,
    pub scroll_depth: Option<f64>,
    pub time_on_page: Option<f64>,
    pub click_target: T,
    pub pathname: T,
    pub referrer: T,
    pub utm_source: T,
    pub utm_medium: T,
    pub utm_campaign: T,
    pub utm_term: T,
    pub utm_content: T,
    pub test: u8,
    pub user_agent: T,
}

impl<T: Default> From<EventMessage<T>> for EventRow<T> {
    fn from(m: EventMessage<T>) -> Self {
        Self {
            event_id: m.event_id,
            received_at: u32::try_from(m.received_at.div_euclid(1000)).unwrap_or(0),
            received_at_ms: m.received_at,
            event_time: m.event_time.unwrap_or(m.received_at),
            public_key: m.public_key,
            event_name: m.event_name,
            experiment_id: m.experiment_id,
            variant_id: m.variant_id.unwrap_or_default(),
            session_id: m.session_id,
            conversion: m.conversion.map(u8::from),
            load_time: m.load_time,
            scroll_depth: m.scroll_depth,
            time_on_page: m.time_on_page,
            click_target: m.click_target.unwrap_or_default(),
            pathname: m.pathname.unwrap_or_default(),
            referrer: m.referrer.unwrap_or_default(),
            utm_source: m.utm_source.unwrap_or_default(),
            utm_medium: m.utm_medium.unwrap_or_default(),
            utm_campaign: m.utm_campaign.unwrap_or_default(),
            utm_term: m.utm_term.unwrap_or_default(),
            utm_content: m.utm_content.unwrap_or_default(),
            test: u8::from(m.test.unwrap_or(false)),
            user_agent: m.user_agent,
        }
    }
}

impl<T> EventRow<T> {
    /// The same row with each text replaced by `f` of it.
    pub fn map<U>(&self, mut f: impl FnMut(&T) -> U) -> EventRow<U> {
        EventRow {
            event_id: self.event_id,
            received_at: self.received_at,
            received_at_ms: self.received_at_ms,
            event_time: self.event_time,
            public_key: f(&self.public_key),
            event_name: f(&self.event_name),
            experiment_id: f(&self.experiment_id),
            variant_id: f(&self.variant_id),
            session_id: f(&self.session_id),
            conversion: self.conversion,
            load_time: self.load_time,
            scroll_depth: self.scroll_depth,
            time_on_page: self.time_on_page,
            click_target: f(&self.click_target),
            pathname: f(&self.pathname),
            referrer: f(&self.referrer),
            utm_source: f(&self.utm_source),
            utm_medium: f(&self.utm_medium),
            utm_campaign: f(&self.utm_campaign),
            utm_term: f(&self.utm_term),
            utm_content: f(&self.utm_content),
            test: self.test,
            user_agent: f(&self.user_agent),
        }
    }
}

/// Where a text of a batch's row is in the batch's bytes.
pub(crate) type Span = Range<usize>;

/// The UTF-8 bytes of a text, written as a ClickHouse `String` as they are.
pub(crate) struct RawText<'a>(pub &'a [u8]);

impl Serialize for RawText<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(self.0)
    }
}

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
    clickhouse: common::ops::Dependency,
}

impl Sink {
    pub fn new(
        topology: Topology,
        insert_timeout: Duration,
        clickhouse: common::ops::Dependency,
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
            by_shard[self.topology.shard_of(&bytes[row.session_id.clone()])].push(row);
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
            self.clickhouse.set_ok(true);
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
        let mut backoff = common::backoff::Backoff::standard();
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
                    self.clickhouse.set_ok(false);
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
                    () = crate::app::stopped(&mut shutdown) => return Outcome::Stopped,
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
