//! Handing outbox rows to the sender: at least once, idempotently, within its backpressure.

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kxp_api::{Client, ClientError};
use sqlx::Pool;

use crate::EventId;
use crate::backend::{Backend, Row};

/// How a [`Relay`] paces itself. `Default` suits a producer emitting up to hundreds of events a
/// second; several relays (one per producer process) may share one PostgreSQL outbox.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// Rows taken per pass. Default 100.
    pub batch: u32,
    /// How long a relay waits for new rows after a pass that found fewer than `batch`. Default
    /// 200 ms: an event reaches the sender within that of its commit.
    pub poll_interval: Duration,
    /// How long a taken row stays invisible to other relays: if this one dies mid-pass, the
    /// row is taken again after it. Default 60 s (far above a pass of `batch` hand-offs).
    pub lease: Duration,
    /// How long one hand-off may take before it counts as failed (and is retried). Default
    /// 10 s.
    pub request_timeout: Duration,
    /// The longest wait between tries of a row the sender did not take (unreachable, 5xx):
    /// waits double from 1 s up to this. Default 5 minutes. It also bounds the sender's
    /// `Retry-After`: a longer one (a proxy's `Retry-After: 86400`, a garbled huge value) is
    /// cut to this, with a warning, so no answer can stop the hand-off for longer.
    pub max_backoff: Duration,
}

impl Default for RelayConfig {
    fn default() -> RelayConfig {
        RelayConfig {
            batch: 100,
            poll_interval: Duration::from_millis(200),
            lease: Duration::from_secs(60),
            request_timeout: Duration::from_secs(10),
            max_backoff: Duration::from_secs(300),
        }
    }
}

/// What one [`Relay::relay_once`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Pass {
    /// Rows the sender took (or had taken before: a hand-off is idempotent); they are gone
    /// from the outbox.
    pub handed_off: usize,
    /// Rows the sender refused for good; they stay, for [`Relay::refused`].
    pub refused: usize,
    /// Set when the pass stopped early because the sender asked to wait (503 or 429 with
    /// `Retry-After`) or could not be reached: how long until the rows are due again.
    pub wait: Option<Duration>,
}

/// An event the sender refused for good (a 4xx that no retry cures: `schema_violation`, a bad
/// `type`, `idempotency_key_reused` …). It stays in the outbox until the producer fixes what
/// is wrong (a schema, the sender's settings) and calls [`Relay::requeue`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Refused {
    /// The outbox row (its `Idempotency-Key`).
    pub id: String,
    /// The event's id.
    pub event_id: EventId,
    /// The `POST /v1/events` body.
    pub request: String,
    /// What the sender answered: `<status> <code>: <message>`.
    pub error: String,
    /// When (Unix ms).
    pub refused_at: i64,
}

/// Why a pass did not run, or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RelayError {
    /// `database`: the outbox could not be read or written. Nothing is lost: rows are only
    /// deleted after the sender took them.
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    /// `not_accepted`: the sender refused the relay itself (401/403: the API key; 404: the base
    /// URL), which no event can cure. Rows stay and wait for the relay's next pass.
    #[error("not_accepted: {0}")]
    NotAccepted(String),
}

impl RelayError {
    /// The stable name of the error.
    pub fn code(&self) -> &'static str {
        match self {
            RelayError::Database(_) => "database",
            RelayError::NotAccepted(_) => "not_accepted",
        }
    }
}

/// Moves outbox rows to the sender (`POST /v1/events`, the row's id as `Idempotency-Key`,
/// the event's id in the body), deleting each row once the sender answered 202. At least
/// once, never twice as events: a crash between the sender's answer and the delete sends the
/// row again, and the sender answers the event it already has.
///
/// Rows go oldest first, one at a time, so the sender takes them in the order they were
/// emitted (within a relay). A 503 or 429 stops the pass and waits the `Retry-After`
/// (the sender's backpressure), at most [`RelayConfig::max_backoff`]; an unreachable sender
/// or a 5xx backs the row off (1 s, doubling, up to [`RelayConfig::max_backoff`]).
#[derive(Debug, Clone)]
pub struct Relay<DB: Backend> {
    pool: Pool<DB>,
    client: Client,
    config: RelayConfig,
}

impl<DB: Backend> Relay<DB> {
    /// A relay of the outbox in `pool`'s database to the sender `client` calls (an account's
    /// API key, or an operator's acting for an account).
    pub fn new(pool: Pool<DB>, client: Client) -> Relay<DB> {
        Relay {
            pool,
            client,
            config: RelayConfig::default(),
        }
    }

    /// The same relay, paced by `config`.
    pub fn with_config(self, config: RelayConfig) -> Relay<DB> {
        Relay { config, ..self }
    }

    /// Runs passes until `shutdown` completes: at once again after a full batch, after
    /// `poll_interval` when the outbox is drained, after the sender's wait when it asked for
    /// one. Errors are logged and retried (after 1 s, doubling up to `max_backoff`); they never
    /// end the loop. A hand-off cut by `shutdown` is sent again by the next relay.
    pub async fn run(&self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut failures = 0u32;
        loop {
            let pause = match self.relay_once().await {
                Ok(pass) => {
                    failures = 0;
                    match pass.wait {
                        Some(wait) => wait,
                        None if pass.handed_off + pass.refused >= self.config.batch as usize => {
                            Duration::ZERO
                        }
                        None => self.config.poll_interval,
                    }
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    tracing::warn!(target: "kxp_outbox", error = %e, code = e.code(),
                        "outbox relay pass failed; retrying");
                    backoff(failures, self.config.max_backoff)
                }
            };
            tokio::select! {
                () = &mut shutdown => return,
                () = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// One pass: takes up to `batch` due rows and hands them off in order.
    pub async fn relay_once(&self) -> Result<Pass, RelayError> {
        let now = now_ms();
        let until = now.saturating_add(millis(self.config.lease));
        let rows = DB::claim(&self.pool, now, until, i64::from(self.config.batch)).await?;
        let mut pass = Pass::default();
        let mut rows = rows.into_iter();
        while let Some(row) = rows.next() {
            match self.hand_off(&row).await {
                HandOff::Taken => {
                    DB::delete(&self.pool, &row.id).await?;
                    pass.handed_off += 1;
                }
                HandOff::Refused(error) => {
                    tracing::error!(target: "kxp_outbox", outbox_id = %row.id,
                        event_id = %row.event_id, %error,
                        "the sender refused an outbox event; it stays in the outbox for requeue");
                    DB::refuse(&self.pool, &row.id, now_ms(), &error).await?;
                    pass.refused += 1;
                }
                HandOff::Later { wait, error } => {
                    let wait = match wait {
                        Some(asked) => self.bounded(asked, &row),
                        None => backoff(
                            u32::try_from(row.attempts + 1).unwrap_or(u32::MAX),
                            self.config.max_backoff,
                        ),
                    };
                    let at = now_ms().saturating_add(millis(wait));
                    DB::reschedule(&self.pool, &row.id, at, true, Some(&error)).await?;
                    // The rest of the batch was not tried: due again with this row, untouched.
                    for rest in rows {
                        DB::reschedule(&self.pool, &rest.id, at, false, None).await?;
                    }
                    pass.wait = Some(wait);
                    return Ok(pass);
                }
                HandOff::NotAccepted(error) => {
                    let at = now_ms().saturating_add(millis(self.config.poll_interval));
                    for row in std::iter::once(row).chain(rows) {
                        DB::reschedule(&self.pool, &row.id, at, false, None).await?;
                    }
                    return Err(RelayError::NotAccepted(error));
                }
            }
        }
        Ok(pass)
    }

    /// The rows the sender refused for good, oldest first (at most `limit`).
    pub async fn refused(&self, limit: u32) -> Result<Vec<Refused>, RelayError> {
        let rows = DB::refused(&self.pool, i64::from(limit)).await?;
        Ok(rows
            .into_iter()
            .map(|r| Refused {
                id: r.id,
                event_id: EventId::from(r.event_id),
                request: r.request,
                error: r.last_error.unwrap_or_default(),
                refused_at: r.refused_at,
            })
            .collect())
    }

    /// Makes a refused row due again (after its cause is fixed); false if `id` is not a
    /// refused row.
    pub async fn requeue(&self, id: &str) -> Result<bool, RelayError> {
        Ok(DB::requeue(&self.pool, id, now_ms()).await?)
    }

    /// How many rows wait to be handed off (refused ones left out): a producer's gauge.
    pub async fn waiting(&self) -> Result<u64, RelayError> {
        Ok(u64::try_from(DB::waiting(&self.pool).await?).unwrap_or(0))
    }

    /// The wait the sender (or a proxy before it) asked for with `Retry-After`, at most
    /// `max_backoff`: an answer is not trusted to stop the hand-off for a day, or, with a huge
    /// value, for good (it would be stored as the row's due time).
    fn bounded(&self, asked: Duration, row: &Row) -> Duration {
        let max = self.config.max_backoff;
        if asked <= max {
            return asked;
        }
        tracing::warn!(target: "kxp_outbox", outbox_id = %row.id, asked = ?asked, used = ?max,
            "the sender's Retry-After is longer than max_backoff; waiting max_backoff instead");
        max
    }

    /// Sends one row and says what its answer means.
    async fn hand_off(&self, row: &Row) -> HandOff {
        let (event, trace) = match crate::emit::stored(&row.request) {
            Ok(stored) => stored,
            // Written by `emit`, so only a row altered by hand gets here; no retry cures it.
            Err(e) => return HandOff::Refused(format!("the outbox row is not an event: {e}")),
        };
        let key = Some(row.id.as_str());
        let call = async {
            match &trace {
                Some(trace) => self.client.create_event_in_trace(&event, key, trace).await,
                None => self.client.create_event(&event, key).await,
            }
        };
        match tokio::time::timeout(self.config.request_timeout, call).await {
            Err(_) => HandOff::Later {
                wait: None,
                error: format!(
                    "no answer within {} ms",
                    self.config.request_timeout.as_millis()
                ),
            },
            Ok(Ok(_)) => HandOff::Taken,
            Ok(Err(e)) => classify(e),
        }
    }
}

/// What one hand-off came to.
enum HandOff {
    /// 202: the sender has the event.
    Taken,
    /// A 4xx about the event: no retry cures it.
    Refused(String),
    /// Try again: after the sender's `Retry-After`, or after the row's backoff.
    Later {
        wait: Option<Duration>,
        error: String,
    },
    /// The sender refused the relay itself.
    NotAccepted(String),
}

/// What a failed `POST /v1/events` means for the row.
fn classify(error: ClientError) -> HandOff {
    let text = error.to_string();
    match &error {
        ClientError::Api {
            status,
            retry_after,
            ..
        } if *status == 503 || *status == 429 => HandOff::Later {
            wait: Some(retry_after.unwrap_or(Duration::from_secs(1))),
            error: text,
        },
        ClientError::Api {
            status: 401 | 403 | 404,
            ..
        } => HandOff::NotAccepted(text),
        ClientError::Api { status, .. } if (400..500).contains(status) && *status != 408 => {
            HandOff::Refused(text)
        }
        _ => HandOff::Later {
            wait: None,
            error: text,
        },
    }
}

/// The wait before try `n` (1-based) of something that failed: 1 s, doubling, at most `max`,
/// less up to a fifth at random so that many relays do not come back together.
fn backoff(n: u32, max: Duration) -> Duration {
    let full = Duration::from_secs(1)
        .saturating_mul(1u32 << n.saturating_sub(1).min(20))
        .min(max);
    let mut byte = [0u8; 1];
    let jitter = match getrandom::fill(&mut byte) {
        Ok(()) => f64::from(byte[0]) / 255.0 * 0.2,
        Err(_) => 0.0,
    };
    full.mul_f64(1.0 - jitter)
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Unix ms now.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_bound_with_at_most_a_fifth_off() {
        let max = Duration::from_secs(300);
        for (n, full) in [(1, 1), (2, 2), (3, 4), (9, 256), (10, 300), (40, 300)] {
            let wait = backoff(n, max);
            let full = Duration::from_secs(full);
            assert!(wait <= full && wait >= full.mul_f64(0.8), "{n}: {wait:?}");
        }
    }
}
