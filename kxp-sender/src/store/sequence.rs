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

use crate::model::EndpointKey;
use crate::store::backend::Backend;
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

/// Numbers the oldest `$3` unnumbered deliveries of each endpoint of `$1` (accounts) and `$2`
/// (their endpoints; locked by [`LOCK_POSTGRES`]) and moves their `next_sequence` past them;
/// answers how many it numbered.
const NUMBER_POSTGRES: &str = "WITH todo AS (SELECT d.id, d.account_id, d.endpoint_id, \
       ROW_NUMBER() OVER (PARTITION BY d.account_id, d.endpoint_id ORDER BY d.created_at, d.id) AS n \
       FROM UNNEST($1::text[], $2::text[]) AS k(a, id) JOIN kxp_deliveries d ON d.account_id = k.a AND d.endpoint_id = k.id \
       WHERE d.sequence IS NULL AND d.replayed_by IS NULL), \
     numbered AS (UPDATE kxp_deliveries d SET sequence = p.next_sequence + t.n - 1 \
       FROM todo t JOIN kxp_sequences p ON p.account_id = t.account_id AND p.endpoint_id = t.endpoint_id \
       WHERE d.account_id = t.account_id AND d.id = t.id AND t.n <= $3 RETURNING d.account_id, d.endpoint_id, d.sequence), \
     moved AS (UPDATE kxp_sequences p SET next_sequence = m.top + 1 \
       FROM (SELECT account_id, endpoint_id, MAX(sequence) AS top FROM numbered GROUP BY account_id, endpoint_id) m \
       WHERE p.account_id = m.account_id AND p.endpoint_id = m.endpoint_id RETURNING p.endpoint_id) \
     SELECT COUNT(*) FROM numbered";

/// [`NUMBER_POSTGRES`] on SQLite: `$1` a JSON array of endpoint ids or NULL for all (an
/// endpoint id is unique across accounts, `kxp_endpoint_directory`'s key: on one database the
/// account adds nothing to the filter); returns the endpoints it numbered deliveries of, with
/// their accounts, one row per delivery.
const NUMBER_SQLITE: &str = "UPDATE kxp_deliveries SET sequence = t.s FROM (SELECT d.id, d.account_id, \
       COALESCE(p.next_sequence, 1) + ROW_NUMBER() OVER (PARTITION BY d.account_id, d.endpoint_id ORDER BY d.created_at, d.id) - 1 AS s, \
       ROW_NUMBER() OVER (PARTITION BY d.account_id, d.endpoint_id ORDER BY d.created_at, d.id) AS n \
       FROM kxp_deliveries d LEFT JOIN kxp_sequences p ON p.account_id = d.account_id AND p.endpoint_id = d.endpoint_id \
       WHERE d.sequence IS NULL AND d.replayed_by IS NULL AND ($1 IS NULL OR d.endpoint_id IN (SELECT value FROM json_each($1)))) t \
     WHERE kxp_deliveries.account_id = t.account_id AND kxp_deliveries.id = t.id AND t.n <= $2 \
     RETURNING account_id, endpoint_id";

/// Moves `next_sequence` of the endpoints in `$1` (a JSON array of `[account, endpoint]`) past
/// their highest number, making their rows the first time.
const MOVE_SQLITE: &str = "INSERT INTO kxp_sequences (endpoint_id, account_id, next_sequence) \
       SELECT k.id, k.a, (SELECT MAX(d.sequence) + 1 FROM kxp_deliveries d \
         WHERE d.account_id = k.a AND d.endpoint_id = k.id) \
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
                let mut tx = pool.begin_with(<Postgres as Backend>::BEGIN).await?;
                // Endpoints just announced have new deliveries: no need to look.
                let candidates: Vec<(String, String)> = match endpoints {
                    Some(keys) => keys
                        .iter()
                        .map(|k| (k.account_id.to_string(), k.id.to_string()))
                        .collect(),
                    None => {
                        sqlx::query_as(UNNUMBERED_POSTGRES)
                            .fetch_all(&mut *tx)
                            .await?
                    }
                };
                if candidates.is_empty() {
                    return Ok(0);
                }
                let (accounts, ids): (Vec<String>, Vec<String>) = candidates.into_iter().unzip();
                let locked: Vec<(String, String)> = sqlx::query_as(LOCK_POSTGRES)
                    .bind(&accounts)
                    .bind(&ids)
                    .fetch_all(&mut *tx)
                    .await?;
                if locked.is_empty() {
                    return Ok(0);
                }
                let (accounts, ids): (Vec<String>, Vec<String>) = locked.into_iter().unzip();
                let numbered: i64 = sqlx::query_scalar(NUMBER_POSTGRES)
                    .bind(&accounts)
                    .bind(&ids)
                    .bind(PER_ENDPOINT)
                    .fetch_one(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(u64::try_from(numbered).unwrap_or(0))
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
