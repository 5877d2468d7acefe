//! Endpoint health: statistics kept up to date as attempts finish, so reading them costs one
//! stats row, at most 25 hourly rows and two index range counts, never a scan of attempts.
//!
//! Recording a batch of finished attempts (`finish_attempts`) reads each endpoint's stats row
//! once under a row lock (`lock_stats!`), folds the batch's attempts into it
//! ([`RunningStats`]), writes it back (`write_stats!`) and adds the batch's hourly tally
//! (`add_hourly!`): a few statements per endpoint and batch, not per attempt. An attempt whose
//! lease was lost is in none of them.

use sqlx::FromRow;

use crate::model::{EndpointHealth, now_ms, rfc3339};
use crate::policy::health::{HOUR_MS, hour_of, window};
use crate::store::{Db, StoreError, on_db};

/// The histogram columns of `kxp_endpoint_stats_hourly`, in bucket order (the last is `+inf`).
const BUCKET_COLUMNS: [&str; 12] = [
    "le_10", "le_25", "le_50", "le_100", "le_250", "le_500", "le_1000", "le_2500", "le_5000",
    "le_10000", "le_30000", "le_inf",
];

/// Makes sure the endpoint `$1` has a stats row (`$2` the time), locks it until the
/// transaction ends, and returns it: an upsert that changes nothing on conflict, because an
/// `ON CONFLICT DO UPDATE` locks the row on both backends where a `SELECT` of a missing row
/// locks nothing.
pub(crate) const LOCK_STATS: &str = "INSERT INTO kxp_endpoint_stats (endpoint_id, consecutive_failures, updated_at) \
     VALUES ($1, 0, $2) ON CONFLICT (endpoint_id) DO UPDATE SET updated_at = kxp_endpoint_stats.updated_at \
     RETURNING consecutive_failures, failing_since, last_success_at, last_failure_at, last_error";

/// Writes an endpoint's running statistics back: `$1` the endpoint, `$2`… the values, `$7` now.
pub(crate) const WRITE_STATS: &str = "UPDATE kxp_endpoint_stats SET consecutive_failures = $2, \
     failing_since = $3, last_success_at = $4, last_failure_at = $5, last_error = $6, updated_at = $7 \
     WHERE endpoint_id = $1";

/// A row of [`LOCK_STATS`].
#[derive(Debug, FromRow)]
pub(crate) struct StatsRow {
    pub consecutive_failures: i64,
    pub failing_since: Option<i64>,
    pub last_success_at: Option<i64>,
    pub last_failure_at: Option<i64>,
    pub last_error: Option<String>,
}

impl From<StatsRow> for crate::policy::health::RunningStats {
    fn from(row: StatsRow) -> Self {
        crate::policy::health::RunningStats {
            consecutive_failures: row.consecutive_failures,
            failing_since: row.failing_since,
            last_success_at: row.last_success_at,
            last_failure_at: row.last_failure_at,
            last_error: row.last_error,
        }
    }
}

/// Locks and reads the stats row of the endpoint `$endpoint_id` on the transaction `$tx`
/// ([`LOCK_STATS`]). Evaluates to `Result<RunningStats, sqlx::Error>`. A macro: it must compile
/// for each backend's transaction type.
macro_rules! lock_stats {
    ($tx:expr, $endpoint_id:expr, $now:expr) => {
        sqlx::query_as::<_, $crate::store::health::StatsRow>($crate::store::health::LOCK_STATS)
            .bind($endpoint_id)
            .bind($now)
            .fetch_one(&mut *$tx)
            .await
            .map($crate::policy::health::RunningStats::from)
    };
}
pub(crate) use lock_stats;

/// Writes `$stats` back as the running statistics of `$endpoint_id` ([`WRITE_STATS`]).
macro_rules! write_stats {
    ($tx:expr, $endpoint_id:expr, $stats:expr, $now:expr) => {
        sqlx::query($crate::store::health::WRITE_STATS)
            .bind($endpoint_id)
            .bind($stats.consecutive_failures)
            .bind($stats.failing_since)
            .bind($stats.last_success_at)
            .bind($stats.last_failure_at)
            .bind(&$stats.last_error)
            .bind($now)
            .execute(&mut *$tx)
            .await
            .map(|_| ())
    };
}
pub(crate) use write_stats;

/// The statement that adds a tally to an endpoint's clock hour: `$1` the endpoint, `$2` the
/// hour, `$3` successes, `$4` failures, `$5`… the histogram's counts. Built once: it runs with
/// every batch.
pub(crate) static ADD_HOURLY: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(add_hourly_sql);

fn add_hourly_sql() -> String {
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
         VALUES ($1, $2, $3, $4, {values}) \
         ON CONFLICT (endpoint_id, hour) DO UPDATE SET {updates}"
    )
}

/// Adds the [`HourTally`](crate::policy::health::HourTally) `$tally` to the clock hour `$hour`
/// of `$endpoint_id` ([`ADD_HOURLY`]), on the transaction `$tx`.
macro_rules! add_hourly {
    ($tx:expr, $endpoint_id:expr, $hour:expr, $tally:expr) => {{
        let mut query = sqlx::query($crate::store::health::ADD_HOURLY.as_str())
            .bind($endpoint_id)
            .bind($hour)
            .bind($tally.successes)
            .bind($tally.failures);
        for count in $tally.histogram {
            query = query.bind(count);
        }
        query.execute(&mut *$tx).await.map(|_| ())
    }};
}
pub(crate) use add_hourly;

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

type HealthRow = (i64, Option<i64>, Option<i64>, Option<String>, Option<i64>);

impl Db {
    /// The health of one of the account's endpoints (deleted ones are not found).
    pub async fn endpoint_health(
        &self,
        account_id: &str,
        id: &str,
    ) -> Result<EndpointHealth, StoreError> {
        let endpoint = self.endpoint(account_id, id).await?;
        let now = now_ms();
        let current = hour_of(now);
        let since = current - 24 * HOUR_MS;
        let (stats, hourly, counts, (due, oldest_due)) = on_db!(self, |pool, _begin| {
            let stats = sqlx::query_as::<_, HealthRow>(
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
            // On the endpoint's due index: held deliveries sit past every due time.
            let backlog = sqlx::query_as::<_, (i64, Option<i64>)>(
                "SELECT COUNT(*), MIN(next_attempt_at) FROM kxp_deliveries \
                 WHERE endpoint_id = $1 AND status = 'pending' AND next_attempt_at <= $2",
            )
            .bind(&endpoint.id)
            .bind(now)
            .fetch_one(pool)
            .await?;
            (stats, hourly, counts, backlog)
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
            due,
            oldest_due_at: oldest_due.map(rfc3339),
            dead: count(&["dead"]),
            status: endpoint.status,
            circuit_state: endpoint.circuit_state,
            circuit_opened_at: endpoint.circuit_opened_at.map(rfc3339),
            next_probe_at: endpoint.circuit_probe_at.map(rfc3339),
            failing_since: failing_since.map(rfc3339),
        })
    }
}
