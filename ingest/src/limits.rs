//! Per-key rate limits: a token bucket per public key, refilled at the key's
//! `maxEventsPerSecond` (or the ingest's default) and holding two seconds' worth of events.
//! A request is admitted whole or refused whole, before anything of it is published. A
//! batch larger than the bucket passes when the bucket is full and leaves it in debt, so
//! no batch is refused forever and the rate still holds on average. Each ingest replica
//! keeps its own buckets: with N replicas behind a balancer a key gets up to N times its
//! limit, so set it per replica.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Seconds of events a full bucket holds.
pub const BURST_SECONDS: f64 = 2.0;

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

#[derive(Debug, Default)]
pub struct RateLimiter {
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl RateLimiter {
    /// Takes `events` from `key`'s bucket refilled at `rate` per second, or answers how
    /// long to wait before such a request may pass. `None` rate: no limit.
    pub fn admit(
        &self,
        key: &str,
        rate: Option<f64>,
        events: usize,
        now: Instant,
    ) -> Result<(), Duration> {
        let Some(rate) = rate else {
            return Ok(());
        };
        let capacity = (rate * BURST_SECONDS).max(1.0);
        let events = events as f64;
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let bucket = buckets.entry(key.to_owned()).or_insert(Bucket {
            tokens: capacity,
            at: now,
        });
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * rate).min(capacity);
        bucket.at = now;
        let needed = events.min(capacity);
        if bucket.tokens >= needed {
            bucket.tokens -= events;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((needed - bucket.tokens) / rate))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_bucket_holds_two_seconds_then_refills_at_the_rate() {
        let limiter = RateLimiter::default();
        let t = Instant::now();
        let rate = Some(5.0);
        assert_eq!(limiter.admit("pk_a", rate, 5, t), Ok(()));
        assert_eq!(limiter.admit("pk_a", rate, 5, t), Ok(()));
        assert_eq!(
            limiter.admit("pk_a", rate, 5, t),
            Err(Duration::from_secs(1)),
            "empty: 5 events need a second"
        );
        assert_eq!(
            limiter.admit("pk_b", rate, 5, t),
            Ok(()),
            "other keys unaffected"
        );
        assert_eq!(
            limiter.admit("pk_a", rate, 5, t + Duration::from_secs(1)),
            Ok(())
        );
        assert_eq!(limiter.admit("pk_free", None, 1_000_000, t), Ok(()));
    }

    #[test]
    fn a_batch_larger_than_the_bucket_passes_when_full_and_leaves_a_debt() {
        let limiter = RateLimiter::default();
        let t = Instant::now();
        let rate = Some(1.0); // capacity 2
        assert_eq!(limiter.admit("pk_a", rate, 10, t), Ok(()));
        // 2 - 10 = -8 tokens: the next event waits for 9 of them.
        assert_eq!(
            limiter.admit("pk_a", rate, 1, t),
            Err(Duration::from_secs(9))
        );
        assert_eq!(
            limiter.admit("pk_a", rate, 1, t + Duration::from_secs(9)),
            Ok(())
        );
    }
}
