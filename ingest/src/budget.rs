//! The memory of the requests worked on at once (`INGEST_MAX_BYTES_IN_FLIGHT`): each
//! request takes a share of the budget, [`cost`], from the end of its body's reading to its
//! answer, and waits for it if the budget is spent. The cost is what the request may take
//! at most whatever its events hold: its body, the reading of its events, and the Kafka
//! messages they could become, each with the User-Agent in it (a 1 MiB body of the
//! smallest events with a 1 KiB User-Agent becomes 22 MB of messages: docs/ingest-limits.md).
//! A body takes its share once read, so a client trickling its body in holds none; a
//! request that costs more than the whole budget waits for all of it and runs alone.

use tokio::sync::{Semaphore, SemaphorePermit};

/// Least bytes of body an accepted event takes:
/// `{"eventName":"a","experimentId":"b","sessionId":"c"},`.
const MIN_EVENT_BYTES: usize = 53;
/// Most bytes a message adds to its event's own text, the User-Agent aside: the fields the
/// ingest adds (`event_id`, `received_at`, the key of at most 128 characters, `phase`,
/// `event_time`...) and the longer names of the message's fields.
const ENVELOPE_BYTES: usize = 320;
/// Bytes of the one-pass reading of events, and of the body's copy, per byte of body
/// (`body::TYPED_BYTES_PER_BODY_BYTE` and one).
const READING_BYTES_PER_BODY_BYTE: usize = 6;

/// The most a request with `body_bytes` of (decoded) body and `user_agent_bytes` of
/// User-Agent kept may take while it is worked on: its reading, and its messages (each its
/// event's text, the envelope and the User-Agent, doubled at most by JSON's escapes).
pub fn cost(body_bytes: usize, user_agent_bytes: usize) -> usize {
    let events = body_bytes / MIN_EVENT_BYTES + 1;
    let message = 2 * user_agent_bytes + ENVELOPE_BYTES;
    body_bytes
        .saturating_mul(READING_BYTES_PER_BODY_BYTE)
        .saturating_add(events.saturating_mul(message))
}

#[derive(Debug)]
pub struct Budget {
    bytes: Semaphore,
    total: u32,
}

impl Budget {
    pub fn new(total: u32) -> Self {
        let total = total.max(1);
        Self {
            bytes: Semaphore::new(total as usize),
            total,
        }
    }

    /// Waits until `bytes` of the budget are free (all of it, if it is smaller) and takes
    /// them until the share is dropped.
    pub async fn take(&self, bytes: usize) -> SemaphorePermit<'_> {
        let share = u32::try_from(bytes)
            .unwrap_or(u32::MAX)
            .clamp(1, self.total);
        if let Ok(permit) = self.bytes.try_acquire_many(share) {
            return permit;
        }
        metrics::counter!("ingest_body_budget_waits_total").increment(1);
        self.bytes
            .acquire_many(share)
            .await
            .expect("the budget's semaphore is never closed")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_request_costs_its_reading_and_the_most_its_events_could_become() {
        // The flood: 600 KB of empty events, no User-Agent.
        assert_eq!(cost(600_000, 0), 3_600_000 + 11_321 * 320);
        // The largest body of the smallest events, with the longest User-Agent kept.
        assert_eq!(cost(1 << 20, 1024), (6 << 20) + 19_785 * 2368);
        // A browser's usual batch, five events in 1.2 KB: the default budget holds 800.
        assert!((16 << 20) / cost(1200, 120) > 800);
    }

    #[tokio::test]
    async fn bodies_beyond_the_budget_wait_for_the_shares_given_back() {
        let budget = Budget::new(1000);
        let first = budget.take(600).await;
        let second = budget.take(400).await;
        let waiting = tokio::time::timeout(Duration::from_millis(50), budget.take(1)).await;
        assert!(waiting.is_err(), "the budget is spent");
        drop(first);
        let third = budget.take(600).await;
        // Larger than the whole budget: takes it all, once it is all free.
        let whole = tokio::time::timeout(Duration::from_millis(50), budget.take(5000)).await;
        assert!(whole.is_err());
        drop((second, third));
        let whole = budget.take(5000).await;
        assert_eq!(whole.num_permits(), 1000);
    }
}
