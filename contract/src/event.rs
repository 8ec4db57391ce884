//! The analytics event: the contract's client form, its validation, and the Kafka message
//! (format v1) that the ingest writes and the consumer reads.
//!
//! Validation turns a client's JSON object into an [`EventMessage`] or one sentence saying
//! what is wrong; an `EventMessage` is therefore always within the documented limits. The
//! client's fields are one list, [`event_fields!`](crate::event_fields) (`event/fields.rs`):
//! the message, the typed reading and the validation's reading follow from it.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;

mod fields;

/// Version of the Kafka message format written by this code.
pub const MESSAGE_VERSION: u8 = 1;
/// Longest id or name (eventName, experimentId, sessionId, variantId), in characters.
pub const MAX_ID_CHARS: usize = 256;
/// Longest URL-like text (clickTarget, pathname, referrer), in characters.
pub const MAX_URL_CHARS: usize = 2048;
/// Longest UTM parameter, in characters.
pub const MAX_UTM_CHARS: usize = 512;
/// Longest User-Agent kept; a longer one is cut at a character boundary.
pub const MAX_USER_AGENT_BYTES: usize = 1024;
/// How far before its receipt a client may place an event ([`EventMessage::event_time`]):
/// one day. An earlier time is moved up to this bound.
pub const MAX_EVENT_AGE_MS: i64 = 24 * 3600 * 1000;

/// Now, in milliseconds since the Unix epoch (the unit of `received_at`).
pub fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// What a field's type and limit in [`event_fields!`](crate::event_fields) mean to the
/// message: its [`EventMessage::map`] (`map`), and its reading by the contract (`read`).
macro_rules! field {
    (map T $value:expr, $f:ident) => {
        $value.map(&mut $f)
    };
    (map $other:ident $value:expr, $f:ident) => {
        $value
    };

    (read T id($max:expr) $fields:ident, $key:expr) => {
        $fields.opt_str($key, $max, Text::Id)
    };
    (read T text($max:expr) $fields:ident, $key:expr) => {
        $fields.opt_str($key, $max, Text::Free)
    };
    (read f64 $fields:ident, $key:expr) => {
        $fields.opt_number($key)
    };
    (read u32 $fields:ident, $key:expr) => {
        $fields.opt_whole($key)
    };
    (read bool $fields:ident, $key:expr) => {
        $fields.opt_bool($key)
    };
}

/// The message, the typed reading of a client's event, the [`keys`] of its fields and its
/// reading by the contract, from the list of [`fields`]; the fields the ingest adds are
/// written out here.
macro_rules! event_message {
    (
        required { $( $req:ident $req_name:literal T id($req_max:expr) $req_column:literal, )* }
        optional {
            $( $opt:ident $opt_name:literal $ty:ident $($limit:ident($max:expr))? $opt_column:literal, )*
        }
    ) => {
        /// One event as it travels through Kafka (JSON, snake_case field names), enriched by
        /// the ingest with `event_id`, `received_at`, `public_key` and `user_agent`. Its
        /// texts are `String`s, or any type read from a JSON string: the consumer reads them
        /// as [`JsonStr`], borrowed from the message where no unescaping is needed. The
        /// client's fields are those of [`event_fields!`](crate::event_fields).
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        pub struct EventMessage<T = String> {
            /// Message format version, [`MESSAGE_VERSION`].
            pub v: u8,
            pub event_id: Uuid,
            /// When the ingest received the event: milliseconds since the Unix epoch, UTC.
            pub received_at: i64,
            pub public_key: T,
            #[serde(default)]
            pub user_agent: T,
            /// The User-Agent is a known crawler's or automation's ([`is_bot`]): the event is
            /// kept, and left out of results.
            #[serde(default, skip_serializing_if = "std::ops::Not::not")]
            pub is_bot: bool,
            $( pub $req: T, )*
            $(
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub $opt: Option<$ty>,
            )*
            /// When the event happened, in milliseconds since the Unix epoch, on the
            /// ingest's clock: the client's `timestamp` moved by the offset between the
            /// ingest's clock and the client's (`received_at - sentAt`). Absent when the
            /// client sent no `timestamp` or no `sentAt`: the event happened at
            /// `received_at`. Never after `received_at`, never more than
            /// [`MAX_EVENT_AGE_MS`] before it.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub event_time: Option<i64>,
        }

        impl<T> EventMessage<T> {
            /// The same message with each text converted by `f`.
            pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> EventMessage<U> {
                EventMessage {
                    v: self.v,
                    event_id: self.event_id,
                    received_at: self.received_at,
                    public_key: f(self.public_key),
                    user_agent: f(self.user_agent),
                    is_bot: self.is_bot,
                    $( $req: f(self.$req), )*
                    $( $opt: field!(map $ty self.$opt, f), )*
                    event_time: self.event_time,
                }
            }
        }

        /// An event's fields, typed by serde straight from the request's bytes, borrowing
        /// the strings that need no unescaping ([`JsonStr`]: serde's own `Cow` would not
        /// borrow inside an `Option`). Reading it fails on a wrong type or a repeated
        /// field; the [`Value`] path then gives the answer.
        #[derive(Deserialize)]
        struct Typed<T> {
            #[serde(default, rename = "eventId")]
            event_id: Option<T>,
            $(
                #[serde(default, rename = $req_name)]
                $req: Option<T>,
            )*
            $(
                #[serde(default, rename = $opt_name)]
                $opt: Option<$ty>,
            )*
            #[serde(default)]
            timestamp: Option<f64>,
        }

        /// A [`Key`] per client field, named as the message's field.
        mod keys {
            use super::Key;

            pub(super) fn event_id<T>() -> Key<T, Option<T>> {
                Key { name: "eventId", typed: |t| &mut t.event_id }
            }
            $(
                pub(super) fn $req<T>() -> Key<T, Option<T>> {
                    Key { name: $req_name, typed: |t| &mut t.$req }
                }
            )*
            $(
                pub(super) fn $opt<T>() -> Key<T, Option<$ty>> {
                    Key { name: $opt_name, typed: |t| &mut t.$opt }
                }
            )*
            pub(super) fn timestamp<T>() -> Key<T, Option<f64>> {
                Key { name: "timestamp", typed: |t| &mut t.timestamp }
            }
        }

        impl<'a> EventMessage<Cow<'a, str>> {
            /// The message of an event that passed the [`rules`]: every field read, in the
            /// list's order, with the ingest's.
            fn read<S: Source<'a>>(
                mut f: Fields<S>,
                event_id: Uuid,
                envelope: &'a Envelope,
            ) -> Result<Self, Rejection> {
                Ok(Self {
                    v: MESSAGE_VERSION,
                    event_id,
                    received_at: envelope.received_at,
                    public_key: Cow::Borrowed(&envelope.public_key),
                    user_agent: Cow::Borrowed(&envelope.user_agent),
                    is_bot: envelope.is_bot,
                    $( $req: f.req_str(keys::$req(), $req_max)?, )*
                    $( $opt: field!(read $ty $($limit($max))? f, keys::$opt())?, )*
                    event_time: envelope.event_time(f.opt_number(keys::timestamp())?),
                })
            }
        }
    };
}

crate::event_fields!(event_message);

/// A text of an [`EventMessage`] read from JSON: borrowed from the JSON when it holds no
/// escape, unescaped into a string of its own when it does.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JsonStr<'a>(pub Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for JsonStr<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = JsonStr<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Self::Value, E> {
                Ok(JsonStr(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
                Ok(JsonStr(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E>(self, s: String) -> Result<Self::Value, E> {
                Ok(JsonStr(Cow::Owned(s)))
            }
        }
        deserializer.deserialize_str(Visitor)
    }
}

/// A client's event read straight from JSON into its typed fields, its texts borrowed
/// where the JSON escaped nothing: an object whose known fields have the contract's JSON
/// types, each once. Anything else fails to deserialize; [`EventMessage::from_client_json`]
/// of its text then names the fault. A batch of such events is read in one pass over the
/// request's body, and [`EventMessage::from_client_event`] checks each against the contract.
pub struct ClientEvent<'a>(Typed<JsonStr<'a>>);

impl<'de: 'a, 'a> Deserialize<'de> for ClientEvent<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // serde would also fill a struct from an array, by position: objects only.
        struct Object<'a>(std::marker::PhantomData<ClientEvent<'a>>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Object<'a> {
            type Value = ClientEvent<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an event object")
            }
            fn visit_map<A>(self, map: A) -> Result<Self::Value, A::Error>
            where
                A: serde::de::MapAccess<'de>,
            {
                let fields = serde::de::value::MapAccessDeserializer::new(map);
                Typed::deserialize(fields).map(ClientEvent)
            }
        }
        deserializer.deserialize_map(Object(std::marker::PhantomData))
    }
}

/// Why an event was refused: the field at fault (`event` for the element itself) and a
/// sentence for the client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    pub field: &'static str,
    pub message: String,
}

impl Rejection {
    fn new(field: &'static str, message: impl Into<String>) -> Self {
        Self {
            field,
            message: message.into(),
        }
    }

    /// `field <name> must <rule>`.
    fn must(field: &'static str, rule: &str) -> Self {
        Self::new(field, format!("field {field} must {rule}"))
    }

    /// An event whose text serde_json cannot read as a value: one that is no object, or an
    /// object that the batch's reading let through (it checks only the JSON's shape) but
    /// that holds what JSON text may spell and no program can hold: a string with a lone
    /// UTF-16 surrogate escape (`"\ud800"`), or a number beyond a 64-bit float (`1e400`).
    pub fn unreadable(json: &str, error: &serde_json::Error) -> Self {
        if !json.trim_start().starts_with('{') {
            return Self::new("event", "an event must be a JSON object");
        }
        // serde_json's own words, without the place it gives: a line and column of the
        // event's text, not of the body, which would mislead the client.
        let said = error.to_string();
        let said = said.split(" at line ").next().unwrap_or_default();
        let reason = if said.contains("surrogate") || said.contains("hex escape") {
            "a string holds a lone UTF-16 surrogate escape (\\ud800 to \\udfff without its pair)"
        } else if said == "number out of range" {
            "a number is out of range (beyond a 64-bit float)"
        } else {
            said
        };
        Self::new("event", format!("an event is not valid JSON: {reason}"))
    }
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Highest `phase` of an experiment (see [`crate::snapshot::Experiment::phase`]).
pub const MAX_PHASE: u32 = 1_000_000;

/// Whether a User-Agent is a known crawler's, monitor's or automated browser's, by the
/// `isbot` crate's maintained list. An empty one is not: it says nothing either way.
pub fn is_bot(user_agent: &str) -> bool {
    static BOTS: std::sync::LazyLock<isbot::Bots> = std::sync::LazyLock::new(isbot::Bots::default);
    !user_agent.is_empty() && BOTS.is_bot(user_agent)
}

/// What the ingest knows about a request, added to each of its events.
#[derive(Clone, Debug)]
pub struct Envelope {
    pub received_at: i64,
    pub public_key: String,
    pub user_agent: String,
    /// [`is_bot`] of the User-Agent.
    pub is_bot: bool,
    /// The batch's `sentAt`: the client's clock when it sent the request, in milliseconds.
    pub sent_at: Option<f64>,
}

impl Envelope {
    /// The envelope of a request: its User-Agent cut to [`MAX_USER_AGENT_BYTES`] and
    /// checked by [`is_bot`].
    pub fn new(
        received_at: i64,
        public_key: String,
        user_agent: String,
        sent_at: Option<f64>,
    ) -> Self {
        let user_agent = Self::clamp_user_agent(user_agent);
        Self {
            received_at,
            public_key,
            is_bot: is_bot(&user_agent),
            user_agent,
            sent_at,
        }
    }

    /// The time of an event the client stamped `timestamp`, on the ingest's clock (see
    /// [`EventMessage::event_time`]).
    pub fn event_time(&self, timestamp: Option<f64>) -> Option<i64> {
        let (timestamp, sent_at) = (timestamp?, self.sent_at?);
        let corrected = self.received_at as f64 - (sent_at - timestamp);
        let earliest = self.received_at - MAX_EVENT_AGE_MS;
        // `as` saturates a float out of range; the clamp then puts it in bounds.
        Some((corrected.round() as i64).clamp(earliest, self.received_at))
    }

    /// The envelope with its User-Agent kept to `max_bytes` (cut at a character boundary;
    /// 0: not kept at all), after [`is_bot`] read it whole: what a deployment stores of
    /// it (`INGEST_USER_AGENT_MAX_BYTES`).
    pub fn keeping_user_agent(mut self, max_bytes: usize) -> Self {
        if self.user_agent.len() > max_bytes {
            let mut end = max_bytes;
            while !self.user_agent.is_char_boundary(end) {
                end -= 1;
            }
            self.user_agent.truncate(end);
        }
        self
    }

    /// Cuts an over-long User-Agent at a character boundary.
    pub fn clamp_user_agent(mut ua: String) -> String {
        if ua.len() > MAX_USER_AGENT_BYTES {
            let mut end = MAX_USER_AGENT_BYTES;
            while !ua.is_char_boundary(end) {
                end -= 1;
            }
            ua.truncate(end);
        }
        ua
    }
}

impl<T: AsRef<str>> EventMessage<T> {
    /// The unit of the experiments' results: the client's `visitorId`, or its session for
    /// clients that send none.
    pub fn visitor(&self) -> &str {
        self.visitor_id
            .as_ref()
            .unwrap_or(&self.session_id)
            .as_ref()
    }

    /// The message key: events of one visitor go to one partition, in order.
    pub fn kafka_key(&self) -> &str {
        self.visitor()
    }
}

impl EventMessage {
    /// Validates one element of a batch's `events` array against the contract.
    /// Unknown fields are ignored. Returns the reason as one sentence on failure.
    pub fn from_client(value: &Value, envelope: &Envelope) -> Result<Self, Rejection> {
        EventMessage::from_value(value, envelope).map(|m| m.map(Cow::into_owned))
    }
}

impl<'a> EventMessage<Cow<'a, str>> {
    /// [`EventMessage::from_client`] of one event's JSON text, with the texts borrowed from
    /// `json` (where the JSON escaped nothing) and from `envelope`. The common case, an
    /// object whose fields have the right types, is read straight into typed fields;
    /// anything else goes through [`Value`], which names the field at fault. Same answers
    /// either way.
    pub fn from_client_json(json: &'a str, envelope: &'a Envelope) -> Result<Self, Rejection> {
        if let Ok(event) = serde_json::from_str::<ClientEvent<'a>>(json) {
            return Self::from_client_event(event, envelope);
        }
        match serde_json::from_str::<Value>(json) {
            Ok(value) => EventMessage::from_value(&value, envelope)
                .map(|m| m.map(|text| Cow::Owned(text.into_owned()))),
            Err(e) => Err(Rejection::unreadable(json, &e)),
        }
    }

    /// [`EventMessage::from_client_json`] of an event already read into its typed fields.
    pub fn from_client_event(
        event: ClientEvent<'a>,
        envelope: &'a Envelope,
    ) -> Result<Self, Rejection> {
        Self::validate(Fields(event.0), envelope)
    }

    fn from_value(value: &'a Value, envelope: &'a Envelope) -> Result<Self, Rejection> {
        let Value::Object(obj) = value else {
            return Err(Rejection::new("event", "an event must be a JSON object"));
        };
        Self::validate(Fields(obj), envelope)
    }

    fn validate<S: Source<'a>>(
        mut f: Fields<S>,
        envelope: &'a Envelope,
    ) -> Result<Self, Rejection> {
        let event_id = rules(&mut f)?;
        Self::read(f, event_id, envelope)
    }
}

/// The contract's rules beyond a field's type and length, checked before the fields are
/// read; their order decides which fault an event with several is refused for. Returns
/// the event's id: the client's `eventId`, or a new UUIDv7.
fn rules<'a, S: Source<'a>>(f: &mut Fields<S>) -> Result<Uuid, Rejection> {
    let key = keys::event_id();
    let event_id = match f.opt_str(key, MAX_ID_CHARS, Text::Id)? {
        None => Uuid::now_v7(),
        Some(raw) => match Uuid::parse_str(&raw) {
            Ok(id) if !id.is_nil() => id,
            _ => return Err(Rejection::must(key.name, "be a UUID")),
        },
    };
    let key = keys::experiment_id();
    let experiment_id = required(key.name, f.peek_str(key, MAX_ID_CHARS, Text::Id)?)?;
    if !has_prefix_and_more(&experiment_id, "exp_") {
        return Err(Rejection::must(
            key.name,
            "be exp_ followed by at least one character",
        ));
    }
    let key = keys::variant_id();
    let variant_id = f.peek_str(key, MAX_ID_CHARS, Text::Id)?;
    if variant_id
        .as_ref()
        .is_some_and(|v| !has_prefix_and_more(v, "var_"))
    {
        return Err(Rejection::must(
            key.name,
            "be var_ followed by at least one character",
        ));
    }
    let key = keys::phase();
    if f.opt_whole(key)?
        .is_some_and(|p| !(1..=MAX_PHASE).contains(&p))
    {
        return Err(whole_out_of_range(key.name));
    }
    let key = keys::scroll_depth();
    if f.opt_number(key)?
        .is_some_and(|d| !(0.0..=100.0).contains(&d))
    {
        return Err(Rejection::must(key.name, "be between 0 and 100"));
    }
    let durations = [keys::load_time(), keys::time_on_page()];
    let values = [f.opt_number(durations[0])?, f.opt_number(durations[1])?];
    for (key, n) in durations.into_iter().zip(values) {
        if n.is_some_and(|n| n < 0.0) {
            return Err(Rejection::must(key.name, "be a number >= 0"));
        }
    }
    Ok(event_id)
}

fn has_prefix_and_more(s: &str, prefix: &str) -> bool {
    s.len() > prefix.len() && s.starts_with(prefix)
}

/// Ids may not hold control characters; free text is kept as sent.
#[derive(Clone, Copy, PartialEq)]
enum Text {
    Id,
    Free,
}

/// A client field: its name in the JSON, and where [`Typed`] of texts `T` holds it (a `V`).
struct Key<T, V> {
    name: &'static str,
    typed: fn(&mut Typed<T>) -> &mut V,
}

impl<T, V> Clone for Key<T, V> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T, V> Copy for Key<T, V> {}

/// The keys of a text, a number and a flag of a client's event read from JSON.
type TextKey<'a> = Key<JsonStr<'a>, Option<JsonStr<'a>>>;
type NumberKey<'a> = Key<JsonStr<'a>, Option<f64>>;
type FlagKey<'a> = Key<JsonStr<'a>, Option<bool>>;
type WholeKey<'a> = Key<JsonStr<'a>, Option<u32>>;

/// Where an event's fields come from: a [`Value`] object, or [`Typed`] fields. A source
/// only checks JSON types; [`Fields`] adds the contract's rules.
trait Source<'a> {
    /// `None` when absent or `null` (JavaScript clients send `undefined` fields so). The
    /// text is taken: a field is read once, after the [`rules`] peeked at it.
    fn text(&mut self, key: TextKey<'a>) -> Result<Option<Cow<'a, str>>, Rejection>;
    /// What [`Source::text`] gives, left in place.
    fn peek_text(&mut self, key: TextKey<'a>) -> Result<Option<Cow<'a, str>>, Rejection>;
    fn number(&mut self, key: NumberKey<'a>) -> Result<Option<f64>, Rejection>;
    fn flag(&mut self, key: FlagKey<'a>) -> Result<Option<bool>, Rejection>;
    fn whole(&mut self, key: WholeKey<'a>) -> Result<Option<u32>, Rejection>;
}

impl<'a> Source<'a> for &'a Map<String, Value> {
    fn text(&mut self, key: TextKey<'a>) -> Result<Option<Cow<'a, str>>, Rejection> {
        match self.get(key.name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(Cow::Borrowed(s))),
            Some(_) => Err(Rejection::must(key.name, "be a string")),
        }
    }

    fn peek_text(&mut self, key: TextKey<'a>) -> Result<Option<Cow<'a, str>>, Rejection> {
        self.text(key)
    }

    fn number(&mut self, key: NumberKey<'a>) -> Result<Option<f64>, Rejection> {
        match self.get(key.name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => match n.as_f64() {
                Some(x) if x.is_finite() => Ok(Some(x)),
                _ => Err(Rejection::must(key.name, "be a finite number")),
            },
            Some(_) => Err(Rejection::must(key.name, "be a number")),
        }
    }

    fn flag(&mut self, key: FlagKey<'a>) -> Result<Option<bool>, Rejection> {
        match self.get(key.name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(Rejection::must(key.name, "be a boolean")),
        }
    }

    fn whole(&mut self, key: WholeKey<'a>) -> Result<Option<u32>, Rejection> {
        match self.get(key.name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => match n.as_u64().map(u32::try_from) {
                Some(Ok(n)) => Ok(Some(n)),
                _ => Err(whole_out_of_range(key.name)),
            },
            Some(_) => Err(Rejection::must(key.name, "be a number")),
        }
    }
}

/// The rejection of a whole number out of its range, 1 to [`MAX_PHASE`] (the only whole
/// number of the list is a phase).
fn whole_out_of_range(name: &'static str) -> Rejection {
    Rejection::must(name, &format!("be a whole number from 1 to {MAX_PHASE}"))
}

impl<'a> Source<'a> for Typed<JsonStr<'a>> {
    fn text(&mut self, key: TextKey<'a>) -> Result<Option<Cow<'a, str>>, Rejection> {
        Ok((key.typed)(self).take().map(|text| text.0))
    }

    fn peek_text(&mut self, key: TextKey<'a>) -> Result<Option<Cow<'a, str>>, Rejection> {
        // Free for a borrowed text; the rules peek at two short ids.
        Ok((key.typed)(self).clone().map(|text| text.0))
    }

    fn number(&mut self, key: NumberKey<'a>) -> Result<Option<f64>, Rejection> {
        Ok(*(key.typed)(self))
    }

    fn flag(&mut self, key: FlagKey<'a>) -> Result<Option<bool>, Rejection> {
        Ok(*(key.typed)(self))
    }

    fn whole(&mut self, key: WholeKey<'a>) -> Result<Option<u32>, Rejection> {
        Ok(*(key.typed)(self))
    }
}

/// The contract's rules over a [`Source`]'s fields.
struct Fields<S>(S);

impl<'a, S: Source<'a>> Fields<S> {
    fn req_str(&mut self, key: TextKey<'a>, max: usize) -> Result<Cow<'a, str>, Rejection> {
        required(key.name, self.opt_str(key, max, Text::Id)?)
    }

    fn opt_str(
        &mut self,
        key: TextKey<'a>,
        max: usize,
        text: Text,
    ) -> Result<Option<Cow<'a, str>>, Rejection> {
        let s = self.0.text(key)?;
        checked(key.name, s, max, text)
    }

    /// [`Fields::opt_str`], leaving the text to be read.
    fn peek_str(
        &mut self,
        key: TextKey<'a>,
        max: usize,
        text: Text,
    ) -> Result<Option<Cow<'a, str>>, Rejection> {
        let s = self.0.peek_text(key)?;
        checked(key.name, s, max, text)
    }

    fn opt_number(&mut self, key: NumberKey<'a>) -> Result<Option<f64>, Rejection> {
        self.0.number(key)
    }

    fn opt_bool(&mut self, key: FlagKey<'a>) -> Result<Option<bool>, Rejection> {
        self.0.flag(key)
    }

    fn opt_whole(&mut self, key: WholeKey<'a>) -> Result<Option<u32>, Rejection> {
        self.0.whole(key)
    }
}

fn checked<'a>(
    name: &'static str,
    s: Option<Cow<'a, str>>,
    max: usize,
    text: Text,
) -> Result<Option<Cow<'a, str>>, Rejection> {
    let Some(s) = s else {
        return Ok(None);
    };
    // Cheap bound first: a string of more bytes than 4 * max has more than max chars.
    if s.len() > max && (s.len() > 4 * max || s.chars().count() > max) {
        return Err(Rejection::new(
            name,
            format!("field {name} is longer than {max} characters"),
        ));
    }
    if text == Text::Id && has_control(&s) {
        return Err(Rejection::must(name, "not contain control characters"));
    }
    Ok(Some(s))
}

/// `s.chars().any(char::is_control)`, fast for the usual id: printable ASCII only (a check
/// the compiler runs many bytes at a time) has no control character; anything else is
/// looked at char by char.
fn has_control(s: &str) -> bool {
    let printable_ascii = s.bytes().fold(true, |ok, b| ok & (0x20..0x7F).contains(&b));
    !printable_ascii && s.chars().any(char::is_control)
}

fn required<'a>(name: &'static str, s: Option<Cow<'a, str>>) -> Result<Cow<'a, str>, Rejection> {
    match s {
        Some(s) if !s.is_empty() => Ok(s),
        Some(_) => Err(Rejection::must(name, "not be empty")),
        None => Err(Rejection::new(name, format!("field {name} is required"))),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_kept_user_agent_is_cut_at_a_character_boundary_or_dropped() {
        let envelope = || Envelope::new(0, "pk".into(), "Mozilla/5.0 (é)".into(), None);
        assert_eq!(
            envelope().keeping_user_agent(1024).user_agent,
            "Mozilla/5.0 (é)"
        );
        // `é` is two bytes: a cut inside it keeps the characters before.
        assert_eq!(
            envelope().keeping_user_agent(14).user_agent,
            "Mozilla/5.0 ("
        );
        assert_eq!(envelope().keeping_user_agent(0).user_agent, "");
    }

    use super::*;
    use serde_json::json;

    fn envelope() -> Envelope {
        Envelope::new(1_700_000_000_123, "pk_test".into(), "UA".into(), None)
    }

    /// Both readings of an event, which must agree, as the result or `field: message`.
    fn check(v: Value) -> Result<EventMessage, String> {
        agree(&v.to_string(), EventMessage::from_client(&v, &envelope()))
    }

    fn agree(
        json: &str,
        from_value: Result<EventMessage, Rejection>,
    ) -> Result<EventMessage, String> {
        let envelope = envelope();
        let from_text =
            EventMessage::from_client_json(json, &envelope).map(|m| m.map(Cow::into_owned));
        match (&from_value, from_text) {
            (Ok(a), Ok(b)) => assert_eq!(
                *a,
                EventMessage {
                    event_id: a.event_id,
                    ..b
                },
                "{json}"
            ),
            (Err(a), Err(b)) => assert_eq!(*a, b, "{json}"),
            (a, b) => panic!("{json}: the Value reading gave {a:?}, the typed one {b:?}"),
        }
        from_value.map_err(|r| format!("{}: {r}", r.field))
    }

    #[test]
    fn control_characters_are_found_in_the_bytes_as_char_is_control_finds_them() {
        for c in (0..=0x10FFFFu32).filter_map(char::from_u32) {
            for s in [c.to_string(), format!("ab{c}"), format!("{c}\u{a0}é")] {
                assert_eq!(
                    super::has_control(&s),
                    s.chars().any(char::is_control),
                    "{c:?}"
                );
            }
        }
    }

    #[test]
    fn text_the_typed_reading_cannot_take_gets_the_value_answer() {
        let value = |json: &str| {
            serde_json::from_str::<Value>(json)
                .map_err(|e| Rejection::unreadable(json, &e))
                .and_then(|v| EventMessage::from_client(&v, &envelope()))
        };
        for json in [
            // A repeated field: the last one counts, as in a JSON object.
            r#"{"eventName":"a","eventName":"click","experimentId":"exp_1","sessionId":"s"}"#,
            // An array would fill the typed fields by position.
            r#"["click","exp_1","s"]"#,
            r#"  {"eventName":"cl\u00efck \"x\"","experimentId":"exp_1","sessionId":"s","extra":[1,{"a":null}]}"#,
            r#"{"eventName":"click","experimentId":"exp_1","sessionId":"s","loadTime":12}"#,
            r#"{"eventName":"click","experimentId":"exp_1","sessionId":"s","loadTime":1e400}"#,
            "nonsense",
        ] {
            let _ = agree(json, value(json));
        }
        let envelope = envelope();
        let typed = EventMessage::from_client_json(
            r#"{"eventName":"a","eventName":"click","experimentId":"exp_1","sessionId":"s"}"#,
            &envelope,
        );
        assert_eq!(typed.expect("valid").event_name, "click");
    }

    /// What a batch's reading lets through (it checks the JSON's shape only) but no value
    /// can hold is named as such, not called "no object".
    #[test]
    fn an_event_json_cannot_hold_is_said_to_be_invalid_json() {
        let envelope = envelope();
        let refused = |json: &str| {
            EventMessage::from_client_json(json, &envelope)
                .map(|_| ())
                .expect_err(json)
        };
        for json in [
            r#"{"eventName":"\ud800","experimentId":"exp_1","sessionId":"s"}"#,
            r#"{"eventName":"a\udc00b","experimentId":"exp_1","sessionId":"s"}"#,
            r#"{"eventName":"a","experimentId":"exp_1","sessionId":"s","visitorId":"\ud800\u0041"}"#,
        ] {
            assert_eq!(
                refused(json),
                Rejection::new(
                    "event",
                    "an event is not valid JSON: a string holds a lone UTF-16 surrogate escape \
                     (\\ud800 to \\udfff without its pair)"
                ),
                "{json}"
            );
        }
        for json in [
            r#"{"eventName":"a","experimentId":"exp_1","sessionId":"s","loadTime":1e400}"#,
            r#"{"eventName":"a","experimentId":"exp_1","sessionId":"s","scrollDepth":-1e400}"#,
        ] {
            assert_eq!(
                refused(json).message,
                "an event is not valid JSON: a number is out of range (beyond a 64-bit float)",
                "{json}"
            );
        }
        for json in ["[1]", "7", "\"text\"", "  [[[[]]]]"] {
            assert_eq!(
                refused(json).message,
                "an event must be a JSON object",
                "{json}"
            );
        }
        // Unknown fields are not read, so what they hold does not matter.
        let ignored =
            r#"{"eventName":"a","experimentId":"exp_1","sessionId":"s","x":["\ud800",1e400]}"#;
        assert!(EventMessage::from_client_json(ignored, &envelope).is_ok());
        // A surrogate pair is one character: read as such.
        let pair = r#"{"eventName":"\ud83d\ude00","experimentId":"exp_1","sessionId":"s"}"#;
        let message = EventMessage::from_client_json(pair, &envelope).expect("valid");
        assert_eq!(message.event_name, "\u{1F600}");
    }

    #[test]
    fn texts_are_borrowed_from_the_json_unless_it_escaped_them() {
        let envelope = envelope();
        let json = r#"{"eventName":"click","experimentId":"exp_1","sessionId":"s\u00e9","pathname":"/a\"b","referrer":"r"}"#;
        let m = EventMessage::from_client_json(json, &envelope).expect("valid");
        let borrowed = |text: &Cow<'_, str>| matches!(text, Cow::Borrowed(_));
        assert!(borrowed(&m.event_name) && borrowed(&m.experiment_id));
        assert!(borrowed(m.referrer.as_ref().expect("referrer")));
        assert!(borrowed(&m.public_key) && borrowed(&m.user_agent));
        assert_eq!(
            (m.session_id.as_ref(), m.pathname.as_deref()),
            ("sé", Some("/a\"b"))
        );
        assert!(!borrowed(&m.session_id) && !borrowed(m.pathname.as_ref().expect("pathname")));
    }

    fn minimal() -> Value {
        json!({ "eventName": "impression", "experimentId": "exp_1", "sessionId": "s1" })
    }

    fn with(field: &str, value: Value) -> Value {
        let mut v = minimal();
        v[field] = value;
        v
    }

    #[test]
    fn the_visitor_is_the_key_and_the_unit_and_defaults_to_the_session() {
        let m = check(minimal()).expect("valid");
        assert_eq!((m.visitor_id.as_deref(), m.visitor()), (None, "s1"));
        assert_eq!(m.kafka_key(), "s1");
        let m = check(with("visitorId", json!("v-1"))).expect("valid");
        assert_eq!((m.visitor(), m.kafka_key()), ("v-1", "v-1"));
        // The rules of an id, as sessionId's.
        assert_eq!(
            check(with("visitorId", json!("v\u{7}"))).map(|_| ()),
            Err("visitorId: field visitorId must not contain control characters".into())
        );
        assert!(check(with("visitorId", json!("v".repeat(MAX_ID_CHARS + 1)))).is_err());
        assert!(check(with("visitorId", json!(7))).is_err());
    }

    #[test]
    fn a_phase_is_a_whole_number_from_one() {
        for ok in [1, 2, MAX_PHASE] {
            assert_eq!(
                check(with("phase", json!(ok))).expect("valid").phase,
                Some(ok)
            );
        }
        assert_eq!(
            check(with("phase", Value::Null)).expect("valid").phase,
            None
        );
        let refused = format!("phase: field phase must be a whole number from 1 to {MAX_PHASE}");
        for bad in [
            json!(0),
            json!(-1),
            json!(1.5),
            json!(MAX_PHASE + 1),
            json!(1e20),
        ] {
            assert_eq!(
                check(with("phase", bad.clone())).map(|_| ()),
                Err(refused.clone()),
                "{bad}"
            );
        }
        assert_eq!(
            check(with("phase", json!("2"))).map(|_| ()),
            Err("phase: field phase must be a number".into())
        );
    }

    #[test]
    fn crawlers_and_automation_are_bots_by_their_user_agent() {
        for bot in [
            "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
            "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/156.0.0.0 Safari/537.36",
            "curl/8.5.0",
            "python-requests/2.32.3",
        ] {
            assert!(is_bot(bot), "{bot}");
            assert!(
                Envelope::new(0, "pk".into(), bot.into(), None).is_bot,
                "{bot}"
            );
        }
        for person in [
            "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/156.0.0.0 Safari/537.36",
            "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1",
            "",
        ] {
            assert!(!is_bot(person), "{person}");
        }
        let bot = Envelope::new(0, "pk".into(), "Googlebot/2.1".into(), None);
        let m = EventMessage::from_client(&minimal(), &bot).expect("valid");
        assert!(m.is_bot);
        let json = serde_json::to_value(&m).expect("ser");
        assert_eq!(json["is_bot"], json!(true));
        let person = EventMessage::from_client(&minimal(), &envelope()).expect("valid");
        let json = serde_json::to_value(&person).expect("ser");
        assert!(json.get("is_bot").is_none(), "left out when false: {json}");
    }

    #[test]
    fn full_event_maps_every_field() {
        let id = Uuid::new_v4();
        let m = check(json!({
            "eventId": id.to_string(), "eventName": "click", "experimentId": "exp_1",
            "sessionId": "s1", "variantId": "var_b", "conversion": true, "loadTime": 12.5,
            "scrollDepth": 100, "timeOnPage": 0, "clickTarget": "#buy", "pathname": "/p",
            "referrer": "", "utm_source": "a", "utm_medium": "b", "utm_campaign": "c",
            "utm_term": "d", "utm_content": "e", "test": false, "someday": [1, 2]
        }))
        .expect("valid");
        assert_eq!(m.event_id, id);
        assert_eq!(
            (m.received_at, m.public_key.as_str(), m.user_agent.as_str()),
            (1_700_000_000_123, "pk_test", "UA")
        );
        assert_eq!(m.variant_id.as_deref(), Some("var_b"));
        assert_eq!((m.conversion, m.test), (Some(true), Some(false)));
        assert_eq!(
            (m.load_time, m.scroll_depth, m.time_on_page),
            (Some(12.5), Some(100.0), Some(0.0))
        );
        assert_eq!(m.referrer.as_deref(), Some(""));
        assert_eq!(m.utm_content.as_deref(), Some("e"));
        let back: EventMessage =
            serde_json::from_slice(&serde_json::to_vec(&m).expect("ser")).expect("de");
        assert_eq!(back, m);
    }

    #[test]
    fn event_time_is_the_clients_timestamp_moved_by_its_clock_offset_within_bounds() {
        let received = 1_700_000_000_123;
        // The client's clock is 10 s behind; it stamped the event 3 s before sending.
        let batch = Envelope {
            sent_at: Some((received - 10_000) as f64),
            ..envelope()
        };
        let at = |timestamp: Value| {
            let v = with("timestamp", timestamp);
            let m = EventMessage::from_client(&v, &batch).expect("valid");
            let json = v.to_string();
            let typed = EventMessage::from_client_json(&json, &batch).expect("valid");
            assert_eq!(m.event_time, typed.event_time, "{v}");
            m.event_time
        };
        assert_eq!(at(json!(received - 13_000)), Some(received - 3_000));
        assert_eq!(
            at(json!(received as f64 - 13_000.4)),
            Some(received - 3_000)
        );
        // Never after its receipt, never more than a day before it.
        assert_eq!(at(json!(received)), Some(received));
        assert_eq!(at(json!(0)), Some(received - MAX_EVENT_AGE_MS));
        assert_eq!(at(json!(-1e300)), Some(received - MAX_EVENT_AGE_MS));
        assert_eq!(at(json!(1e300)), Some(received));
        // Without either half there is no offset to apply: the event happened on receipt.
        assert_eq!(at(Value::Null), None);
        let m = check(with("timestamp", json!(received - 5))).expect("valid");
        assert_eq!(m.event_time, None);
        assert_eq!(
            check(with("timestamp", json!("yesterday"))).map(|_| ()),
            Err("timestamp: field timestamp must be a number".into())
        );
        // The message carries it, and an older message without it still reads.
        let m = EventMessage::from_client(&with("timestamp", json!(received - 13_000)), &batch)
            .expect("valid");
        let text = serde_json::to_string(&m).expect("ser");
        let field = format!(r#","event_time":{}"#, received - 3_000);
        assert!(text.contains(&field), "{text}");
        let old: EventMessage = serde_json::from_str(&text.replace(&field, "")).expect("de");
        assert_eq!(
            (old.event_time, m.event_time),
            (None, Some(received - 3_000))
        );
    }

    #[test]
    fn server_assigns_uuid_v7_when_absent() {
        let m = check(minimal()).expect("valid");
        assert_eq!(m.event_id.get_version_num(), 7);
        assert_eq!(m.variant_id, None);
        assert_eq!(m.kafka_key(), "s1");
    }

    #[test]
    fn rejections_name_the_field() {
        let long = |n: usize| Value::String("é".repeat(n));
        let cases = [
            (json!([]), "must be a JSON object"),
            (
                json!({ "experimentId": "exp_1", "sessionId": "s" }),
                "eventName is required",
            ),
            (with("eventName", json!("")), "eventName must not be empty"),
            (with("eventName", json!(5)), "eventName must be a string"),
            (
                with("experimentId", json!("1")),
                "experimentId must be exp_",
            ),
            (
                with("experimentId", json!("exp_")),
                "experimentId must be exp_",
            ),
            (with("sessionId", json!(null)), "sessionId is required"),
            (
                with("sessionId", json!("a\u{0}b")),
                "sessionId must not contain control",
            ),
            (with("variantId", json!("v1")), "variantId must be var_"),
            (
                with("conversion", json!("true")),
                "conversion must be a boolean",
            ),
            (with("loadTime", json!("5")), "loadTime must be a number"),
            (
                with("loadTime", json!(-1)),
                "loadTime must be a number >= 0",
            ),
            (
                with("timeOnPage", json!(-0.5)),
                "timeOnPage must be a number >= 0",
            ),
            (
                with("scrollDepth", json!(100.5)),
                "scrollDepth must be between 0 and 100",
            ),
            (
                with("scrollDepth", json!(-1)),
                "scrollDepth must be between 0 and 100",
            ),
            (with("test", json!(1)), "test must be a boolean"),
            (with("eventId", json!("nope")), "eventId must be a UUID"),
            (
                with("eventId", json!(Uuid::nil().to_string())),
                "eventId must be a UUID",
            ),
            (with("sessionId", long(257)), "sessionId is longer than 256"),
            (with("pathname", long(2049)), "pathname is longer than 2048"),
            (with("utm_term", long(513)), "utm_term is longer than 512"),
            (with("referrer", json!(false)), "referrer must be a string"),
        ];
        for (input, want) in cases {
            let err = check(input.clone()).expect_err(&format!("{input} was accepted"));
            assert!(err.contains(want), "{input}: got {err:?}, want {want:?}");
            let field = err.split(':').next().unwrap_or_default();
            assert!(
                field == "event" || want.contains(field),
                "{err:?} blames {field}"
            );
        }
    }

    #[test]
    fn an_event_with_several_faults_is_refused_for_the_first_the_rules_check() {
        let faults = |pairs: &[(&str, Value)]| {
            let mut v = minimal();
            for (field, value) in pairs {
                v[*field] = value.clone();
            }
            check(v).expect_err("refused")
        };
        let cases = [
            (
                faults(&[("eventName", json!(5)), ("experimentId", json!("x"))]),
                "experimentId: field experimentId must be exp_",
            ),
            (
                faults(&[("sessionId", json!("")), ("variantId", json!("x"))]),
                "variantId: field variantId must be var_",
            ),
            (
                faults(&[("loadTime", json!(-1)), ("scrollDepth", json!(101))]),
                "scrollDepth: field scrollDepth must be between",
            ),
            (
                faults(&[("loadTime", json!(-1)), ("timeOnPage", json!("x"))]),
                "timeOnPage: field timeOnPage must be a number",
            ),
            (
                faults(&[("conversion", json!(1)), ("pathname", json!(1))]),
                "conversion: field conversion must be a boolean",
            ),
        ];
        for (got, want) in cases {
            assert!(got.starts_with(want), "got {got:?}, want {want:?}");
        }
    }

    #[test]
    fn limits_count_characters_and_free_text_keeps_control_characters() {
        let m = check(with("sessionId", Value::String("é".repeat(256)))).expect("256 chars");
        assert_eq!(m.session_id.chars().count(), 256);
        let m = check(with("clickTarget", json!("a\tb\u{1}"))).expect("free text");
        assert_eq!(m.click_target.as_deref(), Some("a\tb\u{1}"));
        assert!(check(with("eventName", json!("my custom event"))).is_ok());
    }

    #[test]
    fn user_agent_is_cut_at_a_char_boundary() {
        let ua = Envelope::clamp_user_agent("é".repeat(600));
        assert!(ua.len() <= MAX_USER_AGENT_BYTES && ua.len() >= MAX_USER_AGENT_BYTES - 1);
    }
}
