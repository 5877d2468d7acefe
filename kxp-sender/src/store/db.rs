//! The database: SQLite (a file, WAL, nothing to install) or PostgreSQL (for several `kxp serve`
//! processes side by side), behind one enum so each query is written once.

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{PgPool, SqlitePool};

/// A connection pool to either backend.
#[derive(Debug, Clone)]
pub enum Db {
    /// SQLite: one writer at a time, so write transactions take the lock up front.
    Sqlite(SqlitePool),
    /// PostgreSQL: workers claim with `FOR UPDATE SKIP LOCKED`.
    Postgres(PgPool),
}

/// Runs `$body` with `$pool` bound to the backend's pool and `$begin` to the statement that opens
/// a write transaction there. The body is compiled once per backend, so the SQL it holds must
/// suit both (placeholders are `$1`, `$2`, … in both).
macro_rules! on_db {
    ($db:expr, |$pool:ident, $begin:ident| $body:expr) => {
        match $db {
            $crate::db::Db::Sqlite($pool) => {
                // BEGIN IMMEDIATE: a deferred transaction that reads first and writes later can
                // fail with SQLITE_BUSY when two of them race to upgrade; taking the write lock
                // up front makes them queue on the busy timeout instead.
                #[allow(unused_variables)]
                let $begin = "BEGIN IMMEDIATE";
                $body
            }
            $crate::db::Db::Postgres($pool) => {
                #[allow(unused_variables)]
                let $begin = "BEGIN";
                $body
            }
        }
    };
}
pub(crate) use on_db;

impl Db {
    /// Connects and runs the migrations. `sqlite://path` creates the file if missing;
    /// `postgres://…` needs the database to exist.
    pub async fn connect(url: &str) -> Result<Db, sqlx::Error> {
        let db = if url.starts_with("sqlite:") {
            let options = SqliteConnectOptions::from_str(url)?
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal)
                .busy_timeout(Duration::from_secs(30))
                .foreign_keys(true);
            Db::Sqlite(
                SqlitePoolOptions::new()
                    .max_connections(8)
                    .connect_with(options)
                    .await?,
            )
        } else {
            let options = PgConnectOptions::from_str(url)?;
            Db::Postgres(
                PgPoolOptions::new()
                    .max_connections(16)
                    .acquire_timeout(Duration::from_secs(10))
                    .connect_with(options)
                    .await?,
            )
        };
        db.migrate().await?;
        Ok(db)
    }

    /// Brings the schema up to date (idempotent; safe with several processes starting at once).
    pub async fn migrate(&self) -> Result<(), sqlx::Error> {
        match self {
            Db::Sqlite(pool) => sqlx::migrate!("./migrations/sqlite").run(pool).await?,
            Db::Postgres(pool) => sqlx::migrate!("./migrations/postgres").run(pool).await?,
        }
        Ok(())
    }

    /// Which backend, for logs and `/healthz`.
    pub fn backend(&self) -> &'static str {
        match self {
            Db::Sqlite(_) => "sqlite",
            Db::Postgres(_) => "postgres",
        }
    }

    /// Closes every connection.
    pub async fn close(&self) {
        on_db!(self, |pool, _begin| pool.close().await);
    }
}

/// Unix milliseconds by the system clock: every stored time uses this one source.
pub fn now_ms() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

/// A `Duration` in whole milliseconds, saturating.
pub fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// An id with a type prefix and a UUIDv7, so ids sort by creation time and serve as cursors.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::now_v7().simple())
}

/// 32 bytes from the OS CSPRNG, as 64 hex characters: endpoint secrets and API keys.
pub fn random_hex_32() -> String {
    let mut bytes = [0u8; 32];
    // The OS generator failing is an unrecoverable platform fault; nothing sensible is left
    // to do but stop, rather than hand out a predictable secret.
    getrandom::fill(&mut bytes).expect("the operating system's random number generator failed");
    hex::encode(bytes)
}

/// SHA-256 hex: how API keys are stored, so a database leak does not leak working keys.
pub fn sha256_hex(data: &[u8]) -> String {
    use sha2_std::Digest;
    hex::encode(sha2_std::Sha256::digest(data))
}

/// Replaces the password of any `scheme://user:password@` in `text`: sqlx errors can quote a
/// database URL, and a password must never reach a terminal or a log.
pub fn redact_passwords(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| c == '/' || c.is_whitespace())
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match (authority.rfind('@'), authority.find(':')) {
            (Some(at), Some(colon)) if colon < at => {
                out.push_str(&authority[..colon]);
                out.push_str(":[redacted]");
                out.push_str(&authority[at..]);
            }
            _ => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::redact_passwords as redact;

    #[test]
    fn passwords_in_urls_are_redacted() {
        assert_eq!(
            redact("error connecting to postgres://kxp:hunter2@db:5432/kxp: refused"),
            "error connecting to postgres://kxp:[redacted]@db:5432/kxp: refused"
        );
        assert_eq!(redact("postgres://kxp@db/kxp"), "postgres://kxp@db/kxp");
        assert_eq!(redact("no url here"), "no url here");
    }
}
