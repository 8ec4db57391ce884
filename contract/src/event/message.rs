//! The Kafka message of an event (format v1): what the ingest writes and the consumer
//! reads.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

#[cfg(doc)]
use super::{MAX_EVENT_AGE_MS, MESSAGE_VERSION, fields::FIELDS, is_bot};

/// One event as it travels through Kafka (JSON, snake_case field names), enriched by the
/// ingest with `event_id`, `received_at`, `public_key` and `user_agent`. Its texts are
/// `String`s, or any type read from a JSON string: the consumer reads them as [`JsonStr`],
/// borrowed from the message where no unescaping is needed. The client's fields, from
/// `event_name` to `phase`, are those of [`FIELDS`], in its order, with the types of their
/// [`Kind`](super::fields::Kind)s.
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
    pub event_name: T,
    pub experiment_id: T,
    pub session_id: T,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant_id: Option<T>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversion: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_time: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scroll_depth: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_on_page: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub click_target: Option<T>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pathname: Option<T>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub referrer: Option<T>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utm_source: Option<T>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utm_medium: Option<T>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utm_campaign: Option<T>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utm_term: Option<T>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utm_content: Option<T>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visitor_id: Option<T>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<u32>,
    /// When the event happened, in milliseconds since the Unix epoch, on the ingest's
    /// clock: the client's `timestamp` moved by the offset between the ingest's clock and
    /// the client's (`received_at - sentAt`). Absent when the client sent no `timestamp`
    /// or no `sentAt`: the event happened at `received_at`. Never after `received_at`,
    /// never more than [`MAX_EVENT_AGE_MS`] before it.
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
            event_name: f(self.event_name),
            experiment_id: f(self.experiment_id),
            session_id: f(self.session_id),
            variant_id: self.variant_id.map(&mut f),
            conversion: self.conversion,
            load_time: self.load_time,
            scroll_depth: self.scroll_depth,
            time_on_page: self.time_on_page,
            click_target: self.click_target.map(&mut f),
            pathname: self.pathname.map(&mut f),
            referrer: self.referrer.map(&mut f),
            utm_source: self.utm_source.map(&mut f),
            utm_medium: self.utm_medium.map(&mut f),
            utm_campaign: self.utm_campaign.map(&mut f),
            utm_term: self.utm_term.map(&mut f),
            utm_content: self.utm_content.map(&mut f),
            test: self.test,
            visitor_id: self.visitor_id.map(&mut f),
            phase: self.phase,
            event_time: self.event_time,
        }
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
