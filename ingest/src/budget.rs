//! The bytes of request bodies worked on at once (`INGEST_MAX_BODY_BYTES_IN_FLIGHT`): what
//! a request costs in memory, beyond its body, is in proportion to its body (its events
//! read, checked and encoded: docs/ingest-limits.md), so bounding the bytes of bodies
//! between their reading and their answer bounds the memory of all requests together.
//! A body takes its share once read (a client trickling its body in holds none of it)
//! and gives it back with its answer; a body larger than the whole budget takes all of it.

use tokio::sync::{Semaphore, SemaphorePermit};

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

    /// Waits until `bytes` of the budget are free and takes them until the share is dropped.
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
