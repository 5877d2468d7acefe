//! Adaptive per-endpoint concurrency: how many attempts one endpoint gets at once from this
//! process, learned from how it answers (additive increase, multiplicative decrease).
//!
//! A fixed cap is wrong both ways: 8 in flight bounds a fast receiver at 8 per round trip, and
//! 64 in flight buries a struggling one. So each endpoint starts at [`INITIAL`], doubles per
//! round trip while every answer is quick and fine (slow start), then grows by one per round
//! trip; a sign of trouble halves it, at most once per round trip (the attempts already in
//! flight when it was cut say nothing new). Trouble is a timeout, a refused connection, a 429
//! or 503, or an answer much slower than the endpoint's usual ([`Adaptive::congested`]). Other
//! failures (a 500, a 401) say nothing about load and leave the limit alone: deciding that an
//! endpoint is down is the circuit breaker's job, and a `Retry-After` stays a floor on the next
//! try of that delivery. The configured per-endpoint concurrency is the ceiling.
//!
//! Pure: the worker feeds it outcomes and asks for the limit; the clock never enters.

/// Where an endpoint's limit starts.
pub const INITIAL: usize = 4;

/// What an attempt's outcome says about the endpoint's load.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Signal {
    /// A 2xx, after this many milliseconds.
    Answered(f64),
    /// A timeout, a refused connection, 429 or 503: it has more than it can take.
    Overloaded,
    /// Any other failure: nothing about load.
    Neutral,
}

/// One endpoint's adaptive limit.
#[derive(Debug, Clone)]
pub struct Adaptive {
    limit: f64,
    max: usize,
    /// Below the first cut, the limit grows by one per success (doubling per round trip).
    slow_start: bool,
    /// The endpoint's usual latency: the fastest recent answer, drifting up slowly when its
    /// answers get slower for good (a new deployment), so one lucky answer does not make every
    /// later one look congested.
    baseline_ms: Option<f64>,
    /// Outcomes seen so far, and the count before which no new cut is made.
    seen: u64,
    cut_until: u64,
}

impl Adaptive {
    /// A new endpoint's limit, at most `max` (at least 1).
    pub fn new(max: usize) -> Adaptive {
        let max = max.max(1);
        Adaptive {
            limit: INITIAL.min(max) as f64,
            max,
            slow_start: true,
            baseline_ms: None,
            seen: 0,
            cut_until: 0,
        }
    }

    /// Attempts the endpoint may have in flight now.
    pub fn limit(&self) -> usize {
        (self.limit.floor() as usize).clamp(1, self.max)
    }

    /// Whether an answer after `latency_ms` is slow enough, against the endpoint's usual, to
    /// mean it is queueing: more than twice its baseline plus 20 ms (so a 1 ms receiver is not
    /// cut for answering in 5 ms on a busy machine).
    pub fn congested(&self, latency_ms: f64) -> bool {
        self.baseline_ms
            .is_some_and(|base| latency_ms > 2.0 * base + 20.0)
    }

    /// Takes one attempt's outcome into account.
    pub fn observe(&mut self, signal: Signal) {
        self.seen += 1;
        let trouble = match signal {
            Signal::Answered(latency) => {
                let congested = self.congested(latency);
                self.baseline_ms = Some(match self.baseline_ms {
                    None => latency,
                    Some(base) if latency < base => latency,
                    Some(base) => base + (latency - base) * 0.01,
                });
                congested
            }
            Signal::Overloaded => true,
            Signal::Neutral => return,
        };
        if trouble {
            if self.seen >= self.cut_until {
                self.limit = (self.limit / 2.0).max(1.0);
                self.slow_start = false;
                // The attempts in flight now started under the old limit: wait for them.
                self.cut_until = self.seen + self.limit() as u64 * 2;
            }
        } else if self.slow_start {
            self.limit = (self.limit + 1.0).min(self.max as f64);
        } else {
            self.limit = (self.limit + 1.0 / self.limit).min(self.max as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(a: &mut Adaptive, n: usize, latency: f64) {
        for _ in 0..n {
            a.observe(Signal::Answered(latency));
        }
    }

    #[test]
    fn a_healthy_endpoint_grows_to_the_ceiling_and_stays() {
        let mut a = Adaptive::new(64);
        assert_eq!(a.limit(), INITIAL);
        answered(&mut a, 60, 2.0);
        assert_eq!(a.limit(), 64, "slow start: +1 per success");
        answered(&mut a, 1000, 2.0);
        assert_eq!(a.limit(), 64, "never above the ceiling");
        assert_eq!(Adaptive::new(2).limit(), 2, "a ceiling below the start");
    }

    #[test]
    fn trouble_halves_once_per_round_trip_then_growth_is_additive() {
        let mut a = Adaptive::new(64);
        answered(&mut a, 28, 2.0);
        assert_eq!(a.limit(), 32);
        a.observe(Signal::Overloaded);
        assert_eq!(a.limit(), 16);
        // The rest of the window that was in flight: no further cut.
        for _ in 0..10 {
            a.observe(Signal::Overloaded);
        }
        assert_eq!(a.limit(), 16);
        // Past the window, trouble cuts again; down to 1 at the least.
        for _ in 0..200 {
            a.observe(Signal::Overloaded);
        }
        assert_eq!(a.limit(), 1);
        // Additive now: +1/limit per success, about one per round trip.
        answered(&mut a, 1, 2.0);
        assert_eq!(a.limit(), 2);
        answered(&mut a, 2, 2.0);
        assert_eq!(a.limit(), 2, "2.5, then 2.9");
        answered(&mut a, 1, 2.0);
        assert_eq!(a.limit(), 3);
        answered(&mut a, 2, 2.0);
        assert_eq!(a.limit(), 3);
        answered(&mut a, 1, 2.0);
        assert_eq!(a.limit(), 4);
    }

    #[test]
    fn slow_answers_count_as_trouble_and_other_failures_do_not() {
        let mut a = Adaptive::new(64);
        answered(&mut a, 12, 10.0);
        assert_eq!(a.limit(), 16);
        assert!(!a.congested(39.0) && a.congested(41.0), "2 × 10 + 20 ms");
        a.observe(Signal::Answered(500.0));
        assert_eq!(a.limit(), 8, "an answer 50 times slower than usual");
        let before = a.limit();
        for _ in 0..50 {
            a.observe(Signal::Neutral);
        }
        assert_eq!(a.limit(), before, "a 500 says nothing about load");
    }

    #[test]
    fn the_baseline_follows_a_lasting_change() {
        let mut a = Adaptive::new(1000);
        answered(&mut a, 5, 1.0);
        // The endpoint is now 100 ms for good: after the first cut, its baseline catches up
        // and it grows again instead of being cut forever.
        for _ in 0..2000 {
            a.observe(Signal::Answered(100.0));
        }
        assert!(!a.congested(100.0));
        let grown = a.limit();
        answered(&mut a, 200, 100.0);
        assert!(a.limit() > grown);
    }
}
