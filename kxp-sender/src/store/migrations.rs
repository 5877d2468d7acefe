//! The schema's versions: which migrations the database has, which of this version's it lacks,
//! and applying them, one transaction each, reported one by one.
//!
//! On PostgreSQL, several processes share the database and an upgrade is planned: `kxp serve`
//! refuses to start while one of its migrations is pending ([`Migrations::Require`]) and
//! `kxp migrate` shows and applies them. SQLite belongs to one process, which applies its own.
//!
//! A database may hold migrations this version does not know: a newer version applied them (a
//! rolling upgrade, with this version still running beside it). They are tolerated and listed —
//! the expand/contract rule of docs/upgrading.md is what keeps the previous version working on
//! the newer schema. A known migration applied with other SQL than this version's is refused:
//! that schema is not one this version was tested on.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use sqlx::migrate::{Migrate, MigrateError, Migrator};

use super::Db;
use super::distribute::{self, DistributeError, Distribution};

static SQLITE: Migrator = sqlx::migrate!("./migrations/sqlite");
pub(super) static POSTGRES: Migrator = sqlx::migrate!("./migrations/postgres");

/// PostgreSQL's code for a lock not granted within `lock_timeout`.
const LOCK_NOT_AVAILABLE: &str = "55P03";

/// How long `kxp migrate apply` and `kxp serve --migrate` let a migration's statement wait
/// for a lock by default: long enough for the sender's own short transactions, short enough that
/// the queries queued behind the migration's lock request wait no longer than that.
pub const LOCK_TIMEOUT: Duration = Duration::from_secs(5);

/// What opening the database does with the migrations this version has and it lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Migrations {
    /// Applies them (SQLite always does; `kxp serve --migrate` on PostgreSQL), each statement
    /// waiting at most this long for a lock.
    Apply {
        /// How long a statement may wait for a lock before the migration is given up.
        lock_timeout: Duration,
    },
    /// Refuses to go on while one is pending (PostgreSQL): `kxp migrate apply` first.
    Require,
}

/// A migration the database has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AppliedMigration {
    /// Its version: the file name's leading number.
    pub version: i64,
    /// Its name, from the file name.
    pub name: String,
    /// When it was applied, by the database's clock (UTC, RFC 3339).
    pub applied_at: String,
    /// Whether this version knows it (`false`: a newer version applied it).
    pub known: bool,
}

/// A migration of this version that the database lacks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PendingMigration {
    /// Its version: the file name's leading number.
    pub version: i64,
    /// Its name, from the file name.
    pub name: String,
    /// Whether it runs in a transaction (`false`: its file begins `-- no-transaction`, as an
    /// index built `CONCURRENTLY` must).
    pub transaction: bool,
    /// Its SQL, as `kxp migrate plan` prints it.
    #[serde(skip)]
    pub sql: String,
}

/// The database's schema against this version's migrations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SchemaStatus {
    /// `sqlite` or `postgres`.
    pub database: &'static str,
    /// What the database has, oldest first.
    pub applied: Vec<AppliedMigration>,
    /// What this version has and the database lacks, in the order they run.
    pub pending: Vec<PendingMigration>,
    /// Versions applied with other SQL than this version's (refused).
    pub modified: Vec<i64>,
    /// How the tables are placed over a Citus cluster; `None` without the citus extension.
    pub distribution: Option<Distribution>,
}

impl SchemaStatus {
    /// Whether this version can run on the database as it is: nothing pending or modified,
    /// and on Citus every table placed.
    pub fn is_current(&self) -> bool {
        self.refusal().is_none()
    }

    /// Why this version cannot run on the database as it is, if it cannot.
    pub fn refusal(&self) -> Option<SchemaError> {
        if let Some(&version) = self.modified.first() {
            return Some(SchemaError::Modified(version));
        }
        if let Some(first) = self.pending.first() {
            return Some(SchemaError::Pending {
                count: self.pending.len(),
                first: format!("{}_{}", first.version, first.name),
            });
        }
        let local: Vec<&str> = self.distribution.iter().flat_map(|d| d.local()).collect();
        let first = local.first()?;
        Some(SchemaError::Undistributed {
            count: local.len(),
            first: (*first).to_owned(),
        })
    }
}

/// Why the schema is not one this version can run on, or could not be brought there.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaError {
    /// This version has migrations the database lacks, and was not told to apply them.
    #[error(
        "the database lacks {count} migration(s) of this version, from {first}: run `kxp \
         migrate plan` to see them and `kxp migrate apply` to apply them (or start with \
         --migrate); see docs/upgrading.md"
    )]
    Pending {
        /// How many.
        count: usize,
        /// The first to run, `<version>_<name>`.
        first: String,
    },
    /// The database has Citus, and tables still on the coordinator alone.
    #[error(
        "the database has Citus but {count} table(s) are not distributed yet, from {first}: run \
         `kxp migrate apply` (or start with --migrate) to distribute them; see docs/scaling.md"
    )]
    Undistributed {
        /// How many.
        count: usize,
        /// The first, by name.
        first: String,
    },
    /// Placing the tables over the Citus cluster failed. The migrations before it stay
    /// applied; `kxp migrate apply` again goes on where it stopped.
    #[error("{0}")]
    Distribute(#[from] DistributeError),
    /// A migration was applied with other SQL than this version's.
    #[error(
        "migration {0} was applied with other SQL than this version's: the schema is not one \
         this version knows (was the database migrated by an unreleased build?)"
    )]
    Modified(i64),
    /// A migration without a transaction failed part-way on an earlier run.
    #[error(
        "migration {0} failed part-way on an earlier run: repair it as docs/upgrading.md says \
         before going on"
    )]
    Dirty(i64),
    /// A statement of a migration waited longer than the lock timeout: a transaction holds a
    /// table it needs. Nothing of that migration was applied.
    #[error(
        "migration {version} waited over {timeout:?} for a lock that a running transaction \
         holds, and was rolled back: retry when that transaction has ended, or raise \
         --lock-timeout"
    )]
    LockTimeout {
        /// The migration.
        version: i64,
        /// The lock timeout it ran under.
        timeout: Duration,
    },
    /// A migration's SQL failed. Nothing of it was applied if it runs in a transaction.
    #[error("migration {version} failed: {source}")]
    Failed {
        /// The migration.
        version: i64,
        /// The database's error.
        source: sqlx::Error,
    },
    /// The database could not be read.
    #[error("{0}")]
    Database(#[from] sqlx::Error),
}

impl From<MigrateError> for SchemaError {
    fn from(e: MigrateError) -> SchemaError {
        match e {
            MigrateError::Dirty(version) => SchemaError::Dirty(version),
            MigrateError::VersionMismatch(version) => SchemaError::Modified(version),
            MigrateError::ExecuteMigration(source, version) => {
                SchemaError::Failed { version, source }
            }
            MigrateError::Execute(e) => SchemaError::Database(e),
            other => SchemaError::Database(sqlx::Error::Migrate(Box::new(other))),
        }
    }
}

impl Db {
    /// This backend's migrations.
    fn migrator(&self) -> &'static Migrator {
        match self {
            Db::Sqlite(_) => &SQLITE,
            Db::Postgres(_) | Db::Citus(_) => &POSTGRES,
        }
    }

    /// Brings the schema to `migrations`' terms: applies what is pending, or refuses if any
    /// is (never on SQLite, which always applies).
    pub(crate) async fn settle_schema(&self, migrations: Migrations) -> Result<(), SchemaError> {
        match (self, migrations) {
            (Db::Postgres(_) | Db::Citus(_), Migrations::Require) => {
                match self.schema_status().await?.refusal() {
                    Some(refusal) => Err(refusal),
                    None => Ok(()),
                }
            }
            (_, Migrations::Apply { lock_timeout }) => {
                self.apply_migrations(lock_timeout, |_, _| {}).await?;
                Ok(())
            }
            (Db::Sqlite(_), Migrations::Require) => {
                self.apply_migrations(Duration::ZERO, |_, _| {}).await?;
                Ok(())
            }
        }
    }

    /// What the database has and lacks, read without writing anything (a database never
    /// migrated has no migrations table yet, and gets none from this).
    pub(crate) async fn schema_status(&self) -> Result<SchemaStatus, sqlx::Error> {
        self.status_against(self.migrator()).await
    }

    /// [`Db::schema_status`] against `migrator`'s migrations.
    async fn status_against(&self, migrator: &Migrator) -> Result<SchemaStatus, sqlx::Error> {
        let rows: Vec<(i64, String, String, Vec<u8>)> = match self {
            Db::Sqlite(pool) => {
                let exists: Option<String> = sqlx::query_scalar(
                    "SELECT name FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'",
                )
                .fetch_optional(pool)
                .await?;
                if exists.is_none() {
                    Vec::new()
                } else {
                    sqlx::query_as(
                        "SELECT version, description, strftime('%Y-%m-%dT%H:%M:%SZ', installed_on), \
                         checksum FROM _sqlx_migrations WHERE success ORDER BY version",
                    )
                    .fetch_all(pool)
                    .await?
                }
            }
            Db::Postgres(pool) | Db::Citus(pool) => {
                let exists: Option<String> =
                    sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations')::text")
                        .fetch_one(pool)
                        .await?;
                if exists.is_none() {
                    Vec::new()
                } else {
                    sqlx::query_as(
                        "SELECT version, description, \
                         to_char(installed_on AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), \
                         checksum FROM _sqlx_migrations WHERE success ORDER BY version",
                    )
                    .fetch_all(pool)
                    .await?
                }
            }
        };
        let mut status = compare(self.backend(), migrator, rows);
        if let Db::Postgres(pool) | Db::Citus(pool) = self {
            let mut conn = pool.acquire().await?;
            if distribute::has_citus(&mut conn).await? {
                status.distribution = Some(distribute::read(&mut conn).await?);
            }
        }
        Ok(status)
    }

    /// Applies every pending migration in order, each in its own transaction (unless its file
    /// says `-- no-transaction`), calling `applied` after each with how long it took. On
    /// PostgreSQL, processes starting at once take turns (an advisory lock), and each
    /// statement waits at most `lock_timeout` for a table lock (zero: no limit), so a
    /// migration stuck behind a long transaction fails instead of stopping every query queued
    /// behind its own lock request.
    pub(crate) async fn apply_migrations(
        &self,
        lock_timeout: Duration,
        applied: impl FnMut(&PendingMigration, Duration),
    ) -> Result<Vec<PendingMigration>, SchemaError> {
        self.apply_from(self.migrator(), lock_timeout, applied)
            .await
    }

    /// [`Db::apply_migrations`] of `migrator`'s migrations (the tests bring their own).
    async fn apply_from(
        &self,
        migrator: &Migrator,
        lock_timeout: Duration,
        mut applied: impl FnMut(&PendingMigration, Duration),
    ) -> Result<Vec<PendingMigration>, SchemaError> {
        // A connection of its own, closed after: its session settings never reach the pool.
        match self {
            Db::Sqlite(pool) => {
                let mut conn = pool.acquire().await?.detach();
                apply_on(&mut conn, self, migrator, Duration::ZERO, &mut applied).await
            }
            Db::Postgres(pool) | Db::Citus(pool) => {
                let mut conn = pool.acquire().await?.detach();
                // Taken first, so that waiting for another process's migrations is not
                // bounded by the lock timeout.
                conn.lock().await?;
                let result = async {
                    // A migration may run for minutes (a fill, an index built concurrently):
                    // never under the pool's statement timeout.
                    sqlx::query("SET statement_timeout = 0")
                        .execute(&mut conn)
                        .await?;
                    if !lock_timeout.is_zero() {
                        // SET takes no bind parameters; the number is ours, never a user's text.
                        sqlx::query(&format!(
                            "SET lock_timeout = '{}ms'",
                            lock_timeout.as_millis()
                        ))
                        .execute(&mut conn)
                        .await?;
                    }
                    let applied =
                        apply_on(&mut conn, self, migrator, lock_timeout, &mut applied).await?;
                    if distribute::has_citus(&mut conn).await? {
                        distribute::distribute(&mut conn).await?;
                    }
                    Ok(applied)
                }
                .await;
                // Also on failure; the connection is closed after anyway.
                let _ = conn.unlock().await;
                result
            }
        }
    }
}

/// Applies what is pending, on `conn` (holding the migrations' lock, on PostgreSQL).
async fn apply_on<C: Migrate + Send>(
    conn: &mut C,
    db: &Db,
    migrator: &Migrator,
    lock_timeout: Duration,
    applied: &mut impl FnMut(&PendingMigration, Duration),
) -> Result<Vec<PendingMigration>, SchemaError> {
    conn.ensure_migrations_table().await?;
    if let Some(version) = conn.dirty_version().await? {
        return Err(SchemaError::Dirty(version));
    }
    // Read now: another process may have applied some while this one waited for the lock.
    let status = db.status_against(migrator).await?;
    if let Some(&version) = status.modified.first() {
        return Err(SchemaError::Modified(version));
    }
    for pending in &status.pending {
        let Some(migration) = migrator.iter().find(|m| m.version == pending.version) else {
            continue;
        };
        if migration.no_tx {
            drop_invalid_indexes(db, &migration.sql).await?;
        }
        match conn.apply(migration).await {
            Ok(took) => applied(pending, took),
            Err(MigrateError::ExecuteMigration(e, version)) if is_lock_timeout(&e) => {
                return Err(SchemaError::LockTimeout {
                    version,
                    timeout: lock_timeout,
                });
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(status.pending)
}

/// Drops what an earlier, failed run of a `-- no-transaction` migration left behind: an index
/// built `CONCURRENTLY` that failed stays, marked invalid (never used, but kept up to date), and
/// the migration is not recorded, so it runs again — and its `IF NOT EXISTS` would then keep
/// the invalid index and record the migration as done. PostgreSQL only (SQLite builds no index
/// concurrently).
async fn drop_invalid_indexes(db: &Db, sql: &str) -> Result<(), sqlx::Error> {
    let (Db::Postgres(pool) | Db::Citus(pool)) = db else {
        return Ok(());
    };
    for name in concurrent_indexes(sql) {
        let invalid: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid \
             WHERE c.relname = $1 AND pg_table_is_visible(c.oid) AND NOT i.indisvalid)",
        )
        .bind(name)
        .fetch_one(pool)
        .await?;
        if invalid {
            tracing::warn!(target: "kxp_sender", index = name, "dropping the invalid index a failed migration left, to build it again");
            // The name is the migration's own text (an identifier), never a user's.
            sqlx::query(&format!("DROP INDEX CONCURRENTLY IF EXISTS {name}"))
                .execute(pool)
                .await?;
        }
    }
    Ok(())
}

/// The names of the indexes `sql` builds `CONCURRENTLY`.
fn concurrent_indexes(sql: &str) -> Vec<&str> {
    let words: Vec<&str> = sql
        .lines()
        .filter(|line| !line.trim_start().starts_with("--"))
        .flat_map(str::split_whitespace)
        .collect();
    let mut names = Vec::new();
    for (i, word) in words.iter().enumerate() {
        if !word.eq_ignore_ascii_case("CONCURRENTLY")
            || !i
                .checked_sub(1)
                .and_then(|j| words.get(j))
                .is_some_and(|w| w.eq_ignore_ascii_case("INDEX"))
        {
            continue;
        }
        let rest = words.get(i + 1..).unwrap_or_default();
        let name = match rest {
            [w1, w2, w3, name, ..]
                if w1.eq_ignore_ascii_case("IF")
                    && w2.eq_ignore_ascii_case("NOT")
                    && w3.eq_ignore_ascii_case("EXISTS") =>
            {
                name
            }
            [name, ..] => name,
            [] => continue,
        };
        names.push(*name);
    }
    names
}

fn is_lock_timeout(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|e| e.code())
        .is_some_and(|code| code == LOCK_NOT_AVAILABLE)
}

/// The applied rows (version, name, time, checksum) against `migrator`'s migrations.
fn compare(
    database: &'static str,
    migrator: &Migrator,
    rows: Vec<(i64, String, String, Vec<u8>)>,
) -> SchemaStatus {
    let known: BTreeMap<i64, &sqlx::migrate::Migration> = migrator
        .iter()
        .filter(|m| m.migration_type.is_up_migration())
        .map(|m| (m.version, m))
        .collect();
    let mut modified = Vec::new();
    let applied: Vec<AppliedMigration> = rows
        .into_iter()
        .map(|(version, name, applied_at, checksum)| {
            let mine = known.get(&version);
            if mine.is_some_and(|m| *m.checksum != *checksum) {
                modified.push(version);
            }
            AppliedMigration {
                version,
                name,
                applied_at,
                known: mine.is_some(),
            }
        })
        .collect();
    let pending = known
        .values()
        .filter(|m| !applied.iter().any(|a| a.version == m.version))
        .map(|m| PendingMigration {
            version: m.version,
            name: m.description.to_string(),
            transaction: !m.no_tx,
            sql: m.sql.to_string(),
        })
        .collect();
    SchemaStatus {
        database,
        applied,
        pending,
        modified,
        distribution: None,
    }
}

#[cfg(test)]
mod tests;
