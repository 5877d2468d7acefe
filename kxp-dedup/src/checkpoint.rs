//! The catch-up checkpoints: per sender endpoint, the number up to which every event of its
//! sequence is processed, and the id of the event at that number.
//!
//! The event id is what lets kxp-catchup notice a sender that was reset (its database restored
//! from a backup): the sender then gives the checkpoint's number, or numbers below it, to other
//! events. A stored epoch or the sender database's identity would come back with the backup; the
//! content at the number does not.

use std::time::Duration;

use crate::store::Pool;
#[cfg(feature = "sqlite")]
use crate::store::SQLITE_NOW;
use crate::{Store, StoreError};

/// Where a receiver stands in one sender endpoint's sequence ([`Store::checkpoint`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Checkpoint {
    /// Every event numbered up to this is processed; 0 before the first.
    pub sequence: u64,
    /// The id of the event numbered [`sequence`](Checkpoint::sequence), when the catch-up
    /// moved the checkpoint there (`None` for a checkpoint set by hand, or by an earlier
    /// version).
    pub event_id: Option<String>,
}

// Statements the same on both databases (SQLite reads `$n` as numbered parameters too).

const READ: &str =
    "SELECT sequence, event_id FROM kxp_checkpoints WHERE endpoint_id = $1 AND scope = $2";
const LIST: &str =
    "SELECT endpoint_id, sequence FROM kxp_checkpoints WHERE scope = $1 ORDER BY endpoint_id";
/// Forward only; the event id follows the number, and fills in a number's missing id. `now`:
/// the database's clock, in the column's type.
fn advance(now: &str) -> String {
    format!(
        "INSERT INTO kxp_checkpoints AS c (scope, endpoint_id, sequence, event_id, updated_at) \
     VALUES ($1, $2, $3, $4, {now}) \
     ON CONFLICT (scope, endpoint_id) DO UPDATE SET \
       event_id = CASE WHEN excluded.sequence > c.sequence THEN excluded.event_id \
                       WHEN excluded.sequence = c.sequence THEN COALESCE(c.event_id, excluded.event_id) \
                       ELSE c.event_id END, \
       sequence = CASE WHEN excluded.sequence > c.sequence THEN excluded.sequence ELSE c.sequence END, \
       updated_at = excluded.updated_at \
     RETURNING sequence, event_id"
    )
}

/// Any number, the event forgotten.
fn reset(now: &str) -> String {
    format!(
        "INSERT INTO kxp_checkpoints (scope, endpoint_id, sequence, event_id, updated_at) \
     VALUES ($1, $2, $3, NULL, {now}) \
     ON CONFLICT (scope, endpoint_id) DO UPDATE SET \
       sequence = excluded.sequence, event_id = NULL, updated_at = excluded.updated_at"
    )
}

impl Store {
    /// The catch-up checkpoint of the sender's endpoint `endpoint_id`: every event it numbered
    /// up to this is processed. Sequence 0, no event, when there is none yet.
    pub async fn checkpoint(&self, endpoint_id: &str) -> Result<Checkpoint, StoreError> {
        let row: Option<(i64, Option<String>)> = match &self.pool {
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => {
                sqlx::query_as(READ)
                    .bind(endpoint_id)
                    .bind(&*self.scope)
                    .fetch_optional(pool)
                    .await?
            }
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => {
                sqlx::query_as(READ)
                    .bind(endpoint_id)
                    .bind(&*self.scope)
                    .fetch_optional(pool)
                    .await?
            }
        };
        Ok(row.map_or_else(Checkpoint::default, checkpoint_of))
    }

    /// The endpoints that have a checkpoint, to catch up at start with no delivery seen yet.
    pub async fn checkpoints(&self) -> Result<Vec<(String, u64)>, StoreError> {
        let rows: Vec<(String, i64)> = match &self.pool {
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => {
                sqlx::query_as(LIST)
                    .bind(&*self.scope)
                    .fetch_all(pool)
                    .await?
            }
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => {
                sqlx::query_as(LIST)
                    .bind(&*self.scope)
                    .fetch_all(pool)
                    .await?
            }
        };
        Ok(rows
            .into_iter()
            .map(|(id, n)| (id, u64::try_from(n).unwrap_or(0)))
            .collect())
    }

    /// Moves the checkpoint of `endpoint_id` to `sequence`, whose event is `event_id` when
    /// known, never back (two catch-ups racing keep the higher); returns the checkpoint now.
    ///
    /// To start a catch-up after events that are older than the dedup records (an endpoint
    /// with history), set it by hand with `event_id` `None`.
    pub async fn advance_checkpoint(
        &self,
        endpoint_id: &str,
        sequence: u64,
        event_id: Option<&str>,
    ) -> Result<Checkpoint, StoreError> {
        let sequence = i64::try_from(sequence).unwrap_or(i64::MAX);
        let row: (i64, Option<String>) = match &self.pool {
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => {
                sqlx::query_as(&advance(SQLITE_NOW))
                    .bind(&*self.scope)
                    .bind(endpoint_id)
                    .bind(sequence)
                    .bind(event_id)
                    .fetch_one(pool)
                    .await?
            }
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => {
                sqlx::query_as(&advance("now()"))
                    .bind(&*self.scope)
                    .bind(endpoint_id)
                    .bind(sequence)
                    .bind(event_id)
                    .fetch_one(pool)
                    .await?
            }
        };
        Ok(checkpoint_of(row))
    }

    /// Sets the checkpoint of `endpoint_id` to `sequence`, back or forth, forgetting the event
    /// at it: the explicit reset after a sender's database was restored (kxp-catchup's
    /// `CatchUp::reset_checkpoint` calls it; 0 reads the endpoint's whole feed again, and dedup
    /// skips what was processed).
    pub async fn reset_checkpoint(
        &self,
        endpoint_id: &str,
        sequence: u64,
    ) -> Result<(), StoreError> {
        let sequence = i64::try_from(sequence).unwrap_or(i64::MAX);
        match &self.pool {
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => {
                sqlx::query(&reset(SQLITE_NOW))
                    .bind(&*self.scope)
                    .bind(endpoint_id)
                    .bind(sequence)
                    .execute(pool)
                    .await?;
            }
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => {
                sqlx::query(&reset("now()"))
                    .bind(&*self.scope)
                    .bind(endpoint_id)
                    .bind(sequence)
                    .execute(pool)
                    .await?;
            }
        }
        Ok(())
    }

    /// How long the oldest event held for `endpoint_id` has waited (ordered mode), by the
    /// database's clock; `None` when none is held.
    pub async fn held_oldest_age(&self, endpoint_id: &str) -> Result<Option<Duration>, StoreError> {
        let age_ms: Option<i64> =
            match &self.pool {
                #[cfg(feature = "sqlite")]
                Pool::Sqlite(pool) => {
                    sqlx::query_scalar(
                        "SELECT CAST(unixepoch('subsec') * 1000 AS INTEGER) - MIN(received_at) \
                     FROM kxp_held_events WHERE endpoint_id = ?1 AND scope = ?2",
                    )
                    .bind(endpoint_id)
                    .bind(&*self.scope)
                    .fetch_one(pool)
                    .await?
                }
                #[cfg(feature = "postgres")]
                Pool::Postgres(pool) => sqlx::query_scalar(
                    "SELECT CAST(EXTRACT(EPOCH FROM now() - MIN(received_at)) * 1000 AS BIGINT) \
                     FROM kxp_held_events WHERE endpoint_id = $1 AND scope = $2",
                )
                .bind(endpoint_id)
                .bind(&*self.scope)
                .fetch_one(pool)
                .await?,
            };
        Ok(age_ms.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0))))
    }
}

fn checkpoint_of((sequence, event_id): (i64, Option<String>)) -> Checkpoint {
    Checkpoint {
        sequence: u64::try_from(sequence).unwrap_or(0),
        event_id,
    }
}
