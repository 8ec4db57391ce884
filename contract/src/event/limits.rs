//! The event's limits and the version of its Kafka message format.

/// Version of the Kafka message format written by this code.
pub const MESSAGE_VERSION: u8 = 1;
/// Longest id or name (eventName, experimentId, sessionId, variantId, visitorId), in
/// characters.
pub const MAX_ID_CHARS: usize = 256;
/// Longest URL-like text (clickTarget, pathname, referrer), in characters.
pub const MAX_URL_CHARS: usize = 2048;
/// Longest UTM parameter, in characters.
pub const MAX_UTM_CHARS: usize = 512;
/// Longest User-Agent kept; a longer one is cut at a character boundary.
pub const MAX_USER_AGENT_BYTES: usize = 1024;
/// How far before its receipt a client may place an event
/// ([`EventMessage::event_time`](super::EventMessage::event_time)): one day. An earlier
/// time is moved up to this bound.
pub const MAX_EVENT_AGE_MS: i64 = 24 * 3600 * 1000;
/// Highest `phase` of an experiment (see [`crate::snapshot::Experiment::phase`]).
pub const MAX_PHASE: u32 = 1_000_000;
