//! The worker's side of `kxp_deliveries` and `kxp_attempts`: the claim, the job, recording an
//! attempt (with the endpoint's statistics, its breaker and any notification, in one
//! transaction), putting deliveries back and reclaiming expired leases.

use std::sync::LazyLock;

use crate::model::{AttemptRecord, Finished, Job, NextState, now_ms};
use crate::policy::circuit::Protection;
use crate::store::circuit::after_attempt;
use crate::store::health::record_stats;
use crate::store::notifications::queue_notices;
use crate::store::{Db, StoreError, on_db};

impl Db {
    /// Claims up to `limit` due deliveries for `owner`, at most `default_cap` per endpoint, or
    /// what `caps` allows for the endpoints it lists (0: none; this worker keeps them as busy as
    /// their concurrency or rate limit allows). Only deliveries of `active` endpoints with a
    /// closed circuit are claimed, and of a half-open one only its probe.
    ///
    /// The scan stays on the `kxp_deliveries_due` index in due order, with one primary key probe
    /// per candidate, over a window of `4 × limit` candidates; held deliveries (paused, disabled
    /// or open endpoints) are outside its range altogether (`HELD`). Each claimed delivery is
    /// leased for its endpoint's timeout plus `lease_extra_ms`: if the worker dies, the delivery
    /// is claimable again soon after any attempt of its could have ended.
    pub async fn claim(
        &self,
        owner: &str,
        lease_extra_ms: i64,
        limit: i64,
        caps: &[(String, usize)],
        default_cap: usize,
    ) -> Result<Vec<String>, StoreError> {
        let now = now_ms();
        let caps = serde_json::to_string(
            &caps
                .iter()
                .cloned()
                .collect::<std::collections::HashMap<_, _>>(),
        )
        .unwrap_or_else(|_| "{}".to_owned());
        let default_cap = i64::try_from(default_cap).unwrap_or(i64::MAX);
        let sql = match self {
            Db::Sqlite(_) => CLAIM_SQLITE.as_str(),
            Db::Postgres(_) => CLAIM_POSTGRES.as_str(),
        };
        Ok(on_db!(self, |pool, _begin| {
            sqlx::query_scalar::<_, String>(sql)
                .bind(lease_extra_ms)
                .bind(owner)
                .bind(now)
                .bind(&caps)
                .bind(limit)
                .bind(default_cap)
                .fetch_all(pool)
                .await?
        }))
    }

    /// What a worker needs to send a claimed delivery.
    pub(crate) async fn job(&self, delivery_id: &str) -> Result<Job, StoreError> {
        on_db!(self, |pool, _begin| {
            sqlx::query_as::<_, Job>(
                "SELECT d.id, d.event_id, e.event_type, e.payload, d.endpoint_id, p.url, p.timeout_ms, d.attempts, \
                 p.status AS endpoint_status, p.rate_limit_per_second, p.circuit_state, p.circuit_probe_id \
                 FROM kxp_deliveries d JOIN kxp_events e ON e.id = d.event_id JOIN kxp_endpoints p ON p.id = d.endpoint_id \
                 WHERE d.id = $1",
            )
            .bind(delivery_id)
            .fetch_optional(pool)
            .await?
        })
        .ok_or(StoreError::NotFound)
    }

    /// Records a finished attempt and moves the delivery on, if `owner` still holds its lease;
    /// in the same transaction, updates the endpoint's statistics and its circuit breaker
    /// (the circuit policy), and queues the notification a state change calls for.
    /// [`Finished::LeaseLost`] when the lease was lost (it expired and another worker took
    /// over): then nothing is written, and that worker's outcome stands.
    pub async fn finish_attempt(
        &self,
        delivery_id: &str,
        owner: &str,
        attempt: i64,
        record: &AttemptRecord,
        next: NextState,
        protection: &Protection,
    ) -> Result<Finished, StoreError> {
        let now = now_ms();
        // Stored as text: `http_503`, `timeout: no answer within 5000 ms`, …
        let error = record.error.as_ref().map(ToString::to_string);
        let (status, next_at) = match next {
            NextState::Delivered => ("delivered", now),
            NextState::RetryAt(at) => ("pending", at),
            NextState::Dead => ("dead", now),
        };
        let lock_endpoint = matches!(self, Db::Postgres(_)).then_some(
            "SELECT 1 FROM kxp_endpoints WHERE id = (SELECT endpoint_id FROM kxp_deliveries WHERE id = $1) \
             FOR NO KEY UPDATE",
        );
        on_db!(self, |pool, begin| {
            let mut tx = pool.begin_with(begin).await?;
            // The endpoint row first (PostgreSQL), as every transaction that changes an
            // endpoint and its deliveries takes it: one lock order (no deadlock with a resume),
            // and a delete waits for this attempt's outcome instead of missing it.
            if let Some(lock) = lock_endpoint {
                sqlx::query(lock)
                    .bind(delivery_id)
                    .execute(&mut *tx)
                    .await?;
            }
            let updated = sqlx::query(FINISH_ATTEMPT.as_str())
                .bind(status)
                .bind(attempt)
                .bind(record.started_at)
                .bind(next_at)
                .bind(record.status_code.map(i64::from))
                .bind(&error)
                .bind(now)
                .bind(delivery_id)
                .bind(owner)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if updated == 0 {
                tx.rollback().await?;
                return Ok(Finished::LeaseLost);
            }
            sqlx::query(
                "INSERT INTO kxp_attempts (delivery_id, attempt, started_at, duration_ms, status_code, error, response_snippet) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(delivery_id)
            .bind(attempt)
            .bind(record.started_at)
            .bind(record.duration_ms)
            .bind(record.status_code.map(i64::from))
            .bind(&error)
            .bind(&record.response_snippet)
            .execute(&mut *tx)
            .await?;
            // The endpoint's health statistics and its breaker move on in the same transaction.
            record_stats!(tx, delivery_id, now, record)?;
            let success = record.error.is_none();
            let changed = after_attempt!(tx, delivery_id, success, now, protection)?;
            let mut notices = 0;
            if let Some((transition, endpoint)) = &changed
                && let Some(kind) = transition.notice()
            {
                notices = queue_notices!(tx, kind, &endpoint.id, now)?;
            }
            tx.commit().await?;
            Ok(Finished::Recorded {
                transition: changed.map(|(transition, _)| transition),
                notices,
            })
        })
    }

    /// Puts a claimed delivery back, untried (shutdown, more claimed than an endpoint may take
    /// at once, or an endpoint paused since the claim); if its endpoint was deleted meanwhile,
    /// it ends dead with `endpoint_deleted` instead.
    pub(crate) async fn release(&self, delivery_id: &str, owner: &str) -> Result<(), StoreError> {
        let sql = format!(
            "UPDATE kxp_deliveries SET status = CASE WHEN {ENDPOINT_DELETED} THEN 'dead' ELSE 'pending' END, \
             last_error = CASE WHEN {ENDPOINT_DELETED} THEN 'endpoint_deleted' ELSE last_error END, \
             lease_until = NULL, lease_owner = NULL, updated_at = $1 \
             WHERE id = $2 AND lease_owner = $3 AND status = 'delivering'"
        );
        on_db!(self, |pool, _begin| {
            sqlx::query(&sql)
                .bind(now_ms())
                .bind(delivery_id)
                .bind(owner)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// Makes deliveries whose lease ran out (their worker died) claimable again (or dead with
    /// `endpoint_deleted`, if their endpoint was deleted meanwhile).
    pub(crate) async fn reclaim_expired(&self) -> Result<u64, StoreError> {
        let now = now_ms();
        let sql = format!(
            "UPDATE kxp_deliveries SET status = CASE WHEN {ENDPOINT_DELETED} THEN 'dead' ELSE 'pending' END, \
             last_error = CASE WHEN {ENDPOINT_DELETED} THEN 'endpoint_deleted' ELSE last_error END, \
             lease_until = NULL, lease_owner = NULL, next_attempt_at = $1, updated_at = $1 \
             WHERE status = 'delivering' AND lease_until < $1"
        );
        Ok(on_db!(self, |pool, _begin| {
            sqlx::query(&sql)
                .bind(now)
                .execute(pool)
                .await?
                .rows_affected()
        }))
    }
}

/// The worker's claim ([`Db::claim`]) for one backend; built once each.
fn claim_sql(sqlite: bool) -> String {
    // `cap` is the endpoint's entry in the JSON object `$4`, else `$6`.
    let (cap_d, cap_c, lock) = if sqlite {
        (
            "COALESCE(json_extract($4, '$.' || d.endpoint_id), $6)",
            "COALESCE(json_extract($4, '$.' || c.endpoint_id), $6)",
            "",
        )
    } else {
        // SKIP LOCKED: rows another process is claiming right now are passed over rather
        // than waited for, so workers never hold the same delivery.
        (
            "COALESCE(($4::jsonb ->> d.endpoint_id)::bigint, $6)",
            "COALESCE(($4::jsonb ->> c.endpoint_id)::bigint, $6)",
            " FOR UPDATE OF d SKIP LOCKED",
        )
    };
    format!(
        "UPDATE kxp_deliveries SET status = 'delivering', lease_owner = $2, updated_at = $3, \
           lease_until = $3 + $1 + (SELECT timeout_ms FROM kxp_endpoints p WHERE p.id = endpoint_id) \
         WHERE id IN (SELECT c.id FROM ( \
             SELECT w.id, w.endpoint_id, w.next_attempt_at, \
               ROW_NUMBER() OVER (PARTITION BY w.endpoint_id ORDER BY w.next_attempt_at) AS rn \
             FROM (SELECT d.id, d.endpoint_id, d.next_attempt_at FROM kxp_deliveries d \
               WHERE d.status = 'pending' AND d.next_attempt_at <= $3 AND {cap_d} > 0 \
               AND EXISTS (SELECT 1 FROM kxp_endpoints a WHERE a.id = d.endpoint_id AND a.status = 'active' \
                 AND (a.circuit_state = 'closed' OR (a.circuit_state = 'half_open' AND a.circuit_probe_id = d.id))) \
               ORDER BY d.next_attempt_at LIMIT $5 * 4{lock}) w \
           ) c WHERE c.rn <= {cap_c} ORDER BY c.next_attempt_at LIMIT $5) \
         RETURNING id"
    )
}

static CLAIM_SQLITE: LazyLock<String> = LazyLock::new(|| claim_sql(true));
static CLAIM_POSTGRES: LazyLock<String> = LazyLock::new(|| claim_sql(false));

/// Records an attempt's outcome on its delivery ([`Db::finish_attempt`]): `$1` the new status,
/// … `$8` the delivery, `$9` the lease owner. A retry for an endpoint deleted during the
/// attempt ends the delivery instead. Built once: it runs with every attempt.
static FINISH_ATTEMPT: LazyLock<String> = LazyLock::new(|| {
    format!(
        "UPDATE kxp_deliveries SET status = CASE WHEN $1 = 'pending' AND {ENDPOINT_DELETED} THEN 'dead' ELSE $1 END, \
         attempts = $2, first_attempt_at = COALESCE(first_attempt_at, $3), \
         next_attempt_at = $4, lease_until = NULL, lease_owner = NULL, last_status = $5, \
         last_error = CASE WHEN $1 = 'pending' AND {ENDPOINT_DELETED} THEN 'endpoint_deleted' ELSE $6 END, updated_at = $7 \
         WHERE id = $8 AND lease_owner = $9 AND status = 'delivering'"
    )
});

/// True when the row's endpoint is deleted, in an `UPDATE kxp_deliveries`: a delivery that
/// would go back to pending then ends dead instead, as the deletion made its siblings.
const ENDPOINT_DELETED: &str =
    "(SELECT p.status FROM kxp_endpoints p WHERE p.id = kxp_deliveries.endpoint_id) = 'deleted'";
