//! The per-endpoint rate limit, in memory: token buckets with the clock passed in.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

/// Per-endpoint token buckets: each endpoint may start `rate` attempts per second from this
/// process, with bursts of up to one second's worth. In memory, per process: with several
/// `kxp serve` processes the steady-state rate adds up (a drained backlog does not: it is
/// spread in the database). Keyed by `K`: the workers' by [`EndpointId`](crate::model::EndpointId),
/// the API's by the id of a key's owner.
#[derive(Debug)]
pub(crate) struct RateLimiter<K> {
    buckets: HashMap<K, Bucket>,
}

impl<K> Default for RateLimiter<K> {
    fn default() -> Self {
        RateLimiter {
            buckets: HashMap::new(),
        }
    }
}

/// How long an unused full bucket is kept.
const IDLE_BUCKET: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    rate: u32,
    /// When `tokens` was last brought up to date.
    at: Instant,
    /// When a token was last asked for.
    used: Instant,
}

impl Bucket {
    fn refill(&mut self, rate: u32, now: Instant) {
        let capacity = f64::from(rate.max(1));
        let gained = now.saturating_duration_since(self.at).as_secs_f64() * f64::from(rate);
        self.tokens = (self.tokens + gained).min(capacity);
        self.rate = rate;
        self.at = now;
    }
}

impl<K: Hash + Eq> RateLimiter<K> {
    /// Takes one token for `key` at `rate` per second (`None`: unlimited, always granted).
    /// `false` when the key has used its rate.
    pub(crate) fn try_take<Q>(&mut self, key: &Q, rate: Option<u32>, now: Instant) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let Some(rate) = rate else {
            self.buckets.remove(key);
            return true;
        };
        let bucket = self.buckets.entry(key.to_owned()).or_insert(Bucket {
            tokens: f64::from(rate.max(1)),
            rate,
            at: now,
            used: now,
        });
        bucket.refill(rate, now);
        bucket.used = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// How many attempts each rate-limited endpoint may start now (whole tokens), for the
    /// claim's per-endpoint caps. Endpoints not listed are limited only by concurrency.
    pub(crate) fn allowances(&mut self, now: Instant) -> impl Iterator<Item = (&K, usize)> {
        self.buckets.retain(|_, bucket| {
            let idle = now.saturating_duration_since(bucket.used);
            bucket.refill(bucket.rate, now);
            // Kept while in use, so the claim asks for no more than the rate allows; an
            // endpoint idle for a minute is forgotten (a fresh bucket is a full one).
            idle < IDLE_BUCKET || bucket.tokens < f64::from(bucket.rate.max(1))
        });
        self.buckets
            .iter()
            .map(|(id, bucket)| (id, bucket.tokens.floor() as usize))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_allows_a_burst_then_the_rate() {
        let mut limiter = RateLimiter::<String>::default();
        let start = crate::model::tokio_instant();
        let taken = (0..20)
            .filter(|_| limiter.try_take("ep", Some(5), start))
            .count();
        assert_eq!(taken, 5, "a burst of one second's worth");
        assert_eq!(
            limiter.allowances(start).collect::<Vec<_>>(),
            vec![(&"ep".to_owned(), 0)]
        );
        let later = start + Duration::from_millis(400);
        let taken = (0..20)
            .filter(|_| limiter.try_take("ep", Some(5), later))
            .count();
        assert_eq!(taken, 2, "0.4 s at 5/s");
        assert!(limiter.try_take("other", None, later), "unlimited");
        // A full bucket still caps the claim at one second's worth; an idle one is forgotten.
        let later = later + Duration::from_secs(5);
        let mut caps: Vec<_> = limiter.allowances(later).collect();
        caps.sort_unstable();
        assert_eq!(caps, vec![(&"ep".to_owned(), 5)]);
        assert_eq!(limiter.allowances(later + IDLE_BUCKET).count(), 0);
    }
}
