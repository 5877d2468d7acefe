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
mod tests;
