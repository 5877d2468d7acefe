//! Endpoint health: statistics kept up to date as attempts finish, so reading them costs one
//! stats row, at most 25 hourly rows and two index range counts, never a scan of attempts.
//!
//! `record_stats!` runs inside `finish_attempt`'s transaction: an attempt whose lease was lost
//! writes neither its attempt row nor its statistics.

use sqlx::FromRow;

use crate::model::{EndpointHealth, now_ms, rfc3339};
use crate::policy::health::{HOUR_MS, hour_of, window};
use crate::store::{Db, StoreError, on_db};

/// The histogram columns of `kxp_endpoint_stats_hourly`, in bucket order (the last is `+inf`).
const BUCKET_COLUMNS: [&str; 12] = [
    "le_10", "le_25", "le_50", "le_100", "le_250", "le_500", "le_1000", "le_2500", "le_5000",
    "le_10000", "le_30000", "le_inf",
];

/// The statement that upserts an endpoint's running statistics after one attempt of the
/// delivery `$1`: `$2` is 1 for a success and 0 for a failure, `$3` the time, `$4` the error.
/// `failing_since` marks the first failure after a success: what auto-disable measures.
pub(crate) const UPSERT_STATS: &str = "INSERT INTO kxp_endpoint_stats \
       (endpoint_id, consecutive_failures, last_success_at, last_failure_at, last_error, failing_since, updated_at) \
     SELECT endpoint_id, 1 - $2, CASE WHEN $2 = 1 THEN $3 END, CASE WHEN $2 = 1 THEN NULL ELSE $3 END, \
       CASE WHEN $2 = 1 THEN NULL ELSE $4 END, CASE WHEN $2 = 1 THEN NULL ELSE $3 END, $3 \
     FROM kxp_deliveries WHERE id = $1 \
     ON CONFLICT (endpoint_id) DO UPDATE SET \
       consecutive_failures = CASE WHEN $2 = 1 THEN 0 ELSE kxp_endpoint_stats.consecutive_failures + 1 END, \
       last_success_at = CASE WHEN $2 = 1 THEN $3 ELSE kxp_endpoint_stats.last_success_at END, \
       last_failure_at = CASE WHEN $2 = 1 THEN kxp_endpoint_stats.last_failure_at ELSE $3 END, \
       last_error = CASE WHEN $2 = 1 THEN kxp_endpoint_stats.last_error ELSE $4 END, \
       failing_since = CASE WHEN $2 = 1 THEN NULL ELSE COALESCE(kxp_endpoint_stats.failing_since, $3) END, \
       updated_at = $3";

/// The statement that adds one attempt to its endpoint's hourly bucket: `$1` the delivery,
/// `$2` the hour, `$3` successes, `$4` failures, `$5`… the histogram increments. Built once:
/// it runs with every attempt.
pub(crate) static UPSERT_HOURLY: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(upsert_hourly);

fn upsert_hourly() -> String {
    let columns = BUCKET_COLUMNS.join(", ");
    let values = (0..BUCKET_COLUMNS.len())
        .map(|i| format!("${}", i + 5))
        .collect::<Vec<_>>()
        .join(", ");
    let updates = ["successes", "failures"]
        .iter()
        .chain(BUCKET_COLUMNS.iter())
        .map(|c| format!("{c} = kxp_endpoint_stats_hourly.{c} + excluded.{c}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "INSERT INTO kxp_endpoint_stats_hourly (endpoint_id, hour, successes, failures, {columns}) \
         SELECT endpoint_id, $2, $3, $4, {values} FROM kxp_deliveries WHERE id = $1 \
         ON CONFLICT (endpoint_id, hour) DO UPDATE SET {updates}"
    )
}

/// Adds one finished attempt to its endpoint's statistics, on the transaction `$tx`: two
/// upserts, one statement each. A macro: it must compile for each backend's transaction type.
macro_rules! record_stats {
    ($tx:expr, $delivery_id:expr, $now:expr, $record:expr) => {{
        let success = i64::from($record.error.is_none());
        let result = sqlx::query($crate::store::health::UPSERT_STATS)
            .bind($delivery_id)
            .bind(success)
            .bind($now)
            .bind($record.error.as_ref().map(ToString::to_string))
            .execute(&mut *$tx)
            .await;
        match result {
            Err(e) => Err(e),
            Ok(_) => {
                let bucket = $crate::policy::health::bucket_of($record.duration_ms);
                let mut query = sqlx::query($crate::store::health::UPSERT_HOURLY.as_str())
                    .bind($delivery_id)
                    .bind($crate::policy::health::hour_of($now))
                    .bind(success)
                    .bind(1 - success);
                for i in 0..=$crate::policy::health::LATENCY_BOUNDS_MS.len() {
                    query = query.bind(i64::from(i == bucket));
                }
                query.execute(&mut *$tx).await.map(|_| ())
            }
        }
    }};
}
pub(crate) use record_stats;

#[derive(FromRow)]
struct Hourly {
    hour: i64,
    successes: i64,
    failures: i64,
    le_10: i64,
    le_25: i64,
    le_50: i64,
    le_100: i64,
    le_250: i64,
    le_500: i64,
    le_1000: i64,
    le_2500: i64,
    le_5000: i64,
    le_10000: i64,
    le_30000: i64,
    le_inf: i64,
}

impl Hourly {
    fn counts(&self) -> (i64, i64, [i64; 12]) {
        (self.successes, self.failures, self.histogram())
    }

    fn histogram(&self) -> [i64; 12] {
        [
            self.le_10,
            self.le_25,
            self.le_50,
            self.le_100,
            self.le_250,
            self.le_500,
            self.le_1000,
            self.le_2500,
            self.le_5000,
            self.le_10000,
            self.le_30000,
            self.le_inf,
        ]
    }
}

type StatsRow = (i64, Option<i64>, Option<i64>, Option<String>, Option<i64>);

impl Db {
    /// The health of one of the account's endpoints (deleted ones are not found).
    pub async fn endpoint_health(
        &self,
        account_id: &str,
        id: &str,
    ) -> Result<EndpointHealth, StoreError> {
        let endpoint = self.endpoint(account_id, id).await?;
        let current = hour_of(now_ms());
        let since = current - 24 * HOUR_MS;
        let (stats, hourly, counts) = on_db!(self, |pool, _begin| {
            let stats = sqlx::query_as::<_, StatsRow>(
                "SELECT consecutive_failures, last_success_at, last_failure_at, last_error, failing_since \
                 FROM kxp_endpoint_stats WHERE endpoint_id = $1",
            )
            .bind(&endpoint.id)
            .fetch_optional(pool)
            .await?;
            let hourly = sqlx::query_as::<_, Hourly>(&format!(
                "SELECT hour, successes, failures, {} FROM kxp_endpoint_stats_hourly \
                 WHERE endpoint_id = $1 AND hour >= $2",
                BUCKET_COLUMNS.join(", ")
            ))
            .bind(&endpoint.id)
            .bind(since)
            .fetch_all(pool)
            .await?;
            let counts = sqlx::query_as::<_, (String, i64)>(
                "SELECT status, COUNT(*) FROM kxp_deliveries \
                 WHERE endpoint_id = $1 AND status IN ('pending', 'delivering', 'dead') GROUP BY status",
            )
            .bind(&endpoint.id)
            .fetch_all(pool)
            .await?;
            (stats, hourly, counts)
        });
        let count = |wanted: &[&str]| -> i64 {
            counts
                .iter()
                .filter(|(status, _)| wanted.contains(&status.as_str()))
                .map(|(_, n)| n)
                .sum()
        };
        let (consecutive_failures, last_success_at, last_failure_at, last_error, failing_since) =
            stats.unwrap_or((0, None, None, None, None));
        Ok(EndpointHealth {
            last_1h: window(
                hourly
                    .iter()
                    .filter(|r| r.hour >= current - HOUR_MS)
                    .map(Hourly::counts),
            ),
            last_24h: window(hourly.iter().map(Hourly::counts)),
            endpoint_id: endpoint.id,
            consecutive_failures,
            last_success_at: last_success_at.map(rfc3339),
            last_failure_at: last_failure_at.map(rfc3339),
            last_error,
            pending: count(&["pending", "delivering"]),
            dead: count(&["dead"]),
            status: endpoint.status,
            circuit_state: endpoint.circuit_state,
            circuit_opened_at: endpoint.circuit_opened_at.map(rfc3339),
            next_probe_at: endpoint.circuit_probe_at.map(rfc3339),
            failing_since: failing_since.map(rfc3339),
        })
    }
}
