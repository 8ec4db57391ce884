//! Capped exponential backoff: the waits between retries of one operation.

use std::time::Duration;

#[derive(Clone, Debug)]
pub struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    /// Waits of `first`, doubling, never above `max`.
    pub fn new(first: Duration, max: Duration) -> Self {
        Self { next: first, max }
    }

    /// The consumer's retries of ClickHouse and Kafka: 100 ms doubling up to 10 s.
    pub fn standard() -> Self {
        Self::new(Duration::from_millis(100), Duration::from_secs(10))
    }

    /// The wait before the next retry.
    pub fn next_wait(&mut self) -> Duration {
        let wait = self.next;
        self.next = (self.next * 2).min(self.max);
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_the_cap() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(500));
        let waits: Vec<u128> = (0..5).map(|_| b.next_wait().as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 500, 500]);
    }
}
