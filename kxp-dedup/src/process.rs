//! The framework-agnostic glue: run a handler at most once per event id and say what to answer.

use std::any::Any;
use std::convert::Infallible;
use std::fmt::Display;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::pin;
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::{Either, select};

use crate::record::{Claim, Lease, LeaseClaim};
use crate::{STORE_UNAVAILABLE_RETRY_AFTER, Store, StoreError, Tx};

/// What happened to one delivery, and so what the receiver answers (ARCHITECTURE.md,
/// "Receiver: status codes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The handler ran and succeeded, and that is recorded: `200`.
    Processed,
    /// Processed before: `200` without running the handler.
    Duplicate,
    /// Another request holds a live claim on this event: `409` + `Retry-After`.
    InProgress {
        /// When the sender may try again (the rest of that claim's lease, whole seconds).
        retry_after: Duration,
    },
    /// The handler failed: `500`. The event stays claimable, so the sender's retry runs it
    /// again.
    Failed,
    /// The dedup store could not be used, so nothing is recorded: `503` + `Retry-After`.
    StoreUnavailable {
        /// When the sender may try again.
        retry_after: Duration,
    },
}

impl Outcome {
    /// The HTTP status to answer: 200, 200, 409, 500, 503.
    pub const fn status(&self) -> u16 {
        match self {
            Outcome::Processed | Outcome::Duplicate => 200,
            Outcome::InProgress { .. } => 409,
            Outcome::Failed => 500,
            Outcome::StoreUnavailable { .. } => 503,
        }
    }

    /// The value of the request log's `outcome` field: `processed`, `duplicate`,
    /// `in_progress`, `failed`. A store that is down reads `failed` too: the request was not
    /// processed, and the log line's `status` (503) tells it from a handler failure.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Outcome::Processed => "processed",
            Outcome::Duplicate => "duplicate",
            Outcome::InProgress { .. } => "in_progress",
            Outcome::Failed | Outcome::StoreUnavailable { .. } => "failed",
        }
    }

    /// The `Retry-After` to send, for 409 and 503.
    pub const fn retry_after(&self) -> Option<Duration> {
        match self {
            Outcome::InProgress { retry_after } | Outcome::StoreUnavailable { retry_after } => {
                Some(*retry_after)
            }
            Outcome::Processed | Outcome::Duplicate | Outcome::Failed => None,
        }
    }

    /// The `Retry-After` header value: whole seconds, rounded up and at least 1, since
    /// `Retry-After: 0` would invite an immediate retry.
    pub fn retry_after_header(&self) -> Option<u64> {
        self.retry_after().map(|after| {
            let seconds = after
                .as_secs()
                .saturating_add(u64::from(after.subsec_nanos() > 0));
            seconds.max(1)
        })
    }

    /// The response body both adapters send: `{"outcome":"<name>"}`.
    pub fn json_body(&self) -> String {
        format!(r#"{{"outcome":"{}"}}"#, self.as_str())
    }

    /// True for the 2xx outcomes, after which the sender stops delivering.
    pub const fn is_success(&self) -> bool {
        matches!(self, Outcome::Processed | Outcome::Duplicate)
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

const UNAVAILABLE: Outcome = Outcome::StoreUnavailable {
    retry_after: STORE_UNAVAILABLE_RETRY_AFTER,
};

/// Claim/complete mode: claims `event_id` for `lease` ([`Store::claim_lease`]), runs `handler`
/// only if this call holds the claim, renewing the lease while it runs, then records the
/// result if the claim is still this call's.
///
/// - claim → `AlreadyDone`: [`Outcome::Duplicate`]; `InProgress`: [`Outcome::InProgress`].
/// - while the handler runs, the lease is [renewed](Store::renew) every third of `lease`, so a
///   handler slower than its lease is not run a second time by a concurrent delivery while it
///   is alive. The renewals stop when the handler ends (or the returned future is dropped).
/// - handler `Ok` → [`Store::complete_lease`] → [`Outcome::Processed`]. If the completion cannot be
///   written, the answer is [`Outcome::StoreUnavailable`] (never a 200 that is not recorded),
///   and the event runs again once the lease ends: make such handlers idempotent, or use
///   [`process_in_transaction`].
/// - handler `Err(e)` → [`Store::fail_lease`] with `e.to_string()` → [`Outcome::Failed`].
/// - any store error before the handler → [`Outcome::StoreUnavailable`].
///
/// If the claim was lost meanwhile (the lease could not be renewed, say the database was out of
/// reach for longer than `lease`, and another delivery claimed the event), nothing is written
/// over the new holder's claim: the completion is refused (`claim_lost`, logged as an error) and
/// the answer is the event's state, [`Outcome::Duplicate`] once the new holder completed it,
/// else [`Outcome::InProgress`] so that the sender comes back.
///
/// A panicking handler is recorded as failed (so the sender's retry need not wait for the
/// lease), then the panic continues. If the returned future is dropped mid-handler (the client
/// went away), the renewals stop and the claim stays until its lease ends.
pub async fn process<F, Fut, E>(
    store: &Store,
    event_id: &str,
    lease: Duration,
    handler: F,
) -> Outcome
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: Display,
{
    let held = match store.claim_lease(event_id, lease).await {
        Ok(LeaseClaim::Held(held)) => held,
        Ok(LeaseClaim::AlreadyDone) => return Outcome::Duplicate,
        Ok(LeaseClaim::InProgress { retry_after }) => return Outcome::InProgress { retry_after },
        Err(error) => {
            tracing::warn!(event_id, error = %error, kind = error.kind(), "kxp-dedup: cannot claim");
            return UNAVAILABLE;
        }
    };
    match with_heartbeat(store, &held, run_handler(handler)).await {
        HandlerResult::Ok => match store.complete_lease(held).await {
            Ok(()) => Outcome::Processed,
            Err(error @ StoreError::ClaimLost { .. }) => {
                tracing::error!(
                    event_id,
                    error = %error,
                    kind = error.kind(),
                    "kxp-dedup: handler succeeded after its claim was taken over; \
                     the completion is left to the new holder"
                );
                after_lost_claim(store, event_id).await
            }
            Err(error) => {
                tracing::error!(
                    event_id,
                    error = %error,
                    kind = error.kind(),
                    "kxp-dedup: handler succeeded but completion was not recorded; \
                     the event will run again after its lease"
                );
                UNAVAILABLE
            }
        },
        HandlerResult::Err(message) => {
            record_failure(store, held, &message).await;
            Outcome::Failed
        }
        HandlerResult::Panicked(payload) => {
            record_failure(store, held, "handler panicked").await;
            std::panic::resume_unwind(payload)
        }
    }
}

/// Runs `work` while renewing `lease` every third of its duration, until `work` ends. A renewal
/// that fails for want of the database is tried again at the next beat (the lease may still be
/// live); once the claim is lost, the renewals stop and `work` runs on, its result refused at
/// completion.
pub(crate) async fn with_heartbeat<T>(
    store: &Store,
    lease: &Lease,
    work: impl Future<Output = T>,
) -> T {
    let beat = (lease.duration() / 3).max(Duration::from_millis(1));
    let heartbeat = async {
        loop {
            tokio::time::sleep(beat).await;
            match store.renew(lease).await {
                Ok(()) => {}
                Err(error @ (StoreError::ClaimLost { .. } | StoreError::NotClaimed { .. })) => {
                    tracing::warn!(
                        event_id = lease.event_id(),
                        error = %error,
                        kind = error.kind(),
                        "kxp-dedup: the claim was lost while its handler runs"
                    );
                    break;
                }
                Err(error) => {
                    tracing::warn!(
                        event_id = lease.event_id(),
                        error = %error,
                        kind = error.kind(),
                        "kxp-dedup: cannot renew a lease; trying again"
                    );
                }
            }
        }
        std::future::pending::<Infallible>().await
    };
    match select(pin!(work), pin!(heartbeat)).await {
        Either::Left((output, _)) => output,
        Either::Right((never, _)) => match never {},
    }
}

/// The answer after a refused completion: what the event's state says now.
async fn after_lost_claim(store: &Store, event_id: &str) -> Outcome {
    match store.state(event_id).await {
        Ok(Some((status, _))) if status == "done" => Outcome::Duplicate,
        Ok(Some((status, left_ms))) if status == "processing" && left_ms > 0 => {
            Outcome::InProgress {
                retry_after: crate::util::retry_after_from_millis(left_ms),
            }
        }
        // Failed by the new holder, or its lease ran out too: the sender's next try claims it.
        Ok(_) => Outcome::InProgress {
            retry_after: Duration::from_secs(1),
        },
        Err(error) => {
            tracing::warn!(event_id, error = %error, kind = error.kind(), "kxp-dedup: cannot read state");
            UNAVAILABLE
        }
    }
}

async fn record_failure(store: &Store, lease: Lease, message: &str) {
    let event_id = lease.event_id().to_owned();
    if let Err(error) = store.fail_lease(lease, message).await {
        // The claim's lease runs out on its own (or is another's now): the event is retried
        // later either way.
        tracing::warn!(event_id, error = %error, kind = error.kind(), "kxp-dedup: cannot record a failure");
    }
}

pub(crate) enum HandlerResult {
    Ok,
    Err(String),
    Panicked(Box<dyn Any + Send>),
}

/// Runs a handler, turning its error into the text stored as `last_error` and catching a
/// panic so the caller can record it before it continues.
pub(crate) async fn run_handler<F, Fut, E>(handler: F) -> HandlerResult
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: Display,
{
    // The closure is called inside the guarded future, so a panic before its first `.await`
    // is caught too. Unwind safety: after a panic nothing of the handler's state is used again.
    match AssertUnwindSafe(async move { handler().await })
        .catch_unwind()
        .await
    {
        Ok(Ok(())) => HandlerResult::Ok,
        Ok(Err(error)) => HandlerResult::Err(error.to_string()),
        Err(payload) => HandlerResult::Panicked(payload),
    }
}

/// In-transaction mode: the "processed" mark and the handler's database side effect commit
/// together, or not at all — exactly-once for effects in the same database.
///
/// `begin` → [`Tx::mark_processed`] (`false`: roll back, [`Outcome::Duplicate`]) →
/// `handler(tx)` runs its statements on [`Tx::sqlite`] / `Tx::postgres` (feature `postgres`)
/// and hands the transaction back (owned in, owned out, so no borrow lives across an
/// `.await`) → commit → [`Outcome::Processed`].
///
/// A handler error drops the transaction: the effect and the mark roll back together and the
/// outcome is [`Outcome::Failed`]; the next delivery runs it again. Nothing is recorded about
/// the failure (the mark rolled back with it), so `last_error` stays as it was. Store errors
/// (begin, mark, commit) give [`Outcome::StoreUnavailable`].
///
/// On PostgreSQL this costs three round trips (`BEGIN`, the mark, `COMMIT`) and one commit,
/// against the one round trip of a bare `INSERT … ON CONFLICT`: about 1.3–1.4x its time at one
/// worker, 1.5–1.6x at 16 (BENCHMARKS.md). `BEGIN` is not sent with the mark because sqlx 0.8
/// cannot pipeline: the only way to send both at once is one simple query, which has to carry
/// the id as a literal, is parsed and planned at every event, and can only return the mark's
/// answer as an error (`begin_with` discards results). Measured, that cost more than the round
/// trip it saves: 1.68x a bare INSERT at one worker and 1.84x at 16, where the three round
/// trips cost 1.38x and 1.55x in a run minutes before (2026-12, kxp-dedup's git history).
///
/// The transaction is open while the handler runs, holding one pooled connection (and, on
/// SQLite, the write lock): keep the handler short, and do not use the store's pool from
/// inside it (with `sqlite::memory:` the pool has one connection, so that would wait until
/// the acquire timeout).
pub async fn process_in_transaction<F, Fut, E>(store: &Store, event_id: &str, handler: F) -> Outcome
where
    F: FnOnce(Tx) -> Fut,
    Fut: Future<Output = Result<Tx, E>>,
    E: Display,
{
    let mut tx = match store.begin().await {
        Ok(tx) => tx,
        Err(error) => {
            tracing::warn!(event_id, error = %error, kind = error.kind(), "kxp-dedup: cannot begin");
            return UNAVAILABLE;
        }
    };
    match tx.mark_processed(event_id).await {
        Ok(true) => {}
        Ok(false) => {
            let outcome = match tx.why_not_marked(event_id).await {
                Ok(Claim::InProgress { retry_after }) => Outcome::InProgress { retry_after },
                Ok(_) => Outcome::Duplicate,
                Err(error) => {
                    tracing::warn!(event_id, error = %error, kind = error.kind(), "kxp-dedup: cannot read state");
                    UNAVAILABLE
                }
            };
            // Nothing was written: a failed rollback loses nothing (dropping rolls back too).
            let _ = tx.rollback().await;
            return outcome;
        }
        Err(error) => {
            tracing::warn!(event_id, error = %error, kind = error.kind(), "kxp-dedup: cannot mark");
            return UNAVAILABLE;
        }
    }
    let tx = match handler(tx).await {
        Ok(tx) => tx,
        Err(error) => {
            tracing::debug!(event_id, error = %error, "kxp-dedup: handler failed, rolled back");
            return Outcome::Failed;
        }
    };
    match tx.commit().await {
        Ok(()) => Outcome::Processed,
        Err(error) => {
            tracing::warn!(event_id, error = %error, kind = error.kind(), "kxp-dedup: cannot commit");
            UNAVAILABLE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Outcome; 5] = [
        Outcome::Processed,
        Outcome::Duplicate,
        Outcome::InProgress {
            retry_after: Duration::from_secs(7),
        },
        Outcome::Failed,
        Outcome::StoreUnavailable {
            retry_after: Duration::from_secs(5),
        },
    ];

    #[test]
    fn retry_after_is_whole_seconds_rounded_up_and_never_zero() {
        let in_progress = |ms| Outcome::InProgress {
            retry_after: Duration::from_millis(ms),
        };
        assert_eq!(in_progress(0).retry_after_header(), Some(1));
        assert_eq!(in_progress(1).retry_after_header(), Some(1));
        assert_eq!(in_progress(1000).retry_after_header(), Some(1));
        assert_eq!(in_progress(1001).retry_after_header(), Some(2));
        assert_eq!(Outcome::Processed.retry_after_header(), None);
        assert_eq!(Outcome::Duplicate.json_body(), r#"{"outcome":"duplicate"}"#);
    }

    #[test]
    fn statuses_follow_the_architecture_table() {
        let statuses: Vec<u16> = ALL.iter().map(Outcome::status).collect();
        assert_eq!(statuses, [200, 200, 409, 500, 503]);
    }

    #[test]
    fn log_names_are_the_architecture_outcomes() {
        let names: Vec<&str> = ALL.iter().map(Outcome::as_str).collect();
        assert_eq!(
            names,
            ["processed", "duplicate", "in_progress", "failed", "failed"]
        );
        assert_eq!(Outcome::Duplicate.to_string(), "duplicate");
    }

    #[test]
    fn retry_after_only_for_409_and_503() {
        let retry: Vec<Option<Duration>> = ALL.iter().map(Outcome::retry_after).collect();
        assert_eq!(
            retry,
            [
                None,
                None,
                Some(Duration::from_secs(7)),
                None,
                Some(Duration::from_secs(5))
            ]
        );
        for outcome in ALL {
            assert_eq!(
                outcome.retry_after().is_some(),
                matches!(outcome.status(), 409 | 503)
            );
            assert_eq!(outcome.is_success(), outcome.status() == 200);
        }
    }

    #[tokio::test]
    async fn run_handler_catches_errors_and_panics() {
        assert!(matches!(
            run_handler(|| async { Ok::<(), &str>(()) }).await,
            HandlerResult::Ok
        ));
        assert!(matches!(
            run_handler(|| async { Err::<(), &str>("boom") }).await,
            HandlerResult::Err(m) if m == "boom"
        ));
        let panicked = run_handler(|| async {
            if true {
                panic!("handler panic (expected by this test)");
            }
            Ok::<(), &str>(())
        })
        .await;
        assert!(matches!(panicked, HandlerResult::Panicked(_)));
    }
}
