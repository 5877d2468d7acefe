//! The ordered inbox: verified deliveries recorded before their 200, held until their turn.
//!
//! kxp-catchup's ordered mode answers a delivery as soon as it is held here, then hands the
//! endpoint's events to the handler in sequence order, reading which event is which number
//! from the authenticated feed; the handler's dedup marks each done, and
//! [`Store::release_processed`] drops the rows that are.

use crate::store::Pool;
use crate::{InboxPut, Store, StoreError};

// Statements the same on both databases (SQLite reads `$1` as a numbered parameter too).

/// The held rows of done events. Correlated, so that it reads the few held rows and looks each
/// up by key, never the whole processed table.
const RELEASE: &str = "DELETE FROM kxp_held_events WHERE scope = $1 AND EXISTS (SELECT 1 FROM kxp_processed_events e \
     WHERE e.scope = kxp_held_events.scope AND e.event_id = kxp_held_events.event_id AND e.status = 'done')";
/// The endpoints with held rows.
const ENDPOINTS: &str =
    "SELECT DISTINCT endpoint_id FROM kxp_held_events WHERE scope = $1 ORDER BY endpoint_id";

impl Store {
    /// Holds the verified delivery of `event_id` for the sender's endpoint `endpoint_id`, with
    /// its body: answer 200 once this returns `Ok`, whichever variant, since the event is
    /// durably recorded. A redelivery keeps the first row.
    pub async fn hold(
        &self,
        endpoint_id: &str,
        event_id: &str,
        payload: &[u8],
    ) -> Result<InboxPut, StoreError> {
        let inserted = match &self.pool {
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => sqlx::query(
                "INSERT INTO kxp_held_events (scope, event_id, endpoint_id, payload, received_at)
                 VALUES (?4, ?1, ?2, ?3, CAST(unixepoch('subsec') * 1000 AS INTEGER))
                 ON CONFLICT (scope, event_id) DO NOTHING",
            )
            .bind(event_id)
            .bind(endpoint_id)
            .bind(payload)
            .bind(&*self.scope)
            .execute(pool)
            .await?
            .rows_affected(),
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => sqlx::query(
                "INSERT INTO kxp_held_events (scope, event_id, endpoint_id, payload)
                 VALUES ($4, $1, $2, $3) ON CONFLICT (scope, event_id) DO NOTHING",
            )
            .bind(event_id)
            .bind(endpoint_id)
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

    /// How many events are held for `endpoint_id` (processed ones count until
    /// [`release_processed`](Store::release_processed) runs).
    pub async fn held_count(&self, endpoint_id: &str) -> Result<u64, StoreError> {
        let count: i64 =
            match &self.pool {
                #[cfg(feature = "sqlite")]
                Pool::Sqlite(pool) => sqlx::query_scalar(
                    "SELECT COUNT(*) FROM kxp_held_events WHERE endpoint_id = ?1 AND scope = ?2",
                )
                .bind(endpoint_id)
                .bind(&*self.scope)
                .fetch_one(pool)
                .await?,
                #[cfg(feature = "postgres")]
                Pool::Postgres(pool) => sqlx::query_scalar(
                    "SELECT COUNT(*) FROM kxp_held_events WHERE endpoint_id = $1 AND scope = $2",
                )
                .bind(endpoint_id)
                .bind(&*self.scope)
                .fetch_one(pool)
                .await?,
            };
        Ok(u64::try_from(count).unwrap_or(0))
    }

    /// The endpoints with held events, to take up at start what a stopped process held.
    pub async fn held_endpoints(&self) -> Result<Vec<String>, StoreError> {
        Ok(match &self.pool {
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => {
                sqlx::query_scalar(ENDPOINTS)
                    .bind(&*self.scope)
                    .fetch_all(pool)
                    .await?
            }
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => {
                sqlx::query_scalar(ENDPOINTS)
                    .bind(&*self.scope)
                    .fetch_all(pool)
                    .await?
            }
        })
    }

    /// Drops the held rows of events dedup records as done, whichever path processed them
    /// (their turn came, or a redelivery was held after they were); returns how many.
    pub async fn release_processed(&self) -> Result<u64, StoreError> {
        Ok(match &self.pool {
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => sqlx::query(RELEASE)
                .bind(&*self.scope)
                .execute(pool)
                .await?
                .rows_affected(),
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => sqlx::query(RELEASE)
                .bind(&*self.scope)
                .execute(pool)
                .await?
                .rows_affected(),
        })
    }
}
