//! What makes an event's payload gone, wherever the sender stores it: erasure by tag
//! (`kxp_erasures`) and the expiry of a payload's own retention. Both go the same way, a batch
//! of events at a time, each batch one transaction:
//!
//! - the deliveries not delivered yet (pending, held, leased, unread, or dead and never
//!   replayed) end `erased` or `expired`, so no attempt starts and no replay is possible
//!   (a leased attempt may still reach its receiver; its outcome is not recorded, so no
//!   response snippet of it is kept);
//! - the response snippets of every attempt of the events' deliveries are cleared (a receiver
//!   may echo what it was sent);
//! - the events keep their ids, types, times and ordering keys, and lose their payload (`''`),
//!   with the reason in `payload_gone`;
//! - for an erasure, the erased tag is removed from them (their other tags stay), and the
//!   erasure counts them.
//!
//! A batch is at most [`BATCH`] events, so an erasure of a tag on 100,000 events never holds
//! the locks ingestion needs for long. What runs the batches is the engine's erasure loop and
//! retention.

use sqlx::FromRow;

use crate::model::{AccountId, Actor, ErasureId, Gone, new_id, now_ms};
use crate::store::shards::every_shard;
use crate::store::{Db, StoreError, on_db};

/// Events per batch.
pub(crate) const BATCH: u64 = 500;

/// A stored erasure.
#[derive(Debug, Clone, FromRow, serde::Deserialize)]
pub(crate) struct ErasureRow {
    /// `er_…`
    pub id: ErasureId,
    /// The account it erases in.
    pub account_id: AccountId,
    /// The tag.
    pub tag: String,
    /// `running` or `done`.
    pub status: String,
    /// The events erased so far.
    pub events: i64,
    /// Who asked: `account` or `operator`.
    pub actor_kind: String,
    /// Their id.
    pub actor_id: String,
    /// Their name then.
    pub actor_name: String,
    /// `api` or `console`.
    pub via: String,
    /// When it was accepted (Unix ms): events accepted up to then are erased.
    pub created_at: i64,
    /// When it finished.
    pub finished_at: Option<i64>,
}

const COLUMNS: &str = "id, account_id, tag, status, events, actor_kind, actor_id, actor_name, via, created_at, finished_at";

/// The deliveries that end when their event's payload goes: every one not delivered yet, but a
/// pull endpoint's `unread` ones: those stay in its reader's way (the feed serves the marker in
/// their place) until the cursor passes them, so retention never takes a number from under a
/// reader that has not read it.
const UNFINISHED: &str =
    "(status IN ('pending', 'delivering') OR (status = 'dead' AND replayed_by IS NULL))";

/// How long after an erasure was accepted it stays `running` at the least: an ingestion that
/// stamped an event before the erasure but committed after it (PostgreSQL) is still erased by
/// a later batch, and its deliveries are refused meanwhile.
pub(crate) const SETTLE_MS: i64 = 5_000;

/// The event ids of a batch, `$2` (a JSON array), as each database reads one.
pub(super) fn batch_ids(db: &Db) -> &'static str {
    match db {
        Db::Sqlite(_) => "(SELECT value FROM json_each($2))",
        Db::Postgres(_) | Db::Citus(_) => "(SELECT jsonb_array_elements_text($2::jsonb))",
    }
}

/// The statements that make the payloads of a batch's events gone (`$1` the account, `$2` the
/// events): the deliveries not delivered end (`$3` their status, `$4` now), a half-open circuit
/// whose probe is one of them opens again (`$3` now, the probe's time: another pending delivery
/// is released as the probe, or the circuit would wait on a probe that never comes), the
/// snippets go, and the payloads (`$3` the reason, `$4` the erasure, if one).
struct GoneStatements {
    deliveries: String,
    probes: String,
    snippets: String,
    events: String,
}

impl GoneStatements {
    fn of(db: &Db) -> GoneStatements {
        let ids = batch_ids(db);
        GoneStatements {
            probes: format!(
                "UPDATE kxp_endpoints SET circuit_state = 'open', circuit_probe_id = NULL, circuit_probe_at = $3 \
                 WHERE account_id = $1 AND circuit_state = 'half_open' AND circuit_probe_id IN \
                 (SELECT id FROM kxp_deliveries WHERE account_id = $1 AND event_id IN {ids})"
            ),
            deliveries: format!(
                "UPDATE kxp_deliveries SET status = $3, lease_until = NULL, lease_owner = NULL, updated_at = $4 \
                 WHERE account_id = $1 AND event_id IN {ids} AND {UNFINISHED}"
            ),
            snippets: format!(
                "UPDATE kxp_attempts SET response_snippet = NULL WHERE account_id = $1 AND response_snippet IS NOT NULL \
                 AND delivery_id IN (SELECT id FROM kxp_deliveries WHERE account_id = $1 AND event_id IN {ids})"
            ),
            // An erasure erases a payload that expired too, and names itself on it.
            events: format!(
                "UPDATE kxp_events SET payload = '', payload_gone = $3, erasure_id = $4 \
                 WHERE account_id = $1 AND id IN {ids} AND (payload_gone IS NULL OR (CAST($4 AS TEXT) IS NOT NULL AND erasure_id IS NULL))"
            ),
        }
    }
}

/// What a batch took.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Taken {
    /// The events whose payload it erased.
    pub events: u64,
    /// Whether it finished its erasure: it found no event left, [`SETTLE_MS`] after the
    /// erasure was accepted.
    pub done: bool,
}

/// Which events a batch is.
enum Batch<'a> {
    /// Those of the account that carry the erasure's tag, accepted before it; taking the tag
    /// off them is what claims them for this batch.
    Erasure(&'a ErasureRow),
    /// These, whose payload's retention passed.
    Expired(Vec<String>),
}

impl Db {
    /// Records an erasure of `tag` in `account_id`'s events, asked by `actor` `via` the API or
    /// the console, running from now.
    pub(crate) async fn create_erasure(
        &self,
        account_id: &AccountId,
        tag: &str,
        actor: &Actor,
        via: &str,
    ) -> Result<ErasureRow, StoreError> {
        let row = ErasureRow {
            id: ErasureId::from(new_id("er")),
            account_id: account_id.clone(),
            tag: tag.to_owned(),
            status: "running".to_owned(),
            events: 0,
            actor_kind: actor.kind().to_owned(),
            actor_id: actor.id().to_owned(),
            actor_name: actor.name().to_owned(),
            via: via.to_owned(),
            created_at: now_ms(),
            finished_at: None,
        };
        on_db!(self, |pool| {
            sqlx::query(&format!(
                "INSERT INTO kxp_erasures ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
            ))
            .bind(&row.id)
            .bind(&row.account_id)
            .bind(&row.tag)
            .bind(&row.status)
            .bind(row.events)
            .bind(&row.actor_kind)
            .bind(&row.actor_id)
            .bind(&row.actor_name)
            .bind(&row.via)
            .bind(row.created_at)
            .bind(row.finished_at)
            .execute(pool)
            .await?;
        });
        Ok(row)
    }

    /// One of the account's erasures.
    pub(crate) async fn erasure(
        &self,
        account_id: &AccountId,
        id: &ErasureId,
    ) -> Result<ErasureRow, StoreError> {
        on_db!(self, |pool| {
            sqlx::query_as::<_, ErasureRow>(&format!(
                "SELECT {COLUMNS} FROM kxp_erasures WHERE account_id = $1 AND id = $2"
            ))
            .bind(account_id)
            .bind(id)
            .fetch_optional(pool)
            .await?
        })
        .ok_or(StoreError::NotFound)
    }

    /// The account's erasures, newest first, at most `limit`.
    pub(crate) async fn erasures(
        &self,
        account_id: &AccountId,
        limit: i64,
    ) -> Result<Vec<ErasureRow>, StoreError> {
        Ok(on_db!(self, |pool| {
            sqlx::query_as::<_, ErasureRow>(&format!(
                "SELECT {COLUMNS} FROM kxp_erasures WHERE account_id = $1 ORDER BY id DESC LIMIT $2"
            ))
            .bind(account_id)
            .bind(limit)
            .fetch_all(pool)
            .await?
        }))
    }

    /// Every account's running erasures, oldest first (on Citus, read shard by shard).
    pub(crate) async fn running_erasures(&self) -> Result<Vec<ErasureRow>, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM kxp_erasures WHERE status = 'running'");
        let mut rows = match self {
            Db::Citus(pool) => {
                every_shard::<ErasureRow>(
                    pool,
                    "kxp_erasures",
                    "SELECT to_jsonb(x) AS r FROM %%s x WHERE x.status = 'running'",
                    &[],
                )
                .await?
            }
            _ => on_db!(self, |pool| {
                sqlx::query_as::<_, ErasureRow>(&sql)
                    .fetch_all(pool)
                    .await?
            }),
        };
        rows.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(rows)
    }

    /// Erases the next batch of the erasure's events: what it took, or `None` when
    /// another process is running a batch of it right now (or it is done): leave it to that
    /// one. Fewer than [`BATCH`]: it has no event left for now; once [`SETTLE_MS`] have passed
    /// since it was accepted, that batch also marks it done, in the same transaction.
    pub(crate) async fn erase_batch(
        &self,
        erasure: &ErasureRow,
    ) -> Result<Option<Taken>, StoreError> {
        self.gone_batch(&erasure.account_id, Batch::Erasure(erasure))
            .await
    }

    /// Makes the payloads whose retention passed by `now` gone, in batches; of one account
    /// only when `account` names it (Citus: on its shard). Answers how many.
    pub(crate) async fn expire_payloads(
        &self,
        now: i64,
        account: Option<&AccountId>,
    ) -> Result<u64, StoreError> {
        let one = if account.is_some() {
            " AND account_id = $3"
        } else {
            ""
        };
        let sql = format!(
            "SELECT account_id, id FROM kxp_events WHERE payload_expires_at <= $1 AND payload_gone IS NULL{one} \
             ORDER BY payload_expires_at LIMIT $2"
        );
        let mut total = 0;
        loop {
            let due: Vec<(AccountId, String)> = on_db!(self, |pool| {
                let mut query = sqlx::query_as(&sql).bind(now).bind(BATCH as i64);
                if let Some(account) = account {
                    query = query.bind(account);
                }
                query.fetch_all(pool).await?
            });
            let mut by_account: std::collections::BTreeMap<AccountId, Vec<String>> =
                std::collections::BTreeMap::new();
            let found = due.len();
            for (account_id, id) in due {
                by_account.entry(account_id).or_default().push(id);
            }
            for (account_id, ids) in by_account {
                total += self
                    .gone_batch(&account_id, Batch::Expired(ids))
                    .await?
                    .map_or(0, |taken| taken.events);
            }
            if found < BATCH as usize {
                if total > 0 {
                    self.checkpoint_erased().await?;
                }
                return Ok(total);
            }
        }
    }

    /// One batch, in one transaction: answers how many events it took, or `None` for an
    /// erasure another process holds (or that is done). On SQLite the transaction runs with
    /// `secure_delete` on, so the bytes its updates free are zeroed in the file rather than
    /// left in its free space (the WAL's old pages go at the next truncating checkpoint,
    /// which an erasure's last batch and each expiry pass run).
    async fn gone_batch(
        &self,
        account_id: &AccountId,
        batch: Batch<'_>,
    ) -> Result<Option<Taken>, StoreError> {
        let statements = GoneStatements::of(self);
        let sqlite = matches!(self, Db::Sqlite(_));
        // One batch of an erasure at a time, whichever process runs it: the others skip it.
        let lock = if sqlite {
            ""
        } else {
            " FOR UPDATE SKIP LOCKED"
        };
        let now = now_ms();
        let (gone, erasure) = match &batch {
            Batch::Erasure(erasure) => (Gone::Erased, Some(*erasure)),
            Batch::Expired(_) => (Gone::Expired, None),
        };
        Ok(on_db!(self, |pool, DB| {
            let mut conn = pool.acquire().await?;
            if sqlite {
                sqlx::query("PRAGMA secure_delete = ON")
                    .execute(&mut *conn)
                    .await?;
            }
            let outcome: Result<Option<Taken>, StoreError> = async {
                let mut tx = sqlx::Connection::begin_with(&mut *conn, DB::BEGIN).await?;
                if let Some(erasure) = erasure {
                    let held: Option<i64> = sqlx::query_scalar(&format!(
                        "SELECT events FROM kxp_erasures WHERE account_id = $1 AND id = $2 AND status = 'running'{lock}"
                    ))
                    .bind(account_id)
                    .bind(&erasure.id)
                    .fetch_optional(&mut *tx)
                    .await?;
                    if held.is_none() {
                        return Ok(None);
                    }
                }
                let ids: Vec<String> = match &batch {
                    Batch::Erasure(erasure) => {
                        sqlx::query_scalar(
                            "DELETE FROM kxp_event_tags WHERE account_id = $1 AND tag = $2 AND event_id IN \
                             (SELECT event_id FROM kxp_event_tags WHERE account_id = $1 AND tag = $2 AND created_at <= $3 LIMIT $4) \
                             RETURNING event_id",
                        )
                        .bind(account_id)
                        .bind(&erasure.tag)
                        .bind(erasure.created_at)
                        .bind(BATCH as i64)
                        .fetch_all(&mut *tx)
                        .await?
                    }
                    Batch::Expired(ids) => ids.clone(),
                };
                let taken = ids.len() as u64;
                if taken > 0 {
                    let ids = serde_json::to_string(&ids)
                        .map_err(|e| StoreError::Database(sqlx::Error::Encode(Box::new(e))))?;
                    // Deliveries before endpoints, the order the recorder locks them in, so
                    // that the two never wait on each other's rows in a cycle.
                    sqlx::query(&statements.deliveries)
                        .bind(account_id)
                        .bind(&ids)
                        .bind(gone.as_str())
                        .bind(now)
                        .execute(&mut *tx)
                        .await?;
                    sqlx::query(&statements.probes)
                        .bind(account_id)
                        .bind(&ids)
                        .bind(now)
                        .execute(&mut *tx)
                        .await?;
                    sqlx::query(&statements.snippets)
                        .bind(account_id)
                        .bind(&ids)
                        .execute(&mut *tx)
                        .await?;
                    sqlx::query(&statements.events)
                        .bind(account_id)
                        .bind(&ids)
                        .bind(gone.as_str())
                        .bind(erasure.map(|e| &e.id))
                        .execute(&mut *tx)
                        .await?;
                }
                let mut done = false;
                if let Some(erasure) = erasure {
                    let settled = taken < BATCH && now >= erasure.created_at + SETTLE_MS;
                    done = settled;
                    sqlx::query(
                        "UPDATE kxp_erasures SET events = events + $3, \
                         status = CASE WHEN $4 THEN 'done' ELSE status END, \
                         finished_at = CASE WHEN $4 THEN $5 ELSE finished_at END \
                         WHERE account_id = $1 AND id = $2",
                    )
                    .bind(account_id)
                    .bind(&erasure.id)
                    .bind(i64::try_from(taken).unwrap_or(i64::MAX))
                    .bind(settled)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                }
                tx.commit().await?;
                Ok(Some(Taken {
                    events: taken,
                    done,
                }))
            }
            .await;
            if sqlite {
                // Back to the default before the connection serves the pool again.
                sqlx::query("PRAGMA secure_delete = OFF")
                    .execute(&mut *conn)
                    .await?;
            }
            outcome?
        }))
    }

    /// Moves SQLite's WAL into the database file and empties it, so the old copies of the
    /// pages an erasure or an expiry rewrote are gone from the files a backup copies. Nothing
    /// to do on PostgreSQL (its old row versions go when vacuum reuses their space).
    pub(crate) async fn checkpoint_erased(&self) -> Result<(), StoreError> {
        if let Db::Sqlite(pool) = self {
            sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
                .execute(pool)
                .await?;
        }
        Ok(())
    }
}
