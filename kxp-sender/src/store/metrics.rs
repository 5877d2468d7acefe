//! The gauges of `/metrics`, read from the database at each scrape.

use crate::model::{HELD, now_ms};
use crate::store::{Db, StoreError, on_db};

/// What a scrape reads from the database.
#[derive(Debug, Clone, Default)]
pub(crate) struct Gauges {
    /// Pending and due now.
    pub due: i64,
    /// Pending, due later (a retry's wait, a drain's slot).
    pub scheduled: i64,
    /// Pending and held (paused, disabled, open circuit).
    pub held: i64,
    /// Being attempted.
    pub delivering: i64,
    /// Age of the oldest due delivery, ms.
    pub lag_ms: i64,
    /// `(status, circuit_state, count)` of endpoints (deleted ones left out).
    pub endpoints: Vec<(String, String, i64)>,
}

impl Db {
    /// The gauges of `/metrics`. The delivery counts stay on the partial indexes of pending
    /// and leased deliveries; delivered and dead rows are never counted.
    pub(crate) async fn gauges(&self) -> Result<Gauges, StoreError> {
        let now = now_ms();
        let held = HELD;
        on_db!(self, |pool| {
            let (due, scheduled, held_n, oldest) = sqlx::query_as::<_, (i64, i64, i64, Option<i64>)>(
                "SELECT COALESCE(SUM(CASE WHEN next_attempt_at <= $1 THEN 1 ELSE 0 END), 0), \
                   COALESCE(SUM(CASE WHEN next_attempt_at > $1 AND next_attempt_at < $2 THEN 1 ELSE 0 END), 0), \
                   COALESCE(SUM(CASE WHEN next_attempt_at = $2 THEN 1 ELSE 0 END), 0), \
                   MIN(CASE WHEN next_attempt_at <= $1 THEN next_attempt_at END) \
                 FROM kxp_deliveries WHERE status = 'pending'",
            )
            .bind(now)
            .bind(held)
            .fetch_one(pool)
            .await?;
            let delivering = sqlx::query_scalar::<_, i64>(
                "SELECT COUNT(*) FROM kxp_deliveries WHERE status = 'delivering'",
            )
            .fetch_one(pool)
            .await?;
            let endpoints = sqlx::query_as::<_, (String, String, i64)>(
                "SELECT status, circuit_state, COUNT(*) FROM kxp_endpoints WHERE status <> 'deleted' \
                 GROUP BY status, circuit_state ORDER BY status, circuit_state",
            )
            .fetch_all(pool)
            .await?;
            Ok(Gauges {
                due,
                scheduled,
                held: held_n,
                delivering,
                lag_ms: oldest.map_or(0, |at| now.saturating_sub(at).max(0)),
                endpoints,
            })
        })
    }
}
