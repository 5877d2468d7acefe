//! In-transaction mode: the "processed" mark and the caller's side effect commit together.

use std::fmt;

use sqlx::Transaction;
#[cfg(feature = "postgres")]
use sqlx::{PgConnection, Postgres};
#[cfg(feature = "sqlite")]
use sqlx::{Sqlite, SqliteConnection};

use crate::StoreError;
use crate::record::Claim;
#[cfg(feature = "sqlite")]
use crate::store::SQLITE_STATE;
use crate::store::Store;
#[cfg(feature = "postgres")]
use crate::store::{PG_STATE, Pool};
use crate::util::retry_after_from_millis;

/// A database transaction on the store's database, from [`Store::begin`](crate::Store::begin).
///
/// Dropping it without [`commit`](Tx::commit) rolls back the mark and everything the caller did
/// on it, which is what makes a failed handler retryable.
pub struct Tx {
    inner: Inner,
}

enum Inner {
    #[cfg(feature = "sqlite")]
    Sqlite(Transaction<'static, Sqlite>),
    #[cfg(feature = "postgres")]
    Postgres(Transaction<'static, Postgres>),
}

#[cfg(feature = "sqlite")]
// The mark takes over a failed row or one whose lease ran out, like a claim, but goes straight
// to 'done': inside the transaction, "processed" and "the effect happened" are the same fact.
const SQLITE_MARK: &str = "
INSERT INTO kxp_processed_events
    (event_id, status, attempts, locked_until, first_seen_at, updated_at)
SELECT ?1, 'done', 1, NULL, now.ms, now.ms
FROM (SELECT CAST(unixepoch('subsec') * 1000 AS INTEGER) AS ms) AS now
WHERE true
ON CONFLICT (event_id) DO UPDATE SET
    status = 'done',
    attempts = kxp_processed_events.attempts + 1,
    locked_until = NULL,
    updated_at = excluded.updated_at
WHERE kxp_processed_events.status = 'failed'
   OR (kxp_processed_events.status = 'processing'
       AND kxp_processed_events.locked_until < excluded.updated_at)
RETURNING attempts";

#[cfg(feature = "postgres")]
const PG_MARK: &str = "
INSERT INTO kxp_processed_events
    (event_id, status, attempts, locked_until, first_seen_at, updated_at)
VALUES ($1, 'done', 1, NULL, now(), now())
ON CONFLICT (event_id) DO UPDATE SET
    status = 'done',
    attempts = kxp_processed_events.attempts + 1,
    locked_until = NULL,
    updated_at = excluded.updated_at
WHERE kxp_processed_events.status = 'failed'
   OR (kxp_processed_events.status = 'processing'
       AND kxp_processed_events.locked_until < excluded.updated_at)
RETURNING attempts";

#[cfg(feature = "postgres")]
/// The test that turns the mark's answer into the success or failure of the statement: the mark
/// runs in the implicit transaction of a simple query, and `BEGIN` comes after it (see
/// [`begin_marked`]). `1` when a row was written; otherwise the cast fails with
/// [`PG_NOT_MARKED_CODE`], which rolls the mark back and skips the `BEGIN`.
///
/// The text to cast depends on `marked.n`: a constant `'…'::int` would be folded, and so fail,
/// when the statement is planned, whatever the row count.
const PG_MARK_THEN_BEGIN_TAIL: &str = ")
SELECT CASE WHEN marked.n = 1 THEN 1
            ELSE ('kxp-dedup: not marked, a duplicate delivery (' || marked.n || ' rows)')::int
       END
FROM (SELECT count(*) AS n FROM mark) AS marked;
BEGIN";

#[cfg(feature = "postgres")]
/// `invalid_text_representation`: what the failed cast of [`PG_MARK_THEN_BEGIN_TAIL`] reports,
/// together with [`PG_NOT_MARKED_TAG`] in its message (quoted there, so it survives a translated
/// `lc_messages`). No other cast in that statement could fail with it.
const PG_NOT_MARKED_CODE: &str = "22P02";

#[cfg(feature = "postgres")]
const PG_NOT_MARKED_TAG: &str = "kxp-dedup: not marked";

/// What [`begin_marked`] found: a transaction holding the mark, or why there is none.
pub(crate) enum Begun {
    /// The mark is written in this open transaction: run the handler.
    Marked(Tx),
    /// Not marked ([`Claim::AlreadyDone`] or [`Claim::InProgress`]), and no transaction left
    /// open.
    NotMarked(Claim),
}

/// [`Store::begin`] + [`Tx::mark_processed`], and on `false` the reason, for
/// [`process_in_transaction`](crate::process_in_transaction).
///
/// On PostgreSQL, in one round trip instead of two: `BEGIN` and the mark travel as one simple
/// query (`WITH mark AS (INSERT …) SELECT …; BEGIN`), the statement sqlx's `begin_with` sends.
/// sqlx 0.8 cannot pipeline, and `begin_with` discards the results of its statement, so the
/// mark's answer comes back as the query's success or failure:
///
/// - marked: the statement succeeds, then `BEGIN` turns the implicit transaction the mark ran in
///   into an ordinary one (PostgreSQL includes statements before a `BEGIN` of the same simple
///   query in its transaction), and sqlx holds a [`Transaction`] of depth 1 as after `begin`:
///   commit, rollback and drop work as always;
/// - not marked: the statement fails on purpose ([`PG_MARK_THEN_BEGIN_TAIL`]) before `BEGIN`, so
///   the implicit transaction rolls back, the connection goes back to the pool idle, and the
///   row's state is then read on the pool. A duplicate shows in the server's log as one `ERROR`
///   line (`invalid input syntax for type integer: "kxp-dedup: not marked, …"`) with the
///   statement, under `log_min_error_statement`'s default.
///
/// A simple query has no parameters, so the event id goes in as a literal
/// ([`pg_literal`]); ids that cannot be one (non-ASCII, NUL) take the two round trips of
/// [`Store::begin`] and [`Tx::mark_processed`] with a bound parameter, as SQLite always does
/// (there a "round trip" is a function call).
pub(crate) async fn begin_marked(store: &Store, event_id: &str) -> Result<Begun, StoreError> {
    #[cfg(feature = "postgres")]
    if let (Pool::Postgres(pool), Some(literal)) = (&store.pool, pg_literal(event_id)) {
        return pg_begin_marked(pool, event_id, &literal).await;
    }
    let mut tx = store.begin().await?;
    if tx.mark_processed(event_id).await? {
        return Ok(Begun::Marked(tx));
    }
    let claim = tx.why_not_marked(event_id).await?;
    // Nothing was written: a failed rollback loses nothing (dropping rolls back too).
    let _ = tx.rollback().await;
    Ok(Begun::NotMarked(claim))
}

#[cfg(feature = "postgres")]
async fn pg_begin_marked(
    pool: &sqlx::PgPool,
    event_id: &str,
    literal: &str,
) -> Result<Begun, StoreError> {
    // `PG_MARK` has one `$1`; only the template is searched, never the literal put in its place.
    let statement = format!(
        "WITH mark AS ({}{PG_MARK_THEN_BEGIN_TAIL}",
        PG_MARK.replacen("$1", literal, 1)
    );
    // The row read after a refused mark may have changed since (failed, expired or purged in
    // between): then the mark is tried again, as `Store::claim` does.
    for _ in 0..3 {
        let error = match pool.begin_with(statement.clone()).await {
            Ok(tx) => return Ok(Begun::Marked(Tx::postgres_tx(tx))),
            Err(error) => error,
        };
        let not_marked = matches!(&error, sqlx::Error::Database(db)
            if db.code().as_deref() == Some(PG_NOT_MARKED_CODE)
                && db.message().contains(PG_NOT_MARKED_TAG));
        if !not_marked {
            return Err(error.into());
        }
        let state: Option<(String, i64)> = sqlx::query_as(PG_STATE)
            .bind(event_id)
            .fetch_optional(pool)
            .await?;
        match state {
            Some((status, _)) if status == "done" => {
                return Ok(Begun::NotMarked(Claim::AlreadyDone));
            }
            Some((status, left_ms)) if status == "processing" && left_ms > 0 => {
                return Ok(Begun::NotMarked(Claim::InProgress {
                    retry_after: retry_after_from_millis(left_ms),
                }));
            }
            _ => continue,
        }
    }
    // Three races lost in a row: somebody else is busy with this id right now.
    Ok(Begun::NotMarked(Claim::InProgress {
        retry_after: std::time::Duration::from_secs(1),
    }))
}

#[cfg(feature = "postgres")]
/// `event_id` as a PostgreSQL string literal, for a simple query; `None` when it must stay a
/// bound parameter.
///
/// `E'…'` with every `\` and `'` doubled: in an escape string constant a backslash always
/// escapes and `''` is a quote, whatever `standard_conforming_strings` and `backslash_quote`
/// say, so nothing in the id can end the literal. Only ASCII ids: a client encoding other than
/// UTF-8 (a pool of the application's, set up with `-c client_encoding=SJIS`, say) could read a
/// non-ASCII byte and the `\` after it as one character, and the `\` left over would escape
/// the closing quote; ASCII bytes read the same in every encoding PostgreSQL accepts from a
/// client. NUL cannot be in a PostgreSQL string at all (a bound parameter fails on it too).
pub(crate) fn pg_literal(event_id: &str) -> Option<String> {
    if !event_id.bytes().all(|b| b.is_ascii() && b != 0) {
        return None;
    }
    let mut literal = String::with_capacity(event_id.len() + 8);
    literal.push_str("E'");
    for c in event_id.chars() {
        match c {
            '\'' => literal.push_str("''"),
            '\\' => literal.push_str("\\\\"),
            c => literal.push(c),
        }
    }
    literal.push('\'');
    Some(literal)
}

impl Tx {
    #[cfg(feature = "sqlite")]
    pub(crate) fn sqlite_tx(tx: Transaction<'static, Sqlite>) -> Tx {
        Tx {
            inner: Inner::Sqlite(tx),
        }
    }

    #[cfg(feature = "postgres")]
    pub(crate) fn postgres_tx(tx: Transaction<'static, Postgres>) -> Tx {
        Tx {
            inner: Inner::Postgres(tx),
        }
    }

    /// Records `event_id` as processed, inside this transaction. `true`: first time, go ahead
    /// with the side effect; `false`: a duplicate, roll back and answer 200.
    ///
    /// On PostgreSQL a concurrent transaction marking the same id waits on the primary key
    /// until this one ends: after a commit it sees the row and gets `false`; after a rollback
    /// its own insert goes through. On SQLite the transaction already holds the write lock
    /// (`BEGIN IMMEDIATE`), so the others wait before they start.
    pub async fn mark_processed(&mut self, event_id: &str) -> Result<bool, StoreError> {
        let attempts: Option<i64> = match &mut self.inner {
            #[cfg(feature = "sqlite")]
            Inner::Sqlite(tx) => {
                sqlx::query_scalar(SQLITE_MARK)
                    .bind(event_id)
                    .fetch_optional(&mut **tx)
                    .await?
            }
            #[cfg(feature = "postgres")]
            Inner::Postgres(tx) => sqlx::query_scalar::<_, i32>(PG_MARK)
                .bind(event_id)
                .fetch_optional(&mut **tx)
                .await?
                .map(i64::from),
        };
        Ok(attempts.is_some())
    }

    /// After a `false` from [`mark_processed`](Tx::mark_processed): done, or held by a live
    /// claim of claim/complete mode (only when both modes are used for one id).
    pub(crate) async fn why_not_marked(&mut self, event_id: &str) -> Result<Claim, StoreError> {
        let state: Option<(String, i64)> = match &mut self.inner {
            #[cfg(feature = "sqlite")]
            Inner::Sqlite(tx) => {
                sqlx::query_as(SQLITE_STATE)
                    .bind(event_id)
                    .fetch_optional(&mut **tx)
                    .await?
            }
            #[cfg(feature = "postgres")]
            Inner::Postgres(tx) => {
                sqlx::query_as(PG_STATE)
                    .bind(event_id)
                    .fetch_optional(&mut **tx)
                    .await?
            }
        };
        Ok(match state {
            Some((status, left_ms)) if status == "processing" => Claim::InProgress {
                retry_after: retry_after_from_millis(left_ms),
            },
            _ => Claim::AlreadyDone,
        })
    }

    #[cfg(feature = "sqlite")]
    /// The connection of a SQLite transaction, for the caller's own statements; `None` on
    /// PostgreSQL.
    pub fn sqlite(&mut self) -> Option<&mut SqliteConnection> {
        match &mut self.inner {
            #[cfg(feature = "sqlite")]
            Inner::Sqlite(tx) => Some(&mut **tx),
            #[cfg(feature = "postgres")]
            Inner::Postgres(_) => None,
        }
    }

    #[cfg(feature = "postgres")]
    /// The connection of a PostgreSQL transaction, for the caller's own statements; `None` on
    /// SQLite.
    pub fn postgres(&mut self) -> Option<&mut PgConnection> {
        match &mut self.inner {
            #[cfg(feature = "sqlite")]
            Inner::Sqlite(_) => None,
            #[cfg(feature = "postgres")]
            Inner::Postgres(tx) => Some(&mut **tx),
        }
    }

    /// Commits the mark and the caller's statements together.
    pub async fn commit(self) -> Result<(), StoreError> {
        match self.inner {
            #[cfg(feature = "sqlite")]
            Inner::Sqlite(tx) => tx.commit().await?,
            #[cfg(feature = "postgres")]
            Inner::Postgres(tx) => tx.commit().await?,
        }
        Ok(())
    }

    /// Rolls back the mark and the caller's statements. Dropping the `Tx` does the same without
    /// waiting for the database's answer.
    pub async fn rollback(self) -> Result<(), StoreError> {
        match self.inner {
            #[cfg(feature = "sqlite")]
            Inner::Sqlite(tx) => tx.rollback().await?,
            #[cfg(feature = "postgres")]
            Inner::Postgres(tx) => tx.rollback().await?,
        }
        Ok(())
    }
}

impl fmt::Debug for Tx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let backend = match self.inner {
            #[cfg(feature = "sqlite")]
            Inner::Sqlite(_) => "sqlite",
            #[cfg(feature = "postgres")]
            Inner::Postgres(_) => "postgres",
        };
        f.debug_struct("Tx")
            .field("backend", &backend)
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, feature = "postgres"))]
mod tests {
    use super::pg_literal;

    #[test]
    fn pg_literal_doubles_quotes_and_backslashes() {
        assert_eq!(pg_literal("evt_1").as_deref(), Some("E'evt_1'"));
        assert_eq!(pg_literal("").as_deref(), Some("E''"));
        assert_eq!(pg_literal("a'b").as_deref(), Some("E'a''b'"));
        assert_eq!(pg_literal(r"a\b").as_deref(), Some(r"E'a\\b'"));
        assert_eq!(pg_literal(r"\'").as_deref(), Some(r"E'\\'''"));
        assert_eq!(pg_literal("$$ $1").as_deref(), Some("E'$$ $1'"));
    }

    #[test]
    fn pg_literal_refuses_what_must_stay_a_parameter() {
        assert_eq!(pg_literal("evt_é"), None);
        assert_eq!(pg_literal("evt_\0"), None);
    }
}
