//! Endpoint health: statistics kept up to date as attempts finish, so reading them costs one
//! stats row, at most 25 hourly rows and two index range counts, never a scan of attempts.
//!
//! Recording a batch of finished attempts (`finish_attempts`) reads its endpoints' stats rows
//! under a row lock ([`StatsSql::lock`]), folds the batch's attempts into them
//! ([`RunningStats`](crate::policy::health::RunningStats)), writes them back
//! ([`StatsSql::write`]) and adds the batch's hourly tallies ([`StatsSql::add_hourly`]): three
//! statements per batch, however many endpoints it touches. An attempt whose lease was lost is
//! in none of them.

use sqlx::FromRow;

use crate::model::{
    AccountId, CredentialsView, EndpointHealth, EndpointId, EndpointKey, now_ms, rfc3339,
};
use crate::policy::certificates;
use crate::policy::health::{HOUR_MS, hour_of, window};
use crate::store::certificates::server_certificate;
use crate::store::{Db, StoreError, on_db};

/// The histogram columns of `kxp_endpoint_stats_hourly`, in bucket order (the last is `+inf`).
const BUCKET_COLUMNS: [&str; 12] = [
    "le_10", "le_25", "le_50", "le_100", "le_250", "le_500", "le_1000", "le_2500", "le_5000",
    "le_10000", "le_30000", "le_inf",
];

/// The statements that read and write a batch's endpoints' statistics, all endpoints in one
/// statement each, for one backend: the ids and values travel as one JSON parameter, which
/// both backends take apart in SQL (`json_each`, `jsonb_to_recordset`).
pub(crate) struct StatsSql {
    /// Makes sure each endpoint of `$1` (a [`keys_json`](crate::store::record::keys_json)) has
    /// a stats row (`$2` the time), with its account,
    /// locks the rows until the transaction ends, and returns them: an upsert that changes
    /// nothing on conflict, because an `ON CONFLICT DO UPDATE` locks a row on both backends
    /// where a `SELECT` of a missing row locks nothing. In id order on PostgreSQL, so two
    /// batches lock the same rows in the same order.
    pub lock: String,
    /// Writes the running statistics back: `$1` a JSON array of
    /// `{a, id, cf, fs, ls, lf, le}` (account, endpoint, consecutive failures, failing since, last success, last
    /// failure, last error), `$2` now.
    pub write: String,
    /// [`write`](StatsSql::write) of a batch whose endpoints are all of one account, `$3`:
    /// naming it keeps the statement on that account's shard on Citus.
    pub write_one: String,
    /// Adds each endpoint's [`HourTally`](crate::policy::health::HourTally) to its clock hour:
    /// `$1` a JSON array of `{a, id, hour, s, f, b0 … b11}`.
    pub add_hourly: String,
}

const STATS_RETURNING: &str = "RETURNING endpoint_id, account_id, consecutive_failures, failing_since, last_success_at, last_failure_at, last_error";

const SQLITE_WRITE: &str = "UPDATE kxp_endpoint_stats SET consecutive_failures = v.value ->> '$.cf', \
       failing_since = v.value ->> '$.fs', last_success_at = v.value ->> '$.ls', \
       last_failure_at = v.value ->> '$.lf', last_error = v.value ->> '$.le', updated_at = $2 \
     FROM json_each($1) AS v WHERE account_id = v.value ->> '$.a' AND endpoint_id = v.value ->> '$.id'";

const POSTGRES_WRITE: &str = "UPDATE kxp_endpoint_stats s SET consecutive_failures = v.cf, failing_since = v.fs, \
       last_success_at = v.ls, last_failure_at = v.lf, last_error = v.le, updated_at = $2 \
     FROM jsonb_to_recordset($1::jsonb) AS v(a text, id text, cf bigint, fs bigint, ls bigint, lf bigint, le text) \
     WHERE s.account_id = v.a AND s.endpoint_id = v.id";

fn stats_sql(sqlite: bool) -> StatsSql {
    let hourly_columns = BUCKET_COLUMNS.join(", ");
    let updates = ["successes", "failures"]
        .iter()
        .chain(BUCKET_COLUMNS.iter())
        .map(|c| format!("{c} = kxp_endpoint_stats_hourly.{c} + excluded.{c}"))
        .collect::<Vec<_>>()
        .join(", ");
    let upsert_stats = "ON CONFLICT (account_id, endpoint_id) DO UPDATE SET updated_at = kxp_endpoint_stats.updated_at";
    if sqlite {
        let buckets = (0..BUCKET_COLUMNS.len())
            .map(|i| format!("value ->> '$.b{i}'"))
            .collect::<Vec<_>>()
            .join(", ");
        StatsSql {
            lock: format!(
                "INSERT INTO kxp_endpoint_stats (endpoint_id, account_id, consecutive_failures, updated_at) \
                 SELECT value ->> '$.id', value ->> '$.a', 0, $2 FROM json_each($1) WHERE true {upsert_stats} {STATS_RETURNING}"
            ),
            write: SQLITE_WRITE.to_owned(),
            write_one: format!("{SQLITE_WRITE} AND account_id = $3"),
            add_hourly: format!(
                "INSERT INTO kxp_endpoint_stats_hourly (endpoint_id, account_id, hour, successes, failures, {hourly_columns}) \
                 SELECT value ->> '$.id', value ->> '$.a', value ->> '$.hour', value ->> '$.s', value ->> '$.f', {buckets} \
                 FROM json_each($1) WHERE true ON CONFLICT (account_id, endpoint_id, hour) DO UPDATE SET {updates}"
            ),
        }
    } else {
        let bucket_names = (0..BUCKET_COLUMNS.len())
            .map(|i| format!("v.b{i}"))
            .collect::<Vec<_>>()
            .join(", ");
        let bucket_types = (0..BUCKET_COLUMNS.len())
            .map(|i| format!("b{i} bigint"))
            .collect::<Vec<_>>()
            .join(", ");
        StatsSql {
            lock: format!(
                "INSERT INTO kxp_endpoint_stats (endpoint_id, account_id, consecutive_failures, updated_at) \
                 SELECT id, a, 0, $2 FROM jsonb_to_recordset($1::jsonb) AS t(a text, id text) ORDER BY id \
                 {upsert_stats} {STATS_RETURNING}"
            ),
            write: POSTGRES_WRITE.to_owned(),
            write_one: format!("{POSTGRES_WRITE} AND s.account_id = $3"),
            add_hourly: format!(
                "INSERT INTO kxp_endpoint_stats_hourly (endpoint_id, account_id, hour, successes, failures, {hourly_columns}) \
                 SELECT v.id, v.a, v.hour, v.s, v.f, {bucket_names} \
                 FROM jsonb_to_recordset($1::jsonb) AS v(a text, id text, hour bigint, s bigint, f bigint, {bucket_types}) \
                 ORDER BY v.id ON CONFLICT (account_id, endpoint_id, hour) DO UPDATE SET {updates}"
            ),
        }
    }
}

/// The statistics statements of each backend, built once.
pub(crate) static STATS_SQLITE: std::sync::LazyLock<StatsSql> =
    std::sync::LazyLock::new(|| stats_sql(true));
pub(crate) static STATS_POSTGRES: std::sync::LazyLock<StatsSql> =
    std::sync::LazyLock::new(|| stats_sql(false));

/// A row of [`StatsSql::lock`].
#[derive(Debug, FromRow)]
pub(crate) struct StatsRow {
    pub endpoint_id: crate::model::EndpointId,
    pub account_id: AccountId,
    pub consecutive_failures: i64,
    pub failing_since: Option<i64>,
    pub last_success_at: Option<i64>,
    pub last_failure_at: Option<i64>,
    pub last_error: Option<String>,
}

impl StatsRow {
    /// Its endpoint's key.
    pub(crate) fn key(&self) -> EndpointKey {
        EndpointKey::new(&self.account_id, &self.endpoint_id)
    }
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

/// The JSON of [`StatsSql::write`] for these endpoints' statistics.
pub(crate) fn stats_json<'a>(
    stats: impl Iterator<Item = (&'a EndpointKey, &'a crate::policy::health::RunningStats)>,
) -> String {
    let rows: Vec<serde_json::Value> = stats
        .map(|(key, s)| {
            serde_json::json!({"a": key.account_id, "id": key.id, "cf": s.consecutive_failures, "fs": s.failing_since,
                "ls": s.last_success_at, "lf": s.last_failure_at, "le": s.last_error})
        })
        .collect();
    serde_json::Value::from(rows).to_string()
}

/// The JSON of [`StatsSql::add_hourly`] for these endpoints' tallies of the clock hour `hour`.
pub(crate) fn hourly_json<'a>(
    hour: i64,
    tallies: impl Iterator<Item = (&'a EndpointKey, &'a crate::policy::health::HourTally)>,
) -> String {
    let rows: Vec<serde_json::Value> = tallies
        .map(|(key, t)| {
            let mut row = serde_json::json!({"a": key.account_id, "id": key.id, "hour": hour,
                "s": t.successes, "f": t.failures});
            for (i, count) in t.histogram.iter().enumerate() {
                row[format!("b{i}")] = serde_json::Value::from(*count);
            }
            row
        })
        .collect();
    serde_json::Value::from(rows).to_string()
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

/// The highest number endpoint `$2` of account `$1` has given (0: none yet).
pub(crate) const LATEST: &str = "SELECT COALESCE(MAX(next_sequence), 1) - 1 FROM kxp_sequences \
     WHERE account_id = $1 AND endpoint_id = $2";

impl Db {
    /// The health of one of the account's endpoints (deleted ones are not found).
    pub(crate) async fn endpoint_health(
        &self,
        account_id: &AccountId,
        id: &EndpointId,
    ) -> Result<EndpointHealth, StoreError> {
        let endpoint = self.endpoint(account_id, id).await?;
        let now = now_ms();
        let current = hour_of(now);
        let since = current - 24 * HOUR_MS;
        let (stats, hourly, counts, (due, oldest_due), latest) = on_db!(self, |pool| {
            let stats = sqlx::query_as::<_, HealthRow>(
                "SELECT consecutive_failures, last_success_at, last_failure_at, last_error, failing_since \
                 FROM kxp_endpoint_stats WHERE account_id = $2 AND endpoint_id = $1",
            )
            .bind(&endpoint.id)
            .bind(account_id)
            .fetch_optional(pool)
            .await?;
            let hourly = sqlx::query_as::<_, Hourly>(&format!(
                "SELECT hour, successes, failures, {} FROM kxp_endpoint_stats_hourly \
                 WHERE account_id = $3 AND endpoint_id = $1 AND hour >= $2",
                BUCKET_COLUMNS.join(", ")
            ))
            .bind(&endpoint.id)
            .bind(since)
            .bind(account_id)
            .fetch_all(pool)
            .await?;
            let counts = sqlx::query_as::<_, (String, i64)>(
                "SELECT status, COUNT(*) FROM kxp_deliveries \
                 WHERE account_id = $2 AND endpoint_id = $1 AND status IN ('pending', 'delivering', 'dead') GROUP BY status",
            )
            .bind(&endpoint.id)
            .bind(account_id)
            .fetch_all(pool)
            .await?;
            // On the endpoint's due index: held deliveries sit past every due time.
            let backlog = sqlx::query_as::<_, (i64, Option<i64>)>(
                "SELECT COUNT(*), MIN(next_attempt_at) FROM kxp_deliveries \
                 WHERE account_id = $3 AND endpoint_id = $1 AND status = 'pending' AND next_attempt_at <= $2",
            )
            .bind(&endpoint.id)
            .bind(now)
            .bind(account_id)
            .fetch_one(pool)
            .await?;
            let latest = if endpoint.is_pull() {
                sqlx::query_scalar::<_, i64>(LATEST)
                    .bind(account_id)
                    .bind(&endpoint.id)
                    .fetch_one(pool)
                    .await?
            } else {
                0
            };
            (stats, hourly, counts, backlog, latest)
        });
        let pull = endpoint.is_pull().then(|| {
            let cursor = u64::try_from(endpoint.pull_cursor).unwrap_or(0);
            let latest = u64::try_from(latest).unwrap_or(0);
            kxp_api::PullHealth {
                cursor,
                latest,
                lag: latest.saturating_sub(cursor),
                committed_at: endpoint
                    .pull_cursor_at
                    .map(kxp_api::Timestamp::from_unix_ms),
                read_at: endpoint.pull_read_at.map(kxp_api::Timestamp::from_unix_ms),
            }
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
        let server_certificate = server_certificate(endpoint.server_certificate.as_deref());
        let client_expiry = CredentialsView::of_row(endpoint.credentials_view.as_deref())
            .tls
            .and_then(|tls| tls.client_certificate)
            .and_then(|cert| cert.not_after.unix_ms());
        let server_expiry = server_certificate
            .as_ref()
            .and_then(|cert| cert.not_after.unix_ms());
        Ok(EndpointHealth {
            expiring_certificates: certificates::expiring(client_expiry, server_expiry, now),
            server_certificate,
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
            pull,
            hours: (0..=24)
                .map(|back| {
                    let hour = current - (24 - back) * HOUR_MS;
                    hourly
                        .iter()
                        .find(|r| r.hour == hour)
                        .map_or((0, 0), |r| (r.successes, r.failures))
                })
                .collect(),
        })
    }
}
