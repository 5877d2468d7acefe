//! The outbox table, and every statement on it, for each database.

use std::future::Future;

use sqlx::{Database, Pool, Transaction};

/// The outbox table, for both databases: one row per event waiting to be handed to the sender.
/// [`migrate`] runs it; a producer that manages its schema with its own migrations may put it
/// there instead (it is idempotent, and never changes under a version of this crate's 0.1
/// series).
///
/// - `id`: the row's own id (`ob_` and a UUIDv7), sent as the `Idempotency-Key`;
/// - `event_id`: the event's id, fixed at [`emit`](crate::emit) time;
/// - `request`: the `POST /v1/events` body, sent as it is;
/// - `next_attempt_at` (Unix ms): when a relay may take the row; a relay that takes it moves
///   this past its lease, so others skip it and it comes back if that relay dies;
/// - `refused_at`, `last_error`: set when the sender refused the event for good (a 4xx no retry
///   cures); such a row waits for [`Relay::requeue`](crate::Relay::requeue).
pub const SCHEMA: &str = "\
CREATE TABLE IF NOT EXISTS kxp_outbox (
    id TEXT PRIMARY KEY,
    event_id TEXT NOT NULL UNIQUE,
    request TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    attempts BIGINT NOT NULL DEFAULT 0,
    next_attempt_at BIGINT NOT NULL,
    last_error TEXT,
    refused_at BIGINT
);
CREATE INDEX IF NOT EXISTS kxp_outbox_due ON kxp_outbox (next_attempt_at, created_at, id)
    WHERE refused_at IS NULL";

/// Creates the outbox table if it does not exist ([`SCHEMA`]). Idempotent, and safe beside the
/// producer's own sqlx migrations (it records nothing in their table).
pub async fn migrate<DB: Backend>(pool: &Pool<DB>) -> Result<(), sqlx::Error> {
    DB::migrate(pool).await
}

/// A row as a relay takes it (`pub` only for [`Backend`], whose methods are hidden).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Row {
    pub id: String,
    pub event_id: String,
    pub request: String,
    pub created_at: i64,
    pub attempts: i64,
}

/// A row the sender refused, as [`Relay::refused`](crate::Relay::refused) lists it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RefusedRow {
    pub id: String,
    pub event_id: String,
    pub request: String,
    pub last_error: Option<String>,
    pub refused_at: i64,
}

mod sealed {
    pub trait Sealed {}
}

/// A database the outbox runs on: `sqlx::Sqlite` (feature `sqlite`, the default) and
/// `sqlx::Postgres` (feature `postgres`). Sealed: its methods are this crate's statements.
pub trait Backend: Database + sealed::Sealed {
    #[doc(hidden)]
    fn migrate(pool: &Pool<Self>) -> impl Future<Output = Result<(), sqlx::Error>> + Send;
    #[doc(hidden)]
    fn insert<'t>(
        tx: &'t mut Transaction<'_, Self>,
        id: &'t str,
        event_id: &'t str,
        request: &'t str,
        now: i64,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 't;
    #[doc(hidden)]
    fn claim(
        pool: &Pool<Self>,
        now: i64,
        until: i64,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<Row>, sqlx::Error>> + Send;
    #[doc(hidden)]
    fn delete<'a>(
        pool: &'a Pool<Self>,
        id: &'a str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'a;
    #[doc(hidden)]
    fn reschedule<'a>(
        pool: &'a Pool<Self>,
        id: &'a str,
        at: i64,
        tried: bool,
        error: Option<&'a str>,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'a;
    #[doc(hidden)]
    fn refuse<'a>(
        pool: &'a Pool<Self>,
        id: &'a str,
        now: i64,
        error: &'a str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'a;
    #[doc(hidden)]
    fn refused(
        pool: &Pool<Self>,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<RefusedRow>, sqlx::Error>> + Send;
    #[doc(hidden)]
    fn requeue<'a>(
        pool: &'a Pool<Self>,
        id: &'a str,
        now: i64,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'a;
    #[doc(hidden)]
    fn waiting(pool: &Pool<Self>) -> impl Future<Output = Result<i64, sqlx::Error>> + Send;
}

/// Takes up to `$3` due rows, oldest first, moving them to `$2` (the lease's end); `$1` now.
/// `{lock}` skips rows another relay's claim holds (PostgreSQL).
macro_rules! claim_sql {
    ($lock:literal) => {
        concat!(
            "UPDATE kxp_outbox SET next_attempt_at = $2 WHERE id IN (\
               SELECT id FROM kxp_outbox WHERE refused_at IS NULL AND next_attempt_at <= $1 \
               ORDER BY next_attempt_at, created_at, id LIMIT $3",
            $lock,
            ") RETURNING id, event_id, request, created_at, attempts"
        )
    };
}

/// Implements [`Backend`] for `$db`, whose claim locks rows with `$lock`. One body for both
/// databases: the statements are the same but for the claim's lock.
macro_rules! backend {
    ($db:ty, $lock:literal) => {
        impl sealed::Sealed for $db {}

        impl Backend for $db {
            async fn migrate(pool: &Pool<Self>) -> Result<(), sqlx::Error> {
                for statement in SCHEMA.split(';') {
                    sqlx::query(statement).execute(pool).await?;
                }
                Ok(())
            }

            fn insert<'t>(
                tx: &'t mut Transaction<'_, Self>,
                id: &'t str,
                event_id: &'t str,
                request: &'t str,
                now: i64,
            ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 't {
                async move {
                    sqlx::query(
                        "INSERT INTO kxp_outbox (id, event_id, request, created_at, next_attempt_at) \
                         VALUES ($1, $2, $3, $4, $4)",
                    )
                    .bind(id)
                    .bind(event_id)
                    .bind(request)
                    .bind(now)
                    .execute(&mut **tx)
                    .await?;
                    Ok(())
                }
            }

            async fn claim(
                pool: &Pool<Self>,
                now: i64,
                until: i64,
                limit: i64,
            ) -> Result<Vec<Row>, sqlx::Error> {
                let mut rows = sqlx::query_as::<_, Row>(claim_sql!($lock))
                    .bind(now)
                    .bind(until)
                    .bind(limit)
                    .fetch_all(pool)
                    .await?;
                // RETURNING has no order: hand off in the order the rows were emitted.
                rows.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
                Ok(rows)
            }

            async fn delete<'a>(pool: &'a Pool<Self>, id: &'a str) -> Result<(), sqlx::Error> {
                sqlx::query("DELETE FROM kxp_outbox WHERE id = $1")
                    .bind(id)
                    .execute(pool)
                    .await?;
                Ok(())
            }

            async fn reschedule<'a>(
                pool: &'a Pool<Self>,
                id: &'a str,
                at: i64,
                tried: bool,
                error: Option<&'a str>,
            ) -> Result<(), sqlx::Error> {
                sqlx::query(
                    "UPDATE kxp_outbox SET next_attempt_at = $2, \
                       attempts = attempts + CASE WHEN $3 THEN 1 ELSE 0 END, \
                       last_error = COALESCE($4, last_error) WHERE id = $1",
                )
                .bind(id)
                .bind(at)
                .bind(tried)
                .bind(error)
                .execute(pool)
                .await?;
                Ok(())
            }

            async fn refuse<'a>(
                pool: &'a Pool<Self>,
                id: &'a str,
                now: i64,
                error: &'a str,
            ) -> Result<(), sqlx::Error> {
                sqlx::query(
                    "UPDATE kxp_outbox SET refused_at = $2, attempts = attempts + 1, \
                       last_error = $3 WHERE id = $1",
                )
                .bind(id)
                .bind(now)
                .bind(error)
                .execute(pool)
                .await?;
                Ok(())
            }

            async fn refused(pool: &Pool<Self>, limit: i64) -> Result<Vec<RefusedRow>, sqlx::Error> {
                sqlx::query_as::<_, RefusedRow>(
                    "SELECT id, event_id, request, last_error, refused_at FROM kxp_outbox \
                     WHERE refused_at IS NOT NULL ORDER BY created_at, id LIMIT $1",
                )
                .bind(limit)
                .fetch_all(pool)
                .await
            }

            async fn requeue<'a>(
                pool: &'a Pool<Self>,
                id: &'a str,
                now: i64,
            ) -> Result<bool, sqlx::Error> {
                let done = sqlx::query(
                    "UPDATE kxp_outbox SET refused_at = NULL, next_attempt_at = $2 \
                     WHERE id = $1 AND refused_at IS NOT NULL",
                )
                .bind(id)
                .bind(now)
                .execute(pool)
                .await?;
                Ok(done.rows_affected() == 1)
            }

            async fn waiting(pool: &Pool<Self>) -> Result<i64, sqlx::Error> {
                sqlx::query_scalar("SELECT COUNT(*) FROM kxp_outbox WHERE refused_at IS NULL")
                    .fetch_one(pool)
                    .await
            }
        }
    };
}

#[cfg(feature = "sqlite")]
backend!(sqlx::Sqlite, "");
#[cfg(feature = "postgres")]
backend!(sqlx::Postgres, " FOR UPDATE SKIP LOCKED");
