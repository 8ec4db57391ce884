//! A row of `events`, made from an event message, with a column per field of
//! [`contract::event::FIELDS`] besides the ingest's: written by the consumer with its texts
//! as spans of a batch's bytes ([`Span`], [`RawText`]), read back with `String`s by tests
//! and tools. Whatever the type of its texts, a row has the same columns in the same
//! order, [`EventRow::COLUMNS`], so all of them write and read the same table.

use std::ops::Range;

use clickhouse::Row;
use contract::event::EventMessage;
#[cfg(doc)]
use contract::event::FIELDS;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// One row of `analytics.events`: the ingest's columns, then a column per field of
/// [`FIELDS`], in its order and of its ClickHouse type. Absent optional text is stored as
/// `''`, absent numbers and `conversion` as NULL, an absent `test` as 0, an absent
/// `visitor_id` as the session's id, an absent `phase` as 1 (the ingest stamps the live
/// one: only messages written before phases existed lack it). Its texts are `String`s, or
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
    pub user_agent: T,
    pub is_bot: u8,
    pub event_name: T,
    pub experiment_id: T,
    pub session_id: T,
    pub variant_id: T,
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
    pub visitor_id: T,
    pub phase: u32,
}

impl<T> EventRow<T> {
    /// The columns of a row, in its order: name and ClickHouse type, where `{millis}` is
    /// the server's type of a time in milliseconds (see
    /// [`crate::event_columns`]). The ingest's first, then those of [`FIELDS`].
    #[rustfmt::skip]
    pub const COLUMNS: &[(&str, &str)] = &[
        ("event_id",       "UUID"),
        ("received_at",    "DateTime('UTC')"),
        ("received_at_ms", "{millis}"),
        ("event_time",     "{millis}"),
        ("public_key",     "LowCardinality(String)"),
        ("user_agent",     "String"),
        ("is_bot",         "UInt8"),
        ("event_name",     "LowCardinality(String)"),
        ("experiment_id",  "LowCardinality(String)"),
        ("session_id",     "String"),
        ("variant_id",     "LowCardinality(String)"),
        ("conversion",     "Nullable(UInt8)"),
        ("load_time",      "Nullable(Float64)"),
        ("scroll_depth",   "Nullable(Float64)"),
        ("time_on_page",   "Nullable(Float64)"),
        ("click_target",   "String"),
        ("pathname",       "String"),
        ("referrer",       "String"),
        ("utm_source",     "LowCardinality(String)"),
        ("utm_medium",     "LowCardinality(String)"),
        ("utm_campaign",   "LowCardinality(String)"),
        ("utm_term",       "String"),
        ("utm_content",    "String"),
        ("test",           "UInt8"),
        ("visitor_id",     "String"),
        ("phase",          "UInt32"),
    ];

    /// How many of [`EventRow::COLUMNS`] come first and are the ingest's, not the client's.
    pub const INGEST_COLUMNS: usize = 7;

    /// The same row with each text replaced by `f` of it.
    pub fn map<U>(&self, mut f: impl FnMut(&T) -> U) -> EventRow<U> {
        EventRow {
            event_id: self.event_id,
            received_at: self.received_at,
            received_at_ms: self.received_at_ms,
            event_time: self.event_time,
            public_key: f(&self.public_key),
            user_agent: f(&self.user_agent),
            is_bot: self.is_bot,
            event_name: f(&self.event_name),
            experiment_id: f(&self.experiment_id),
            session_id: f(&self.session_id),
            variant_id: f(&self.variant_id),
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
            visitor_id: f(&self.visitor_id),
            phase: self.phase,
        }
    }
}

impl<T: Default + Clone> From<EventMessage<T>> for EventRow<T> {
    fn from(m: EventMessage<T>) -> Self {
        let session = m.session_id.clone();
        Self {
            event_id: m.event_id,
            received_at: u32::try_from(m.received_at.div_euclid(1000)).unwrap_or(0),
            received_at_ms: m.received_at,
            event_time: m.event_time.unwrap_or(m.received_at),
            public_key: m.public_key,
            user_agent: m.user_agent,
            is_bot: u8::from(m.is_bot),
            event_name: m.event_name,
            experiment_id: m.experiment_id,
            session_id: m.session_id,
            variant_id: m.variant_id.unwrap_or_default(),
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
            // The visitor: its session for the clients that send none.
            visitor_id: m.visitor_id.unwrap_or(session),
            phase: m.phase.unwrap_or(1),
        }
    }
}

/// Where a text of a batch's row is in the batch's bytes.
pub type Span = Range<usize>;

/// The UTF-8 bytes of a text, written as a ClickHouse `String` as they are.
pub struct RawText<'a>(pub &'a [u8]);

impl Serialize for RawText<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(self.0)
    }
}

#[cfg(test)]
mod tests {
    use contract::event::{FIELDS, Kind};

    use super::*;

    #[test]
    fn the_columns_are_the_rows_fields_in_order() {
        let names: Vec<&str> = EventRow::<String>::COLUMNS.iter().map(|c| c.0).collect();
        assert_eq!(names, <EventRow as Row>::COLUMN_NAMES);
    }

    #[test]
    fn the_client_columns_are_the_lists_fields_with_their_types_in_order() {
        let (ingest, client) =
            EventRow::<String>::COLUMNS.split_at(EventRow::<String>::INGEST_COLUMNS);
        let want: Vec<(&str, &str)> = FIELDS.iter().map(|f| (f.name, f.column)).collect();
        assert_eq!(client, want);
        for (name, _) in ingest {
            assert!(
                !FIELDS.iter().any(|f| f.name == *name),
                "{name} is the ingest's"
            );
        }
    }

    /// A message with every field set, each to another value, becomes a row whose column of
    /// each field of the list holds it, in the column's type.
    #[test]
    fn each_field_of_the_message_goes_to_its_column() {
        let mut message = serde_json::json!({
            "v": 1, "event_id": "0190b8a2-3c4d-7e5f-8a9b-0c1d2e3f4a5b", "received_at": 1_700_000_000_123_i64,
            "public_key": "pk", "user_agent": "UA",
        });
        for (i, field) in FIELDS.iter().enumerate() {
            message[field.name] = match field.kind {
                Kind::Id(_) | Kind::Text(_) => serde_json::json!(format!("{}-{i}", field.name)),
                Kind::Number => serde_json::json!(i as f64 + 0.5),
                Kind::Whole => serde_json::json!(i),
                Kind::Flag => serde_json::json!(true),
            };
        }
        let row = EventRow::from(
            serde_json::from_value::<EventMessage>(message.clone()).expect("a message"),
        );
        let row = serde_json::to_value(&row).expect("ser");
        for field in FIELDS {
            let want = match field.kind {
                Kind::Flag => serde_json::json!(1),
                _ => message[field.name].clone(),
            };
            assert_eq!(row[field.name], want, "{}", field.name);
        }
    }
}
