//! The reading and checking of a client's event: a JSON object in, an [`EventMessage`]
//! or one sentence saying what is wrong out. An `EventMessage` is therefore always within
//! the documented limits. Two readings give the same answers: the common case, an object
//! whose fields have the right JSON types, straight into typed fields ([`ClientEvent`]);
//! anything else through a [`Value`], which names the field at fault.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::{Map, Value};
use uuid::Uuid;

use super::envelope::Envelope;
use super::limits::{MAX_ID_CHARS, MAX_PHASE, MAX_URL_CHARS, MAX_UTM_CHARS, MESSAGE_VERSION};
use super::message::{EventMessage, JsonStr};

#[cfg(doc)]
use super::fields::FIELDS;

/// An event's fields, typed by serde straight from the request's bytes, borrowing the
/// strings that need no unescaping ([`JsonStr`]: serde's own `Cow` would not borrow inside
/// an `Option`). Reading it fails on a wrong type or a repeated field; the [`Value`] path
/// then gives the answer. Its fields are those of [`FIELDS`], each renamed to its client
/// name, with the client's `eventId` and `timestamp`.
#[derive(Deserialize)]
struct Typed<T> {
    #[serde(default, rename = "eventId")]
    event_id: Option<T>,
    #[serde(default, rename = "eventName")]
    event_name: Option<T>,
    #[serde(default, rename = "experimentId")]
    experiment_id: Option<T>,
    #[serde(default, rename = "sessionId")]
    session_id: Option<T>,
    #[serde(default, rename = "variantId")]
    variant_id: Option<T>,
    #[serde(default, rename = "conversion")]
    conversion: Option<bool>,
    #[serde(default, rename = "loadTime")]
    load_time: Option<f64>,
    #[serde(default, rename = "scrollDepth")]
    scroll_depth: Option<f64>,
    #[serde(default, rename = "timeOnPage")]
    time_on_page: Option<f64>,
    #[serde(default, rename = "clickTarget")]
    click_target: Option<T>,
    #[serde(default, rename = "pathname")]
    pathname: Option<T>,
    #[serde(default, rename = "referrer")]
    referrer: Option<T>,
    #[serde(default, rename = "utm_source")]
    utm_source: Option<T>,
    #[serde(default, rename = "utm_medium")]
    utm_medium: Option<T>,
    #[serde(default, rename = "utm_campaign")]
    utm_campaign: Option<T>,
    #[serde(default, rename = "utm_term")]
    utm_term: Option<T>,
    #[serde(default, rename = "utm_content")]
    utm_content: Option<T>,
    #[serde(default, rename = "test")]
    test: Option<bool>,
    #[serde(default, rename = "visitorId")]
    visitor_id: Option<T>,
    #[serde(default, rename = "phase")]
    phase: Option<u32>,
    #[serde(default)]
    timestamp: Option<f64>,
}

/// A [`Key`] per client field, named as the message's field: its client name (as in
/// [`Typed`]'s `rename`) and its place in [`Typed`].
mod keys {
    use super::Key;

    pub(super) fn event_id<T>() -> Key<T, Option<T>> {
        Key {
            name: "eventId",
            typed: |t| &mut t.event_id,
        }
    }

    pub(super) fn event_name<T>() -> Key<T, Option<T>> {
        Key {
            name: "eventName",
            typed: |t| &mut t.event_name,
        }
    }

    pub(super) fn experiment_id<T>() -> Key<T, Option<T>> {
        Key {
            name: "experimentId",
            typed: |t| &mut t.experiment_id,
        }
    }

    pub(super) fn session_id<T>() -> Key<T, Option<T>> {
        Key {
            name: "sessionId",
            typed: |t| &mut t.session_id,
        }
    }

    pub(super) fn variant_id<T>() -> Key<T, Option<T>> {
        Key {
            name: "variantId",
            typed: |t| &mut t.variant_id,
        }
    }

    pub(super) fn conversion<T>() -> Key<T, Option<bool>> {
        Key {
            name: "conversion",
            typed: |t| &mut t.conversion,
        }
    }

    pub(super) fn load_time<T>() -> Key<T, Option<f64>> {
        Key {
            name: "loadTime",
            typed: |t| &mut t.load_time,
        }
    }

    pub(super) fn scroll_depth<T>() -> Key<T, Option<f64>> {
        Key {
            name: "scrollDepth",
            typed: |t| &mut t.scroll_depth,
        }
    }

    pub(super) fn time_on_page<T>() -> Key<T, Option<f64>> {
        Key {
            name: "timeOnPage",
            typed: |t| &mut t.time_on_page,
        }
    }

    pub(super) fn click_target<T>() -> Key<T, Option<T>> {
        Key {
            name: "clickTarget",
            typed: |t| &mut t.click_target,
        }
    }

    pub(super) fn pathname<T>() -> Key<T, Option<T>> {
        Key {
            name: "pathname",
            typed: |t| &mut t.pathname,
        }
    }

    pub(super) fn referrer<T>() -> Key<T, Option<T>> {
        Key {
            name: "referrer",
            typed: |t| &mut t.referrer,
        }
    }

    pub(super) fn utm_source<T>() -> Key<T, Option<T>> {
        Key {
            name: "utm_source",
            typed: |t| &mut t.utm_source,
        }
    }

    pub(super) fn utm_medium<T>() -> Key<T, Option<T>> {
        Key {
            name: "utm_medium",
            typed: |t| &mut t.utm_medium,
        }
    }

    pub(super) fn utm_campaign<T>() -> Key<T, Option<T>> {
        Key {
            name: "utm_campaign",
            typed: |t| &mut t.utm_campaign,
        }
    }

    pub(super) fn utm_term<T>() -> Key<T, Option<T>> {
        Key {
            name: "utm_term",
            typed: |t| &mut t.utm_term,
        }
    }

    pub(super) fn utm_content<T>() -> Key<T, Option<T>> {
        Key {
            name: "utm_content",
            typed: |t| &mut t.utm_content,
        }
    }

    pub(super) fn test<T>() -> Key<T, Option<bool>> {
        Key {
            name: "test",
            typed: |t| &mut t.test,
        }
    }

    pub(super) fn visitor_id<T>() -> Key<T, Option<T>> {
        Key {
            name: "visitorId",
            typed: |t| &mut t.visitor_id,
        }
    }

    pub(super) fn phase<T>() -> Key<T, Option<u32>> {
        Key {
            name: "phase",
            typed: |t| &mut t.phase,
        }
    }

    pub(super) fn timestamp<T>() -> Key<T, Option<f64>> {
        Key {
            name: "timestamp",
            typed: |t| &mut t.timestamp,
        }
    }
}

impl<'a> EventMessage<Cow<'a, str>> {
    /// The message of an event that passed the [`rules`]: every field read, in the
    /// message's order, with the ingest's. Each text's limit and rule are its field's
    /// [`Kind`](super::fields::Kind) in [`FIELDS`].
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
            event_name: f.req_str(keys::event_name(), MAX_ID_CHARS)?,
            experiment_id: f.req_str(keys::experiment_id(), MAX_ID_CHARS)?,
            session_id: f.req_str(keys::session_id(), MAX_ID_CHARS)?,
            variant_id: f.opt_str(keys::variant_id(), MAX_ID_CHARS, Text::Id)?,
            conversion: f.opt_bool(keys::conversion())?,
            load_time: f.opt_number(keys::load_time())?,
            scroll_depth: f.opt_number(keys::scroll_depth())?,
            time_on_page: f.opt_number(keys::time_on_page())?,
            click_target: f.opt_str(keys::click_target(), MAX_URL_CHARS, Text::Free)?,
            pathname: f.opt_str(keys::pathname(), MAX_URL_CHARS, Text::Free)?,
            referrer: f.opt_str(keys::referrer(), MAX_URL_CHARS, Text::Free)?,
            utm_source: f.opt_str(keys::utm_source(), MAX_UTM_CHARS, Text::Free)?,
            utm_medium: f.opt_str(keys::utm_medium(), MAX_UTM_CHARS, Text::Free)?,
            utm_campaign: f.opt_str(keys::utm_campaign(), MAX_UTM_CHARS, Text::Free)?,
            utm_term: f.opt_str(keys::utm_term(), MAX_UTM_CHARS, Text::Free)?,
            utm_content: f.opt_str(keys::utm_content(), MAX_UTM_CHARS, Text::Free)?,
            test: f.opt_bool(keys::test())?,
            // The rules of `sessionId` when present: an empty id would merge every
            // client that sends one into one visitor.
            visitor_id: {
                let key = keys::visitor_id();
                let id = f.opt_str(key, MAX_ID_CHARS, Text::Id)?;
                id.map(|id| required(key.name, Some(id))).transpose()?
            },
            phase: f.opt_whole(keys::phase())?,
            event_time: envelope.event_time(f.opt_number(keys::timestamp())?),
        })
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
mod tests;
