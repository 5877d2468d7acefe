//! The store: a pool of either backend, its migrations, and the claim / renew / complete / fail
//! / purge statements.
//!
//! Every time that is compared lives in the database and is computed there (`now()` on
//! PostgreSQL, `unixepoch('subsec')` on SQLite): receivers on several machines with skewed
//! clocks still agree on when a lease ends, because only the database's clock is ever read.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "sqlite")]
use sqlx::Sqlite;
#[cfg(feature = "postgres")]
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
#[cfg(feature = "sqlite")]
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
#[cfg(feature = "postgres")]
use sqlx::{Connection, PgConnection, Postgres};
use sqlx::{Database, TransactionManager};

use crate::error::{Redactor, StoreError};
use crate::record::{Backend, Claim, EventRecord, EventStatus, Lease, LeaseClaim};
use crate::tx::Tx;
use crate::util::{millis, retry_after_from_millis};

/// How long a pool waits for a free connection (or for the server) before the operation fails
/// as `unavailable`. Below the sender's 5 s request timeout, so the sender reads a 503 rather
/// than a timeout.
pub(crate) const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(3);

#[cfg(feature = "sqlite")]
/// How long a SQLite connection waits for the write lock before `SQLITE_BUSY`.
pub(crate) const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

#[cfg(feature = "postgres")]
/// How long [`Store::connect`] waits for PostgreSQL to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A dedup store on SQLite or PostgreSQL. Cheap to clone: clones share one connection pool.
///
/// Every record is keyed by the store's [scope](Store::scoped) as well as by its event id (or,
/// for checkpoints, its endpoint id): a store from [`connect`](Store::connect) has the empty
/// scope, and [`scoped`](Store::scoped) gives a handle on the same database with another.
///
/// Its `Debug` shows the backend and the scope, never connection settings.
#[derive(Clone)]
pub struct Store {
    pub(crate) pool: Pool,
    pub(crate) scope: Arc<str>,
}

/// The pool of one backend: two small implementations side by side rather than `sqlx::Any`,
/// which would lose the native types, or generics over `sqlx::Database`, which have no
/// `rows_affected()`.
#[derive(Clone)]
pub(crate) enum Pool {
    #[cfg(feature = "sqlite")]
    Sqlite(SqlitePool),
    #[cfg(feature = "postgres")]
    Postgres(PgPool),
}

/// The claim statement's result before it becomes a public [`Claim`]: a [`Lease`] needs the
/// attempt number as its fencing token.
pub(crate) enum ClaimState {
    Claimed { attempts: u32 },
    AlreadyDone,
    InProgress { retry_after: Duration },
}

#[cfg(feature = "sqlite")]
// One `now` per statement on SQLite: a sub-select computed once, in milliseconds.
const SQLITE_CLAIM: &str = "
INSERT INTO kxp_processed_events
    (scope, event_id, status, attempts, locked_until, first_seen_at, updated_at)
SELECT ?3, ?1, 'processing', 1, now.ms + ?2, now.ms, now.ms
FROM (SELECT CAST(unixepoch('subsec') * 1000 AS INTEGER) AS ms) AS now
WHERE true
ON CONFLICT (scope, event_id) DO UPDATE SET
    status = 'processing',
    attempts = kxp_processed_events.attempts + 1,
    locked_until = excluded.locked_until,
    updated_at = excluded.updated_at
WHERE kxp_processed_events.status = 'failed'
   OR (kxp_processed_events.status = 'processing'
       AND kxp_processed_events.locked_until < excluded.updated_at)
RETURNING attempts";

#[cfg(feature = "postgres")]
const PG_CLAIM: &str = "
INSERT INTO kxp_processed_events
    (scope, event_id, status, attempts, locked_until, first_seen_at, updated_at)
VALUES ($3, $1, 'processing', 1, now() + $2::bigint * interval '1 millisecond', now(), now())
ON CONFLICT (scope, event_id) DO UPDATE SET
    status = 'processing',
    attempts = kxp_processed_events.attempts + 1,
    locked_until = excluded.locked_until,
    updated_at = excluded.updated_at
WHERE kxp_processed_events.status = 'failed'
   OR (kxp_processed_events.status = 'processing'
       AND kxp_processed_events.locked_until < excluded.updated_at)
RETURNING attempts";

#[cfg(feature = "sqlite")]
// The status and the milliseconds left on the lease (0 when none or expired).
pub(crate) const SQLITE_STATE: &str = "
SELECT status,
       MAX(COALESCE(locked_until, 0) - CAST(unixepoch('subsec') * 1000 AS INTEGER), 0)
FROM kxp_processed_events WHERE event_id = ?1 AND scope = ?2";

#[cfg(feature = "postgres")]
pub(crate) const PG_STATE: &str = "
SELECT status,
       COALESCE(GREATEST(CEIL(EXTRACT(EPOCH FROM (locked_until - now())) * 1000), 0), 0)::bigint
FROM kxp_processed_events WHERE event_id = $1 AND scope = $2";

/// What a fenced statement ([`Store::fenced`]) changes on the event's row.
#[derive(Clone, Copy)]
enum Fenced<'a> {
    /// The lease extended by `lease_ms` from now.
    Renew { lease_ms: i64 },
    /// The event done.
    Complete,
    /// The event failed with `error`.
    Fail { error: &'a str },
}

/// The database's clock in SQLite, in Unix milliseconds.
#[cfg(feature = "sqlite")]
pub(crate) const SQLITE_NOW: &str = "CAST(unixepoch('subsec') * 1000 AS INTEGER)";

impl Store {
    /// Connects to `url` and applies the crate's migrations.
    ///
    /// - `sqlite://path/to/file.db`: the file is created if missing; WAL mode, `synchronous =
    ///   FULL` (a recorded event survives a power cut), a 5 s busy timeout.
    /// - `sqlite::memory:`: one in-memory database shared by the whole store (the pool holds a
    ///   single connection that never closes). For tests and examples: it is not durable.
    /// - `postgres://…` or `postgresql://…`: one connection is opened at once, so a server that
    ///   is down is reported right away (kind `unavailable`) instead of after the pool's
    ///   retries; the pool then opens connections on demand.
    ///
    /// Pools built here wait at most 3 s for a connection, so a request fails with
    /// `unavailable` before the sender's 5 s timeout. Errors never contain the URL's password.
    pub async fn connect(url: &str) -> Result<Store, StoreError> {
        let redactor = Redactor::for_url(url);
        if url.starts_with("sqlite:") {
            #[cfg(feature = "sqlite")]
            return Store::connect_sqlite(url, &redactor).await;
            #[cfg(not(feature = "sqlite"))]
            return Err(StoreError::invalid_url(
                "a sqlite: URL, but kxp-dedup is built without its `sqlite` feature",
            ));
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            #[cfg(feature = "postgres")]
            return Store::connect_postgres(url, &redactor).await;
            #[cfg(not(feature = "postgres"))]
            return Err(StoreError::invalid_url(
                "a postgres:// URL, but kxp-dedup is built without its `postgres` feature",
            ));
        }
        {
            Err(StoreError::invalid_url(
                "expected a URL starting with sqlite:, postgres:// or postgresql://",
            ))
        }
    }

    #[cfg(feature = "sqlite")]
    async fn connect_sqlite(url: &str, redactor: &Redactor) -> Result<Store, StoreError> {
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|e| redactor.connect_error("SQLite", e))?
            .busy_timeout(SQLITE_BUSY_TIMEOUT)
            // FULL is SQLite's default; stated because the 200 depends on it: with NORMAL a
            // power cut can lose the last commits in WAL mode.
            .synchronous(SqliteSynchronous::Full);
        let after_scheme = url.trim_start_matches("sqlite:").trim_start_matches("//");
        let in_memory = after_scheme.starts_with(":memory:") || url.contains("mode=memory");
        let pool = if in_memory {
            // sqlx gives `:memory:` a shared-cache name, but the database still vanishes when
            // its last connection closes: keep exactly one, forever.
            SqlitePoolOptions::new()
                .max_connections(1)
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None)
                .acquire_timeout(ACQUIRE_TIMEOUT)
                .after_release(|conn, _| {
                    clean_on_release(
                        conn,
                        <Sqlite as Database>::TransactionManager::get_transaction_depth,
                    )
                })
                .connect_with(options)
                .await
        } else {
            SqlitePoolOptions::new()
                .acquire_timeout(ACQUIRE_TIMEOUT)
                .after_release(|conn, _| {
                    clean_on_release(
                        conn,
                        <Sqlite as Database>::TransactionManager::get_transaction_depth,
                    )
                })
                .connect_with(
                    options
                        .create_if_missing(true)
                        .journal_mode(SqliteJournalMode::Wal),
                )
                .await
        }
        .map_err(|e| redactor.connect_error("SQLite", e))?;
        Store::from_sqlite_pool(pool)
            .await
            .map_err(|e| redactor.scrub_error(e))
    }

    #[cfg(feature = "postgres")]
    async fn connect_postgres(url: &str, redactor: &Redactor) -> Result<Store, StoreError> {
        let options =
            PgConnectOptions::from_str(url).map_err(|e| redactor.connect_error("PostgreSQL", e))?;
        // A pool retries a refused connection until its acquire timeout and then reports only
        // "pool timed out"; one direct connection fails at once with the real cause. It also
        // runs the migrations, then closes.
        let mut conn = tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(&options))
            .await
            .map_err(|_| {
                StoreError::unavailable(format!(
                    "cannot connect to PostgreSQL: no answer within {} s",
                    CONNECT_TIMEOUT.as_secs()
                ))
            })?
            .map_err(|e| redactor.connect_error("PostgreSQL", e))?;
        let migrated = postgres_migrator()
            .run(&mut conn)
            .await
            .map_err(|e| redactor.scrub_error(e.into()));
        // Closing is a courtesy to the server; a failure to say goodbye changes nothing.
        let _ = conn.close().await;
        migrated?;
        let pool = PgPoolOptions::new()
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .after_release(|conn, _| {
                clean_on_release(
                    conn,
                    <Postgres as Database>::TransactionManager::get_transaction_depth,
                )
            })
            .connect_lazy_with(options);
        Ok(Store {
            pool: Pool::Postgres(pool),
            scope: Arc::from(""),
        })
    }

    #[cfg(feature = "sqlite")]
    /// A store over an existing SQLite pool (for instance the application's own, so that
    /// in-transaction mode shares its database); applies the migrations.
    ///
    /// Give its connections a busy timeout (sqlx's default is 5 s) and prefer WAL mode:
    /// concurrent claims wait for SQLite's single write lock. Give the pool
    /// [`clean_on_release`] as its `after_release` hook too, as [`Store::connect`] does, or a
    /// full disk can leave a pooled connection unusable until a restart.
    pub async fn from_sqlite_pool(pool: SqlitePool) -> Result<Store, StoreError> {
        let store = Store {
            pool: Pool::Sqlite(pool),
            scope: Arc::from(""),
        };
        store.migrate().await?;
        Ok(store)
    }

    #[cfg(feature = "postgres")]
    /// A store over an existing PostgreSQL pool; applies the migrations.
    pub async fn from_postgres_pool(pool: PgPool) -> Result<Store, StoreError> {
        let store = Store {
            pool: Pool::Postgres(pool),
            scope: Arc::from(""),
        };
        store.migrate().await?;
        Ok(store)
    }

    /// Applies the crate's migrations (`migrations/sqlite/` or `migrations/postgres/`) that are
    /// not applied yet. Safe to run at every start, by several processes at once on PostgreSQL
    /// (sqlx takes an advisory lock).
    ///
    /// sqlx 0.8 records migrations in one `_sqlx_migrations` table per database (or schema), so
    /// the migrator ignores versions it does not know: an application that runs its own sqlx
    /// migrations in the same database does not break this one. The application's migrator
    /// needs `set_ignore_missing(true)` in turn, or kxp-dedup can live in its own PostgreSQL
    /// schema (`?options=-c search_path=kxp`), which keeps a separate migrations table.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        match &self.pool {
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => sqlite_migrator().run(pool).await?,
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => postgres_migrator().run(pool).await?,
        }
        Ok(())
    }

    /// A handle on the same database (and pool) whose records are keyed by `scope` as well:
    /// the same event id under two scopes is two events, each processed once.
    ///
    /// Event ids are unique per sender account, not across accounts: a receiver that takes
    /// events of several accounts (several endpoints, each with its own secret) gives each
    /// route its own scope, say the account or the route's name, so that one account's event
    /// cannot mark another's with the same id as a duplicate. Set it from the route's
    /// configuration, never from anything in the request: the id is verified, but which
    /// account a request claims to come from (an `X-Kxp-Endpoint-Id`, say) is not. A receiver
    /// of one account needs no scope.
    ///
    /// Everything the handle does stays in its scope: claims, in-transaction marks, the inbox
    /// and its worker, held events, checkpoints and [`record`](Store::record);
    /// [`purge`](Store::purge) alone spans every scope.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), kxp_dedup::StoreError> {
    /// use std::time::Duration;
    /// use kxp_dedup::{Claim, Store};
    ///
    /// let store = Store::connect("sqlite::memory:").await?;
    /// let (shop_a, shop_b) = (store.scoped("shop-a"), store.scoped("shop-b"));
    /// let lease = Duration::from_secs(60);
    /// // The same id from two accounts: each route claims its own.
    /// assert_eq!(shop_a.claim("5f0c7d1e-…", lease).await?, Claim::Claimed);
    /// assert_eq!(shop_b.claim("5f0c7d1e-…", lease).await?, Claim::Claimed);
    /// # Ok(()) }
    /// ```
    pub fn scoped(&self, scope: &str) -> Store {
        Store {
            pool: self.pool.clone(),
            scope: Arc::from(scope),
        }
    }

    /// The scope of this handle's records: empty unless set by [`scoped`](Store::scoped).
    pub fn scope(&self) -> &str {
        &self.scope
    }

    /// Which database this store uses.
    pub fn backend(&self) -> Backend {
        match &self.pool {
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(_) => Backend::Sqlite,
            #[cfg(feature = "postgres")]
            Pool::Postgres(_) => Backend::Postgres,
        }
    }

    #[cfg(feature = "sqlite")]
    /// The SQLite pool, when the store is on SQLite: run the application's own queries on the
    /// same database.
    pub fn sqlite_pool(&self) -> Option<&SqlitePool> {
        match &self.pool {
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => Some(pool),
            #[cfg(feature = "postgres")]
            Pool::Postgres(_) => None,
        }
    }

    #[cfg(feature = "postgres")]
    /// The PostgreSQL pool, when the store is on PostgreSQL.
    pub fn postgres_pool(&self) -> Option<&PgPool> {
        match &self.pool {
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(_) => None,
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => Some(pool),
        }
    }

    /// Closes the pool: waits for connections in use to come back, then closes them all. Every
    /// later operation (on every clone) fails with `unavailable`.
    pub async fn close(&self) {
        match &self.pool {
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => pool.close().await,
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => pool.close().await,
        }
    }

    /// Claims `event_id` for `lease`, in one statement:
    ///
    /// ```sql
    /// INSERT … ON CONFLICT (event_id) DO UPDATE SET status = 'processing', attempts = attempts + 1, …
    /// WHERE status = 'failed' OR (status = 'processing' AND locked_until < now) RETURNING …
    /// ```
    ///
    /// A new event id, a failed one, or one whose lease ran out (its process died) is
    /// [`Claimed`](Claim::Claimed); concurrent claims of the same id serialize in the database
    /// and exactly one wins. Otherwise the row is read to tell
    /// [`AlreadyDone`](Claim::AlreadyDone) from [`InProgress`](Claim::InProgress).
    ///
    /// The lease should outlast the handler: a claim whose lease ran out can be taken by another
    /// delivery while the first handler still runs. This claim is not renewable and
    /// [`complete`](Store::complete) / [`fail`](Store::fail) do not check who holds the event:
    /// [`claim_lease`](Store::claim_lease) is the same claim with a fencing token, and
    /// [`process`](crate::process) uses it.
    pub async fn claim(&self, event_id: &str, lease: Duration) -> Result<Claim, StoreError> {
        Ok(match self.claim_inner(event_id, lease).await? {
            ClaimState::Claimed { .. } => Claim::Claimed,
            ClaimState::AlreadyDone => Claim::AlreadyDone,
            ClaimState::InProgress { retry_after } => Claim::InProgress { retry_after },
        })
    }

    /// [`claim`](Store::claim) (the same statement and rules), handing a won claim out as a
    /// [`Lease`]: keep it alive with [`renew`](Store::renew) while the work runs (at a third of
    /// its duration, say, as [`process`](crate::process) does), then end it with
    /// [`complete_lease`](Store::complete_lease) or [`fail_lease`](Store::fail_lease). All three
    /// are refused with `claim_lost` once the event was claimed again by anyone else, so a
    /// holder that outlived its lease cannot overwrite the new holder's claim.
    pub async fn claim_lease(
        &self,
        event_id: &str,
        lease: Duration,
    ) -> Result<LeaseClaim, StoreError> {
        Ok(match self.claim_inner(event_id, lease).await? {
            ClaimState::Claimed { attempts } => LeaseClaim::Held(Lease {
                scope: Arc::clone(&self.scope),
                event_id: event_id.to_owned(),
                token: attempts,
                duration: lease,
            }),
            ClaimState::AlreadyDone => LeaseClaim::AlreadyDone,
            ClaimState::InProgress { retry_after } => LeaseClaim::InProgress { retry_after },
        })
    }

    /// Extends `lease` to its [`duration`](Lease::duration) from now (the database's now), if
    /// it still holds its event: a lease that ran out but was not taken over yet is renewed
    /// too, since nobody else holds the event.
    ///
    /// Fails with `claim_lost` when the event carries a newer claim (or was completed), and
    /// `not_claimed` when its row is gone (purged).
    pub async fn renew(&self, lease: &Lease) -> Result<(), StoreError> {
        self.fenced(
            lease,
            Fenced::Renew {
                lease_ms: millis(lease.duration),
            },
        )
        .await
    }

    /// [`complete`](Store::complete) for the holder of `lease` only: marks the event done if
    /// it still carries this lease's claim.
    ///
    /// Fails with `claim_lost` when the event was claimed again after the lease ran out (the
    /// new holder's claim is left as it is: the event is not marked done for it), and
    /// `not_claimed` when its row is gone.
    pub async fn complete_lease(&self, lease: Lease) -> Result<(), StoreError> {
        self.fenced(&lease, Fenced::Complete).await
    }

    /// [`fail`](Store::fail) for the holder of `lease` only: marks the event failed (claimable
    /// by the next delivery at once) and records `error` as `last_error`, if it still carries
    /// this lease's claim. Fails with `claim_lost` or `not_claimed` as
    /// [`complete_lease`](Store::complete_lease) does.
    pub async fn fail_lease(&self, lease: Lease, error: &str) -> Result<(), StoreError> {
        let error = crate::util::truncate(error, crate::MAX_ERROR_LEN);
        self.fenced(&lease, Fenced::Fail { error }).await
    }

    /// The one statement of [`renew`](Store::renew), [`complete_lease`](Store::complete_lease)
    /// and [`fail_lease`](Store::fail_lease): an `UPDATE` of the event's row that matches only
    /// while it carries `lease`'s claim (status `processing`, `attempts` = its token).
    async fn fenced(&self, lease: &Lease, change: Fenced<'_>) -> Result<(), StoreError> {
        let token = i64::from(lease.token);
        let updated = match &self.pool {
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => {
                let set = match change {
                    Fenced::Renew { .. } => format!("locked_until = {SQLITE_NOW} + ?4"),
                    Fenced::Complete => "status = 'done', locked_until = NULL".to_owned(),
                    Fenced::Fail { .. } => {
                        "status = 'failed', locked_until = NULL, last_error = ?4".to_owned()
                    }
                };
                let sql = format!(
                    "UPDATE kxp_processed_events SET {set}, updated_at = {SQLITE_NOW}
                     WHERE event_id = ?1 AND status = 'processing' AND attempts = ?2 AND scope = ?3"
                );
                let query = sqlx::query(&sql)
                    .bind(&lease.event_id)
                    .bind(token)
                    .bind(&*lease.scope);
                let query = match change {
                    Fenced::Renew { lease_ms } => query.bind(lease_ms),
                    Fenced::Complete => query,
                    Fenced::Fail { error } => query.bind(error),
                };
                query.execute(pool).await?.rows_affected()
            }
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => {
                let set = match change {
                    Fenced::Renew { .. } => {
                        "locked_until = now() + $4::bigint * interval '1 millisecond'"
                    }
                    Fenced::Complete => "status = 'done', locked_until = NULL",
                    Fenced::Fail { .. } => {
                        "status = 'failed', locked_until = NULL, last_error = $4"
                    }
                };
                let sql = format!(
                    "UPDATE kxp_processed_events SET {set}, updated_at = now()
                     WHERE event_id = $1 AND status = 'processing' AND attempts = $2::bigint AND scope = $3"
                );
                let query = sqlx::query(&sql)
                    .bind(&lease.event_id)
                    .bind(token)
                    .bind(&*lease.scope);
                let query = match change {
                    Fenced::Renew { lease_ms } => query.bind(lease_ms),
                    Fenced::Complete => query,
                    Fenced::Fail { error } => query.bind(error),
                };
                query.execute(pool).await?.rows_affected()
            }
        };
        self.scoped(&lease.scope)
            .held_or_lost(&lease.event_id, updated)
            .await
    }

    /// After a fenced statement: one row updated is success; none is `claim_lost` if the row
    /// exists (it carries another claim), else `not_claimed`.
    async fn held_or_lost(&self, event_id: &str, updated: u64) -> Result<(), StoreError> {
        if updated > 0 {
            return Ok(());
        }
        let event_id = event_id.to_owned();
        Err(match self.state(&event_id).await? {
            Some(_) => StoreError::ClaimLost { event_id },
            None => StoreError::NotClaimed { event_id },
        })
    }

    /// The status of `event_id` and the milliseconds left on its lease (0 when none or
    /// expired), or `None` without a row.
    pub(crate) async fn state(&self, event_id: &str) -> Result<Option<(String, i64)>, StoreError> {
        Ok(match &self.pool {
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => {
                sqlx::query_as(SQLITE_STATE)
                    .bind(event_id)
                    .bind(&*self.scope)
                    .fetch_optional(pool)
                    .await?
            }
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => {
                sqlx::query_as(PG_STATE)
                    .bind(event_id)
                    .bind(&*self.scope)
                    .fetch_optional(pool)
                    .await?
            }
        })
    }

    pub(crate) async fn claim_inner(
        &self,
        event_id: &str,
        lease: Duration,
    ) -> Result<ClaimState, StoreError> {
        let lease_ms = millis(lease);
        // The row may change between the claim and the read (failed, expired or purged in
        // between); then the claim is simply tried again.
        for _ in 0..3 {
            let attempts: Option<i64> = match &self.pool {
                #[cfg(feature = "sqlite")]
                Pool::Sqlite(pool) => {
                    sqlx::query_scalar(SQLITE_CLAIM)
                        .bind(event_id)
                        .bind(lease_ms)
                        .bind(&*self.scope)
                        .fetch_optional(pool)
                        .await?
                }
                #[cfg(feature = "postgres")]
                Pool::Postgres(pool) => sqlx::query_scalar::<_, i32>(PG_CLAIM)
                    .bind(event_id)
                    .bind(lease_ms)
                    .bind(&*self.scope)
                    .fetch_optional(pool)
                    .await?
                    .map(i64::from),
            };
            if let Some(attempts) = attempts {
                let attempts = u32::try_from(attempts).unwrap_or(u32::MAX);
                return Ok(ClaimState::Claimed { attempts });
            }
            match self.state(event_id).await? {
                Some((status, _)) if status == "done" => {
                    return Ok(ClaimState::AlreadyDone);
                }
                Some((status, left_ms)) if status == "processing" && left_ms > 0 => {
                    return Ok(ClaimState::InProgress {
                        retry_after: retry_after_from_millis(left_ms),
                    });
                }
                _ => continue,
            }
        }
        // Three races lost in a row: somebody else is busy with this id right now.
        Ok(ClaimState::InProgress {
            retry_after: Duration::from_secs(1),
        })
    }

    /// Marks a claimed event done: every later claim answers
    /// [`AlreadyDone`](Claim::AlreadyDone). Call it only once the handler's effect is durable.
    ///
    /// Unfenced: it marks the event done whoever holds it now; a holder whose lease may have run
    /// out should use [`complete_lease`](Store::complete_lease). Fails with `not_claimed` when
    /// there is no row for `event_id`.
    pub async fn complete(&self, event_id: &str) -> Result<(), StoreError> {
        let updated = match &self.pool {
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => sqlx::query(
                "UPDATE kxp_processed_events
                 SET status = 'done', locked_until = NULL,
                     updated_at = CAST(unixepoch('subsec') * 1000 AS INTEGER)
                 WHERE event_id = ?1 AND scope = ?2",
            )
            .bind(event_id)
            .bind(&*self.scope)
            .execute(pool)
            .await?
            .rows_affected(),
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => sqlx::query(
                "UPDATE kxp_processed_events
                 SET status = 'done', locked_until = NULL, updated_at = now()
                 WHERE event_id = $1 AND scope = $2",
            )
            .bind(event_id)
            .bind(&*self.scope)
            .execute(pool)
            .await?
            .rows_affected(),
        };
        if updated == 0 {
            return Err(StoreError::NotClaimed {
                event_id: event_id.to_owned(),
            });
        }
        Ok(())
    }

    /// Marks a claimed event failed and records `error` (cut to
    /// [`MAX_ERROR_LEN`](crate::MAX_ERROR_LEN) bytes) as `last_error`: the next delivery claims
    /// it again without waiting for the lease.
    ///
    /// A done event stays done (another delivery may have completed it after this one's lease
    /// ran out), but a newer claim is not protected: [`fail_lease`](Store::fail_lease) is.
    /// Fails with `not_claimed` when there is no row for `event_id`.
    pub async fn fail(&self, event_id: &str, error: &str) -> Result<(), StoreError> {
        let error = crate::util::truncate(error, crate::MAX_ERROR_LEN);
        let updated = match &self.pool {
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => sqlx::query(
                "UPDATE kxp_processed_events
                 SET status = 'failed', locked_until = NULL, last_error = ?2,
                     updated_at = CAST(unixepoch('subsec') * 1000 AS INTEGER)
                 WHERE event_id = ?1 AND status <> 'done' AND scope = ?3",
            )
            .bind(event_id)
            .bind(error)
            .bind(&*self.scope)
            .execute(pool)
            .await?
            .rows_affected(),
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => sqlx::query(
                "UPDATE kxp_processed_events
                 SET status = 'failed', locked_until = NULL, last_error = $2, updated_at = now()
                 WHERE event_id = $1 AND status <> 'done' AND scope = $3",
            )
            .bind(event_id)
            .bind(error)
            .bind(&*self.scope)
            .execute(pool)
            .await?
            .rows_affected(),
        };
        if updated == 0 && self.record(event_id).await?.is_none() {
            return Err(StoreError::NotClaimed {
                event_id: event_id.to_owned(),
            });
        }
        Ok(())
    }

    /// Deletes what is older than `older_than` ([`DEFAULT_RETENTION`](crate::DEFAULT_RETENTION)
    /// is 30 days): event rows whose last change is older, and processed inbox items done
    /// before then. Returns how many rows went, from both tables.
    ///
    /// Inbox items that are not processed yet are never deleted. A delivery of a purged event
    /// id is processed again, so keep the age longer than the sender's retry span (about a day)
    /// plus the time within which anyone might replay an event.
    pub async fn purge(&self, older_than: Duration) -> Result<u64, StoreError> {
        let age_ms = millis(older_than);
        let deleted = match &self.pool {
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => {
                let events = sqlx::query(
                    "DELETE FROM kxp_processed_events
                     WHERE updated_at < CAST(unixepoch('subsec') * 1000 AS INTEGER) - ?1",
                )
                .bind(age_ms)
                .execute(pool)
                .await?
                .rows_affected();
                let inbox = sqlx::query(
                    "DELETE FROM kxp_inbox
                     WHERE done_at < CAST(unixepoch('subsec') * 1000 AS INTEGER) - ?1",
                )
                .bind(age_ms)
                .execute(pool)
                .await?
                .rows_affected();
                events + inbox
            }
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => {
                let events = sqlx::query(
                    "DELETE FROM kxp_processed_events
                     WHERE updated_at < now() - $1::bigint * interval '1 millisecond'",
                )
                .bind(age_ms)
                .execute(pool)
                .await?
                .rows_affected();
                let inbox = sqlx::query(
                    "DELETE FROM kxp_inbox
                     WHERE done_at < now() - $1::bigint * interval '1 millisecond'",
                )
                .bind(age_ms)
                .execute(pool)
                .await?
                .rows_affected();
                events + inbox
            }
        };
        Ok(deleted)
    }

    /// The stored state of `event_id`, or `None` if it was never seen (or purged).
    pub async fn record(&self, event_id: &str) -> Result<Option<EventRecord>, StoreError> {
        let row: Option<(String, i64, Option<String>)> = match &self.pool {
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => {
                sqlx::query_as(
                    "SELECT status, attempts, last_error FROM kxp_processed_events
                     WHERE event_id = ?1 AND scope = ?2",
                )
                .bind(event_id)
                .bind(&*self.scope)
                .fetch_optional(pool)
                .await?
            }
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => {
                sqlx::query_as(
                    "SELECT status, attempts::bigint, last_error FROM kxp_processed_events
                     WHERE event_id = $1 AND scope = $2",
                )
                .bind(event_id)
                .bind(&*self.scope)
                .fetch_optional(pool)
                .await?
            }
        };
        row.map(|(status, attempts, last_error)| {
            Ok(EventRecord {
                status: EventStatus::parse(&status)?,
                attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
                last_error,
            })
        })
        .transpose()
    }

    /// Begins a transaction for in-transaction mode: call [`Tx::mark_processed`], run the side
    /// effect on [`Tx::sqlite`] / `Tx::postgres`, then [`Tx::commit`].
    ///
    /// On SQLite the transaction is `BEGIN IMMEDIATE`: it takes the single write lock at once,
    /// so concurrent deliveries of one event wait their turn (up to the busy timeout) instead
    /// of failing with `SQLITE_BUSY` when a read lock would have to be upgraded.
    pub async fn begin(&self) -> Result<Tx, StoreError> {
        match &self.pool {
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => Ok(Tx::sqlite_tx(
                pool.begin_with("BEGIN IMMEDIATE").await?,
                Arc::clone(&self.scope),
            )),
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => Ok(Tx::postgres_tx(
                pool.begin().await?,
                Arc::clone(&self.scope),
            )),
        }
    }
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Connect options hold the password: show nothing of them.
        f.debug_struct("Store")
            .field("backend", &self.backend())
            .field("scope", &&*self.scope)
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "sqlite")]
fn sqlite_migrator() -> sqlx::migrate::Migrator {
    let mut migrator = sqlx::migrate!("./migrations/sqlite");
    migrator.set_ignore_missing(true);
    migrator
}

#[cfg(feature = "postgres")]
fn postgres_migrator() -> sqlx::migrate::Migrator {
    let mut migrator = sqlx::migrate!("./migrations/postgres");
    migrator.set_ignore_missing(true);
    migrator
}

/// A pool's `after_release` hook that closes a connection still inside a transaction instead
/// of pooling it again; [`Store::connect`] installs it, and a pool given to
/// [`Store::from_sqlite_pool`] should have it too.
///
/// A transaction can end in a state the driver did not follow: on `SQLITE_FULL` (a full disk)
/// SQLite rolls back by itself, the `ROLLBACK` sqlx sends then fails, and sqlx's transaction
/// depth stays at 1, so every later `begin` on that connection fails (sqlx issues #3932 and
/// #4031): a receiver in in-transaction mode answered 503 to every delivery after the disk had
/// space again. A dropped transaction's rollback is queued, not yet run, so a ping first lets it
/// run; what is still inside a transaction then is closed, and the pool opens a fresh
/// connection.
///
/// ```no_run
/// use kxp_dedup::clean_on_release;
/// use kxp_dedup::sqlx::{self, Database, Sqlite, TransactionManager, sqlite::SqlitePoolOptions};
///
/// # async fn pool() -> Result<(), sqlx::Error> {
/// let pool = SqlitePoolOptions::new()
///     .after_release(|conn, _| {
///         clean_on_release(conn, <Sqlite as Database>::TransactionManager::get_transaction_depth)
///     })
///     .connect("sqlite://app.db")
///     .await?;
/// # Ok(()) }
/// ```
pub fn clean_on_release<C: sqlx::Connection>(
    conn: &mut C,
    depth: fn(&C) -> usize,
) -> Pin<Box<dyn Future<Output = Result<bool, sqlx::Error>> + Send + '_>> {
    Box::pin(async move {
        if depth(conn) == 0 {
            return Ok(true);
        }
        if conn.ping().await.is_err() {
            return Ok(false);
        }
        Ok(depth(conn) == 0)
    })
}
