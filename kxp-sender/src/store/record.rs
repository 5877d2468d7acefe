//! Recording finished attempts, in batches: each delivery row and attempt row (only while the
//! worker still holds the delivery's lease), then the endpoints' statistics, breakers and any
//! notification, in one transaction. The statements are [`Backend`]'s; the folding, ordering
//! and policy calls are written here once, for both databases.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use sqlx::Pool;

use crate::model::{
    AccountId, EndpointKey, FinishAttempt, Finished, NextState, NoticeDetail, now_ms,
};
use crate::policy::circuit::Protection;
use crate::policy::health::{HourTally, RunningStats, hour_of};
use crate::store::backend::Backend;
use crate::store::circuit::{BreakerRow, breaker_step};
use crate::store::claim::endpoint_deleted;
use crate::store::health::{hourly_json, stats_json};
use crate::store::notifications::queue_notices;
use crate::store::{Db, StoreError, on_db};

/// One finished attempt as its delivery row records it.
pub(crate) struct Finishing<'a> {
    /// The delivery's new status: `delivered`, `pending` (a retry) or `dead`.
    pub status: &'static str,
    /// Its next try (a retry), else the time it ended.
    pub next_at: i64,
    /// The HTTP status, if a response came.
    pub status_code: Option<i64>,
    /// What went wrong, if anything.
    pub error: Option<&'a str>,
}

impl<'a> Finishing<'a> {
    fn of(item: &FinishAttempt, error: Option<&'a str>, now: i64) -> Finishing<'a> {
        let (status, next_at) = match item.next {
            NextState::Delivered => ("delivered", now),
            NextState::RetryAt(at) => ("pending", at),
            NextState::Dead => ("dead", now),
        };
        Finishing {
            status,
            next_at,
            status_code: item.record.status_code.map(i64::from),
            error,
        }
    }
}

impl Db {
    /// Records a batch of finished attempts in one transaction, each only if its `owner` still
    /// holds the delivery's lease ([`Finished::LeaseLost`] otherwise: that item writes nothing,
    /// and the worker that took over stands; the others are recorded all the same). Per
    /// endpoint of the batch, once: its statistics (locked, folded in order, written back) and
    /// its hourly tally; its circuit breaker sees the attempts one by one, in order, each with
    /// the statistics as of that attempt, and queues the notification a state change calls for.
    /// (Every delivery row of the batch is written before the breaker steps, and the batch has
    /// one time: the end states are those of recording the attempts one at a time.) Answers
    /// one [`Finished`] per item, in order.
    ///
    /// One commit for the whole batch is what makes delivery fast: a commit waits for the disk,
    /// and on PostgreSQL each endpoint's rows are locked once per batch instead of once per
    /// attempt. On Citus the batch is written in one transaction per account, each on that
    /// account's shard, and an account whose worker is down fails alone: the answers are per
    /// item, and a failed one was not recorded (its lease runs out, it is tried again).
    #[cfg_attr(
        not(feature = "test-util"),
        expect(unreachable_pub, reason = "public with feature test-util only")
    )]
    pub async fn finish_attempts(
        &self,
        batch: &[FinishAttempt],
        protection: &Protection,
    ) -> Vec<Result<Finished, Arc<StoreError>>> {
        let Db::Citus(pool) = self else {
            return match on_db!(self, |pool| finish(pool, batch, protection).await) {
                Ok(finished) => finished.into_iter().map(Ok).collect(),
                Err(e) => vec![Err(Arc::new(StoreError::from(e))); batch.len()],
            };
        };
        let mut results = vec![Ok(Finished::LeaseLost); batch.len()];
        for positions in positions_by_account(batch.iter().map(|item| &item.account_id)) {
            let group: Vec<FinishAttempt> = positions.iter().map(|&i| batch[i].clone()).collect();
            match finish(pool, &group, protection).await {
                Ok(finished) => {
                    for (i, done) in positions.into_iter().zip(finished) {
                        results[i] = Ok(done);
                    }
                }
                Err(e) => {
                    let e = Arc::new(StoreError::from(e));
                    for i in positions {
                        results[i] = Err(e.clone());
                    }
                }
            }
        }
        results
    }
}

/// The positions of each account's items in a batch, account by account: what Citus writes
/// in one statement or transaction per account.
pub(crate) fn positions_by_account<'a>(
    accounts: impl Iterator<Item = &'a AccountId>,
) -> Vec<Vec<usize>> {
    let mut by_account: BTreeMap<&AccountId, Vec<usize>> = BTreeMap::new();
    for (i, account) in accounts.enumerate() {
        by_account.entry(account).or_default().push(i);
    }
    by_account.into_values().collect()
}

/// [`Db::finish_attempts`] on one database.
async fn finish<DB: Backend>(
    pool: &Pool<DB>,
    batch: &[FinishAttempt],
    protection: &Protection,
) -> Result<Vec<Finished>, sqlx::Error> {
    let now = now_ms();
    let errors: Vec<Option<String>> = batch
        .iter()
        .map(|f| f.record.error.as_ref().map(ToString::to_string))
        .collect();
    let finishing: Vec<Finishing> = batch
        .iter()
        .zip(&errors)
        .map(|(item, error)| Finishing::of(item, error.as_deref(), now))
        .collect();
    let mut tx = pool.begin_with(DB::BEGIN).await?;
    let recorded = DB::finish_deliveries(&mut *tx, batch, &finishing, now).await?;
    let results =
        record_endpoints::<DB>(&mut *tx, batch, &errors, &recorded, now, protection).await?;
    tx.commit().await?;
    Ok(results)
}

/// The endpoints `keys` as one JSON parameter, as the recording statements take them apart:
/// `[{"a": account, "id": endpoint}, …]`.
pub(crate) fn keys_json(keys: &[EndpointKey]) -> String {
    serde_json::Value::from(
        keys.iter()
            .map(|key| serde_json::json!({"a": key.account_id, "id": key.id}))
            .collect::<Vec<_>>(),
    )
    .to_string()
}

/// What a batch's finished attempts do to their endpoints, on the transaction `conn`, once the
/// delivery and attempt rows are written (`recorded[i]`: item `i` still held its lease): the
/// statistics of every endpoint touched are locked and read in one statement, and their
/// breakers in another; then, per endpoint, each attempt in order is folded into the
/// statistics and steps the breaker (SQL only on a transition, with the notices it calls for);
/// then all statistics and hourly tallies are written in one statement each. Answers one
/// [`Finished`] per item.
async fn record_endpoints<DB: Backend>(
    conn: &mut DB::Connection,
    batch: &[FinishAttempt],
    errors: &[Option<String>],
    recorded: &[bool],
    now: i64,
    protection: &Protection,
) -> Result<Vec<Finished>, sqlx::Error> {
    let mut results = vec![Finished::LeaseLost; batch.len()];
    let mut touched: Vec<EndpointKey> = (0..batch.len())
        .filter(|&i| recorded[i])
        .map(|i| batch[i].endpoint())
        .collect();
    touched.sort_unstable();
    touched.dedup();
    if touched.is_empty() {
        return Ok(results);
    }
    let keys = keys_json(&touched);
    // Every endpoint of one account (always so on Citus, where a batch is written per account):
    // named as a constant, so that each statement stays on that account's shard.
    let one = one_account(touched.iter().map(|key| &key.account_id));
    let mut stats: BTreeMap<EndpointKey, RunningStats> = DB::lock_stats(conn, &keys, now)
        .await?
        .into_iter()
        .map(|row| (row.key(), RunningStats::from(row)))
        .collect();
    let mut rows: BTreeMap<EndpointKey, BreakerRow> = DB::breaker_rows(conn, &keys, one)
        .await?
        .into_iter()
        .map(|row| (row.key(), row))
        .collect();
    let mut tallies: BTreeMap<EndpointKey, HourTally> = BTreeMap::new();
    // Endpoint by endpoint in key order (a breaker's transition locks its row: two batches take
    // such locks in the same order), each endpoint's attempts in order.
    let mut order: Vec<(EndpointKey, usize)> = (0..batch.len())
        .filter(|&i| recorded[i])
        .map(|i| (batch[i].endpoint(), i))
        .collect();
    order.sort_unstable();
    for (endpoint, i) in order.iter().map(|(endpoint, i)| (endpoint, *i)) {
        let item = &batch[i];
        let (Some(stats), Some(row)) = (stats.get_mut(endpoint), rows.get_mut(endpoint)) else {
            continue;
        };
        let success = errors[i].is_none();
        stats.record(now, errors[i].as_deref());
        tallies
            .entry(endpoint.clone())
            .or_default()
            .add(success, item.record.duration_ms);
        let changed = breaker_step::<DB>(
            conn,
            row,
            &item.delivery_id,
            success,
            stats,
            now,
            protection,
        )
        .await?;
        let mut notices = 0;
        if let Some(kind) = changed.and_then(|t| t.notice()) {
            // The notice quotes the statistics: they go down first.
            DB::write_stats(
                conn,
                stats_json(std::iter::once((endpoint, &*stats))),
                now,
                one,
            )
            .await?;
            notices = queue_notices::<DB>(conn, kind, endpoint, NoticeDetail::None, now).await?;
        }
        results[i] = Finished::Recorded {
            transition: changed,
            notices,
        };
    }
    DB::write_stats(conn, stats_json(stats.iter()), now, one).await?;
    DB::add_hourly(conn, hourly_json(hour_of(now), tallies.iter())).await?;
    Ok(results)
}

/// Records an attempt's outcome on its delivery ([`Db::finish_attempts`] on SQLite, one delivery
/// at a time): `$1` the new status, … `$8` the delivery, `$9` the lease owner, `$10` its account. A retry for an endpoint deleted during the
/// attempt ends the delivery instead. Built once: it runs with every attempt.
pub(crate) static FINISH_ATTEMPT: LazyLock<String> = LazyLock::new(|| {
    let deleted = endpoint_deleted("$10");
    format!(
        "UPDATE kxp_deliveries SET status = CASE WHEN $1 = 'pending' AND {deleted} THEN 'dead' ELSE $1 END, \
         attempts = $2, first_attempt_at = COALESCE(first_attempt_at, $3), \
         next_attempt_at = $4, lease_until = NULL, lease_owner = NULL, last_status = $5, \
         last_error = CASE WHEN $1 = 'pending' AND {deleted} THEN 'endpoint_deleted' ELSE $6 END, updated_at = $7 \
         WHERE account_id = $10 AND id = $8 AND lease_owner = $9 AND status = 'delivering'"
    )
});

/// [`FINISH_ATTEMPT`] for a whole batch, on PostgreSQL: `$1`… `$8` the batch's columns as
/// arrays (delivery, status, attempt, started at, next at, HTTP status, error, lease owner),
/// `$9` now, `$10` the deliveries' accounts. Each row is checked against its own lease; returns the deliveries it recorded.
pub(crate) static FINISH_ATTEMPTS_POSTGRES: LazyLock<String> =
    LazyLock::new(|| finish_attempts_postgres(""));
/// [`FINISH_ATTEMPTS_POSTGRES`] for a batch of one account, `$11`: on Citus, on its shard.
pub(crate) static FINISH_ATTEMPTS_ONE: LazyLock<String> =
    LazyLock::new(|| finish_attempts_postgres("AND d.account_id = $11 AND p.account_id = $11 "));

fn finish_attempts_postgres(one: &str) -> String {
    format!(
        "UPDATE kxp_deliveries d SET \
       status = CASE WHEN u.status = 'pending' AND p.status = 'deleted' THEN 'dead' ELSE u.status END, \
       attempts = u.attempt, first_attempt_at = COALESCE(d.first_attempt_at, u.started_at), \
       next_attempt_at = u.next_at, lease_until = NULL, lease_owner = NULL, last_status = u.status_code, \
       last_error = CASE WHEN u.status = 'pending' AND p.status = 'deleted' THEN 'endpoint_deleted' ELSE u.error END, \
       updated_at = $9 \
     FROM UNNEST($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], $7::text[], $8::text[], $10::text[]) \
       AS u(id, status, attempt, started_at, next_at, status_code, error, owner, account_id), kxp_endpoints p \
     WHERE d.account_id = u.account_id AND d.id = u.id AND d.lease_owner = u.owner AND d.status = 'delivering' \
       AND p.account_id = d.account_id AND p.id = d.endpoint_id \
     {one}RETURNING d.id"
    )
}

/// The one account of `accounts`, if they are all the same one (none if empty): a batch of one
/// account names it as a constant, which keeps each statement on that account's shard on Citus.
pub(crate) fn one_account<T: PartialEq>(accounts: impl IntoIterator<Item = T>) -> Option<T> {
    let mut accounts = accounts.into_iter();
    let first = accounts.next()?;
    accounts.all(|a| a == first).then_some(first)
}

/// The endpoint rows of a batch of one account (`$2`; `$1` the endpoint ids) under KEY SHARE.
pub(crate) const KEY_SHARE_ONE: &str = "SELECT 1 FROM kxp_endpoints p WHERE p.account_id = $2 AND p.id = ANY($1::text[]) \
     ORDER BY p.id FOR KEY SHARE";

/// Writes a batch's attempt rows on PostgreSQL: `$1`… `$10` their columns as arrays. An
/// attempt's id is its delivery's next: this transaction holds the delivery's row (its lease
/// was just checked by updating it), so no other takes the same, and two attempts of one
/// delivery in a batch (which one worker's lease never makes) would take one each. The
/// deliveries' highest ids are read in a join, not a subquery per row, which Citus does not
/// take beside `UNNEST`.
pub(crate) static ATTEMPTS_POSTGRES: LazyLock<String> = LazyLock::new(|| attempts_postgres(""));
/// [`ATTEMPTS_POSTGRES`] for a batch of one account, `$11`: on Citus, on its shard.
pub(crate) static ATTEMPTS_ONE: LazyLock<String> =
    LazyLock::new(|| attempts_postgres("AND a.account_id = $11 "));

fn attempts_postgres(one: &str) -> String {
    format!(
        "INSERT INTO kxp_attempts (id, delivery_id, attempt, started_at, duration_ms, status_code, \
       error, response_snippet, signed_with, verified_key, account_id) \
     SELECT COALESCE(m.top, 0) + row_number() OVER (PARTITION BY u.account_id, u.delivery_id), u.* \
     FROM UNNEST($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[], $6::text[], $7::text[], $8::text[], \
       $9::text[], $10::text[]) AS u(delivery_id, attempt, started_at, duration_ms, status_code, error, response_snippet, \
       signed_with, verified_key, account_id) \
     LEFT JOIN (SELECT a.account_id, a.delivery_id, MAX(a.id) AS top FROM kxp_attempts a \
       WHERE (a.account_id, a.delivery_id) IN (SELECT * FROM UNNEST($10::text[], $1::text[])) \
       {one}GROUP BY a.account_id, a.delivery_id) m ON m.account_id = u.account_id AND m.delivery_id = u.delivery_id"
    )
}
