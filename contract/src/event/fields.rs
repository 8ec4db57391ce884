//! The one list of an event's fields that come from the client: what each is called in
//! the client's JSON, how it is read and checked, and its column in `analytics.events`.
//! Everything else that names these fields is written out by hand and checked against
//! this list by tests: the message ([`EventMessage`](super::EventMessage)) and the
//! reading of a client's event (this crate's tests), the consumer's row and its column
//! list (the consumer's tests), the live table, the SDK's `Event` type and the OpenAPI
//! schema's `Event` (the end-to-end tests' `event_fields`). The fields the ingest adds
//! (`v`, `event_id`, `received_at`, `public_key`, `user_agent`, `is_bot`, `event_time`)
//! are written out where each of those is declared.
//!
//! To add a field: its line here, its field in the message, the reading and the row,
//! the migration that adds its column (the consumer's `schema/migrations/`), the SDK's
//! `Event` and the OpenAPI schema; if it has a rule beyond its type and length, that rule
//! in `validate.rs`'s `rules`. The tests name whatever disagrees.

use super::limits::{MAX_ID_CHARS, MAX_URL_CHARS, MAX_UTM_CHARS};

/// One client field of an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// The message's field and the table's column.
    pub name: &'static str,
    /// The field in the client's JSON.
    pub client: &'static str,
    /// Its JSON type and limit, and so its type in the message.
    pub kind: Kind,
    /// Required: absent, `null` or empty is refused. Only ids are required.
    pub required: bool,
    /// The column's ClickHouse type; it decides the Rust type of the consumer's row.
    pub column: &'static str,
}

/// A client field's JSON type and limit, and its type in the message (`T` the message's
/// text type). A required field's type is `T`, an optional one's `Option` of it: `None`
/// when the client left it out or sent `null`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A text (`T`) of at most this many characters and no control characters.
    Id(usize),
    /// A text (`T`) of at most this many characters of anything.
    Text(usize),
    /// A finite number (`f64`).
    Number,
    /// A whole number (`u32`).
    Whole,
    /// A boolean (`bool`).
    Flag,
}

const fn required(name: &'static str, client: &'static str, column: &'static str) -> Field {
    Field {
        name,
        client,
        kind: Kind::Id(MAX_ID_CHARS),
        required: true,
        column,
    }
}

const fn optional(
    name: &'static str,
    client: &'static str,
    kind: Kind,
    column: &'static str,
) -> Field {
    Field {
        name,
        client,
        kind,
        required: false,
        column,
    }
}

/// The client's fields, in the order of the Kafka message's JSON and of the row's columns.
#[rustfmt::skip]
pub const FIELDS: &[Field] = &[
    required("event_name",    "eventName",    "LowCardinality(String)"),
    required("experiment_id", "experimentId", "LowCardinality(String)"),
    required("session_id",    "sessionId",    "String"),
    optional("variant_id",    "variantId",    Kind::Id(MAX_ID_CHARS),    "LowCardinality(String)"),
    optional("conversion",    "conversion",   Kind::Flag,                "Nullable(UInt8)"),
    optional("load_time",     "loadTime",     Kind::Number,              "Nullable(Float64)"),
    optional("scroll_depth",  "scrollDepth",  Kind::Number,              "Nullable(Float64)"),
    optional("time_on_page",  "timeOnPage",   Kind::Number,              "Nullable(Float64)"),
    optional("click_target",  "clickTarget",  Kind::Text(MAX_URL_CHARS), "String"),
    optional("pathname",      "pathname",     Kind::Text(MAX_URL_CHARS), "String"),
    optional("referrer",      "referrer",     Kind::Text(MAX_URL_CHARS), "String"),
    optional("utm_source",    "utm_source",   Kind::Text(MAX_UTM_CHARS), "LowCardinality(String)"),
    optional("utm_medium",    "utm_medium",   Kind::Text(MAX_UTM_CHARS), "LowCardinality(String)"),
    optional("utm_campaign",  "utm_campaign", Kind::Text(MAX_UTM_CHARS), "LowCardinality(String)"),
    optional("utm_term",      "utm_term",     Kind::Text(MAX_UTM_CHARS), "String"),
    optional("utm_content",   "utm_content",  Kind::Text(MAX_UTM_CHARS), "String"),
    optional("test",          "test",         Kind::Flag,                "UInt8"),
    optional("visitor_id",    "visitorId",    Kind::Id(MAX_ID_CHARS),    "String"),
    optional("phase",         "phase",        Kind::Whole,               "UInt32"),
];

/// The client's fields that are read but not carried as they are: `eventId` becomes the
/// message's `event_id` (or a new one), `timestamp` its `event_time`.
pub const CLIENT_ONLY: &[&str] = &["eventId", "timestamp"];

/// The message's fields that the ingest adds, in the message's order: all of its fields
/// but the client's.
pub const INGEST_FIELDS: &[&str] = &[
    "v",
    "event_id",
    "received_at",
    "public_key",
    "user_agent",
    "is_bot",
    "event_time",
];

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use serde_json::{Value, json};

    use super::*;
    use crate::event::envelope::Envelope;
    use crate::event::message::EventMessage;
    use crate::event::validate::Rejection;

    fn envelope() -> Envelope {
        Envelope::new(
            1_700_000_000_123,
            "pk_test".into(),
            "Googlebot/2.1".into(),
            Some(1.0),
        )
    }

    /// Both readings of a client's event, which must agree.
    fn read(event: &Value) -> Result<EventMessage, Rejection> {
        let envelope = envelope();
        let from_value = EventMessage::from_client(event, &envelope);
        let json = event.to_string();
        let typed = EventMessage::from_client_json(&json, &envelope).map(|m| EventMessage {
            event_id: from_value.as_ref().map_or(m.event_id, |v| v.event_id),
            ..m.map(Cow::into_owned)
        });
        assert_eq!(from_value, typed, "{json}");
        from_value
    }

    /// A text of `chars` characters that the rules beyond its field's kind accept.
    fn text(field: &Field, chars: usize) -> String {
        let prefix = match field.client {
            "experimentId" => "exp_",
            "variantId" => "var_",
            _ => "",
        };
        let body: String = field
            .name
            .chars()
            .cycle()
            .take(chars - prefix.len())
            .collect();
        format!("{prefix}{body}")
    }

    /// A value of every field, each another, that the contract accepts.
    fn every_field() -> Value {
        let mut event =
            json!({ "eventId": "0190b8a2-3c4d-7e5f-8a9b-0c1d2e3f4a5b", "timestamp": 0.5 });
        for (i, field) in FIELDS.iter().enumerate() {
            event[field.client] = match field.kind {
                Kind::Id(_) | Kind::Text(_) => json!(text(field, 8 + i)),
                Kind::Number => json!(i as f64 + 0.5),
                Kind::Whole => json!(i),
                Kind::Flag => json!(i % 2 == 0),
            };
        }
        event
    }

    #[test]
    fn the_message_has_a_field_per_client_field_named_as_the_list_in_its_order() {
        let message = read(&every_field()).expect("valid");
        let text = serde_json::to_string(&message).expect("ser");
        let Value::Object(fields) = serde_json::from_str::<Value>(&text).expect("de") else {
            panic!("{text}")
        };
        let mut names: Vec<&str> = fields.keys().map(String::as_str).collect();
        names.sort_by_key(|name| text.find(&format!("\"{name}\":")));
        let client: Vec<&str> = names
            .iter()
            .copied()
            .filter(|name| !INGEST_FIELDS.contains(name))
            .collect();
        let want: Vec<&str> = FIELDS.iter().map(|f| f.name).collect();
        assert_eq!(client, want, "{text}");
        assert_eq!(names.len(), INGEST_FIELDS.len() + FIELDS.len(), "{text}");
        // Each holds what the client sent in its field of the list's client name.
        let sent = every_field();
        for field in FIELDS {
            assert_eq!(fields[field.name], sent[field.client], "{}", field.name);
        }
    }

    #[test]
    fn each_field_is_read_as_its_kind_under_its_client_name() {
        for field in FIELDS {
            let mut event = every_field();
            event[field.client] = json!([]);
            let rule = match field.kind {
                Kind::Id(_) | Kind::Text(_) => "be a string",
                Kind::Number | Kind::Whole => "be a number",
                Kind::Flag => "be a boolean",
            };
            let refused = read(&event).expect_err(field.client);
            assert_eq!(
                (refused.field, refused.message),
                (field.client, format!("field {} must {rule}", field.client))
            );
            // Absent: required, or left out of the message.
            event[field.client] = Value::Null;
            match read(&event) {
                Err(refused) => {
                    assert!(field.required, "{}: {refused}", field.client);
                    assert_eq!(
                        refused.message,
                        format!("field {} is required", field.client)
                    );
                }
                Ok(message) => {
                    assert!(!field.required, "{} may be left out", field.client);
                    let json = serde_json::to_value(&message).expect("ser");
                    assert!(json.get(field.name).is_none(), "{}: {json}", field.name);
                }
            }
        }
    }

    #[test]
    fn each_text_is_held_to_its_kinds_limit_and_characters() {
        for field in FIELDS {
            let (Kind::Id(max) | Kind::Text(max)) = field.kind else {
                continue;
            };
            let mut event = every_field();
            event[field.client] = json!(text(field, max));
            assert!(read(&event).is_ok(), "{} of {max} characters", field.client);
            event[field.client] = json!(text(field, max + 1));
            assert_eq!(
                read(&event).map(|_| ()),
                Err(Rejection {
                    field: field.client,
                    message: format!("field {} is longer than {max} characters", field.client)
                })
            );
            event[field.client] = json!(format!("{}\u{7}", text(field, 6)));
            let read = read(&event).map(|_| ());
            match field.kind {
                Kind::Id(_) => assert_eq!(
                    read.map_err(|r| r.message),
                    Err(format!(
                        "field {} must not contain control characters",
                        field.client
                    ))
                ),
                _ => assert_eq!(read, Ok(()), "{}", field.client),
            }
        }
    }

    #[test]
    fn the_list_names_each_field_and_column_once() {
        let mut names: Vec<&str> = FIELDS.iter().map(|f| f.name).collect();
        let mut clients: Vec<&str> = FIELDS
            .iter()
            .map(|f| f.client)
            .chain(CLIENT_ONLY.iter().copied())
            .collect();
        names.sort_unstable();
        clients.sort_unstable();
        let (n, c) = (names.len(), clients.len());
        names.dedup();
        clients.dedup();
        assert_eq!((names.len(), clients.len()), (n, c));
        for field in FIELDS {
            assert!(
                !field.required || matches!(field.kind, Kind::Id(_)),
                "{}",
                field.name
            );
        }
    }
}
