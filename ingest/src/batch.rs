//! A body's events checked one at a time and turned into what Kafka gets: each accepted
//! event encoded at once into one buffer (its key, then its payload), each refused one
//! counted and, among the first [`LISTED_REJECTIONS`], listed with its reason. Nothing is
//! kept per event beyond its message and two ranges, so a batch of refused events costs
//! its count and no more, and the answer that lists them stays short.

use std::borrow::Cow;
use std::ops::Range;

use contract::event::{EventMessage, Rejection};
use serde::Serialize;

use crate::sink::Message;

/// Rejections an answer lists; beyond them it counts all of them (`rejectedCount`). A
/// listed one takes about 80 bytes, so 100 keep an answer under 16 KB.
pub const LISTED_REJECTIONS: usize = 100;

/// An event refused by validation: its place in the batch and why.
#[derive(Debug, Serialize)]
pub struct Rejected {
    pub index: usize,
    pub error: String,
}

/// The refused events of a batch: the first [`LISTED_REJECTIONS`] listed, all counted,
/// and counted by the field at fault (for `ingest_events_rejected_total`).
#[derive(Debug, Default)]
pub struct Rejections {
    pub listed: Vec<Rejected>,
    pub count: usize,
    by_field: Vec<(&'static str, u64)>,
}

impl Rejections {
    fn add(&mut self, index: usize, rejection: Rejection) {
        self.count += 1;
        match self
            .by_field
            .iter_mut()
            .find(|(f, _)| *f == rejection.field)
        {
            Some((_, n)) => *n += 1,
            None => self.by_field.push((rejection.field, 1)),
        }
        if self.listed.len() < LISTED_REJECTIONS {
            self.listed.push(Rejected {
                index,
                error: rejection.message,
            });
        }
    }

    /// The count of all rejections when the list leaves some out (`rejectedCount`): a
    /// list without it is whole, so the usual answer is as it always was.
    pub fn count_if_cut(&self) -> Option<usize> {
        (self.count > self.listed.len()).then_some(self.count)
    }

    /// Counts the rejections in `ingest_events_rejected_total`, by field.
    pub fn record(&self) {
        for &(field, n) in &self.by_field {
            metrics::counter!("ingest_events_rejected_total", "field" => field).increment(n);
        }
    }
}

/// Bytes of the first buffer of a batch's messages; each next one is twice the last, up to
/// [`LAST_CHUNK_BYTES`]. Messages are never moved to make room: one buffer grown by doubling
/// would hold 48 MB for a moment to keep a 22 MB batch.
const FIRST_CHUNK_BYTES: usize = 16 * 1024;
const LAST_CHUNK_BYTES: usize = 1 << 20;
/// Room a buffer must have left to take the next message (a longer message grows it).
const ROOM_BYTES: usize = 16 * 1024;

/// The accepted events of a batch encoded one after the other (each its key, then its
/// payload) in a few buffers, and the refused ones.
#[derive(Default)]
pub struct Batch {
    chunks: Vec<Vec<u8>>,
    /// Where each message is: its buffer, its key and its payload there.
    messages: Vec<(usize, Range<usize>, Range<usize>)>,
    pub rejections: Rejections,
}

impl Batch {
    /// The event at `index` checked: encoded if valid, counted if not. Fails only if the
    /// message cannot be written as JSON.
    pub fn add<'e>(
        &mut self,
        index: usize,
        event: Result<EventMessage<Cow<'e, str>>, Rejection>,
    ) -> Result<(), serde_json::Error> {
        let message = match event {
            Ok(message) => message,
            Err(rejection) => {
                self.rejections.add(index, rejection);
                return Ok(());
            }
        };
        let (at, chunk) = self.chunk_with_room();
        let start = chunk.len();
        chunk.extend_from_slice(message.kafka_key().as_bytes());
        let key_end = chunk.len();
        serde_json::to_writer(&mut *chunk, &message)?;
        let end = chunk.len();
        self.messages.push((at, start..key_end, key_end..end));
        Ok(())
    }

    /// The last buffer, or a new one if it has not [`ROOM_BYTES`] left.
    fn chunk_with_room(&mut self) -> (usize, &mut Vec<u8>) {
        let room = self.chunks.last().map(|c| c.capacity() - c.len());
        if room.is_none_or(|room| room < ROOM_BYTES) {
            let size = self.chunks.last().map_or(FIRST_CHUNK_BYTES, |c| {
                (c.capacity() * 2).min(LAST_CHUNK_BYTES)
            });
            self.chunks.push(Vec::with_capacity(size));
        }
        let at = self.chunks.len() - 1;
        (at, &mut self.chunks[at])
    }

    pub fn accepted(&self) -> usize {
        self.messages.len()
    }

    /// The messages as the sink takes them, borrowed from the batch.
    pub fn messages(&self) -> Vec<Message<'_>> {
        self.messages
            .iter()
            .map(|(at, key, payload)| Message {
                key: &self.chunks[*at][key.clone()],
                payload: &self.chunks[*at][payload.clone()],
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_fill_buffers_that_are_never_moved() {
        let envelope = contract::event::Envelope::new(1, "pk_a".into(), "ua".repeat(500), None);
        let mut batch = Batch::default();
        let n = 20_000;
        for index in 0..n {
            let json =
                format!(r#"{{"eventName":"e{index}","experimentId":"exp_1","sessionId":"s"}}"#);
            let event = EventMessage::from_client_json(&json, &envelope)
                .map(|m| m.map(|text| Cow::Owned(text.into_owned())));
            batch.add(index, event).expect("encoded");
        }
        let messages = batch.messages();
        assert_eq!(messages.len(), n);
        for (index, message) in messages.iter().enumerate().step_by(997) {
            let decoded: EventMessage = serde_json::from_slice(message.payload).expect("JSON");
            assert_eq!(decoded.event_name, format!("e{index}"));
            assert_eq!(message.key, b"s");
        }
        let used: usize = batch.chunks.iter().map(Vec::len).sum();
        let held: usize = batch.chunks.iter().map(Vec::capacity).sum();
        assert!(used > 20 << 20, "{used}");
        // No buffer grew (none moved), and the room left is at most one buffer's.
        let sizes: Vec<usize> = batch.chunks.iter().map(Vec::capacity).collect();
        assert!(sizes.iter().all(|&c| c <= LAST_CHUNK_BYTES), "{sizes:?}");
        assert!(held - used < LAST_CHUNK_BYTES, "{held} held for {used}");
    }

    #[test]
    fn a_whole_list_says_no_count() {
        let mut batch = Batch::default();
        for index in 0..LISTED_REJECTIONS {
            let refused = Rejection {
                field: "event",
                message: "no".into(),
            };
            batch.add(index, Err(refused)).expect("counted");
        }
        assert_eq!(batch.rejections.count_if_cut(), None);
    }

    #[test]
    fn rejections_are_all_counted_and_the_first_listed() {
        let mut batch = Batch::default();
        for index in 0..1000 {
            let field = if index % 2 == 0 { "eventName" } else { "event" };
            let refused = Rejection {
                field,
                message: format!("reason {index}"),
            };
            batch.add(index, Err(refused)).expect("counted");
        }
        let rejections = &batch.rejections;
        assert_eq!(rejections.count, 1000);
        assert_eq!(rejections.listed.len(), LISTED_REJECTIONS);
        assert_eq!(rejections.listed[99].index, 99);
        assert_eq!(rejections.listed[99].error, "reason 99");
        assert_eq!(rejections.by_field, [("eventName", 500), ("event", 500)]);
        assert_eq!(rejections.count_if_cut(), Some(1000));
        assert_eq!(batch.accepted(), 0);
        assert!(batch.chunks.is_empty(), "nothing kept for refused events");
    }
}
