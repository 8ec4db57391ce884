//! What the ingest knows about a request and adds to each of its events: the time of its
//! receipt, the public key, the User-Agent and whether it is a bot's, the client's clock.

use super::limits::{MAX_EVENT_AGE_MS, MAX_USER_AGENT_BYTES};

#[cfg(doc)]
use super::message::EventMessage;

/// Now, in milliseconds since the Unix epoch (the unit of `received_at`).
pub fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

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
