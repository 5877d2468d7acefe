//! Protecting endpoints: the circuit breaker, auto-disable, the rate limit and the drain of a
//! held backlog.
//!
//! The breaker lives on the endpoint row, so every `kxp serve` process sharing a database sees
//! one state:
//!
//! - `closed`: deliveries flow. [`Protection::breaker_failures`] consecutive failed attempts
//!   (any deliveries) open it.
//! - `open`: the endpoint's pending deliveries are *held* (`next_attempt_at` = [`HELD`](crate::model::HELD), outside
//!   the range workers scan): they stay pending, burn no attempt and lose nothing. New events
//!   for the endpoint queue up held too.
//! - `half_open`: once the cool-down has passed, one held delivery, the oldest, is released as
//!   the probe; only it may be claimed. Its success closes the circuit; its failure opens it
//!   again with twice the cool-down (up to [`Protection::breaker_cooldown_max`]).
//!
//! Closing the circuit (or resuming an endpoint) releases the held backlog *spread out* at the
//! endpoint's rate limit ([`spacing_ms`]), so a recovered endpoint is never hit by a storm, and
//! the spreading is exact however many processes deliver. An endpoint that has failed every
//! attempt for [`Protection::disable_after`] is disabled: it holds deliveries like a paused one
//! until the merchant resumes it. Opening and disabling each leave one notification in the
//! outbox, in the same transaction as the state change.
//!
//! Everything here is a pure function of the endpoint's state, the settings and the time
//! ([`decide`], [`next_probe_at`], [`follow_up`]): no SQL. The store calls them inside the
//! transaction that records the attempt, and carries out what they return.

use std::time::Duration;

use crate::model::{CircuitState, Transition, ms};

/// How endpoints are protected. The defaults are documented in `docs/operations.md`.
#[derive(Debug, Clone, PartialEq)]
pub struct Protection {
    /// Consecutive failed attempts that open an endpoint's circuit.
    pub breaker_failures: u32,
    /// How long an open circuit waits before its first probe.
    pub breaker_cooldown: Duration,
    /// The longest wait between probes (the wait doubles after each failed probe).
    pub breaker_cooldown_max: Duration,
    /// How long an endpoint may fail every attempt before it is disabled.
    pub disable_after: Duration,
    /// Deliveries per second to one endpoint unless the endpoint sets its own limit; 0 (the
    /// default): no fixed limit, only the endpoint's adaptive concurrency. A drained backlog is
    /// spread at this rate when one applies.
    pub rate_limit: u32,
}

impl Default for Protection {
    fn default() -> Protection {
        Protection {
            breaker_failures: 10,
            // Short at first: a blip (a deploy answering 503 for two seconds opens the
            // circuit of a busy endpoint in milliseconds) holds deliveries for seconds, not a
            // minute. A long outage doubles it, probe by probe, to the maximum.
            breaker_cooldown: Duration::from_secs(5),
            breaker_cooldown_max: Duration::from_secs(60 * 60),
            disable_after: Duration::from_secs(3 * 24 * 60 * 60),
            rate_limit: 0,
        }
    }
}

impl Protection {
    /// The rate limit that applies to an endpoint: its own, else the default; `None` when
    /// unlimited.
    pub fn rate_of(&self, endpoint_limit: Option<i64>) -> Option<u32> {
        let rate = match endpoint_limit {
            Some(own) => u32::try_from(own).unwrap_or(u32::MAX),
            None => self.rate_limit,
        };
        (rate > 0).then_some(rate)
    }
}

/// The endpoint as a finished attempt leaves it (statistics already updated).
#[derive(Debug, Clone, Copy)]
pub(crate) struct AfterAttempt {
    /// The breaker's state before this attempt's outcome is applied.
    pub state: CircuitState,
    /// Whether this attempt was the half-open circuit's probe (and not an attempt that was
    /// already in flight when the circuit opened).
    pub probe: bool,
    /// Whether the endpoint is `active` (paused, disabled and deleted endpoints never
    /// transition).
    pub active: bool,
    /// Whether this attempt succeeded.
    pub success: bool,
    /// Failed attempts since the last success, this one included.
    pub consecutive_failures: i64,
    /// When the current run of failures began (Unix ms), if the last attempt failed.
    pub failing_since: Option<i64>,
}

/// The breaker's decision after one attempt, at `now` (Unix ms).
pub(crate) fn decide(p: &Protection, after: &AfterAttempt, now: i64) -> Transition {
    if !after.active {
        return Transition::Stay;
    }
    if after.success {
        return match after.state {
            CircuitState::Closed => Transition::Stay,
            CircuitState::Open | CircuitState::HalfOpen => Transition::Close,
        };
    }
    let failing_for = after
        .failing_since
        .map_or(0, |since| now.saturating_sub(since));
    if failing_for >= ms(p.disable_after) {
        return Transition::Disable;
    }
    match after.state {
        CircuitState::Closed
            if after.consecutive_failures >= i64::from(p.breaker_failures.max(1)) =>
        {
            Transition::Open
        }
        CircuitState::HalfOpen if after.probe => Transition::Reopen,
        _ => Transition::Stay,
    }
}

/// How long an open circuit waits before probing, after `failed_probes` failed probes: the
/// cool-down, doubled per failed probe, capped.
pub(crate) fn probe_delay(p: &Protection, failed_probes: i64) -> Duration {
    let doublings = u32::try_from(failed_probes.clamp(0, 32)).unwrap_or(32);
    p.breaker_cooldown
        .saturating_mul(2u32.saturating_pow(doublings))
        .min(p.breaker_cooldown_max.max(p.breaker_cooldown))
}

/// Milliseconds between two released deliveries at `rate` per second (0: all at once).
pub(crate) fn spacing_ms(rate: Option<u32>) -> i64 {
    rate.map_or(0, |rate| 1000 / i64::from(rate.max(1)))
}

/// When an open circuit is probed next, for a transition that opens it (`None` for the others):
/// the cool-down after opening, doubled per failed probe after a reopening.
/// `failed_probes`: the probes that had failed before this attempt.
pub(crate) fn next_probe_at(
    p: &Protection,
    transition: Transition,
    failed_probes: i64,
    now: i64,
) -> Option<i64> {
    let failed = match transition {
        Transition::Open => 0,
        Transition::Reopen => failed_probes + 1,
        _ => return None,
    };
    Some(now.saturating_add(ms(probe_delay(p, failed))))
}

/// What becomes of an endpoint's pending deliveries after an attempt, once the store has tried
/// to make the [`Transition`] [`decide`] chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FollowUp {
    /// Nothing changes.
    Nothing,
    /// The circuit closed: release the held backlog, one delivery every `spacing_ms`.
    ReleaseHeld {
        /// Milliseconds between two released deliveries ([`spacing_ms`]).
        spacing_ms: i64,
    },
    /// The circuit opened or the endpoint was disabled: hold every pending delivery
    /// (`next_attempt_at` = [`HELD`](crate::model::HELD)).
    HoldEndpoint,
    /// The circuit is not closed (an attempt that was in flight when it opened, or another
    /// process opened it a moment ago): this delivery's retry waits with the others.
    HoldDelivery,
}

/// The [`FollowUp`] of `transition`. `made`: whether the store's conditional statement changed
/// the endpoint (another process may have made the same change first); `before`: the circuit
/// before the attempt; `rate_limit`: the endpoint's own limit.
pub(crate) fn follow_up(
    p: &Protection,
    transition: Transition,
    made: bool,
    before: CircuitState,
    rate_limit: Option<i64>,
) -> FollowUp {
    match transition {
        Transition::Close if made => FollowUp::ReleaseHeld {
            spacing_ms: spacing_ms(p.rate_of(rate_limit)),
        },
        Transition::Open | Transition::Reopen | Transition::Disable if made => {
            FollowUp::HoldEndpoint
        }
        Transition::Stay | Transition::Close if before == CircuitState::Closed => FollowUp::Nothing,
        _ => FollowUp::HoldDelivery,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> Protection {
        Protection {
            breaker_failures: 3,
            breaker_cooldown: Duration::from_secs(10),
            breaker_cooldown_max: Duration::from_secs(60),
            disable_after: Duration::from_secs(1000),
            rate_limit: 5,
        }
    }

    fn after(
        state: CircuitState,
        success: bool,
        failures: i64,
        since: Option<i64>,
    ) -> AfterAttempt {
        AfterAttempt {
            state,
            probe: state == CircuitState::HalfOpen,
            active: true,
            success,
            consecutive_failures: failures,
            failing_since: since,
        }
    }

    #[test]
    fn the_breaker_opens_at_the_threshold_and_not_before() {
        let now = 1_000_000;
        let closed = CircuitState::Closed;
        assert_eq!(
            decide(&p(), &after(closed, false, 2, Some(now)), now),
            Transition::Stay
        );
        assert_eq!(
            decide(&p(), &after(closed, false, 3, Some(now)), now),
            Transition::Open
        );
        assert_eq!(
            decide(&p(), &after(closed, true, 0, None), now),
            Transition::Stay
        );
        // Already open: a straggler's failure changes nothing, and sends nothing again.
        let open = CircuitState::Open;
        assert_eq!(
            decide(&p(), &after(open, false, 9, Some(now)), now),
            Transition::Stay
        );
    }

    #[test]
    fn a_probe_closes_or_reopens() {
        let now = 1_000_000;
        let half = CircuitState::HalfOpen;
        assert_eq!(
            decide(&p(), &after(half, true, 0, None), now),
            Transition::Close
        );
        assert_eq!(
            decide(&p(), &after(half, false, 4, Some(now)), now),
            Transition::Reopen
        );
        assert_eq!(Transition::Reopen.notice(), None);
        // A straggler (in flight since before the circuit opened) failing is not the probe.
        let straggler = AfterAttempt {
            probe: false,
            ..after(half, false, 5, Some(now))
        };
        assert_eq!(decide(&p(), &straggler, now), Transition::Stay);
        assert_eq!(Transition::Open.notice(), Some("endpoint.circuit_opened"));
        assert_eq!(Transition::Disable.notice(), Some("endpoint.disabled"));
        // A success of an attempt that was in flight when the circuit opened closes it too.
        let open = CircuitState::Open;
        assert_eq!(
            decide(&p(), &after(open, true, 0, None), now),
            Transition::Close
        );
    }

    #[test]
    fn failing_for_the_whole_period_disables() {
        let now = 10_000_000;
        let since = now - 1_000_000;
        for state in [
            CircuitState::Closed,
            CircuitState::Open,
            CircuitState::HalfOpen,
        ] {
            assert_eq!(
                decide(&p(), &after(state, false, 1, Some(since)), now),
                Transition::Disable
            );
            assert_ne!(
                decide(&p(), &after(state, false, 1, Some(since + 1)), now),
                Transition::Disable
            );
            // A success in between starts the period again: no `failing_since`.
            assert_ne!(
                decide(&p(), &after(state, true, 0, None), now),
                Transition::Disable
            );
        }
        let mut paused = after(CircuitState::Closed, false, 99, Some(since));
        paused.active = false;
        assert_eq!(decide(&p(), &paused, now), Transition::Stay);
    }

    #[test]
    fn follow_ups() {
        use CircuitState::*;
        assert_eq!(
            follow_up(&p(), Transition::Close, true, HalfOpen, None),
            FollowUp::ReleaseHeld { spacing_ms: 200 }
        );
        assert_eq!(
            follow_up(&p(), Transition::Open, true, Closed, None),
            FollowUp::HoldEndpoint
        );
        assert_eq!(
            follow_up(&p(), Transition::Stay, false, Closed, None),
            FollowUp::Nothing
        );
        assert_eq!(
            follow_up(&p(), Transition::Open, false, Closed, None),
            FollowUp::HoldDelivery
        );
        assert_eq!(
            follow_up(&p(), Transition::Stay, false, Open, None),
            FollowUp::HoldDelivery
        );
        assert_eq!(next_probe_at(&p(), Transition::Open, 5, 1000), Some(11_000));
        assert_eq!(
            next_probe_at(&p(), Transition::Reopen, 0, 1000),
            Some(21_000)
        );
        assert_eq!(next_probe_at(&p(), Transition::Close, 0, 1000), None);
    }

    #[test]
    fn probes_back_off_to_the_cap() {
        assert_eq!(probe_delay(&p(), 0), Duration::from_secs(10));
        assert_eq!(probe_delay(&p(), 1), Duration::from_secs(20));
        assert_eq!(probe_delay(&p(), 2), Duration::from_secs(40));
        assert_eq!(probe_delay(&p(), 3), Duration::from_secs(60));
        assert_eq!(probe_delay(&p(), 1000), Duration::from_secs(60));
    }

    #[test]
    fn rates_and_spacing() {
        assert_eq!(p().rate_of(None), Some(5));
        assert_eq!(p().rate_of(Some(20)), Some(20));
        let unlimited = Protection {
            rate_limit: 0,
            ..p()
        };
        assert_eq!(unlimited.rate_of(None), None);
        assert_eq!(spacing_ms(Some(5)), 200);
        assert_eq!(spacing_ms(Some(4000)), 0);
        assert_eq!(spacing_ms(None), 0);
    }
}
