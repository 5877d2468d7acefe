//! The store: every SQL statement the sender runs, and nothing else. SQLite (a file, WAL,
//! nothing to install) or PostgreSQL (for several `kxp serve` processes side by side). [`Db`]
//! is an enum of the two pools; each of its methods dispatches once to the backend it holds.
//!
//! Two shapes, by size. The transactions of several statements on the hot and shared paths
//! (recording attempts, ingestion, the breaker, notices, replays, endpoint changes) are generic
//! functions over [`backend::Backend`], a sealed trait implemented for `sqlx::Sqlite` and
//! `sqlx::Postgres` by one generator per trait, one method per statement, with what differs
//! between the databases (how a write transaction begins, row locks, JSON functions, the
//! batched writes) as its parameters or constants: their logic is written and compiled once,
//! and each statement is type-checked where it is written. The other statements (and the small
//! transactions of the API's rarer writes) are written once where they are used, inside
//! `on_db!`, which holds no SQL: it only picks the pool and names the backend's type, whose
//! [`Backend`](backend::Backend) constants say what differs (never a test of which database
//! this is). The claim and the sequencer are written out per backend, as PostgreSQL's are
//! single statements that skip rows other workers hold where SQLite's take its one write lock.
//!
//! One file per table or aggregate: [`accounts`], [`operators`], [`sessions`] (the console's
//! sign-ins), [`endpoints`], [`secrets`] and [`credentials`] (sealed at rest by [`seal`]),
//! [`certificates`] (endpoints' certificates watched), [`events`],
//! [`deliveries`] (the API's side), [`claim`] (the worker's claim, release and reclaim of
//! expired leases), [`record`] (finished attempts, in batches), [`circuit`], [`health`],
//! [`notifications`], [`schemas`], [`retention`], [`metrics`], [`sequence`] (each endpoint's
//! numbering), [`feed`] (the catch-up feed's reads), [`migrations`] (the schema's versions:
//! applied, pending, applying), [`distribute`] (the tables' places on a Citus cluster). What to
//! write is decided by the model's rules and the pure [`policy`](crate::policy) functions,
//! which the store calls inside its transactions; no other
//! module holds SQL.

mod accounts;
mod audit;
mod backend;
mod certificates;
pub(crate) mod circuit;
#[cfg(test)]
mod citus_plans;
mod claim;
mod credentials;
pub(crate) mod deliveries;
mod distribute;
mod endpoints;
mod erasures;
mod events;
mod feed;
pub(crate) mod health;
mod listen_tokens;
mod metrics;
mod migrations;
pub(crate) mod notifications;
mod operators;
#[cfg(test)]
mod plans;
mod record;
mod retention;
mod schemas;
pub(crate) mod seal;
mod secrets;
mod sequence;
mod sessions;
mod shards;

pub(crate) use certificates::{SeenCertificate, server_certificate};
pub(crate) use credentials::{open_credentials, seal_credentials};
pub use distribute::{DistributeError, Distribution, Placement, TablePlacement};
pub(crate) use erasures::{BATCH as ERASURE_BATCH, ErasureRow};
pub(crate) use feed::{Committed, FeedRow, FeedSource};
pub(crate) use metrics::Gauges;
pub use migrations::{
    AppliedMigration, LOCK_TIMEOUT, Migrations, PendingMigration, SchemaError, SchemaStatus,
};
pub use retention::{Purged, Retention};
pub(crate) use secrets::open_secret;
pub(crate) use sessions::{NewLink, Opening};

use std::str::FromStr;
use std::time::Duration;

use kxp_dedup::clean_on_release;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{PgPool, Postgres, Sqlite, SqlitePool, TransactionManager};

use crate::model::{offset_from, system_ms};

/// The most database connections a process opens (8 on SQLite), which the API server's
/// connection cap leaves descriptors for.
pub(crate) const POOL_MAX: u32 = 16;

/// How long a request waits for a pooled connection before it is answered 503
/// `store_unavailable`: a burst that exhausts the pool is refused, never left hanging.
const POOL_WAIT: Duration = Duration::from_secs(10);

/// A connection pool to either backend.
#[derive(Debug, Clone)]
#[cfg_attr(
    not(feature = "test-util"),
    expect(unreachable_pub, reason = "public with feature test-util only")
)]
pub enum Db {
    /// SQLite: one writer at a time, so write transactions take the lock up front.
    Sqlite(SqlitePool),
    /// PostgreSQL: workers claim with `FOR UPDATE SKIP LOCKED`.
    Postgres(PgPool),
    /// PostgreSQL with Citus (found at connect), whose account tables may be spread over
    /// several servers: what the batched statements of [`Db::Postgres`] do for several accounts
    /// at once is done once per account, each statement on one account's shard (Citus takes
    /// row locks only there). Every other statement is [`Db::Postgres`]'s: it names its account
    /// already.
    Citus(PgPool),
}

/// Runs `$body` once per backend with `$pool` bound to the backend's pool and, in the second
/// form, `$backend` to the backend's type (`sqlx::Sqlite` or `sqlx::Postgres`), so the body can
/// open a write transaction with `$backend::BEGIN` and take [`Backend::row_lock`]s. It holds no
/// SQL and only picks the pool: the body is written where it is used, and compiled (and
/// type-checked) for each backend there, so its SQL must suit both (placeholders are `$1`,
/// `$2`, … in both). Where the databases differ, the difference is a [`Backend`] constant or
/// method, never a test of which database this is.
///
/// [`Backend`]: backend::Backend
/// [`Backend::row_lock`]: backend::Backend::row_lock
macro_rules! on_db {
    ($db:expr, |$pool:ident| $body:expr) => {
        match $db {
            $crate::store::Db::Sqlite($pool) => $body,
            $crate::store::Db::Postgres($pool) | $crate::store::Db::Citus($pool) => $body,
        }
    };
    ($db:expr, |$pool:ident, $backend:ident| $body:expr) => {
        match $db {
            $crate::store::Db::Sqlite($pool) => on_db!(@as $backend = sqlx::Sqlite, $body),
            $crate::store::Db::Postgres($pool) | $crate::store::Db::Citus($pool) => {
                on_db!(@as $backend = sqlx::Postgres, $body)
            }
        }
    };
    (@as $backend:ident = $type:ty, $body:expr) => {{
        #[allow(clippy::upper_case_acronyms, reason = "reads as the generic functions' DB")]
        type $backend = $type;
        #[allow(unused_imports, reason = "the body may name no Backend item")]
        use $crate::store::backend::Backend as _;
        $body
    }};
}
pub(crate) use on_db;

impl Db {
    /// How far the database's clock is ahead of this machine's, in ms (PostgreSQL, shared by
    /// every `kxp serve` process); `None` on SQLite, or when the reading failed or took too long.
    #[cfg_attr(
        not(feature = "test-util"),
        expect(unreachable_pub, reason = "public with feature test-util only")
    )]
    pub async fn clock_offset(&self) -> Option<i64> {
        let (Db::Postgres(pool) | Db::Citus(pool)) = self else {
            return None;
        };
        let mut conn = pool.acquire().await.ok()?;
        let before = system_ms();
        let database: i64 =
            sqlx::query_scalar("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")
                .fetch_one(&mut *conn)
                .await
                .ok()?;
        offset_from(before, database, system_ms())
    }

    /// Connects and applies the migrations the database lacks (the tests' and SQLite's way;
    /// `kxp serve` on PostgreSQL uses [`connect_with`](Db::connect_with)). `sqlite://path`
    /// creates the file if missing; `postgres://…` needs the database to exist.
    #[cfg(any(test, feature = "test-util"))]
    #[cfg_attr(
        not(feature = "test-util"),
        expect(unreachable_pub, reason = "public with feature test-util only")
    )]
    pub async fn connect(url: &str) -> Result<Db, SchemaError> {
        Db::connect_with(
            url,
            Migrations::Apply {
                lock_timeout: Duration::ZERO,
            },
            Duration::ZERO,
        )
        .await
    }

    /// Connects, and applies the pending migrations or refuses to go on with one pending, as
    /// `migrations` says (SQLite always applies them). On PostgreSQL every statement runs under
    /// `statement_timeout` (zero: none; see [`Db::open_with`]).
    pub(crate) async fn connect_with(
        url: &str,
        migrations: Migrations,
        statement_timeout: Duration,
    ) -> Result<Db, SchemaError> {
        let db = Db::open_with(url, statement_timeout).await?;
        db.settle_schema(migrations).await?;
        Ok(db)
    }

    /// Connects, leaving the schema as it is (`kxp migrate`), with no statement timeout.
    pub(crate) async fn open(url: &str) -> Result<Db, sqlx::Error> {
        Db::open_with(url, Duration::ZERO).await
    }

    /// Connects, leaving the schema as it is. On PostgreSQL, each connection's statements are
    /// cancelled after `statement_timeout` (zero: never), and on Citus connecting to a worker
    /// gives up after it too (`citus.node_connection_timeout`, which defaults to 30 s): a
    /// worker down answers an error in that time rather than holding the request.
    pub(crate) async fn open_with(
        url: &str,
        statement_timeout: Duration,
    ) -> Result<Db, sqlx::Error> {
        let db = if url.starts_with("sqlite:") {
            let options = SqliteConnectOptions::from_str(url)?
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                // FULL: a commit is on disk before it returns, so an event answered 202 (and an
                // attempt recorded) survives a power loss. NORMAL in WAL mode can lose the last
                // commits then; it only survives a crash of the process.
                .synchronous(SqliteSynchronous::Full)
                .busy_timeout(Duration::from_secs(30))
                .foreign_keys(true);
            Db::Sqlite(
                SqlitePoolOptions::new()
                    .max_connections(POOL_MAX.min(8))
                    .acquire_timeout(POOL_WAIT)
                    .after_release(|conn, _| {
                        // A full disk leaves SQLite's transaction open where sqlx thinks it
                        // ended: such a connection is closed, never pooled (kxp-dedup's doc).
                        clean_on_release(
                            conn,
                            <Sqlite as sqlx::Database>::TransactionManager::get_transaction_depth,
                        )
                    })
                    .connect_with(options)
                    .await?,
            )
        } else {
            let mut options = PgConnectOptions::from_str(url)?;
            if !statement_timeout.is_zero() {
                // A setting PostgreSQL does not know, but with a prefix, is kept as a
                // placeholder: harmless without Citus, in force with it.
                let ms = statement_timeout.as_millis().to_string();
                options = options.options([
                    ("statement_timeout", ms.as_str()),
                    ("citus.node_connection_timeout", ms.as_str()),
                ]);
            }
            let pool = PgPoolOptions::new()
                .max_connections(POOL_MAX)
                .acquire_timeout(POOL_WAIT)
                .after_release(|conn, _| {
                    clean_on_release(
                        conn,
                        <Postgres as sqlx::Database>::TransactionManager::get_transaction_depth,
                    )
                })
                .connect_with(options)
                .await?;
            let citus: bool = sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')",
            )
            .fetch_one(&pool)
            .await?;
            if citus {
                Db::Citus(pool)
            } else {
                Db::Postgres(pool)
            }
        };
        Ok(db)
    }

    /// This database with the per-account statement forms of [`Db::Citus`] (PostgreSQL; SQLite
    /// has one form).
    pub(crate) fn per_account(self) -> Db {
        match self {
            Db::Postgres(pool) => Db::Citus(pool),
            other => other,
        }
    }

    /// Which backend, for logs and `/healthz` (Citus is PostgreSQL's).
    pub(crate) fn backend(&self) -> &'static str {
        match self {
            Db::Sqlite(_) => "sqlite",
            Db::Postgres(_) | Db::Citus(_) => "postgres",
        }
    }

    /// Closes every connection.
    #[cfg_attr(
        not(feature = "test-util"),
        expect(unreachable_pub, reason = "public with feature test-util only")
    )]
    pub async fn close(&self) {
        on_db!(self, |pool| pool.close().await);
    }
}

/// Sends `payload` on PostgreSQL's `channel` (`NOTIFY`): the engine's announcements of new
/// work to the other `kxp serve` processes.
pub(crate) async fn notify(pool: &PgPool, channel: &str, payload: &str) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(channel)
        .bind(payload)
        .execute(pool)
        .await?;
    Ok(())
}

/// A failed query, or a row the caller's account may not see.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The database failed or is unreachable.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// The row does not exist for this account (another account's ids look the same).
    #[error("not found")]
    NotFound,
    /// The request contradicts the row's state (a replay to a deleted endpoint, one rotation
    /// too many): nothing was written.
    #[error("{message}")]
    Conflict {
        /// Which contradiction: what the callers decide on (the API picks its code by it).
        kind: StoreConflict,
        /// What is wrong, and what to do instead.
        message: String,
    },
    /// A stored secret does not open with this server's `KXP_SECRETS_KEY` (the message names
    /// the key id it needs, never the secret).
    #[error("{0}")]
    Sealed(#[from] seal::OpenError),
}

/// The contradictions [`StoreError::Conflict`] names: the store's own words, which the service
/// layer maps to the API's (the store knows nothing of HTTP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreConflict {
    /// The endpoint was deleted: nothing can be delivered to it any more.
    EndpointDeleted,
    /// One more secret or key would be more than a signature carries.
    TooManySecrets,
    /// An endpoint that signs with Ed25519 only cannot take up a shared secret again.
    SharedSecretRetired,
    /// A pull endpoint is sent nothing, so nothing can be replayed to it: its reader reads
    /// the feed again instead.
    PullEndpoint,
    /// The event's payload was erased: nothing of it can be sent again.
    Erased,
    /// The event's payload passed its retention: nothing of it can be sent again.
    Expired,
}

/// Replaces the credentials of every URL in `text`: the whole user part when it is a lone
/// name (`nats://TOKEN@host`: NATS takes a lone name as a token, and text cannot tell a token
/// from a user name), the password of a `user:password@` (the user name stays, to say whose
/// they were), and the value of any `password=` query parameter
/// (`postgres://kxp@db/kxp?password=…`, which libpq and sqlx accept too). Every URL the sender and the CLI print (errors, logs,
/// `--print-config`, `Debug`) goes through this one function: sqlx, lapin and async-nats
/// errors can quote a URL, and a credential must never reach a terminal or a log.
///
/// A URL runs from its `://` to the next white space or quote, and its user part ends at its
/// last `@`, even past a `/`, `?` or `#` a password may hold unencoded: that errs towards
/// redacting too much (an `@` in a path or a query hides what comes before it).
pub fn redact_passwords(text: &str) -> String {
    redact_query_passwords(&redact_userinfo(text))
}

fn redact_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '<' | '>'))
            .unwrap_or(tail.len());
        let url = &tail[..end];
        match url.rfind('@') {
            Some(at) => {
                match url[..at].split_once(':') {
                    Some((user, password)) if !user.is_empty() && !password.is_empty() => {
                        out.push_str(user);
                        out.push_str(":[redacted]");
                    }
                    _ => out.push_str("[redacted]"),
                }
                out.push_str(&url[at..]);
            }
            None => out.push_str(url),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// `password=<value>` after `?` or `&` (any case), up to the next `&`, quote or white space.
fn redact_query_passwords(text: &str) -> String {
    const KEY: &str = "password=";
    let lower = text.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut from = 0;
    while let Some(found) = lower[from..].find(KEY) {
        let key_at = from + found;
        let value_at = key_at + KEY.len();
        let after_separator = key_at > 0 && matches!(text.as_bytes()[key_at - 1], b'?' | b'&');
        if after_separator {
            let end = text[value_at..]
                .find(|c: char| c == '&' || c == '"' || c == '\'' || c.is_whitespace())
                .map_or(text.len(), |n| value_at + n);
            out.push_str(&text[copied..value_at]);
            out.push_str("[redacted]");
            copied = end;
        }
        from = value_at;
    }
    out.push_str(&text[copied..]);
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
        assert_eq!(redact("no url here"), "no url here");
        assert_eq!(redact("sqlite://kxp.db"), "sqlite://kxp.db");
    }

    #[test]
    fn any_user_part_is_redacted_a_lone_one_whole() {
        for (text, shown) in [
            // A lone name may be a token (NATS): the whole of it goes.
            (
                "nats://S3cr3tT0ken@127.0.0.1:4222?stream=S",
                "nats://[redacted]@127.0.0.1:4222?stream=S",
            ),
            ("postgres://kxp@db/kxp", "postgres://[redacted]@db/kxp"),
            // An empty password: what stands for the user may be the key.
            ("https://sk_live_1:@api", "https://[redacted]@api"),
            ("amqp://:pw@mq", "amqp://[redacted]@mq"),
            // Unencoded `/`, `?`, `#` and `@` in a password: still all of it.
            (
                "amqp://kxp:a/b?c#d@e@mq/%2f",
                "amqp://kxp:[redacted]@mq/%2f",
            ),
            (
                "error: ingest: \"nats://t0k@n:4222\" and smtps://u:p@mail:465.",
                "error: ingest: \"nats://[redacted]@n:4222\" and smtps://u:[redacted]@mail:465.",
            ),
            ("a://x@h b://y:z@h", "a://[redacted]@h b://y:[redacted]@h"),
        ] {
            assert_eq!(redact(text), shown, "{text}");
        }
    }

    #[test]
    fn passwords_in_query_parameters_are_redacted() {
        assert_eq!(
            redact("postgres://kxp@db:5432/kxp?password=hunter2&sslmode=require"),
            "postgres://[redacted]@db:5432/kxp?password=[redacted]&sslmode=require"
        );
        assert_eq!(
            redact("postgres://db/kxp?sslmode=require&PASSWORD=hunter2 refused"),
            "postgres://db/kxp?sslmode=require&PASSWORD=[redacted] refused"
        );
        assert_eq!(
            redact("postgres://a:b@db/kxp?password=c"),
            "postgres://a:[redacted]@db/kxp?password=[redacted]"
        );
        // Not a query parameter: left alone.
        assert_eq!(
            redact("the password=field is required"),
            "the password=field is required"
        );
    }
}
