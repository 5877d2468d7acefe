//! The gauges of `/metrics`, read from the database at each scrape. On Citus they are read
//! shard by shard ([`every_shard_counted`]): a worker down leaves its shards' rows out of the
//! sums, and `kxp_store_shards_unanswered` says how many shards that was.

use std::collections::BTreeMap;

use sqlx::PgPool;

use crate::model::{HELD, now_ms};
use crate::store::shards::{every_shard_counted, scans_by_shard};
use crate::store::{Db, StoreError, on_db};

/// One shard's pending deliveries: due at the first `%L`, scheduled before the second (the
/// held mark), held, and the oldest due.
const PENDING: &str = "SELECT jsonb_build_array( \
       COUNT(*) FILTER (WHERE next_attempt_at <= %1$L), \
       COUNT(*) FILTER (WHERE next_attempt_at > %1$L AND next_attempt_at < %2$L), \
       COUNT(*) FILTER (WHERE next_attempt_at = %2$L), \
       MIN(next_attempt_at) FILTER (WHERE next_attempt_at <= %1$L)) AS r \
     FROM %%s WHERE status = 'pending'";

/// One shard's leased deliveries.
const DELIVERING: &str = "SELECT to_jsonb(COUNT(*)) AS r FROM %%s WHERE status = 'delivering'";

/// One shard's endpoints by status and circuit state.
const ENDPOINTS: &str = "SELECT jsonb_build_array(status, circuit_state, COUNT(*)) AS r \
     FROM %%s WHERE status <> 'deleted' GROUP BY status, circuit_state";

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
    /// On Citus, how many shards did not answer (their rows are not in the counts above);
    /// `None` elsewhere.
    pub unanswered_shards: Option<usize>,
    /// On Citus, how many scans read shard by shard since the process started (a worker was
    /// down); `None` elsewhere.
    pub scans_by_shard: Option<u64>,
}

impl Db {
    /// The gauges of `/metrics`. The delivery counts stay on the partial indexes of pending
    /// and leased deliveries; delivered and dead rows are never counted.
    pub(crate) async fn gauges(&self) -> Result<Gauges, StoreError> {
        let now = now_ms();
        let held = HELD;
        if let Db::Citus(pool) = self {
            return Ok(by_shard(pool, now).await?);
        }
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
                unanswered_shards: None,
                scans_by_shard: None,
            })
        })
    }
}

/// [`Db::gauges`] on Citus: each shard's counts, summed.
async fn by_shard(pool: &PgPool, now: i64) -> Result<Gauges, sqlx::Error> {
    let args = [now.to_string(), HELD.to_string()];
    let pending =
        every_shard_counted::<(i64, i64, i64, Option<i64>)>(pool, "kxp_deliveries", PENDING, &args)
            .await?;
    let delivering = every_shard_counted::<i64>(pool, "kxp_deliveries", DELIVERING, &[]).await?;
    let endpoints =
        every_shard_counted::<(String, String, i64)>(pool, "kxp_endpoints", ENDPOINTS, &[]).await?;
    let mut gauges = Gauges {
        delivering: delivering.rows.iter().sum(),
        unanswered_shards: Some(
            pending
                .unanswered
                .max(delivering.unanswered)
                .max(endpoints.unanswered),
        ),
        scans_by_shard: Some(scans_by_shard()),
        ..Gauges::default()
    };
    let mut oldest: Option<i64> = None;
    for (due, scheduled, held, first) in pending.rows {
        gauges.due += due;
        gauges.scheduled += scheduled;
        gauges.held += held;
        oldest = match (oldest, first) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    gauges.lag_ms = oldest.map_or(0, |at| now.saturating_sub(at).max(0));
    let mut by_state: BTreeMap<(String, String), i64> = BTreeMap::new();
    for (status, circuit, n) in endpoints.rows {
        *by_state.entry((status, circuit)).or_default() += n;
    }
    gauges.endpoints = by_state
        .into_iter()
        .map(|((status, circuit), n)| (status, circuit, n))
        .collect();
    Ok(gauges)
}
