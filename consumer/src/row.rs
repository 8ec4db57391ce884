//! A row of `events`, the one list of its columns: made from an event message, written by
//! the consumer with its texts as spans of a batch's bytes ([`Span`], [`RawText`]), read
//! back with `String`s by tests and tools. Whatever the type of its texts, a row has the
//! same columns in the same order, so all of them write and read the same table.

use std::ops::Range;

use clickhouse::Row;
use common::event::EventMessage;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// One row of `analytics.events`. Absent optional text is stored as `''`, absent
/// numbers and `conversion` as NULL, an absent `test` as 0. Its texts are `String`s, or
/// in the consumer's batches `Span`s of the batch's bytes, written as `RawText`.
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
