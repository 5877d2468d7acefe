//! The sequencer: each endpoint's deliveries numbered 1, 2, 3, … with no holes, in the order
//! their ingestion committed.
//!
//! A replayed delivery is never numbered: its replay carries the number of the (endpoint, event)
//! pair (store/deliveries.rs copies it), so every number stands for one event.
//!
//! A database sequence cannot do this: its numbers leave holes (a rolled-back ingestion) and
//! commit out of order (a reader can see 6 before 5 commits). So deliveries are stored without a
//! number and numbered **after** they commit, by one sequencer per endpoint at a time: a pass
//! numbers every committed, unnumbered delivery of the endpoints it holds, oldest first, from
//! the endpoint's `next_sequence`. A delivery committed after a pass read is numbered by a later
//! pass, after every number that pass gave: commit order.
//!
//! The next number of each endpoint is in its own table, `kxp_sequences`, never in
//! `kxp_endpoints`: ingestion reads the endpoint rows `FOR SHARE` while it queues deliveries, and
//! a sequencer locking those rows would make it wait (and skip them while it reads).
//!
//! On PostgreSQL, several processes run passes at once. A pass locks the rows of the endpoints
//! it will number, making those of endpoints numbered for the first time (`FOR UPDATE SKIP
//! LOCKED`: it never waits for another sequencer, and nothing else touches these rows), then
//! numbers in a **second statement**: in READ COMMITTED that statement's snapshot is taken
//! after the locks were granted, so it sees the numbers the previous holder committed. Numbering
//! in the locking statement itself would read deliveries from a snapshot older than the lock and
//! number some twice. On SQLite the pass is one `BEGIN IMMEDIATE` transaction: one writer.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use crate::model::{AccountId, EndpointKey};
use crate::store::backend::Backend;
use crate::store::shards::every_shard;
use crate::store::{Db, StoreError};
use sqlx::{Postgres, Sqlite};

/// The most deliveries a pass numbers per endpoint: the rest wait for the next pass, which comes
/// with the next claim.
pub(crate) const PER_ENDPOINT: i64 = 1000;

/// The endpoints with unnumbered deliveries (account, endpoint), for a pass over all of them.
const UNNUMBERED_POSTGRES: &str = "SELECT DISTINCT account_id, endpoint_id FROM kxp_deliveries \
       WHERE sequence IS NULL AND replayed_by IS NULL";

/// The sequencer rows of the endpoints `$1` (accounts) and `$2` (their endpoints), locked for
/// this pass: those it makes (endpoints numbered for the first time; this transaction holds a
/// row it inserts) and those no other sequencer holds (the rest are skipped). The insert's rows
/// are not in the locking read's snapshot, so none is listed twice.
const LOCK_POSTGRES: &str = "WITH k AS (SELECT * FROM UNNEST($1::text[], $2::text[]) AS k(a, id)), \
     made AS (INSERT INTO kxp_sequences (endpoint_id, account_id, next_sequence) \
       SELECT e.id, e.account_id, 1 FROM k JOIN kxp_endpoints e ON e.account_id = k.a AND e.id = k.id \
       WHERE NOT EXISTS (SELECT 1 FROM kxp_sequences s WHERE s.account_id = e.account_id AND s.endpoint_id = e.id) \
       ON CONFLICT DO NOTHING RETURNING account_id, endpoint_id), \
     held AS (SELECT s.account_id, s.endpoint_id FROM kxp_sequences s JOIN k ON s.account_id = k.a AND s.endpoint_id = k.id \
       ORDER BY s.endpoint_id, s.account_id FOR UPDATE OF s SKIP LOCKED) \
     SELECT account_id, endpoint_id FROM made UNION SELECT account_id, endpoint_id FROM held";

/// [`LOCK_POSTGRES`] of the endpoints `$2` of one account `$1` ([`Db::Citus`]), in two
/// statements, as Citus takes row locks only in a statement of one shard and runs an insert
/// from a query through the coordinator: the rows of endpoints numbered for the first time
/// are made first (waiting for another sequencer's insert of the same row to end, then
/// leaving it), then every row is locked or skipped, in a snapshot taken after both.
pub(super) const MAKE_ACCOUNT: &str = "INSERT INTO kxp_sequences (endpoint_id, account_id, next_sequence) \
     SELECT e.id, e.account_id, 1 FROM kxp_endpoints e WHERE e.account_id = $1 AND e.id = ANY($2::text[]) \
     ON CONFLICT DO NOTHING";
pub(super) const HOLD_ACCOUNT: &str = "SELECT s.account_id, s.endpoint_id FROM kxp_sequences s \
     WHERE s.account_id = $1 AND s.endpoint_id = ANY($2::text[]) ORDER BY s.endpoint_id FOR UPDATE SKIP LOCKED";

/// Numbers the oldest `$3` unnumbered deliveries of each endpoint of `$1` (accounts) and `$2`
/// (their endpoints; locked by [`LOCK_POSTGRES`]) and moves their `next_sequence` past them;
/// answers how many it numbered.
static NUMBER_POSTGRES: LazyLock<String> = LazyLock::new(|| number_sql(false));

/// [`NUMBER_POSTGRES`], or for the endpoints `$2` of the one account `$1` when `one_account`.
fn number_sql(one_account: bool) -> String {
    let (keys, account, numbered, moved) = if one_account {
        (
            "(SELECT $1::text AS a, id FROM UNNEST($2::text[]) AS k(id)) k",
            "$1",
            "d.account_id = $1 AND ",
            "p.account_id = $1 AND ",
        )
    } else {
        ("UNNEST($1::text[], $2::text[]) AS k(a, id)", "k.a", "", "")
    };
    format!(
        "WITH todo AS (SELECT d.id, d.account_id, d.endpoint_id, \
           ROW_NUMBER() OVER (PARTITION BY d.account_id, d.endpoint_id ORDER BY d.created_at, d.id) AS n \
           FROM {keys} JOIN kxp_deliveries d ON d.account_id = {account} AND d.endpoint_id = k.id \
           WHERE d.sequence IS NULL AND d.replayed_by IS NULL), \
         numbered AS (UPDATE kxp_deliveries d SET sequence = p.next_sequence + t.n - 1 \
           FROM todo t JOIN kxp_sequences p ON p.account_id = t.account_id AND p.endpoint_id = t.endpoint_id \
           WHERE {numbered}d.account_id = t.account_id AND d.id = t.id AND t.n <= $3 \
           RETURNING d.account_id, d.endpoint_id, d.sequence), \
         moved AS (UPDATE kxp_sequences p SET next_sequence = m.top + 1 \
           FROM (SELECT account_id, endpoint_id, MAX(sequence) AS top FROM numbered GROUP BY account_id, endpoint_id) m \
           WHERE {moved}p.account_id = m.account_id AND p.endpoint_id = m.endpoint_id \
           RETURNING p.endpoint_id) \
         SELECT COUNT(*) FROM numbered"
    )
}

/// [`NUMBER_POSTGRES`] on SQLite: `$1` a JSON array of endpoint ids or NULL for all; returns
/// the endpoints it numbered deliveries of, with their accounts, one row per delivery. An
/// endpoint id is unique across accounts (`kxp_endpoint_directory`'s key), so on one database
/// the deliveries are read and numbered by endpoint alone, in the order of the
/// `kxp_deliveries_unnumbered` index (partitioning by account too made SQLite read every
/// delivery through another index to sort them: 24 times the time).
pub(super) const NUMBER_SQLITE: &str = "UPDATE kxp_deliveries SET sequence = t.s FROM (SELECT d.id, d.account_id, \
       COALESCE(p.next_sequence, 1) + ROW_NUMBER() OVER (PARTITION BY d.endpoint_id ORDER BY d.created_at, d.id) - 1 AS s, \
       ROW_NUMBER() OVER (PARTITION BY d.endpoint_id ORDER BY d.created_at, d.id) AS n \
       FROM kxp_deliveries d LEFT JOIN kxp_sequences p ON p.account_id = d.account_id AND p.endpoint_id = d.endpoint_id \
       WHERE d.sequence IS NULL AND d.replayed_by IS NULL AND ($1 IS NULL OR d.endpoint_id IN (SELECT value FROM json_each($1)))) t \
     WHERE kxp_deliveries.account_id = t.account_id AND kxp_deliveries.id = t.id AND t.n <= $2 \
     RETURNING account_id, endpoint_id";

/// Moves `next_sequence` of the endpoints in `$1` (a JSON array of `[account, endpoint]`) past
/// their highest number, making their rows the first time. The highest number is read from
/// the `kxp_deliveries_sequence` index (by endpoint, unique across accounts, and numbered
/// deliveries only): naming the account made SQLite read all the account's deliveries instead.
pub(super) const MOVE_SQLITE: &str = "INSERT INTO kxp_sequences (endpoint_id, account_id, next_sequence) \
       SELECT k.id, k.a, (SELECT MAX(d.sequence) + 1 FROM kxp_deliveries d \
         WHERE d.endpoint_id = k.id AND d.sequence IS NOT NULL) \
       FROM (SELECT json_extract(value, '$[0]') AS a, json_extract(value, '$[1]') AS id FROM json_each($1)) AS k \
       WHERE true \
     ON CONFLICT (account_id, endpoint_id) DO UPDATE SET next_sequence = excluded.next_sequence";

impl Db {
    /// One sequencer pass over `endpoints` (every endpoint when `None`): numbers their committed,
    /// unnumbered deliveries, at most [`PER_ENDPOINT`] each; returns how many it numbered.
    pub(crate) async fn assign_sequences(
        &self,
        endpoints: Option<&[EndpointKey]>,
    ) -> Result<u64, StoreError> {
        match self {
            Db::Postgres(pool) => {
                let candidates: Vec<(String, String)> = match endpoints {
                    Some(keys) => keys
                        .iter()
                        .map(|k| (k.account_id.to_string(), k.id.to_string()))
                        .collect(),
                    // Endpoints just announced have new deliveries: no need to look.
                    None => sqlx::query_as(UNNUMBERED_POSTGRES).fetch_all(pool).await?,
                };
                let (accounts, ids): (Vec<String>, Vec<String>) = candidates.into_iter().unzip();
                pass(pool, Of::Each(&accounts), &ids).await
            }
            // One pass per account, each a transaction on that account's shard.
            Db::Citus(pool) => {
                let candidates: Vec<(AccountId, String)> = match endpoints {
                    Some(keys) => keys
                        .iter()
                        .map(|k| (k.account_id.clone(), k.id.to_string()))
                        .collect(),
                    // Shard by shard: a worker down leaves the other shards' numbered.
                    None => every_shard(
                        pool,
                        "kxp_deliveries",
                        "SELECT DISTINCT jsonb_build_array(account_id, endpoint_id) AS r FROM %%s \
                             WHERE sequence IS NULL AND replayed_by IS NULL",
                        &[],
                    )
                    .await?,
                };
                let mut by_account: BTreeMap<AccountId, Vec<String>> = BTreeMap::new();
                for (account, id) in candidates {
                    by_account.entry(account).or_default().push(id);
                }
                // An account whose shard fails is numbered on a later pass; the others' stand.
                let mut numbered = 0;
                let mut failed = None;
                for (account, ids) in by_account {
                    match pass(pool, Of::One(&account), &ids).await {
                        Ok(n) => numbered += n,
                        Err(e) => {
                            failed.get_or_insert(e);
                        }
                    }
                }
                match failed {
                    Some(e) if numbered == 0 => Err(e),
                    _ => Ok(numbered),
                }
            }
            Db::Sqlite(pool) => {
                let only = endpoints.map(|keys| {
                    let ids: Vec<&str> = keys.iter().map(|k| k.id.as_str()).collect();
                    serde_json::to_string(&ids).unwrap_or_else(|_| "[]".to_owned())
                });
                let mut tx = pool.begin_with(<Sqlite as Backend>::BEGIN).await?;
                let touched: Vec<(String, String)> = sqlx::query_as(NUMBER_SQLITE)
                    .bind(&only)
                    .bind(PER_ENDPOINT)
                    .fetch_all(&mut *tx)
                    .await?;
                if touched.is_empty() {
                    return Ok(0);
                }
                let mut endpoints = touched.clone();
                endpoints.sort_unstable();
                endpoints.dedup();
                let endpoints = serde_json::to_string(&endpoints).unwrap_or_else(|_| "[]".into());
                sqlx::query(MOVE_SQLITE)
                    .bind(endpoints)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(touched.len() as u64)
            }
        }
    }
}

/// [`NUMBER_POSTGRES`] of one account ([`Db::Citus`]).
pub(super) static NUMBER_ACCOUNT: LazyLock<String> = LazyLock::new(|| number_sql(true));

/// Whose endpoints a sequencer pass numbers.
enum Of<'a> {
    /// Each endpoint's account, in the endpoints' order ([`Db::Postgres`]).
    Each(&'a [String]),
    /// One account's ([`Db::Citus`]).
    One(&'a AccountId),
}

/// One sequencer pass on PostgreSQL, in its own transaction: locks the sequence rows of the
/// endpoints `ids` (of `accounts`), then numbers their deliveries. Answers how many it
/// numbered.
async fn pass(pool: &sqlx::PgPool, accounts: Of<'_>, ids: &[String]) -> Result<u64, StoreError> {
    if ids.is_empty() {
        return Ok(0);
    }
    let mut tx = pool.begin_with(<Postgres as Backend>::BEGIN).await?;
    let locked: Vec<(String, String)> = match accounts {
        Of::Each(accounts) => {
            sqlx::query_as(LOCK_POSTGRES)
                .bind(accounts)
                .bind(ids)
                .fetch_all(&mut *tx)
                .await?
        }
        Of::One(account) => {
            sqlx::query(MAKE_ACCOUNT)
                .bind(account)
                .bind(ids)
                .execute(&mut *tx)
                .await?;
            sqlx::query_as(HOLD_ACCOUNT)
                .bind(account)
                .bind(ids)
                .fetch_all(&mut *tx)
                .await?
        }
    };
    if locked.is_empty() {
        return Ok(0);
    }
    let (locked_accounts, locked_ids): (Vec<String>, Vec<String>) = locked.into_iter().unzip();
    let number = match accounts {
        Of::Each(_) => sqlx::query_scalar(&NUMBER_POSTGRES).bind(&locked_accounts),
        Of::One(account) => sqlx::query_scalar(&NUMBER_ACCOUNT).bind(account),
    };
    let numbered: i64 = number
        .bind(&locked_ids)
        .bind(PER_ENDPOINT)
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(u64::try_from(numbered).unwrap_or(0))
}
