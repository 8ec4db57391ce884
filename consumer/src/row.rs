//! A row of `events`, made from an event message, with a column per field of
//! [`contract::event_fields!`] besides the ingest's: written by the consumer with its texts
//! as spans of a batch's bytes ([`Span`], [`RawText`]), read back with `String`s by tests
//! and tools. Whatever the type of its texts, a row has the same columns in the same
//! order, [`EventRow::COLUMNS`], so all of them write and read the same table.

use std::ops::Range;

use clickhouse::Row;
use contract::event::EventMessage;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The ClickHouse types a client's field can be stored as, an arm each: the row's type of
/// the column (`T` a text), and how it is made from the message's `Option` of the field
/// (`from`) and mapped to other texts (`map`). One at a time, the fields of the list are
/// turned into `(field [row type] [from] [map] "ClickHouse type")`, then
/// [`event_row!`] writes the row.
macro_rules! columns {
    ($req:tt [$($done:tt)*]) => {
        event_row! { $req [$($done)*] }
    };
    // The visitor: its session for the clients that send none.
    ($req:tt [$($done:tt)*] visitor_id $name:literal T $limit:ident($max:expr) "String", $($rest:tt)*) => {
        columns! { $req [$($done)* (visitor_id [T] [or_session] [text] "String")] $($rest)* }
    };
    ($req:tt [$($done:tt)*] $field:ident $name:literal T $limit:ident($max:expr) "String", $($rest:tt)*) => {
        columns! { $req [$($done)* ($field [T] [unwrap_or_default] [text] "String")] $($rest)* }
    };
    ($req:tt [$($done:tt)*] $field:ident $name:literal T $limit:ident($max:expr) "LowCardinality(String)", $($rest:tt)*) => {
        columns! { $req [$($done)* ($field [T] [unwrap_or_default] [text] "LowCardinality(String)")] $($rest)* }
    };
    ($req:tt [$($done:tt)*] $field:ident $name:literal f64 "Nullable(Float64)", $($rest:tt)*) => {
        columns! { $req [$($done)* ($field [Option<f64>] [nullable] [copy] "Nullable(Float64)")] $($rest)* }
    };
    ($req:tt [$($done:tt)*] $field:ident $name:literal bool "Nullable(UInt8)", $($rest:tt)*) => {
        columns! { $req [$($done)* ($field [Option<u8>] [nullable_flag] [copy] "Nullable(UInt8)")] $($rest)* }
    };
    ($req:tt [$($done:tt)*] $field:ident $name:literal u32 "UInt32", $($rest:tt)*) => {
        columns! { $req [$($done)* ($field [u32] [or_first] [copy] "UInt32")] $($rest)* }
    };
    ($req:tt [$($done:tt)*] $field:ident $name:literal bool "UInt8", $($rest:tt)*) => {
        columns! { $req [$($done)* ($field [u8] [flag_or_false] [copy] "UInt8")] $($rest)* }
    };
}

/// The conversions that [`columns!`] names.
macro_rules! convert {
    (unwrap_or_default $value:expr, $session:ident) => {
        $value.unwrap_or_default()
    };
    (or_session $value:expr, $session:ident) => {
        $value.unwrap_or($session)
    };
    (or_first $value:expr, $session:ident) => {
        $value.unwrap_or(1)
    };
    (nullable $value:expr, $session:ident) => {
        $value
    };
    (nullable_flag $value:expr, $session:ident) => {
        $value.map(u8::from)
    };
    (flag_or_false $value:expr, $session:ident) => {
        u8::from($value.unwrap_or(false))
    };
    (text $value:expr, $f:ident) => {
        $f(&$value)
    };
    (copy $value:expr, $f:ident) => {
        $value
    };
}

/// Starts [`columns!`] on the list's optional fields.
macro_rules! row_of_fields {
    (
        required { $( $req:ident $req_name:literal T id($req_max:expr) $req_column:literal, )* }
        optional { $($optional:tt)* }
    ) => {
        columns! { [$( ($req $req_column) )*] [] $($optional)* }
    };
}

/// The row, its making from a message, its [`EventRow::map`] and its
/// [`EventRow::COLUMNS`]; the columns of the ingest's fields are written out here.
macro_rules! event_row {
    (
        [$( ($req:ident $req_column:literal) )*]
        [$( ($opt:ident [$($ty:tt)*] [$from:ident] [$map:ident] $opt_column:literal) )*]
    ) => {
        /// One row of `analytics.events`. Absent optional text is stored as `''`, absent
        /// numbers and `conversion` as NULL, an absent `test` as 0, an absent
        /// `visitor_id` as the session's id, an absent `phase` as 1 (the ingest stamps the
        /// live one: only messages written before phases existed lack it). Its texts are
        /// `String`s, or in the consumer's batches `Span`s of the batch's bytes, written as
        /// `RawText`.
        #[derive(Clone, Debug, PartialEq, Row, Serialize, Deserialize)]
        pub struct EventRow<T = String> {
            #[serde(with = "clickhouse::serde::uuid")]
            pub event_id: Uuid,
            /// Seconds since the Unix epoch (a `DateTime`).
            pub received_at: u32,
            /// Milliseconds since the Unix epoch (`Int64`, or `DateTime64(3)` on servers
            /// with it).
            pub received_at_ms: i64,
            /// When the event happened, in milliseconds: the client's corrected time, or
            /// `received_at_ms`.
            pub event_time: i64,
            pub public_key: T,
            pub user_agent: T,
            pub is_bot: u8,
            $( pub $req: T, )*
            $( pub $opt: $($ty)*, )*
        }

        impl<T> EventRow<T> {
            /// The columns of a row, in its order: name and ClickHouse type, where
            /// `{millis}` is the server's type of a time in milliseconds (see
            /// [`crate::schema::event_columns`]).
            pub const COLUMNS: &[(&str, &str)] = &[
                ("event_id", "UUID"),
                ("received_at", "DateTime('UTC')"),
                ("received_at_ms", "{millis}"),
                ("event_time", "{millis}"),
                ("public_key", "LowCardinality(String)"),
                ("user_agent", "String"),
                ("is_bot", "UInt8"),
                $( (stringify!($req), $req_column), )*
                $( (stringify!($opt), $opt_column), )*
            ];

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
                    $( $req: f(&self.$req), )*
                    $( $opt: convert!($map self.$opt, f), )*
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
                    $( $req: m.$req, )*
                    $( $opt: convert!($from m.$opt, session), )*
                }
            }
        }
    };
}

contract::event_fields!(row_of_fields);

/// Where a text of a batch's row is in the batch's bytes.
pub(crate) type Span = Range<usize>;

/// The UTF-8 bytes of a text, written as a ClickHouse `String` as they are.
pub(crate) struct RawText<'a>(pub &'a [u8]);

impl Serialize for RawText<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_columns_are_the_rows_fields_in_order() {
        let names: Vec<&str> = EventRow::<String>::COLUMNS.iter().map(|c| c.0).collect();
        assert_eq!(names, <EventRow as Row>::COLUMN_NAMES);
    }
}
