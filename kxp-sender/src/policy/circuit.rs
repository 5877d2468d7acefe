//! Protecting endpoints: the circuit breaker, auto-disable, the rate limit and the drain of a
//! held backlog.
//!
//! The breaker lives on the endpoint row, so every `kxp serve` process sharing a database sees
//! one state:
//!
//! - `closed`: deliveries flow. [`Protection::breaker_failures`] consecutive failed attempts
//!   (any deliveries) open it.
//! - `open`: the endpoint's pending deliveries are *held* (`next_attempt_at` = [`HELD`], outside
//!   the range workers scan): they stay pending, burn no attempt and lose nothing. New events
//!   for the endpoint queue up held too.
//! - `half_open`: once the cool-down has passed, one held delivery, the oldest, is released as
//!   the probe; only it may be claimed. Its success closes the circuit; its failure opens it
//!   again with twice the cool-down (up to [`Protection::breaker_cooldown_max`]).
//!
//! Closing the circuit (or resuming an endpoint) releases the held backlog *spread out* at the
//! endpoint's rate limit (`spread_held!`), so a recovered endpoint is never hit by a storm, and
//! the spreading is exact however many processes deliver. An endpoint that has failed every
//! attempt for [`Protection::disable_after`] is disabled: it holds deliveries like a paused one
//! until the merchant resumes it. Opening and disabling each leave one notification in the
//! outbox ([`crate::notify`]), in the same transaction as the state change.
//!
//! The decisions are pure functions ([`decide`], [`probe_delay`]); the SQL that carries them
//! out runs inside the transaction that records the attempt (`after_attempt!`).

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::db::{Db, ms, now_ms, on_db};
use crate::store::{HELD, StoreError};

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
    /// Deliveries per second to one endpoint unless the endpoint sets its own limit; 0 lifts the
    /// default limit (the concurrency limit still applies).
    pub rate_limit: u32,
}

impl Default for Protection {
    fn default() -> Protection {
        Protection {
            breaker_failures: 10,
            breaker_cooldown: Duration::from_secs(60),
            breaker_cooldown_max: Duration::from_secs(60 * 60),
            disable_after: Duration::from_secs(3 * 24 * 60 * 60),
            rate_limit: 50,
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

/// A circuit's state, as stored in `kxp_endpoints.circuit_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CircuitState {
    /// Deliveries flow.
    Closed,
    /// Deliveries are held until the next probe.
    Open,
    /// One delivery is probing.
    HalfOpen,
}

impl CircuitState {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            CircuitState::Closed => "closed",
            CircuitState::Open => "open",
            CircuitState::HalfOpen => "half_open",
        }
    }

    /// From the stored name (anything unknown reads as closed: deliveries keep flowing).
    pub fn parse(text: &str) -> CircuitState {
        match text {
            "open" => CircuitState::Open,
            "half_open" => CircuitState::HalfOpen,
            _ => CircuitState::Closed,
        }
    }
}

/// What a finished attempt does to its endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// Nothing changes.
    Stay,
    /// `closed` → `open`: hold the deliveries, tell the merchant.
    Open,
    /// `half_open` → `open`: the probe failed; hold again, wait longer. No new notification:
    /// the circuit never closed.
    Reopen,
    /// → `closed`: a success; release the held backlog at the rate limit.
    Close,
    /// → disabled: failing for too long; hold everything, tell the merchant.
    Disable,
}

/// The endpoint as a finished attempt leaves it (statistics already updated).
#[derive(Debug, Clone, Copy)]
pub struct AfterAttempt {
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
pub fn decide(p: &Protection, after: &AfterAttempt, now: i64) -> Transition {
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
pub fn probe_delay(p: &Protection, failed_probes: i64) -> Duration {
    let doublings = u32::try_from(failed_probes.clamp(0, 32)).unwrap_or(32);
    p.breaker_cooldown
        .saturating_mul(2u32.saturating_pow(doublings))
        .min(p.breaker_cooldown_max.max(p.breaker_cooldown))
}

/// Milliseconds between two released deliveries at `rate` per second (0: all at once).
pub fn spacing_ms(rate: Option<u32>) -> i64 {
    rate.map_or(0, |rate| 1000 / i64::from(rate.max(1)))
}

/// Releases an endpoint's held deliveries on the transaction `$tx`: the oldest due at `$now`,
/// each next one `$spacing` ms later, so a backlog drains at the endpoint's rate limit. One
/// statement; `UPDATE … FROM` with a window function works on both backends.
macro_rules! spread_held {
    ($tx:expr, $endpoint_id:expr, $now:expr, $spacing:expr) => {
        sqlx::query(
            "UPDATE kxp_deliveries SET next_attempt_at = $1 + s.rn * $2, updated_at = $1 \
             FROM (SELECT id, ROW_NUMBER() OVER (ORDER BY id) - 1 AS rn FROM kxp_deliveries \
                   WHERE endpoint_id = $3 AND status = 'pending' AND next_attempt_at = $4) AS s \
             WHERE kxp_deliveries.id = s.id",
        )
        .bind($now)
        .bind($spacing)
        .bind($endpoint_id)
        .bind($crate::store::HELD)
        .execute(&mut *$tx)
        .await
    };
}
pub(crate) use spread_held;

/// Holds every pending delivery of an endpoint on the transaction `$tx` (they keep their
/// attempt counts; [`spread_held!`] releases them).
macro_rules! hold_pending {
    ($tx:expr, $endpoint_id:expr, $now:expr) => {
        sqlx::query(
            "UPDATE kxp_deliveries SET next_attempt_at = $1, updated_at = $2 \
             WHERE endpoint_id = $3 AND status = 'pending' AND next_attempt_at <> $1",
        )
        .bind($crate::store::HELD)
        .bind($now)
        .bind($endpoint_id)
        .execute(&mut *$tx)
        .await
    };
}
pub(crate) use hold_pending;

/// The endpoint columns a finished attempt reads, by the delivery's id.
pub(crate) const ENDPOINT_OF_DELIVERY: &str = "SELECT p.id, p.status, p.circuit_state, \
       p.circuit_failed_probes, p.circuit_probe_id, p.rate_limit_per_second, s.consecutive_failures, \
       s.failing_since \
     FROM kxp_deliveries d JOIN kxp_endpoints p ON p.id = d.endpoint_id \
     LEFT JOIN kxp_endpoint_stats s ON s.endpoint_id = p.id WHERE d.id = $1";

/// A row of [`ENDPOINT_OF_DELIVERY`].
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct EndpointRow {
    pub id: String,
    pub status: String,
    pub circuit_state: String,
    pub circuit_failed_probes: i64,
    pub circuit_probe_id: Option<String>,
    pub rate_limit_per_second: Option<i64>,
    pub consecutive_failures: Option<i64>,
    pub failing_since: Option<i64>,
}

/// The statements that carry out each [`Transition`]; `$1` the endpoint, `$2` now, and for the
/// two that open the circuit `$3` the next probe time. Each is conditional on the state it leaves, so two processes finishing
/// attempts at once cannot both make the same change.
pub(crate) const OPEN: &str = "UPDATE kxp_endpoints SET circuit_state = 'open', circuit_opened_at = $2, \
       circuit_probe_at = $3, circuit_probe_id = NULL, circuit_failed_probes = 0, updated_at = $2 \
     WHERE id = $1 AND circuit_state = 'closed' AND status = 'active'";
pub(crate) const REOPEN: &str = "UPDATE kxp_endpoints SET circuit_state = 'open', circuit_probe_at = $3, \
       circuit_probe_id = NULL, circuit_failed_probes = circuit_failed_probes + 1, updated_at = $2 \
     WHERE id = $1 AND circuit_state = 'half_open' AND status = 'active'";
pub(crate) const CLOSE: &str = "UPDATE kxp_endpoints SET circuit_state = 'closed', circuit_opened_at = NULL, \
       circuit_probe_at = NULL, circuit_probe_id = NULL, circuit_failed_probes = 0, updated_at = $2 \
     WHERE id = $1 AND circuit_state <> 'closed' AND status = 'active'";
pub(crate) const DISABLE: &str = "UPDATE kxp_endpoints SET status = 'disabled', circuit_state = 'closed', \
       circuit_opened_at = NULL, circuit_probe_at = NULL, circuit_probe_id = NULL, \
       circuit_failed_probes = 0, updated_at = $2 \
     WHERE id = $1 AND status = 'active'";

impl Transition {
    /// The statement that makes this change, if it makes one.
    pub(crate) fn statement(self) -> Option<&'static str> {
        match self {
            Transition::Stay => None,
            Transition::Open => Some(OPEN),
            Transition::Reopen => Some(REOPEN),
            Transition::Close => Some(CLOSE),
            Transition::Disable => Some(DISABLE),
        }
    }

    /// A name for logs: `circuit_opened`, `circuit_reopened`, `circuit_closed`, `disabled`.
    pub fn as_str(self) -> &'static str {
        match self {
            Transition::Stay => "none",
            Transition::Open => "circuit_opened",
            Transition::Reopen => "circuit_reopened",
            Transition::Close => "circuit_closed",
            Transition::Disable => "disabled",
        }
    }

    /// Whether the change schedules a probe (its statement takes the probe time as `$3`).
    pub(crate) fn schedules_probe(self) -> bool {
        matches!(self, Transition::Open | Transition::Reopen)
    }

    /// The notification this change sends, if any.
    pub fn notice(self) -> Option<&'static str> {
        match self {
            Transition::Open => Some("endpoint.circuit_opened"),
            Transition::Disable => Some("endpoint.disabled"),
            _ => None,
        }
    }
}

/// Applies a finished attempt's outcome to its endpoint's breaker, on the transaction `$tx`
/// (after the statistics were updated). Evaluates to `Result<Option<(Transition,
/// EndpointRow)>, sqlx::Error>`: the change made, if one was.
macro_rules! after_attempt {
    ($tx:expr, $delivery_id:expr, $success:expr, $now:expr, $protection:expr) => {{
        async {
            let row = sqlx::query_as::<_, $crate::circuit::EndpointRow>(
                $crate::circuit::ENDPOINT_OF_DELIVERY,
            )
            .bind($delivery_id)
            .fetch_one(&mut *$tx)
            .await?;
            let state = $crate::circuit::CircuitState::parse(&row.circuit_state);
            let after = $crate::circuit::AfterAttempt {
                state,
                probe: row.circuit_probe_id.as_deref() == Some($delivery_id),
                active: row.status == "active",
                success: $success,
                consecutive_failures: row.consecutive_failures.unwrap_or(0),
                failing_since: row.failing_since,
            };
            let transition = $crate::circuit::decide($protection, &after, $now);
            let failed_probes = match transition {
                $crate::circuit::Transition::Reopen => row.circuit_failed_probes + 1,
                _ => 0,
            };
            let probe_at = $now.saturating_add($crate::db::ms($crate::circuit::probe_delay(
                $protection,
                failed_probes,
            )));
            let changed = match transition.statement() {
                None => false,
                Some(sql) => {
                    let query = sqlx::query(sql).bind(&row.id).bind($now);
                    let query = if transition.schedules_probe() {
                        query.bind(probe_at)
                    } else {
                        query
                    };
                    query.execute(&mut *$tx).await?.rows_affected() == 1
                }
            };
            match transition {
                $crate::circuit::Transition::Close if changed => {
                    let spacing =
                        $crate::circuit::spacing_ms($protection.rate_of(row.rate_limit_per_second));
                    $crate::circuit::spread_held!($tx, &row.id, $now, spacing)?;
                }
                $crate::circuit::Transition::Open
                | $crate::circuit::Transition::Reopen
                | $crate::circuit::Transition::Disable
                    if changed =>
                {
                    $crate::circuit::hold_pending!($tx, &row.id, $now)?;
                }
                $crate::circuit::Transition::Stay | $crate::circuit::Transition::Close
                    if state == $crate::circuit::CircuitState::Closed => {}
                _ => {
                    // The circuit is not closed (an attempt that was in flight when it opened,
                    // or another process opened it a moment ago): this delivery's retry waits
                    // with the others.
                    sqlx::query(
                        "UPDATE kxp_deliveries SET next_attempt_at = $1 \
                         WHERE id = $2 AND status = 'pending'",
                    )
                    .bind($crate::store::HELD)
                    .bind($delivery_id)
                    .execute(&mut *$tx)
                    .await?;
                }
            }
            Ok::<_, sqlx::Error>(changed.then_some((transition, row)))
        }
        .await
    }};
}
pub(crate) use after_attempt;

impl Db {
    /// Moves every open circuit whose cool-down has passed to `half_open`, releasing one held
    /// delivery as the probe: the one with the most tries left (the oldest of those), so a long
    /// outage wears the backlog down evenly instead of sending its oldest delivery to the
    /// dead-letter queue. Pending deliveries that escaped holding (put back by a worker, or
    /// reclaimed after a crash, while the circuit was open) are held first. An open circuit
    /// with nothing pending stays open until there is something to probe with. Returns how many
    /// probes were released.
    pub async fn release_probes(&self) -> Result<u64, StoreError> {
        let now = now_ms();
        let due: Vec<String> = on_db!(self, |pool, _begin| {
            sqlx::query_scalar::<_, String>(
                "SELECT id FROM kxp_endpoints WHERE circuit_state = 'open' AND circuit_probe_at <= $1 \
                 AND status = 'active'",
            )
            .bind(now)
            .fetch_all(pool)
            .await?
        });
        let mut released = 0;
        for endpoint_id in due {
            let probe: Option<String> = on_db!(self, |pool, begin| {
                let mut tx = pool.begin_with(begin).await?;
                // The state change comes first: on PostgreSQL it locks the row, so a second
                // process doing the same finds the circuit half-open and changes nothing.
                let moved = sqlx::query(
                    "UPDATE kxp_endpoints SET circuit_state = 'half_open', updated_at = $2 \
                     WHERE id = $1 AND circuit_state = 'open' AND circuit_probe_at <= $2 AND status = 'active'",
                )
                .bind(&endpoint_id)
                .bind(now)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                let probe = if moved == 1 {
                    hold_pending!(tx, &endpoint_id, now)?;
                    sqlx::query_scalar::<_, String>(
                        "UPDATE kxp_deliveries SET next_attempt_at = $1, updated_at = $1 WHERE id = \
                         (SELECT id FROM kxp_deliveries WHERE endpoint_id = $2 AND status = 'pending' \
                          AND next_attempt_at = $3 ORDER BY attempts, id LIMIT 1) RETURNING id",
                    )
                    .bind(now)
                    .bind(&endpoint_id)
                    .bind(HELD)
                    .fetch_optional(&mut *tx)
                    .await?
                } else {
                    None
                };
                match &probe {
                    Some(probe) => {
                        sqlx::query("UPDATE kxp_endpoints SET circuit_probe_id = $1 WHERE id = $2")
                            .bind(probe)
                            .bind(&endpoint_id)
                            .execute(&mut *tx)
                            .await?;
                        tx.commit().await?;
                    }
                    None => tx.rollback().await?,
                }
                probe
            });
            if let Some(probe) = probe {
                tracing::info!(target: "kxp_sender::circuit", endpoint_id = %endpoint_id, delivery_id = %probe, "circuit half-open: probing");
                released += 1;
            }
        }
        Ok(released)
    }
}

/// Per-endpoint token buckets: each endpoint may start `rate` attempts per second from this
/// process, with bursts of up to one second's worth. In memory, per process: with several
/// `kxp serve` processes the steady-state rate adds up (a drained backlog does not: it is
/// spread in the database).
#[derive(Debug, Default)]
pub struct RateLimiter {
    buckets: HashMap<String, Bucket>,
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

impl RateLimiter {
    /// Takes one token for `endpoint_id` at `rate` per second (`None`: unlimited, always
    /// granted). `false` when the endpoint has used its rate.
    pub fn try_take(&mut self, endpoint_id: &str, rate: Option<u32>, now: Instant) -> bool {
        let Some(rate) = rate else {
            self.buckets.remove(endpoint_id);
            return true;
        };
        let bucket = self
            .buckets
            .entry(endpoint_id.to_owned())
            .or_insert(Bucket {
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
    pub fn allowances(&mut self, now: Instant) -> impl Iterator<Item = (&str, usize)> {
        self.buckets.retain(|_, bucket| {
            let idle = now.saturating_duration_since(bucket.used);
            bucket.refill(bucket.rate, now);
            // Kept while in use, so the claim asks for no more than the rate allows; an
            // endpoint idle for a minute is forgotten (a fresh bucket is a full one).
            idle < IDLE_BUCKET || bucket.tokens < f64::from(bucket.rate.max(1))
        });
        self.buckets
            .iter()
            .map(|(id, bucket)| (id.as_str(), bucket.tokens.floor() as usize))
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

    #[test]
    fn the_bucket_allows_a_burst_then_the_rate() {
        let mut limiter = RateLimiter::default();
        let start = Instant::now();
        let taken = (0..20)
            .filter(|_| limiter.try_take("ep", Some(5), start))
            .count();
        assert_eq!(taken, 5, "a burst of one second's worth");
        assert_eq!(
            limiter.allowances(start).collect::<Vec<_>>(),
            vec![("ep", 0)]
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
        assert_eq!(caps, vec![("ep", 5)]);
        assert_eq!(limiter.allowances(later + IDLE_BUCKET).count(), 0);
    }
}
