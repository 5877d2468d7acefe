//! Endpoint health: statistics kept up to date as attempts finish, so reading them costs one
//! stats row, at most 25 hourly rows and two index range counts, never a scan of attempts.
//!
//! `record_stats!` runs inside `finish_attempt`'s transaction: an attempt whose lease was lost
//! writes neither its attempt row nor its statistics.

use serde::Serialize;
use sqlx::FromRow;

use crate::db::{Db, now_ms, on_db};
use crate::store::{StoreError, rfc3339};

/// Upper bounds (ms, inclusive) of the latency histogram's buckets; one more bucket holds
/// everything slower. 30 000 ms is the longest endpoint timeout.
pub const LATENCY_BOUNDS_MS: [i64; 11] =
    [10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 30_000];

/// One hour, in ms: the width of a statistics bucket.
pub const HOUR_MS: i64 = 60 * 60 * 1000;

/// The histogram columns of `kxp_endpoint_stats_hourly`, in bucket order (the last is `+inf`).
const BUCKET_COLUMNS: [&str; 12] = [
    "le_10", "le_25", "le_50", "le_100", "le_250", "le_500", "le_1000", "le_2500", "le_5000",
    "le_10000", "le_30000", "le_inf",
];

/// The histogram bucket of a duration.
pub fn bucket_of(duration_ms: i64) -> usize {
    LATENCY_BOUNDS_MS
        .iter()
        .position(|&bound| duration_ms <= bound)
        .unwrap_or(LATENCY_BOUNDS_MS.len())
}

/// The start (Unix ms) of the clock hour holding `at`.
pub fn hour_of(at: i64) -> i64 {
    at.div_euclid(HOUR_MS) * HOUR_MS
}

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
        let result = sqlx::query($crate::health::UPSERT_STATS)
            .bind($delivery_id)
            .bind(success)
            .bind($now)
            .bind(&$record.error)
            .execute(&mut *$tx)
            .await;
        match result {
            Err(e) => Err(e),
            Ok(_) => {
                let bucket = $crate::health::bucket_of($record.duration_ms);
                let mut query = sqlx::query($crate::health::UPSERT_HOURLY.as_str())
                    .bind($delivery_id)
                    .bind($crate::health::hour_of($now))
                    .bind(success)
                    .bind(1 - success);
                for i in 0..=$crate::health::LATENCY_BOUNDS_MS.len() {
                    query = query.bind(i64::from(i == bucket));
                }
                query.execute(&mut *$tx).await.map(|_| ())
            }
        }
    }};
}
pub(crate) use record_stats;

/// `GET /v1/endpoints/{id}/health`.
#[derive(Debug, Clone, Serialize)]
pub struct EndpointHealth {
    /// `ep_…`
    pub endpoint_id: String,
    /// The current clock hour and the one before it.
    pub last_1h: Window,
    /// The current clock hour and the 24 before it.
    pub last_24h: Window,
    /// Failed attempts since the last success (or since the first attempt).
    pub consecutive_failures: i64,
    /// RFC 3339; `null` before the first success.
    pub last_success_at: Option<String>,
    /// RFC 3339; `null` before the first failure.
    pub last_failure_at: Option<String>,
    /// The error of the last failed attempt (`http_503`, `timeout`, …), kept after a success.
    pub last_error: Option<String>,
    /// Deliveries not finished yet (`pending` or `delivering`).
    pub pending: i64,
    /// Dead deliveries.
    pub dead: i64,
    /// `active`, `paused` or `disabled` (by the sender, after failing for too long).
    pub status: String,
    /// The circuit breaker: `closed`, `open` (deliveries held) or `half_open` (one probing).
    pub circuit_state: String,
    /// RFC 3339: when the circuit opened, while it is not closed.
    pub circuit_opened_at: Option<String>,
    /// RFC 3339: when an open circuit is probed next.
    pub next_probe_at: Option<String>,
    /// RFC 3339: when the current run of failures began (auto-disable counts from here);
    /// `null` after a success.
    pub failing_since: Option<String>,
}

/// Attempt statistics over a window of whole clock hours.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Window {
    /// Attempts finished in the window.
    pub attempts: i64,
    /// Of which 2xx.
    pub successes: i64,
    /// Of which not.
    pub failures: i64,
    /// `successes / attempts`; `null` without attempts.
    pub success_rate: Option<f64>,
    /// The upper bound (ms) of the histogram bucket holding the median; `null` without attempts
    /// or above the last bound.
    pub latency_p50_ms: Option<i64>,
    /// The same, for the 95th percentile.
    pub latency_p95_ms: Option<i64>,
}

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

/// The upper bound of the bucket holding the `p`-quantile (nearest rank) of a histogram.
fn percentile(histogram: &[i64; 12], p: f64) -> Option<i64> {
    let total: i64 = histogram.iter().sum();
    if total == 0 {
        return None;
    }
    // Nearest rank: the smallest value with at least p of the attempts at or below it.
    let rank = ((p * total as f64).ceil() as i64).clamp(1, total);
    let mut seen = 0;
    for (i, count) in histogram.iter().enumerate() {
        seen += count;
        if seen >= rank {
            return LATENCY_BOUNDS_MS.get(i).copied();
        }
    }
    None
}

fn window<'a>(rows: impl Iterator<Item = &'a Hourly>) -> Window {
    let mut histogram = [0i64; 12];
    let (mut successes, mut failures) = (0, 0);
    for row in rows {
        successes += row.successes;
        failures += row.failures;
        for (sum, count) in histogram.iter_mut().zip(row.histogram()) {
            *sum += count;
        }
    }
    let attempts = successes + failures;
    Window {
        attempts,
        successes,
        failures,
        success_rate: (attempts > 0).then(|| successes as f64 / attempts as f64),
        latency_p50_ms: percentile(&histogram, 0.5),
        latency_p95_ms: percentile(&histogram, 0.95),
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
            last_1h: window(hourly.iter().filter(|r| r.hour >= current - HOUR_MS)),
            last_24h: window(hourly.iter()),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_and_percentiles() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(10), 0);
        assert_eq!(bucket_of(11), 1);
        assert_eq!(bucket_of(30_000), 10);
        assert_eq!(bucket_of(30_001), 11);
        let mut h = [0i64; 12];
        assert_eq!(percentile(&h, 0.5), None);
        h[0] = 7;
        h[5] = 1;
        assert_eq!(percentile(&h, 0.5), Some(10));
        assert_eq!(percentile(&h, 0.95), Some(500));
        h[11] = 10;
        assert_eq!(percentile(&h, 0.95), None);
        assert_eq!(hour_of(HOUR_MS + 5), HOUR_MS);
    }
}
