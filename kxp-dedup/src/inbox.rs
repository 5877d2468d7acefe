//! Inbox mode: store the verified payload and answer 200 at once; a worker processes it later,
//! under the same claim rules as claim/complete mode.

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use crate::process::{HandlerResult, run_handler};
use crate::store::{ClaimState, Pool};
use crate::util::{millis, truncate};
use crate::{Outcome, Store, StoreError};

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
}

impl InboxRun {
    /// The event id of the item that ran.
    pub fn event_id(&self) -> &str {
        match self {
            InboxRun::Processed { event_id } | InboxRun::Failed { event_id, .. } => event_id,
        }
    }

    /// [`Outcome::Processed`] or [`Outcome::Failed`], for logs shared with the request path.
    pub fn outcome(&self) -> Outcome {
        match self {
            InboxRun::Processed { .. } => Outcome::Processed,
            InboxRun::Failed { .. } => Outcome::Failed,
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

#[cfg(feature = "sqlite")]
const SQLITE_NOW: &str = "CAST(unixepoch('subsec') * 1000 AS INTEGER)";

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
                "INSERT INTO kxp_inbox (event_id, payload, received_at, available_at)
                 SELECT ?1, ?2, now.ms, now.ms
                 FROM (SELECT CAST(unixepoch('subsec') * 1000 AS INTEGER) AS ms) AS now
                 WHERE true
                 ON CONFLICT (event_id) DO NOTHING",
            )
            .bind(event_id)
            .bind(payload)
            .execute(pool)
            .await?
            .rows_affected(),
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => sqlx::query(
                "INSERT INTO kxp_inbox (event_id, payload, received_at, available_at)
                 VALUES ($1, $2, now(), now())
                 ON CONFLICT (event_id) DO NOTHING",
            )
            .bind(event_id)
            .bind(payload)
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
    /// [`claim`](Store::claim) (so several workers, on several machines, never run one item
    /// at the same time), calls `handler(event_id, payload)`, then records the result.
    ///
    /// - `Ok(None)`: nothing is due. Sleep a little before the next call.
    /// - `Ok(Some(InboxRun::Processed { .. }))`: done; the event and the item are marked in one
    ///   transaction.
    /// - `Ok(Some(InboxRun::Failed { .. }))`: the error is stored as `last_error` and the item
    ///   is due again after [`inbox_retry_delay`].
    ///
    /// An item whose claim's lease ran out (the worker died) is due again. A worker loop:
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
            let attempts = match self.claim_inner(&event_id, lease).await? {
                ClaimState::Claimed { attempts } => attempts,
                // Completed without the inbox (claim/complete mode used for the same id, or a
                // crash between two statements of an older version): close the item.
                ClaimState::AlreadyDone => {
                    self.inbox_close(&event_id).await?;
                    continue;
                }
                // Another worker was faster.
                ClaimState::InProgress { .. } => continue,
            };
            let payload = self.inbox_payload(&event_id).await?;
            let id = event_id.clone();
            let result = run_handler(move || handler(id, payload)).await;
            return match result {
                HandlerResult::Ok => {
                    self.inbox_complete(&event_id).await?;
                    Ok(Some(InboxRun::Processed { event_id }))
                }
                HandlerResult::Err(error) => {
                    let retry_after = inbox_retry_delay(attempts);
                    self.inbox_fail(&event_id, &error, retry_after).await?;
                    Ok(Some(InboxRun::Failed {
                        event_id,
                        error,
                        retry_after,
                    }))
                }
                HandlerResult::Panicked(payload) => {
                    let retry_after = inbox_retry_delay(attempts);
                    if let Err(error) = self
                        .inbox_fail(&event_id, "handler panicked", retry_after)
                        .await
                    {
                        tracing::warn!(event_id, error = %error, "kxp-dedup: cannot record a failure");
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
                     LEFT JOIN kxp_processed_events AS e ON e.event_id = i.event_id
                     WHERE i.done_at IS NULL AND i.available_at <= {SQLITE_NOW}
                       AND NOT (e.status IS 'processing' AND e.locked_until >= {SQLITE_NOW})
                     ORDER BY i.available_at, i.received_at
                     LIMIT ?1"
                );
                sqlx::query_scalar(&sql)
                    .bind(CANDIDATES)
                    .fetch_all(pool)
                    .await?
            }
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => {
                sqlx::query_scalar(
                    "SELECT i.event_id FROM kxp_inbox AS i
                     LEFT JOIN kxp_processed_events AS e ON e.event_id = i.event_id
                     WHERE i.done_at IS NULL AND i.available_at <= now()
                       AND NOT (e.status IS NOT DISTINCT FROM 'processing'
                                AND e.locked_until >= now())
                     ORDER BY i.available_at, i.received_at
                     LIMIT $1",
                )
                .bind(CANDIDATES)
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
                sqlx::query_scalar("SELECT payload FROM kxp_inbox WHERE event_id = ?1")
                    .bind(event_id)
                    .fetch_one(pool)
                    .await?
            }
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => {
                sqlx::query_scalar("SELECT payload FROM kxp_inbox WHERE event_id = $1")
                    .bind(event_id)
                    .fetch_one(pool)
                    .await?
            }
        };
        Ok(payload)
    }

    /// The event done and the item closed, in one transaction: a crash in between cannot leave
    /// a done event with an open item, or the reverse.
    async fn inbox_complete(&self, event_id: &str) -> Result<(), StoreError> {
        match &self.pool {
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => {
                let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
                let sql = format!(
                    "UPDATE kxp_processed_events
                     SET status = 'done', locked_until = NULL, updated_at = {SQLITE_NOW}
                     WHERE event_id = ?1"
                );
                sqlx::query(&sql).bind(event_id).execute(&mut *tx).await?;
                let sql =
                    format!("UPDATE kxp_inbox SET done_at = {SQLITE_NOW} WHERE event_id = ?1");
                sqlx::query(&sql).bind(event_id).execute(&mut *tx).await?;
                tx.commit().await?;
            }
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => {
                let mut tx = pool.begin().await?;
                sqlx::query(
                    "UPDATE kxp_processed_events
                     SET status = 'done', locked_until = NULL, updated_at = now()
                     WHERE event_id = $1",
                )
                .bind(event_id)
                .execute(&mut *tx)
                .await?;
                sqlx::query("UPDATE kxp_inbox SET done_at = now() WHERE event_id = $1")
                    .bind(event_id)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
            }
        }
        Ok(())
    }

    /// The event failed and the item pushed back, in one transaction.
    async fn inbox_fail(
        &self,
        event_id: &str,
        error: &str,
        retry_after: Duration,
    ) -> Result<(), StoreError> {
        let error = truncate(error, crate::MAX_ERROR_LEN);
        let delay_ms = millis(retry_after);
        match &self.pool {
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => {
                let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
                let sql = format!(
                    "UPDATE kxp_processed_events
                     SET status = 'failed', locked_until = NULL, last_error = ?2,
                         updated_at = {SQLITE_NOW}
                     WHERE event_id = ?1 AND status <> 'done'"
                );
                sqlx::query(&sql)
                    .bind(event_id)
                    .bind(error)
                    .execute(&mut *tx)
                    .await?;
                let sql = format!(
                    "UPDATE kxp_inbox SET available_at = {SQLITE_NOW} + ?2 WHERE event_id = ?1"
                );
                sqlx::query(&sql)
                    .bind(event_id)
                    .bind(delay_ms)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
            }
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => {
                let mut tx = pool.begin().await?;
                sqlx::query(
                    "UPDATE kxp_processed_events
                     SET status = 'failed', locked_until = NULL, last_error = $2,
                         updated_at = now()
                     WHERE event_id = $1 AND status <> 'done'",
                )
                .bind(event_id)
                .bind(error)
                .execute(&mut *tx)
                .await?;
                sqlx::query(
                    "UPDATE kxp_inbox
                     SET available_at = now() + $2::bigint * interval '1 millisecond'
                     WHERE event_id = $1",
                )
                .bind(event_id)
                .bind(delay_ms)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
            }
        }
        Ok(())
    }

    /// Closes an item whose event is already done.
    async fn inbox_close(&self, event_id: &str) -> Result<(), StoreError> {
        match &self.pool {
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => {
                let sql = format!(
                    "UPDATE kxp_inbox SET done_at = {SQLITE_NOW}
                     WHERE event_id = ?1 AND done_at IS NULL"
                );
                sqlx::query(&sql).bind(event_id).execute(pool).await?;
            }
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => {
                sqlx::query(
                    "UPDATE kxp_inbox SET done_at = now() WHERE event_id = $1 AND done_at IS NULL",
                )
                .bind(event_id)
                .execute(pool)
                .await?;
            }
        }
        Ok(())
    }
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
