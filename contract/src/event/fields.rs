//! The one list of an event's fields that come from the client: what each is called in
//! the client's JSON, how it is read and checked, and its column in `analytics.events`.
//! The message ([`EventMessage`](super::EventMessage)), the typed reading of a client's
//! event, the validation's reading and the consumer's row and column list all follow from
//! it, so they cannot disagree. The fields the ingest adds (`v`, `event_id`,
//! `received_at`, `public_key`, `user_agent`, `is_bot`, `event_time`) are written out where
//! each of those is declared.
//!
//! To add a field: one line here, the migration that adds its column (the consumer's
//! `schema/migrations/`), and, if it has a rule beyond its type and length, that rule in
//! [`rules`](super::rules). A test compares the column list with the live table.

/// Calls the macro `$then` with the list, in the order of the Kafka message's JSON:
///
/// ```text
/// required { field "clientName" T    id(max)   "ClickHouse type", ... }
/// optional { field "clientName" type [limit]   "ClickHouse type", ... }
/// ```
///
/// `field` names the message's field and the table's column; `clientName` the field in the
/// client's JSON. Its type in the message: `T` a text (the message's text type), `f64` a
/// finite number, `u32` a whole number, `bool` a boolean. A text has a limit: `id(max)`, at most `max`
/// characters (the constants of [`crate::event`]) and no control characters; `text(max)`,
/// at most `max` characters of anything. A required field is an id; an optional one is
/// `None` in the message when the client left it out or sent `null`. The ClickHouse type
/// decides the Rust type of the consumer's row.
#[macro_export]
macro_rules! event_fields {
    ($then:ident) => {
        $then! {
            required {
                event_name     "eventName"     T     id(MAX_ID_CHARS)     "LowCardinality(String)",
                experiment_id  "experimentId"  T     id(MAX_ID_CHARS)     "LowCardinality(String)",
                session_id     "sessionId"     T     id(MAX_ID_CHARS)     "String",
            }
            optional {
                variant_id     "variantId"     T     id(MAX_ID_CHARS)     "LowCardinality(String)",
                conversion     "conversion"    bool                       "Nullable(UInt8)",
                load_time      "loadTime"      f64                        "Nullable(Float64)",
                scroll_depth   "scrollDepth"   f64                        "Nullable(Float64)",
                time_on_page   "timeOnPage"    f64                        "Nullable(Float64)",
                click_target   "clickTarget"   T     text(MAX_URL_CHARS)  "String",
                pathname       "pathname"      T     text(MAX_URL_CHARS)  "String",
                referrer       "referrer"      T     text(MAX_URL_CHARS)  "String",
                utm_source     "utm_source"    T     text(MAX_UTM_CHARS)  "LowCardinality(String)",
                utm_medium     "utm_medium"    T     text(MAX_UTM_CHARS)  "LowCardinality(String)",
                utm_campaign   "utm_campaign"  T     text(MAX_UTM_CHARS)  "LowCardinality(String)",
                utm_term       "utm_term"      T     text(MAX_UTM_CHARS)  "String",
                utm_content    "utm_content"   T     text(MAX_UTM_CHARS)  "String",
                test           "test"          bool                       "UInt8",
                visitor_id     "visitorId"     T     id(MAX_ID_CHARS)     "String",
                phase          "phase"         u32                        "UInt32",
            }
        }
    };
}
