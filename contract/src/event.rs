//! The analytics event: the contract's client form, its validation, and the Kafka message
//! (format v1) that the ingest writes and the consumer reads.
//!
//! - [`fields`]: the one list of the client's fields ([`FIELDS`]), which tests check the
//!   message, the reading, the consumer's row, the table, the SDK and the OpenAPI schema
//!   against;
//! - `limits`: the limits of its fields and the message's version;
//! - `message`: the Kafka message, [`EventMessage`];
//! - `envelope`: what the ingest adds to each event of a request, [`Envelope`];
//! - `validate`: a client's JSON to an [`EventMessage`] or a [`Rejection`].

mod envelope;
pub mod fields;
mod limits;
mod message;
mod validate;

pub use envelope::{Envelope, is_bot, now_millis};
pub use fields::{CLIENT_ONLY, FIELDS, Field, INGEST_FIELDS, Kind};
pub use limits::{
    MAX_EVENT_AGE_MS, MAX_ID_CHARS, MAX_PHASE, MAX_URL_CHARS, MAX_USER_AGENT_BYTES, MAX_UTM_CHARS,
    MESSAGE_VERSION,
};
pub use message::{EventMessage, JsonStr};
pub use validate::{ClientEvent, Rejection};
