//! A request body read into its key (`pkey`, the page-unload form's), its events and the
//! client's clock (`sentAt`), with memory in proportion to the body whatever it holds: the
//! usual body is read in one pass into typed events, as long as they take at most
//! [`TYPED_BYTES_PER_BODY_BYTE`] times the body; any other body (small events by the
//! hundred thousand, an event of another shape, a repeated field) is kept as the text of
//! its events, which are then read one at a time ([`Events::for_each`]).

use std::borrow::Cow;

use contract::event::{ClientEvent, JsonStr};
use serde::Deserializer as _;
use serde::de::{DeserializeSeed, Error as _, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use crate::error::IngestError;

/// Most bytes of typed events per byte of body in the one-pass reading: a typed event
/// takes about 450 bytes whatever its text, an empty one (`{},`) 3 bytes of body. The
/// usual events (100 bytes and more of JSON each) stay within it. Counted in the request's
/// cost (`budget::cost`).
const TYPED_BYTES_PER_BODY_BYTE: usize = 4;
/// Events any body may have typed at once, whatever its size (about 110 KB).
const TYPED_EVENTS_ALWAYS: usize = 256;

/// A body's key, events and clock. The problems are kept apart so that they are reported in
/// order: the key first.
pub(crate) struct Parsed<'a> {
    pub pkey: Result<Option<Cow<'a, str>>, IngestError>,
    pub events: Result<Events<'a>, IngestError>,
    pub sent_at: Result<Option<f64>, IngestError>,
}

/// The events of a body, never empty.
pub(crate) enum Events<'a> {
    /// Each read into its typed fields in the body's one pass: the usual body.
    Typed(Vec<ClientEvent<'a>>),
    /// The text of the `events` array, each event read alone when it is reached, so that
    /// one bad event is refused alone.
    Text(&'a RawValue),
}

/// One event, as [`Events::for_each`] hands it on. Never stored: one at a time passes by
/// value, so the size of the typed one costs nothing and a box would cost an allocation.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Event<'a> {
    Typed(ClientEvent<'a>),
    Text(&'a str),
}

impl<'a> Events<'a> {
    /// Calls `each` with every event in the body's order, none of them kept once handed on.
    pub fn for_each(self, mut each: impl FnMut(Event<'a>)) {
        match self {
            Self::Typed(events) => events.into_iter().map(Event::Typed).for_each(each),
            Self::Text(array) => {
                // The text was read as a JSON array already: reading it again cannot fail.
                let mut reader = serde_json::Deserializer::from_str(array.get());
                let _ = reader.deserialize_seq(EachText(&mut each));
            }
        }
    }
}

impl<'a> Parsed<'a> {
    pub fn from_bytes(bytes: &'a [u8]) -> Result<Self, IngestError> {
        // serde would also fill a struct from an array, by position: objects only.
        if bytes.trim_ascii_start().first() == Some(&b'{')
            && let Some(usual) = Self::typed(bytes)
        {
            return Ok(usual);
        }
        Self::text(bytes)
    }

    /// The usual body, if it is one, its events typed in the one pass.
    fn typed(bytes: &'a [u8]) -> Option<Self> {
        let most = (bytes.len() * TYPED_BYTES_PER_BODY_BYTE / size_of::<ClientEvent<'_>>())
            .max(TYPED_EVENTS_ALWAYS);
        let mut reader = serde_json::Deserializer::from_slice(bytes);
        let usual = reader.deserialize_map(TypedBody { most }).ok()?;
        reader.end().ok()?;
        Some(usual)
    }

    /// Any other body, with the answer that names what is wrong. Its events are kept as the
    /// text of their array; the last of a repeated field counts, as in a JSON object.
    fn text(bytes: &'a [u8]) -> Result<Self, IngestError> {
        let mut reader = serde_json::Deserializer::from_slice(bytes);
        let fields = match reader.deserialize_map(TextBody) {
            Ok(fields) => {
                reader.end().map_err(IngestError::MalformedJson)?;
                fields
            }
            Err(e) => {
                // JSON of another kind, or no JSON at all? (An object fails here only for
                // what the shape's check lets through: a lone surrogate in a field's name.)
                let object = bytes.trim_ascii_start().first() == Some(&b'{');
                return Err(match serde_json::from_slice::<IgnoredAny>(bytes) {
                    Ok(_) if !object => IngestError::InvalidBody("The body must be a JSON object."),
                    Ok(_) => IngestError::MalformedJson(e),
                    Err(syntax) => IngestError::MalformedJson(syntax),
                });
            }
        };
        let pkey = match fields.pkey {
            None => Ok(None),
            Some(raw) => serde_json::from_str::<Option<JsonStr<'a>>>(raw.get())
                .map(|key| key.map(|key| key.0))
                .map_err(|_| {
                    IngestError::InvalidPublicKey("The field pkey must be a string.".into())
                }),
        };
        let events = match fields.events.map(|raw| (raw, raw.get())) {
            None => Err(IngestError::InvalidBody("The field events is required.")),
            Some((_, text)) if !text.starts_with('[') => Err(IngestError::InvalidBody(
                "The field events must be an array.",
            )),
            Some((_, text)) if text[1..].trim_start().starts_with(']') => {
                Err(IngestError::InvalidBody("The events array is empty."))
            }
            Some((raw, _)) => Ok(Events::Text(raw)),
        };
        let sent_at = match fields.sent_at {
            None => Ok(None),
            Some(raw) => match serde_json::from_str::<Option<f64>>(raw.get()) {
                Ok(sent_at) if sent_at.is_none_or(f64::is_finite) => Ok(sent_at),
                _ => Err(IngestError::InvalidBody(
                    "The field sentAt must be a number: the client's clock in milliseconds since the Unix epoch.",
                )),
            },
        };
        Ok(Self {
            pkey,
            events,
            sent_at,
        })
    }
}

/// The usual body: `pkey` a string, `events` a non-empty array of at most `most` events of
/// the usual shape, `sentAt` a number, each at most once; anything else fails it.
struct TypedBody {
    most: usize,
}

impl<'de> Visitor<'de> for TypedBody {
    type Value = Parsed<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the usual body")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Parsed<'de>, A::Error> {
        let (mut pkey, mut events, mut sent_at) = (None, None, None);
        while let Some(name) = map.next_key::<JsonStr<'de>>()? {
            match name.0.as_ref() {
                "pkey" => once(&mut pkey, map.next_value::<Option<JsonStr<'de>>>()?)?,
                "events" => once(&mut events, map.next_value_seed(TypedEvents(self.most))?)?,
                "sentAt" => once(&mut sent_at, map.next_value::<Option<f64>>()?)?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let events = events.ok_or_else(|| A::Error::missing_field("events"))?;
        if events.is_empty() {
            return Err(A::Error::invalid_length(0, &"events"));
        }
        Ok(Parsed {
            pkey: Ok(pkey.flatten().map(|key| key.0)),
            events: Ok(Events::Typed(events)),
            sent_at: Ok(sent_at.flatten()),
        })
    }
}

/// Sets a field seen for the first time; a repeated one fails the usual reading.
fn once<T, E: serde::de::Error>(field: &mut Option<T>, value: T) -> Result<(), E> {
    if field.replace(value).is_some() {
        return Err(E::custom("a repeated field"));
    }
    Ok(())
}

/// The `events` array read into at most `.0` typed events.
struct TypedEvents(usize);

impl<'de> DeserializeSeed<'de> for TypedEvents {
    type Value = Vec<ClientEvent<'de>>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for TypedEvents {
    type Value = Vec<ClientEvent<'de>>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an array of events")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut events = Vec::new();
        while let Some(event) = seq.next_element::<ClientEvent<'de>>()? {
            if events.len() == self.0 {
                return Err(A::Error::custom("more events than the one pass takes"));
            }
            events.push(event);
        }
        Ok(events)
    }
}

/// Any object's `pkey`, `events` and `sentAt` as their JSON texts, the last of each.
#[derive(Default)]
struct TextFields<'a> {
    pkey: Option<&'a RawValue>,
    events: Option<&'a RawValue>,
    sent_at: Option<&'a RawValue>,
}

struct TextBody;

impl<'de> Visitor<'de> for TextBody {
    type Value = TextFields<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TextFields<'de>, A::Error> {
        let mut fields = TextFields::default();
        while let Some(name) = map.next_key::<JsonStr<'de>>()? {
            let field = match name.0.as_ref() {
                "pkey" => &mut fields.pkey,
                "events" => &mut fields.events,
                "sentAt" => &mut fields.sent_at,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            *field = Some(map.next_value()?);
        }
        Ok(fields)
    }
}

/// Hands each element of a JSON array on as its text.
struct EachText<'f, F>(&'f mut F);

impl<'de, F: FnMut(Event<'de>)> Visitor<'de> for EachText<'_, F> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(event) = seq.next_element::<&'de RawValue>()? {
            (self.0)(Event::Text(event.get()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(body: &str) -> Vec<String> {
        let parsed = Parsed::from_bytes(body.as_bytes()).expect("an object");
        let mut texts = Vec::new();
        parsed
            .events
            .unwrap_or_else(|e| panic!("{e}"))
            .for_each(|event| {
                texts.push(match event {
                    Event::Typed(_) => "typed".to_owned(),
                    Event::Text(text) => text.to_owned(),
                });
            });
        texts
    }

    #[test]
    fn the_usual_body_is_typed_in_one_pass_and_others_kept_as_text() {
        let usual = r#"{"pkey":"pk_a","events":[{"eventName":"a"},{}],"sentAt":5}"#;
        assert_eq!(events(usual), ["typed", "typed"]);
        let parsed = Parsed::from_bytes(usual.as_bytes()).expect("an object");
        assert_eq!(parsed.pkey.ok().flatten().as_deref(), Some("pk_a"));
        assert_eq!(parsed.sent_at.ok().flatten(), Some(5.0));

        // Another shape, a repeated field: each event's text, the last field counting.
        assert_eq!(events(r#"{"events":[{}, 7 ,[1]]}"#), ["{}", "7", "[1]"]);
        assert_eq!(
            events(r#"{"events":[{"a":1}],"events":[ {"b":2} ]}"#),
            [r#"{"b":2}"#]
        );
    }

    #[test]
    fn small_events_by_the_thousand_are_not_typed_at_once() {
        // Typed, 10 000 empty events would take 4.5 MB for 30 KB of body.
        let body = format!(r#"{{"events":[{}]}}"#, vec!["{}"; 10_000].join(","));
        let parsed = Parsed::from_bytes(body.as_bytes()).expect("an object");
        assert!(matches!(parsed.events, Ok(Events::Text(_))));
        assert_eq!(events(&body).len(), 10_000);
        // Up to the floor, any body is typed.
        let body = format!(r#"{{"events":[{}]}}"#, vec!["{}"; 256].join(","));
        let parsed = Parsed::from_bytes(body.as_bytes()).expect("an object");
        assert!(matches!(parsed.events, Ok(Events::Typed(_))));
    }

    #[test]
    fn what_the_body_holds_besides_events_is_read_as_before() {
        let problem = |body: &str| match Parsed::from_bytes(body.as_bytes()) {
            Err(e) => e.to_string(),
            Ok(p) => [p.pkey.err(), p.events.err(), p.sent_at.err()]
                .into_iter()
                .flatten()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join(" "),
        };
        assert_eq!(problem(r#"[{}]"#), "The body must be a JSON object.");
        assert!(problem(r#"{"events":[}"#).starts_with("The body is not valid JSON"));
        assert!(problem(r#"{"events":[{}]} x"#).starts_with("The body is not valid JSON"));
        assert_eq!(
            problem(r#"{"events":{}}"#),
            "The field events must be an array."
        );
        assert_eq!(
            problem(r#"{"events":null}"#),
            "The field events must be an array."
        );
        assert_eq!(problem(r#"{"events":[ ]}"#), "The events array is empty.");
        assert_eq!(
            problem(r#"{"events":[{}],"pkey":7}"#),
            "The field pkey must be a string."
        );
        assert_eq!(problem(r#"{"pkey":null,"events":[{}],"sentAt":null}"#), "");
        assert!(problem(r#"{"events":[{}],"sentAt":"now"}"#).starts_with("The field sentAt"));
        assert!(problem(r#"{"events":[{}],"sentAt":1e400}"#).starts_with("The field sentAt"));
        assert_eq!(problem(r#"{"events":[{}],"\u0070key":"pk_a"}"#), "");
        assert_eq!(problem(r#"{}"#), "The field events is required.");
    }
}
