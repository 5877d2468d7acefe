//! Adaptive per-endpoint concurrency: how many attempts one endpoint gets at once from this
//! process, learned from how it answers (additive increase, multiplicative decrease).
//!
//! A fixed cap is wrong both ways: 8 in flight bounds a fast receiver at 8 per round trip, and
//! 64 in flight buries a struggling one. So each endpoint starts at [`INITIAL`], doubles per
//! round trip while every answer is quick and fine (slow start), then grows by one per round
//! trip; a sign of trouble halves it, at most once per round trip (the attempts already in
//! flight when it was cut say nothing new). Trouble is a timeout, a refused connection, a 429
//! or 503, or answers getting much slower than the endpoint's usual: its recent latency (a
//! fast-moving average) above twice its usual latency (a slow-moving average) plus 20 ms. Both
//! are averages, so an endpoint whose answers merely vary (10 to 100 ms, say) is not cut for
//! its slow ones, and a lasting change (a slower deployment) becomes the new usual. Other
//! failures (a 500, a 401) say nothing about load and leave the limit alone: deciding that an
//! endpoint is down is the circuit breaker's job, and a `Retry-After` stays a floor on the next
//! try of that delivery. The configured per-endpoint concurrency is the ceiling.
//!
//! Pure: the worker feeds it outcomes and asks for the limit; the clock never enters.

/// Where an endpoint's limit starts.
pub(crate) const INITIAL: usize = 4;

/// What an attempt's outcome says about the endpoint's load.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Signal {
    /// A 2xx, after this many milliseconds.
    Answered(f64),
    /// A timeout, a refused connection, 429 or 503: it has more than it can take.
    Overloaded,
    /// Any other failure: nothing about load.
    Neutral,
}

/// One endpoint's adaptive limit.
#[derive(Debug, Clone)]
pub(crate) struct Adaptive {
    limit: f64,
    max: usize,
    /// Below the first cut, the limit grows by one per success (doubling per round trip).
    slow_start: bool,
    /// Recent latency: an average that follows the last few answers.
    recent_ms: Option<f64>,
    /// Usual latency: an average over the last hundred or so answers.
    usual_ms: Option<f64>,
    /// Answers (2xx) seen so far.
    answered: u64,
    /// Outcomes seen so far, and the count before which no new cut is made.
    seen: u64,
    cut_until: u64,
    /// Whether the last outcome that said anything about load was trouble.
    troubled: bool,
}

/// How fast each average follows new answers.
const RECENT_WEIGHT: f64 = 0.2;
const USUAL_WEIGHT: f64 = 0.02;

impl Adaptive {
    /// A new endpoint's limit, at most `max` (at least 1).
    pub(crate) fn new(max: usize) -> Adaptive {
        let max = max.max(1);
        Adaptive {
            limit: INITIAL.min(max) as f64,
            max,
            slow_start: true,
            recent_ms: None,
            usual_ms: None,
            answered: 0,
            seen: 0,
            cut_until: 0,
            troubled: false,
        }
    }

    /// Attempts the endpoint may have in flight now.
    pub(crate) fn limit(&self) -> usize {
        (self.limit.floor() as usize).clamp(1, self.max)
    }

    /// Whether the endpoint is answering much slower than usual: its recent latency above
    /// twice its usual latency plus 20 ms (so a 1 ms receiver is not cut for answering in 5 ms
    /// on a busy machine).
    pub(crate) fn congested(&self) -> bool {
        match (self.recent_ms, self.usual_ms) {
            (Some(recent), Some(usual)) => recent > 2.0 * usual + 20.0,
            _ => false,
        }
    }

    /// Whether the endpoint answers quickly now: it has answered, and its last outcome that
    /// said anything about load was a timely answer (not a timeout, refusal, 429, 503 or a
    /// much slower answer than usual). Its attempts are expected to give their worker back
    /// soon ([`Fairness`](crate::policy::fairness::Fairness) lends them the reserve).
    pub(crate) fn quick(&self) -> bool {
        self.answered > 0 && !self.troubled
    }

    /// Takes one attempt's outcome into account.
    pub(crate) fn observe(&mut self, signal: Signal) {
        self.seen += 1;
        let trouble = match signal {
            Signal::Answered(latency) => {
                self.answered += 1;
                // Until there are enough answers, each average is the plain mean of them all:
                // the first answer alone says little about what is usual.
                let mean = 1.0 / self.answered as f64;
                let follow = |average: Option<f64>, weight: f64| {
                    Some(average.map_or(latency, |a| a + (latency - a) * weight.max(mean)))
                };
                self.recent_ms = follow(self.recent_ms, RECENT_WEIGHT);
                self.usual_ms = follow(self.usual_ms, USUAL_WEIGHT);
                self.congested()
            }
            Signal::Overloaded => true,
            Signal::Neutral => return,
        };
        self.troubled = trouble;
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
        assert!(!a.quick(), "not answered yet");
        answered(&mut a, 60, 2.0);
        assert_eq!(a.limit(), 64, "slow start: +1 per success");
        answered(&mut a, 1000, 2.0);
        assert_eq!(a.limit(), 64, "never above the ceiling");
        assert!(a.quick());
        assert_eq!(Adaptive::new(2).limit(), 2, "a ceiling below the start");
    }

    #[test]
    fn trouble_halves_once_per_round_trip_then_growth_is_additive() {
        let mut a = Adaptive::new(64);
        answered(&mut a, 28, 2.0);
        assert_eq!(a.limit(), 32);
        assert!(a.quick());
        a.observe(Signal::Overloaded);
        assert_eq!(a.limit(), 16);
        assert!(!a.quick(), "a timeout: not quick until it answers again");
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
    fn slower_answers_count_as_trouble_and_other_failures_do_not() {
        let mut a = Adaptive::new(1000);
        answered(&mut a, 100, 10.0);
        assert_eq!(a.limit(), 104);
        assert!(!a.congested());
        // An answer 50 times slower than usual: recent latency jumps, the usual one lags.
        a.observe(Signal::Answered(500.0));
        assert!(a.congested());
        assert_eq!(a.limit(), 52);
        let before = a.limit();
        for _ in 0..50 {
            a.observe(Signal::Neutral);
        }
        assert_eq!(a.limit(), before, "a 500 says nothing about load");
    }

    #[test]
    fn answers_that_merely_vary_are_not_trouble() {
        let mut a = Adaptive::new(64);
        // 10 to 100 ms, spread evenly, for a long time.
        for n in 0..2000 {
            a.observe(Signal::Answered(10.0 + f64::from(n % 10) * 10.0));
        }
        assert_eq!(a.limit(), 64, "never cut");
    }

    #[test]
    fn a_lasting_change_becomes_the_usual() {
        let mut a = Adaptive::new(64);
        answered(&mut a, 200, 1.0);
        assert_eq!(a.limit(), 64);
        // The endpoint is now 100 ms for good: it is cut while its usual latency catches up,
        // then grows back to the ceiling instead of being cut forever.
        answered(&mut a, 30, 100.0);
        assert!(a.limit() < 64, "cut: {}", a.limit());
        answered(&mut a, 2500, 100.0);
        assert!(!a.congested());
        assert_eq!(a.limit(), 64);
    }
}
