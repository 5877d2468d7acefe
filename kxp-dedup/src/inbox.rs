//! Inbox mode: store the verified payload and answer 200 at once; a worker processes it later,
//! under the same claim rules as claim/complete mode: a fenced [`Lease`], renewed while the
//! handler runs.

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use crate::process::{HandlerResult, run_handler, with_heartbeat};
use crate::store::Pool;
#[cfg(feature = "sqlite")]
use crate::store::SQLITE_NOW;
use crate::util::{millis, truncate};
use crate::{Lease, LeaseClaim, Outcome, Store, StoreError};

/// What [`Store::inbox_put`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InboxPut {
    /// First delivery: the payload is now durably stored. Answer 200.
    Stored,
    /// Stored before (a redelivery): the first payload is kept. Answer 200.
    AlreadyStored,
}

/// One inbox item that [`Store::inbox_run_once`] ran.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum InboxRun {
    /// The handler succeeded; the item and its event are marked done together.
    Processed {
        /// The item's event id.
        event_id: String,
    },
    /// The handler failed; the item is due again after `retry_after`.
    Failed {
        /// The item's event id.
        event_id: String,
        /// The handler's error, as stored in `last_error`.
        error: String,
        /// The back-off before the item is due again ([`inbox_retry_delay`]).
        retry_after: Duration,
    },
    /// The handler ran (and succeeded or failed), but its claim was taken over meanwhile: the
    /// lease ran out without being renewed (the database was out of reach for a whole lease,
    /// or the worker stalled) and another worker claimed the item. Nothing of this run is
    /// recorded: the new holder completes or fails the item, and its claim is left as it was.
    /// Logged at error level (`kind = "claim_lost"`); the worker loop simply goes on.
    ClaimLost {
        /// The item's event id.
        event_id: String,
    },
}

impl InboxRun {
    /// The event id of the item that ran.
    pub fn event_id(&self) -> &str {
        match self {
            InboxRun::Processed { event_id }
            | InboxRun::Failed { event_id, .. }
            | InboxRun::ClaimLost { event_id } => event_id,
        }
    }

    /// [`Outcome::Processed`] or [`Outcome::Failed`], for logs shared with the request path.
    /// A [`ClaimLost`](InboxRun::ClaimLost) run reads `Failed`: its result was not recorded,
    /// as a request whose completion cannot be written logs `failed` too.
    pub fn outcome(&self) -> Outcome {
        match self {
            InboxRun::Processed { .. } => Outcome::Processed,
            InboxRun::Failed { .. } | InboxRun::ClaimLost { .. } => Outcome::Failed,
        }
    }
}

/// How long a failed inbox item waits before it is due again, after its `attempts`-th claim:
/// 1 s, 2 s, 4 s, … doubling up to one hour, then hourly for ever.
///
/// Nobody redelivers an inbox item (the sender already has its 200), so the worker retries
/// until an operator steps in; the back-off keeps a poison item from spinning a worker.
pub fn inbox_retry_delay(attempts: u32) -> Duration {
    const CAP: Duration = Duration::from_secs(3600);
    let exponent = attempts.saturating_sub(1).min(12);
    Duration::from_secs(1u64 << exponent).min(CAP)
}

/// How many due items one call looks at: enough to step over items other workers claim first.
const CANDIDATES: i64 = 8;

/// How a run ends, for its event row and its item.
#[derive(Clone, Copy)]
enum Finish<'a> {
    /// The event done and the item closed.
    Done,
    /// The event failed with `error` and the item due again after `retry_after`.
    Failed {
        error: &'a str,
        retry_after: Duration,
    },
}

impl Store {
    /// Stores a verified payload for later processing. Answer 200 once this returns `Ok`,
    /// whichever variant: the event is durably recorded.
    ///
    /// A redelivery of a stored event id keeps the first payload (they are identical: the
    /// event id names one event).
    pub async fn inbox_put(&self, event_id: &str, payload: &[u8]) -> Result<InboxPut, StoreError> {
        let inserted = match &self.pool {
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => sqlx::query(
                "INSERT INTO kxp_inbox (scope, event_id, payload, received_at, available_at)
                 SELECT ?3, ?1, ?2, now.ms, now.ms
                 FROM (SELECT CAST(unixepoch('subsec') * 1000 AS INTEGER) AS ms) AS now
                 WHERE true
                 ON CONFLICT (scope, event_id) DO NOTHING",
            )
            .bind(event_id)
            .bind(payload)
            .bind(&*self.scope)
            .execute(pool)
            .await?
            .rows_affected(),
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => sqlx::query(
                "INSERT INTO kxp_inbox (scope, event_id, payload, received_at, available_at)
                 VALUES ($3, $1, $2, now(), now())
                 ON CONFLICT (scope, event_id) DO NOTHING",
            )
            .bind(event_id)
            .bind(payload)
            .bind(&*self.scope)
            .execute(pool)
            .await?
            .rows_affected(),
        };
        Ok(if inserted == 0 {
            InboxPut::AlreadyStored
        } else {
            InboxPut::Stored
        })
    }

    /// Runs one due inbox item, if there is one: claims it with the same rules as
    /// [`claim_lease`](Store::claim_lease) (so several workers, on several machines, never run
    /// one item at the same time), calls `handler(event_id, payload)` while
    /// [renewing](Store::renew) the lease every third of `lease`, then records the result if
    /// the claim is still this call's.
    ///
    /// - `Ok(None)`: nothing is due. Sleep a little before the next call.
    /// - `Ok(Some(InboxRun::Processed { .. }))`: done; the event and the item are marked in one
    ///   transaction.
    /// - `Ok(Some(InboxRun::Failed { .. }))`: the error is stored as `last_error` and the item
    ///   is due again after [`inbox_retry_delay`].
    /// - `Ok(Some(InboxRun::ClaimLost { .. }))`: the claim was taken over while the handler ran
    ///   (the lease could not be renewed for a whole lease, and another worker claimed the
    ///   item). Nothing of this run is written over the new holder's claim; it completes or
    ///   fails the item. Logged at error level; a worker loop needs nothing special for it,
    ///   which is why it is a result and not an `Err` (`?` would end the loop).
    ///
    /// A handler slower than its lease keeps the item while it runs; an item whose claim's
    /// lease ran out (the worker died) is due again. A worker loop:
    ///
    /// ```no_run
    /// # async fn worker(store: kxp_dedup::Store) -> Result<(), kxp_dedup::StoreError> {
    /// use std::time::Duration;
    /// loop {
    ///     let ran = store
    ///         .inbox_run_once(Duration::from_secs(60), |event_id, payload| async move {
    ///             // deserialize `payload`, do the work…
    ///             # let _ = (event_id, payload);
    ///             Ok::<(), std::io::Error>(())
    ///         })
    ///         .await?;
    ///     if ran.is_none() {
    ///         tokio::time::sleep(Duration::from_millis(500)).await;
    ///     }
    /// }
    /// # }
    /// ```
    pub async fn inbox_run_once<F, Fut, E>(
        &self,
        lease: Duration,
        handler: F,
    ) -> Result<Option<InboxRun>, StoreError>
    where
        F: FnOnce(String, Vec<u8>) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: Display,
    {
        for event_id in self.inbox_candidates().await? {
            let held = match self.claim_lease(&event_id, lease).await? {
                LeaseClaim::Held(held) => held,
                // Completed without the inbox (claim/complete mode used for the same id, or a
                // crash between two statements of an older version): close the item.
                LeaseClaim::AlreadyDone => {
                    self.inbox_close(&event_id).await?;
                    continue;
                }
                // Another worker was faster.
                LeaseClaim::InProgress { .. } => continue,
            };
            let payload = self.inbox_payload(&event_id).await?;
            let id = event_id.clone();
            let result =
                with_heartbeat(self, &held, run_handler(move || handler(id, payload))).await;
            let retry_after = inbox_retry_delay(held.token());
            return match result {
                HandlerResult::Ok => {
                    if !self.inbox_finish(&held, Finish::Done).await? {
                        log_claim_lost(&event_id, "succeeded");
                        return Ok(Some(InboxRun::ClaimLost { event_id }));
                    }
                    Ok(Some(InboxRun::Processed { event_id }))
                }
                HandlerResult::Err(error) => {
                    let finish = Finish::Failed {
                        error: &error,
                        retry_after,
                    };
                    if !self.inbox_finish(&held, finish).await? {
                        log_claim_lost(&event_id, "failed");
                        return Ok(Some(InboxRun::ClaimLost { event_id }));
                    }
                    Ok(Some(InboxRun::Failed {
                        event_id,
                        error,
                        retry_after,
                    }))
                }
                HandlerResult::Panicked(payload) => {
                    let finish = Finish::Failed {
                        error: "handler panicked",
                        retry_after,
                    };
                    match self.inbox_finish(&held, finish).await {
                        Ok(true) => {}
                        Ok(false) => log_claim_lost(&event_id, "panicked"),
                        Err(error) => {
                            tracing::warn!(event_id, error = %error, kind = error.kind(), "kxp-dedup: cannot record a failure");
                        }
                    }
                    std::panic::resume_unwind(payload)
                }
            };
        }
        Ok(None)
    }

    /// Due, unfinished items not held by a live claim, oldest due first.
    async fn inbox_candidates(&self) -> Result<Vec<String>, StoreError> {
        let ids = match &self.pool {
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => {
                let sql = format!(
                    "SELECT i.event_id FROM kxp_inbox AS i
                     LEFT JOIN kxp_processed_events AS e
                       ON e.scope = i.scope AND e.event_id = i.event_id
                     WHERE i.scope = ?2 AND i.done_at IS NULL AND i.available_at <= {SQLITE_NOW}
                       AND NOT (e.status IS 'processing' AND e.locked_until >= {SQLITE_NOW})
                     ORDER BY i.available_at, i.received_at
                     LIMIT ?1"
                );
                sqlx::query_scalar(&sql)
                    .bind(CANDIDATES)
                    .bind(&*self.scope)
                    .fetch_all(pool)
                    .await?
            }
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => {
                sqlx::query_scalar(
                    "SELECT i.event_id FROM kxp_inbox AS i
                     LEFT JOIN kxp_processed_events AS e
                       ON e.scope = i.scope AND e.event_id = i.event_id
                     WHERE i.scope = $2 AND i.done_at IS NULL AND i.available_at <= now()
                       AND NOT (e.status IS NOT DISTINCT FROM 'processing'
                                AND e.locked_until >= now())
                     ORDER BY i.available_at, i.received_at
                     LIMIT $1",
                )
                .bind(CANDIDATES)
                .bind(&*self.scope)
                .fetch_all(pool)
                .await?
            }
        };
        Ok(ids)
    }

    async fn inbox_payload(&self, event_id: &str) -> Result<Vec<u8>, StoreError> {
        let payload = match &self.pool {
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => {
                sqlx::query_scalar(
                    "SELECT payload FROM kxp_inbox WHERE event_id = ?1 AND scope = ?2",
                )
                .bind(event_id)
                .bind(&*self.scope)
                .fetch_one(pool)
                .await?
            }
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => {
                sqlx::query_scalar(
                    "SELECT payload FROM kxp_inbox WHERE event_id = $1 AND scope = $2",
                )
                .bind(event_id)
                .bind(&*self.scope)
                .fetch_one(pool)
                .await?
            }
        };
        Ok(payload)
    }

    /// Records how a run ended if `lease` still holds the event: the event row's `UPDATE`, fenced
    /// as [`complete_lease`](Store::complete_lease)'s is, and the item's only when that one
    /// matched, in one transaction. A crash in between cannot leave a done event with an open
    /// item, or the reverse.
    ///
    /// `false` when the event carries another claim (or has no row): rolled back, nothing
    /// written, so the holder's claim and its item stay as they are.
    async fn inbox_finish(&self, lease: &Lease, finish: Finish<'_>) -> Result<bool, StoreError> {
        let token = i64::from(lease.token);
        match &self.pool {
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => {
                let (event_set, item_set) = match finish {
                    Finish::Done => ("status = 'done'", format!("done_at = {SQLITE_NOW}")),
                    Finish::Failed { .. } => (
                        "status = 'failed', last_error = ?4",
                        format!("available_at = {SQLITE_NOW} + ?3"),
                    ),
                };
                let event_sql = format!(
                    "UPDATE kxp_processed_events
                     SET {event_set}, locked_until = NULL, updated_at = {SQLITE_NOW}
                     WHERE event_id = ?1 AND scope = ?2 AND status = 'processing' AND attempts = ?3"
                );
                let item_sql =
                    format!("UPDATE kxp_inbox SET {item_set} WHERE event_id = ?1 AND scope = ?2");
                let mut event = sqlx::query(&event_sql)
                    .bind(&lease.event_id)
                    .bind(&*lease.scope)
                    .bind(token);
                let mut item = sqlx::query(&item_sql)
                    .bind(&lease.event_id)
                    .bind(&*lease.scope);
                if let Finish::Failed { error, retry_after } = finish {
                    event = event.bind(truncate(error, crate::MAX_ERROR_LEN));
                    item = item.bind(millis(retry_after));
                }
                let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
                if event.execute(&mut *tx).await?.rows_affected() == 0 {
                    // Nothing was written: a failed rollback loses nothing (dropping rolls
                    // back too).
                    let _ = tx.rollback().await;
                    return Ok(false);
                }
                item.execute(&mut *tx).await?;
                tx.commit().await?;
            }
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => {
                let (event_set, item_set) = match finish {
                    Finish::Done => ("status = 'done'", "done_at = now()"),
                    Finish::Failed { .. } => (
                        "status = 'failed', last_error = $4",
                        "available_at = now() + $3::bigint * interval '1 millisecond'",
                    ),
                };
                let event_sql = format!(
                    "UPDATE kxp_processed_events
                     SET {event_set}, locked_until = NULL, updated_at = now()
                     WHERE event_id = $1 AND scope = $2 AND status = 'processing' AND attempts = $3::bigint"
                );
                let item_sql =
                    format!("UPDATE kxp_inbox SET {item_set} WHERE event_id = $1 AND scope = $2");
                let mut event = sqlx::query(&event_sql)
                    .bind(&lease.event_id)
                    .bind(&*lease.scope)
                    .bind(token);
                let mut item = sqlx::query(&item_sql)
                    .bind(&lease.event_id)
                    .bind(&*lease.scope);
                if let Finish::Failed { error, retry_after } = finish {
                    event = event.bind(truncate(error, crate::MAX_ERROR_LEN));
                    item = item.bind(millis(retry_after));
                }
                let mut tx = pool.begin().await?;
                if event.execute(&mut *tx).await?.rows_affected() == 0 {
                    // As on SQLite: nothing was written.
                    let _ = tx.rollback().await;
                    return Ok(false);
                }
                item.execute(&mut *tx).await?;
                tx.commit().await?;
            }
        }
        Ok(true)
    }

    /// Closes an item whose event is already done.
    async fn inbox_close(&self, event_id: &str) -> Result<(), StoreError> {
        match &self.pool {
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => {
                let sql = format!(
                    "UPDATE kxp_inbox SET done_at = {SQLITE_NOW}
                     WHERE event_id = ?1 AND scope = ?2 AND done_at IS NULL"
                );
                sqlx::query(&sql)
                    .bind(event_id)
                    .bind(&*self.scope)
                    .execute(pool)
                    .await?;
            }
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => {
                sqlx::query(
                    "UPDATE kxp_inbox SET done_at = now()
                     WHERE event_id = $1 AND scope = $2 AND done_at IS NULL",
                )
                .bind(event_id)
                .bind(&*self.scope)
                .execute(pool)
                .await?;
            }
        }
        Ok(())
    }
}

/// Logs a run whose result was refused, at error level as [`process`](crate::process) does:
/// `handler` says how the handler ended.
fn log_claim_lost(event_id: &str, handler: &str) {
    let error = StoreError::ClaimLost {
        event_id: event_id.to_owned(),
    };
    tracing::error!(
        event_id,
        error = %error,
        kind = error.kind(),
        "kxp-dedup: inbox handler {handler} after its claim was taken over; \
         the item is left to the new holder"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delay_doubles_up_to_an_hour() {
        let secs: Vec<u64> = [0, 1, 2, 3, 4, 12, 13, 100, u32::MAX]
            .into_iter()
            .map(|a| inbox_retry_delay(a).as_secs())
            .collect();
        assert_eq!(secs, [1, 1, 2, 4, 8, 2048, 3600, 3600, 3600]);
    }
}
