//! Capped exponential backoff: the waits between retries of one operation, optionally
//! jittered so that processes retrying the same thing do not retry in step.

use std::time::Duration;

#[derive(Clone, Debug)]
pub struct Backoff {
    next: Duration,
    max: Duration,
    jitter: bool,
}

impl Backoff {
    /// Waits of `first`, doubling, never above `max`.
    pub fn new(first: Duration, max: Duration) -> Self {
        Self {
            next: first,
            max,
            jitter: false,
        }
    }

    /// Each wait lengthened by a random share of itself (up to double).
    pub fn jittered(self) -> Self {
        Self {
            jitter: true,
            ..self
        }
    }

    /// The consumer's retries of ClickHouse and Kafka: 100 ms doubling up to 10 s.
    pub fn standard() -> Self {
        Self::new(Duration::from_millis(100), Duration::from_secs(10))
    }

    /// The wait before the next retry.
    pub fn next_wait(&mut self) -> Duration {
        let wait = self.next;
        self.next = (self.next * 2).min(self.max);
        if self.jitter {
            wait + wait.mul_f64(fastrand::f64())
        } else {
            wait
        }
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

    #[test]
    fn jittered_waits_spread_between_the_wait_and_its_double() {
        let waits: Vec<Duration> = (0..50)
            .map(|_| Backoff::new(Duration::from_millis(100), Duration::from_secs(1)).jittered())
            .map(|mut b| b.next_wait())
            .collect();
        assert!(
            waits
                .iter()
                .all(|w| (Duration::from_millis(100)..=Duration::from_millis(200)).contains(w))
        );
        let distinct: std::collections::BTreeSet<_> = waits.iter().collect();
        assert!(
            distinct.len() > 25,
            "{} distinct waits of 50",
            distinct.len()
        );
    }
}
