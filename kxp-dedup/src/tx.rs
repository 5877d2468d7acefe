//! In-transaction mode: the "processed" mark and the caller's side effect commit together.

use std::fmt;
use std::sync::Arc;

use sqlx::Transaction;
#[cfg(feature = "postgres")]
use sqlx::{PgConnection, Postgres};
#[cfg(feature = "sqlite")]
use sqlx::{Sqlite, SqliteConnection};

use crate::StoreError;
use crate::record::Claim;
#[cfg(feature = "postgres")]
use crate::store::PG_STATE;
#[cfg(feature = "sqlite")]
use crate::store::SQLITE_STATE;
use crate::util::retry_after_from_millis;

/// A database transaction on the store's database, from [`Store::begin`](crate::Store::begin).
///
/// Dropping it without [`commit`](Tx::commit) rolls back the mark and everything the caller did
/// on it, which is what makes a failed handler retryable.
pub struct Tx {
    inner: Inner,
    /// The scope of the store that began it: its marks are keyed by it.
    scope: Arc<str>,
}

enum Inner {
    #[cfg(feature = "sqlite")]
    Sqlite(Transaction<'static, Sqlite>),
    #[cfg(feature = "postgres")]
    Postgres(Transaction<'static, Postgres>),
}

#[cfg(feature = "sqlite")]
// The mark takes over a failed row or one whose lease ran out, like a claim, but goes straight
// to 'done': inside the transaction, "processed" and "the effect happened" are the same fact.
const SQLITE_MARK: &str = "
INSERT INTO kxp_processed_events
    (scope, event_id, status, attempts, locked_until, first_seen_at, updated_at)
SELECT ?2, ?1, 'done', 1, NULL, now.ms, now.ms
FROM (SELECT CAST(unixepoch('subsec') * 1000 AS INTEGER) AS ms) AS now
WHERE true
ON CONFLICT (scope, event_id) DO UPDATE SET
    status = 'done',
    attempts = kxp_processed_events.attempts + 1,
    locked_until = NULL,
    updated_at = excluded.updated_at
WHERE kxp_processed_events.status = 'failed'
   OR (kxp_processed_events.status = 'processing'
       AND kxp_processed_events.locked_until < excluded.updated_at)
RETURNING attempts";

#[cfg(feature = "postgres")]
const PG_MARK: &str = "
INSERT INTO kxp_processed_events
    (scope, event_id, status, attempts, locked_until, first_seen_at, updated_at)
VALUES ($2, $1, 'done', 1, NULL, now(), now())
ON CONFLICT (scope, event_id) DO UPDATE SET
    status = 'done',
    attempts = kxp_processed_events.attempts + 1,
    locked_until = NULL,
    updated_at = excluded.updated_at
WHERE kxp_processed_events.status = 'failed'
   OR (kxp_processed_events.status = 'processing'
       AND kxp_processed_events.locked_until < excluded.updated_at)
RETURNING attempts";

impl Tx {
    #[cfg(feature = "sqlite")]
    pub(crate) fn sqlite_tx(tx: Transaction<'static, Sqlite>, scope: Arc<str>) -> Tx {
        Tx {
            inner: Inner::Sqlite(tx),
            scope,
        }
    }

    #[cfg(feature = "postgres")]
    pub(crate) fn postgres_tx(tx: Transaction<'static, Postgres>, scope: Arc<str>) -> Tx {
        Tx {
            inner: Inner::Postgres(tx),
            scope,
        }
    }

    /// Records `event_id` as processed, inside this transaction. `true`: first time, go ahead
    /// with the side effect; `false`: a duplicate, roll back and answer 200.
    ///
    /// On PostgreSQL a concurrent transaction marking the same id waits on the primary key
    /// until this one ends: after a commit it sees the row and gets `false`; after a rollback
    /// its own insert goes through. On SQLite the transaction already holds the write lock
    /// (`BEGIN IMMEDIATE`), so the others wait before they start.
    pub async fn mark_processed(&mut self, event_id: &str) -> Result<bool, StoreError> {
        let attempts: Option<i64> = match &mut self.inner {
            #[cfg(feature = "sqlite")]
            Inner::Sqlite(tx) => {
                sqlx::query_scalar(SQLITE_MARK)
                    .bind(event_id)
                    .bind(&*self.scope)
                    .fetch_optional(&mut **tx)
                    .await?
            }
            #[cfg(feature = "postgres")]
            Inner::Postgres(tx) => sqlx::query_scalar::<_, i32>(PG_MARK)
                .bind(event_id)
                .bind(&*self.scope)
                .fetch_optional(&mut **tx)
                .await?
                .map(i64::from),
        };
        Ok(attempts.is_some())
    }

    /// After a `false` from [`mark_processed`](Tx::mark_processed): done, or held by a live
    /// claim of claim/complete mode (only when both modes are used for one id).
    pub(crate) async fn why_not_marked(&mut self, event_id: &str) -> Result<Claim, StoreError> {
        let state: Option<(String, i64)> = match &mut self.inner {
            #[cfg(feature = "sqlite")]
            Inner::Sqlite(tx) => {
                sqlx::query_as(SQLITE_STATE)
                    .bind(event_id)
                    .bind(&*self.scope)
                    .fetch_optional(&mut **tx)
                    .await?
            }
            #[cfg(feature = "postgres")]
            Inner::Postgres(tx) => {
                sqlx::query_as(PG_STATE)
                    .bind(event_id)
                    .bind(&*self.scope)
                    .fetch_optional(&mut **tx)
                    .await?
            }
        };
        Ok(match state {
            Some((status, left_ms)) if status == "processing" => Claim::InProgress {
                retry_after: retry_after_from_millis(left_ms),
            },
            _ => Claim::AlreadyDone,
        })
    }

    #[cfg(feature = "sqlite")]
    /// The connection of a SQLite transaction, for the caller's own statements; `None` on
    /// PostgreSQL.
    pub fn sqlite(&mut self) -> Option<&mut SqliteConnection> {
        match &mut self.inner {
            #[cfg(feature = "sqlite")]
            Inner::Sqlite(tx) => Some(&mut **tx),
            #[cfg(feature = "postgres")]
            Inner::Postgres(_) => None,
        }
    }

    #[cfg(feature = "postgres")]
    /// The connection of a PostgreSQL transaction, for the caller's own statements; `None` on
    /// SQLite.
    pub fn postgres(&mut self) -> Option<&mut PgConnection> {
        match &mut self.inner {
            #[cfg(feature = "sqlite")]
            Inner::Sqlite(_) => None,
            #[cfg(feature = "postgres")]
            Inner::Postgres(tx) => Some(&mut **tx),
        }
    }

    /// Commits the mark and the caller's statements together.
    pub async fn commit(self) -> Result<(), StoreError> {
        match self.inner {
            #[cfg(feature = "sqlite")]
            Inner::Sqlite(tx) => tx.commit().await?,
            #[cfg(feature = "postgres")]
            Inner::Postgres(tx) => tx.commit().await?,
        }
        Ok(())
    }

    /// Rolls back the mark and the caller's statements. Dropping the `Tx` does the same without
    /// waiting for the database's answer.
    pub async fn rollback(self) -> Result<(), StoreError> {
        match self.inner {
            #[cfg(feature = "sqlite")]
            Inner::Sqlite(tx) => tx.rollback().await?,
            #[cfg(feature = "postgres")]
            Inner::Postgres(tx) => tx.rollback().await?,
        }
        Ok(())
    }
}

impl fmt::Debug for Tx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let backend = match self.inner {
            #[cfg(feature = "sqlite")]
            Inner::Sqlite(_) => "sqlite",
            #[cfg(feature = "postgres")]
            Inner::Postgres(_) => "postgres",
        };
        f.debug_struct("Tx")
            .field("backend", &backend)
            .field("scope", &&*self.scope)
            .finish_non_exhaustive()
    }
}
