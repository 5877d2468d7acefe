//! The claims on Citus ([`Db::Citus`](crate::store::Db::Citus)): what the batched claims do for
//! several accounts in one statement is done account by account, each statement on one
//! account's shard, the only place Citus takes row locks. Which accounts have due work (or
//! expired leases) is read from every shard first, without locks, shard by shard
//! ([`every_shard`]): a worker down leaves the other shards' accounts claimed.

use std::sync::LazyLock;

use sqlx::PgPool;

use super::{ClaimArgs, claim_for, claim_for_postgres, claim_sql_of, put_back};
use crate::model::{AccountId, EndpointKey, Job};
use crate::policy::fairness::AccountCaps;
use crate::store::record::positions_by_account;
use crate::store::shards::every_shard;

/// The accounts of the first deliveries due (at the first `%L`, the window's size the last),
/// with when each account's first is due, on one shard: the batched scan's window, by
/// account. As there, deliveries of endpoints (a JSON object of endpoint id → cap, else a
/// default) and accounts (likewise) that may take no more are left out, so that one account's
/// backlog cannot fill the window.
const DUE_ACCOUNTS: &str = "SELECT jsonb_build_array(account_id, MIN(next_attempt_at)) AS r FROM ( \
     SELECT account_id, next_attempt_at FROM %%s \
     WHERE status = 'pending' AND next_attempt_at <= %L \
       AND COALESCE((%L::jsonb ->> endpoint_id)::bigint, %L) > 0 \
       AND COALESCE((%L::jsonb ->> account_id)::bigint, %L) > 0 \
     ORDER BY next_attempt_at LIMIT %L) due GROUP BY account_id";

/// The accounts with deliveries whose lease ran out before `%L`, on one shard.
const EXPIRED_ACCOUNTS: &str = "SELECT DISTINCT to_jsonb(account_id) AS r FROM %%s \
     WHERE status = 'delivering' AND lease_until < %L";

/// The scan's claim of one account's deliveries (`$9`).
pub(in crate::store) static CLAIM_ACCOUNT: LazyLock<String> =
    LazyLock::new(|| claim_sql_of(false, true));

/// The claim for ready endpoints of one account (`$7`).
pub(in crate::store) static CLAIM_FOR_ACCOUNT: LazyLock<String> =
    LazyLock::new(|| claim_for_postgres(true));

/// [`Db::reclaim_expired`](crate::store::Db::reclaim_expired) of one account (`$2`), at `$1`.
pub(in crate::store) static RECLAIM_ACCOUNT: LazyLock<String> = LazyLock::new(|| {
    format!(
        "UPDATE kxp_deliveries SET {}, next_attempt_at = $1, updated_at = $1 \
         WHERE account_id = $2 AND id IN (SELECT id FROM kxp_deliveries \
           WHERE account_id = $2 AND status = 'delivering' AND lease_until < $1 FOR UPDATE SKIP LOCKED) \
         AND status = 'delivering' AND lease_until < $1",
        put_back("$2")
    )
});

/// The scan ([`Db::claim_fair`](crate::store::Db::claim_fair)): the accounts of the window of
/// due deliveries, in due order, each claimed from within its cap, until `args.limit`.
pub(super) async fn claim_fair(
    pool: &PgPool,
    args: ClaimArgs<'_>,
    accounts: &AccountCaps,
) -> Result<Vec<Job>, sqlx::Error> {
    let mut due: Vec<(AccountId, i64)> = every_shard(
        pool,
        "kxp_deliveries",
        DUE_ACCOUNTS,
        &[
            args.now.to_string(),
            args.caps.to_owned(),
            args.default_cap.to_string(),
            args.account_caps.to_owned(),
            args.other_accounts.to_string(),
            args.limit.saturating_mul(4).to_string(),
        ],
    )
    .await?;
    // Every shard's window, merged: the accounts whose first is due first, first.
    due.sort_unstable_by_key(|(_, at)| *at);
    let due = due.into_iter().map(|(account, _)| account);
    let mut jobs = Vec::new();
    for account in due {
        let left = args.limit - i64::try_from(jobs.len()).unwrap_or(i64::MAX);
        if left <= 0 {
            break;
        }
        let cap = left.min(i64::try_from(accounts.of(&account)).unwrap_or(i64::MAX));
        if cap == 0 {
            continue;
        }
        let one = ClaimArgs { limit: cap, ..args };
        let taken = one
            .bind(sqlx::query_as::<_, Job>(CLAIM_ACCOUNT.as_str()))
            .bind(&account)
            .fetch_all(pool)
            .await?;
        jobs.extend(taken);
    }
    Ok(jobs)
}

/// The claim for ready endpoints ([`Db::claim_for_fair`](crate::store::Db::claim_for_fair)),
/// one statement per account. An account whose shard cannot be reached (its worker down) is
/// skipped, and the others' claims stand: what they leased is returned, never dropped (it would
/// wait out its lease). Only when every account fails is the claim an error.
pub(super) async fn claim_for_fair(
    pool: &PgPool,
    lease: (i64, &str, i64),
    targets: &[(&EndpointKey, i64)],
    accounts: &AccountCaps,
) -> Result<Vec<Job>, sqlx::Error> {
    let mut jobs = Vec::new();
    let mut failed = None;
    for positions in positions_by_account(targets.iter().map(|(key, _)| &key.account_id)) {
        let account = &targets[positions[0]].0.account_id;
        let group: Vec<(&EndpointKey, i64)> = positions.iter().map(|&i| targets[i]).collect();
        match claim_for(
            pool,
            &CLAIM_FOR_ACCOUNT,
            lease,
            &group,
            accounts,
            Some(account),
        )
        .await
        {
            Ok(taken) => jobs.extend(taken),
            Err(e) => {
                tracing::warn!(target: "kxp_sender", account_id = %account, error = %e, "claiming for one account failed; the other accounts' claims stand");
                failed.get_or_insert(e);
            }
        }
    }
    match failed {
        Some(e) if jobs.is_empty() => Err(e),
        _ => Ok(jobs),
    }
}

/// [`Db::reclaim_expired`](crate::store::Db::reclaim_expired), account by account.
pub(super) async fn reclaim_expired(pool: &PgPool, now: i64) -> Result<u64, sqlx::Error> {
    let expired: Vec<AccountId> =
        every_shard(pool, "kxp_deliveries", EXPIRED_ACCOUNTS, &[now.to_string()]).await?;
    let mut reclaimed = 0;
    for account in expired {
        reclaimed += sqlx::query(&RECLAIM_ACCOUNT)
            .bind(now)
            .bind(&account)
            .execute(pool)
            .await?
            .rows_affected();
    }
    Ok(reclaimed)
}
