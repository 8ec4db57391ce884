//! Rows of `events` and their insertion: one RowBinary INSERT per batch. Failures that may
//! pass (network, timeouts, server overload, schema being fixed) are retried with capped
//! exponential backoff until ClickHouse acknowledges or shutdown is asked for; a refusal
//! of the data itself is returned to the caller, which sets the rows aside.

use std::time::{Duration, Instant};

use clickhouse::{Client, Row};
use common::event::EventMessage;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use uuid::Uuid;

/// One row of `analytics.events`. Absent optional text is stored as `''`, absent
/// numbers and `conversion` as NULL, an absent `test` as 0.
#[derive(Clone, Debug, PartialEq, Row, Serialize, Deserialize)]
pub struct EventRow {
    #[serde(with = "clickhouse::serde::uuid")]
    pub event_id: Uuid,
    /// Seconds since the Unix epoch (a `DateTime`).
    pub received_at: u32,
    /// Milliseconds since the Unix epoch (`Int64`, or `DateTime64(3)` on servers with it).
    pub received_at_ms: i64,
    /// When the event happened, in milliseconds: the client's corrected time, or
    /// `received_at_ms`.
    pub event_time: i64,
    pub public_key: String,
    pub event_name: String,
    pub experiment_id: String,
    pub variant_id: String,
    pub session_id: String,
    pub conversion: Option<u8>,
    pub load_time: Option<f64>,
    pub scroll_depth: Option<f64>,
    pub time_on_page: Option<f64>,
    pub click_target: String,
    pub pathname: String,
    pub referrer: String,
    pub utm_source: String,
    pub utm_medium: String,
    pub utm_campaign: String,
    pub utm_term: String,
    pub utm_content: String,
    pub test: u8,
    pub user_agent: String,
}

impl From<EventMessage> for EventRow {
    fn from(m: EventMessage) -> Self {
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
    pub client: Client,
    pub insert_timeout: Duration,
    /// Not ready while inserts fail: ClickHouse is the consumer's dependency.
    pub clickhouse: common::http::Dependency,
}

impl Sink {
    async fn insert_once(&self, rows: &[EventRow]) -> clickhouse::error::Result<()> {
        let mut insert = self
            .client
            .insert::<EventRow>("events")
            .await?
            .with_timeouts(Some(self.insert_timeout), Some(self.insert_timeout));
        for row in rows {
            insert.write(row).await?;
        }
        insert.end().await
    }

    /// Inserts `rows`, retrying what may pass until it does.
    pub async fn insert(&self, rows: &[EventRow], shutdown: &mut watch::Receiver<bool>) -> Outcome {
        if rows.is_empty() {
            return Outcome::Inserted;
        }
        let mut backoff = common::backoff::Backoff::standard();
        loop {
            let started = Instant::now();
            match self.insert_once(rows).await {
                Ok(()) => {
                    self.clickhouse.set_ok(true);
                    metrics::histogram!("consumer_insert_seconds")
                        .record(started.elapsed().as_secs_f64());
                    metrics::histogram!("consumer_batch_rows").record(rows.len() as f64);
                    metrics::counter!("consumer_rows_inserted_total").increment(rows.len() as u64);
                    return Outcome::Inserted;
                }
                Err(e) if is_permanent(&e) => {
                    tracing::warn!(error = %e, rows = rows.len(), "ClickHouse refused the rows.");
                    return Outcome::Rejected(e.to_string());
                }
                Err(e) => {
                    self.clickhouse.set_ok(false);
                    metrics::counter!("consumer_insert_retries_total").increment(1);
                    tracing::warn!(error = %e, rows = rows.len(), "Insert failed; retrying.");
                }
            }
            tokio::select! {
                () = tokio::time::sleep(backoff.next_wait()) => {}
                () = crate::app::stopped(shutdown) => return Outcome::Stopped,
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
