//! The batch, an arena: the messages of one batch kept in one buffer of bytes, their rows
//! with texts that are spans of it, the dead letters, and the next offset to commit per
//! partition. Every message read is either a row or a dead letter, and its offset is
//! committed only with the batch that holds it; a batch's buffers are used again once it
//! is stored.

use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::Range;

use contract::event::{EventMessage, JsonStr, MESSAGE_VERSION};
use rdkafka::{Message, Offset, TopicPartitionList};
use schema::row::{EventRow, Span};

/// Where a message came from, kept until its batch is stored so that it can be set
/// aside with its original bytes: ranges of the batch's one buffer of kept bytes, not
/// copies of their own (an allocation or three per message, for dead letters that are
/// rare).
pub(crate) struct Origin {
    payload: Range<usize>,
    key: Option<Range<usize>>,
    topic: usize,
    partition: i32,
    offset: i64,
}

/// A message to set aside, as it was read.
pub(crate) struct Letter<'a> {
    pub payload: &'a [u8],
    pub key: Option<&'a [u8]>,
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
}

/// What one batch holds: rows (with their origins) to insert, dead letters to publish
/// first, and the next offset to commit per partition. A stored batch's buffers are used
/// again for a later batch: filling fresh memory (page faults, and copies as the buffers
/// grow) was a third of the consumer's CPU while it drained a backlog.
#[derive(Default)]
pub(crate) struct Batch {
    /// Rows, or payload bytes, that make the batch full.
    max_rows: usize,
    max_bytes: usize,
    /// Their texts are spans of `kept`: of the message's bytes, or of the unescaped copy
    /// kept after them when the JSON escaped a character.
    rows: Vec<EventRow<Span>>,
    origins: Vec<Origin>,
    dead: Vec<(Origin, String)>,
    /// Payload bytes read, for the batch's size bound.
    bytes: usize,
    /// The payloads and keys of the batch's messages, one after another.
    kept: Vec<u8>,
    topics: Vec<String>,
    /// By (index in `topics`, partition).
    next_offsets: HashMap<(usize, i32), i64>,
}

impl Batch {
    pub(crate) fn new(max_rows: usize, max_bytes: usize) -> Self {
        Self {
            max_rows,
            max_bytes,
            ..Self::default()
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.next_offsets.is_empty()
    }

    pub(crate) fn is_full(&self) -> bool {
        self.rows.len() >= self.max_rows || self.bytes >= self.max_bytes
    }

    /// Empties the batch, keeping of its buffers' capacity at most twice what it used:
    /// as much as the next batch needs when the rate holds, and little once it falls.
    pub(crate) fn clear(&mut self) {
        fn empty<T>(buffer: &mut Vec<T>) {
            let used = buffer.len();
            buffer.clear();
            buffer.shrink_to(2 * used);
        }
        empty(&mut self.rows);
        empty(&mut self.origins);
        empty(&mut self.dead);
        empty(&mut self.kept);
        self.topics.clear();
        self.next_offsets.clear();
        self.bytes = 0;
    }

    pub(crate) fn add(&mut self, message: &impl Message) {
        let payload = message.payload().unwrap_or_default();
        self.bytes += payload.len();
        let topic = match self.topics.iter().position(|t| t == message.topic()) {
            Some(index) => index,
            None => {
                self.topics.push(message.topic().to_owned());
                self.topics.len() - 1
            }
        };
        self.next_offsets
            .insert((topic, message.partition()), message.offset() + 1);
        let mut keep = |bytes: &[u8]| {
            let start = self.kept.len();
            self.kept.extend_from_slice(bytes);
            start..self.kept.len()
        };
        let origin = Origin {
            payload: keep(payload),
            key: message.key().map(&mut keep),
            topic,
            partition: message.partition(),
            offset: message.offset(),
        };
        match decode(payload) {
            Ok(event) => {
                let kept = &mut self.kept;
                let row = EventRow::from(event).map(|text| {
                    // A text the JSON did not escape is where the message's copy has it.
                    if let Cow::Borrowed(s) = &text.0
                        && let Some(at) =
                            (s.as_ptr() as usize).checked_sub(payload.as_ptr() as usize)
                        && at + s.len() <= payload.len()
                    {
                        let at = origin.payload.start + at;
                        return at..at + s.len();
                    }
                    let at = kept.len();
                    kept.extend_from_slice(text.0.as_bytes());
                    at..kept.len()
                });
                self.rows.push(row);
                self.origins.push(origin);
            }
            Err(reason) => self.dead.push((origin, reason)),
        }
    }

    /// The rows, whose texts are spans of [`Batch::kept`].
    pub(crate) fn rows(&self) -> &[EventRow<Span>] {
        &self.rows
    }

    /// The bytes the rows' spans are of.
    pub(crate) fn kept(&self) -> &[u8] {
        &self.kept
    }

    /// Messages taken into the batch: its rows and its dead letters.
    pub(crate) fn messages(&self) -> usize {
        self.rows.len() + self.dead.len()
    }

    /// The dead letters found while decoding, with why each was set aside.
    pub(crate) fn dead_letters(&self) -> Vec<(Letter<'_>, String)> {
        self.dead
            .iter()
            .map(|(o, r)| (self.letter(o), r.clone()))
            .collect()
    }

    /// The message the row at `index` came from.
    pub(crate) fn letter_of_row(&self, index: usize) -> Letter<'_> {
        self.letter(&self.origins[index])
    }

    /// The offsets to commit once the batch is stored: the next one per partition.
    pub(crate) fn offsets(&self) -> TopicPartitionList {
        let mut offsets = TopicPartitionList::new();
        for (&(topic, partition), next) in &self.next_offsets {
            let topic = &self.topics[topic];
            if let Err(e) = offsets.add_partition_offset(topic, partition, Offset::Offset(*next)) {
                tracing::warn!(error = %e, "Cannot list an offset to commit.");
            }
        }
        offsets
    }

    fn letter(&self, origin: &Origin) -> Letter<'_> {
        Letter {
            payload: &self.kept[origin.payload.clone()],
            key: origin.key.clone().map(|key| &self.kept[key]),
            topic: &self.topics[origin.topic],
            partition: origin.partition,
            offset: origin.offset,
        }
    }
}

/// A message is stored when it is a v1 event message; anything else is a dead letter.
fn decode(payload: &[u8]) -> Result<EventMessage<JsonStr<'_>>, String> {
    let event: EventMessage<JsonStr<'_>> =
        serde_json::from_slice(payload).map_err(|e| format!("not an event message: {e}"))?;
    if event.v != MESSAGE_VERSION {
        return Err(format!("unsupported message version {}", event.v));
    }
    Ok(event)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> EventRow<Span> {
        let message = serde_json::json!({
            "v": MESSAGE_VERSION, "event_id": uuid::Uuid::now_v7(), "received_at": 1_700_000_000_000i64,
            "public_key": "pk_test", "event_name": "click", "experiment_id": "exp_1",
            "session_id": "s1",
        });
        EventRow::from(serde_json::from_value::<EventMessage>(message).expect("a message"))
            .map(|_| 0..0)
    }

    /// Fills `batch` with `n` rows of 100 payload bytes each, as `add` would.
    fn fill(batch: &mut Batch, n: usize) {
        for offset in 0..n {
            let start = batch.kept.len();
            batch.kept.extend_from_slice(&[b'x'; 100]);
            batch.rows.push(row());
            batch.origins.push(Origin {
                payload: start..batch.kept.len(),
                key: None,
                topic: 0,
                partition: 0,
                offset: offset as i64,
            });
        }
        batch.next_offsets.insert((0, 0), n as i64);
    }

    fn message(payload: &[u8], offset: i64) -> rdkafka::message::OwnedMessage {
        rdkafka::message::OwnedMessage::new(
            Some(payload.to_vec()),
            Some(b"key".to_vec()),
            "events".to_owned(),
            rdkafka::Timestamp::NotAvailable,
            0,
            offset,
            None,
        )
    }

    /// The texts of a batch's row, as the batch's bytes hold them.
    fn texts(batch: &Batch, index: usize) -> EventRow {
        batch.rows[index]
            .map(|span| String::from_utf8(batch.kept[span.clone()].to_vec()).expect("UTF-8"))
    }

    #[test]
    fn a_row_reads_its_texts_where_the_message_has_them_and_unescaped_where_it_escaped_them() {
        let plain = serde_json::json!({
            "v": MESSAGE_VERSION, "event_id": uuid::Uuid::now_v7(), "received_at": 1_700_000_000_000i64,
            "public_key": "pk_test", "user_agent": "Mozilla/5.0", "event_name": "click",
            "experiment_id": "exp_1", "session_id": "s1", "variant_id": "var_a",
            "click_target": "#buy", "pathname": "/p", "utm_source": "news",
        });
        let mut escaped = plain.clone();
        escaped["click_target"] = "say \"hi\"\n".into();
        escaped["referrer"] = "https://exemple.fr/caf\u{e9}?q=a\\b".into();
        escaped["utm_term"] = "\u{1F600} tab\t".into();
        let mut batch = Batch::new(10, usize::MAX);
        for (offset, json) in [&plain, &escaped].into_iter().enumerate() {
            let payload = serde_json::to_vec(json).expect("JSON");
            batch.add(&message(&payload, offset as i64));
            let want = EventRow::from(
                serde_json::from_value::<EventMessage>(json.clone()).expect("a message"),
            );
            assert_eq!(texts(&batch, offset), want, "{json}");
        }
        // The plain message's texts are not copied again.
        let first = batch.origins[0].payload.clone();
        assert!(
            batch.rows[0]
                .map(|span| first.contains(&span.start))
                .session_id
        );
        assert_eq!(
            batch.letter(&batch.origins[1]).payload,
            serde_json::to_vec(&escaped).expect("JSON")
        );
        assert_eq!(batch.letter(&batch.origins[1]).key, Some(&b"key"[..]));

        batch.add(&message(b"{not json", 2));
        assert_eq!((batch.rows.len(), batch.dead.len()), (2, 1));
        assert_eq!(batch.next_offsets[&(0, 0)], 3);
    }

    #[test]
    fn a_stored_batch_keeps_room_for_the_next_at_the_same_rate_and_gives_it_back_when_it_falls() {
        let mut batch = Batch::new(10_000, usize::MAX);
        fill(&mut batch, 10_000);
        batch.clear();
        assert!(batch.is_empty() && batch.rows.is_empty() && batch.kept.is_empty());
        assert!(batch.rows.capacity() >= 10_000 && batch.kept.capacity() >= 1_000_000);

        fill(&mut batch, 10);
        batch.clear();
        assert!(batch.rows.capacity() <= 20, "{}", batch.rows.capacity());
        assert!(batch.origins.capacity() <= 20);
        assert!(batch.kept.capacity() <= 2_000, "{}", batch.kept.capacity());
    }
}
