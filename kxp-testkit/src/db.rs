//! Databases for tests (feature `db`): a fresh PostgreSQL database per test on the server of
//! [`PG_ENV`] (or a loud `SKIPPED` line when it is not set), and a SQLite file in a fresh
//! temporary directory. Each is deleted when the test is done with it, also when the test
//! panics, so runs never see each other and leave nothing behind.
//!
//! ```no_run
//! # async fn test() {
//! use kxp_testkit::db::PgDatabase;
//!
//! let Some(database) = PgDatabase::create("kxp_example").await else {
//!     return; // `SKIPPED (PostgreSQL): KXP_TEST_DATABASE_URL is not set` is on stderr.
//! };
//! // … connect to `database.url()` and test …
//! database.drop().await;
//! # }
//! ```

use std::io::Write;
use std::path::Path;

use sqlx::{Connection, PgConnection};

/// The environment variable that names the PostgreSQL server tests create their databases on:
/// a URL the tests may run `CREATE DATABASE` with, e.g. `postgres://postgres@127.0.0.1:5432/test`.
pub const PG_ENV: &str = "KXP_TEST_DATABASE_URL";

/// The URL of [`PG_ENV`]; `None` when it is unset or empty, after writing
/// `SKIPPED (PostgreSQL): KXP_TEST_DATABASE_URL is not set` to stderr.
///
/// The line is written to the stderr handle itself, not with `eprintln!`: libtest captures the
/// macro's output of a passing test, and a skip nobody sees is a silent pass.
pub fn pg_admin_url() -> Option<String> {
    match std::env::var(PG_ENV) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED (PostgreSQL): {PG_ENV} is not set"
            );
            None
        }
    }
}

/// A database of one test's own on the server of [`PG_ENV`], named `<prefix>_<uuid>`.
///
/// [`PgDatabase::drop`] deletes it (`DROP DATABASE … WITH (FORCE)`, so connections still open
/// do not keep it alive). If the value is dropped without that, as when the test panics, the
/// database is deleted on the way out all the same, on a thread and runtime of its own: a best
/// effort, which says on stderr when it fails rather than panic again.
#[derive(Debug)]
#[must_use = "the database is deleted as soon as this value is dropped"]
pub struct PgDatabase {
    admin_url: String,
    name: String,
    url: String,
    /// Whether dropping the value still has to delete the database.
    armed: bool,
}

impl PgDatabase {
    /// Creates an empty database named `<prefix>_<uuid>` on the server of [`PG_ENV`], or
    /// returns `None` when that is not set, after the `SKIPPED` line of [`pg_admin_url`].
    ///
    /// `prefix` is lowercase ASCII letters, digits and `_`, at most 30 bytes (so the name fits
    /// PostgreSQL's 63). Panics if the server refuses: a test that cannot get its database fails.
    pub async fn create(prefix: &str) -> Option<PgDatabase> {
        let admin_url = pg_admin_url()?;
        Some(PgDatabase::create_on(&admin_url, prefix).await)
    }

    async fn create_on(admin_url: &str, prefix: &str) -> PgDatabase {
        assert!(
            !prefix.is_empty()
                && prefix.len() <= 30
                && prefix
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
            "invalid database name prefix {prefix:?}: lowercase ASCII, digits and `_`, 1 to 30 bytes"
        );
        let name = format!("{prefix}_{}", uuid::Uuid::new_v4().simple());
        PgDatabase::create_named(admin_url, name).await
    }

    /// Creates the database `name` on the server of `admin_url` (each node of a Citus cluster
    /// gets one of the same name).
    pub(crate) async fn create_named(admin_url: &str, name: String) -> PgDatabase {
        let mut admin = PgConnection::connect(admin_url)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to the server of {PG_ENV}: {e}"));
        sqlx::query(&format!("CREATE DATABASE \"{name}\""))
            .execute(&mut admin)
            .await
            .unwrap_or_else(|e| panic!("cannot create the test database {name}: {e}"));
        let _ = admin.close().await;
        PgDatabase {
            url: with_database(admin_url, &name),
            admin_url: admin_url.to_owned(),
            name,
            armed: true,
        }
    }

    /// The URL of the database: the one of [`PG_ENV`] with the database name replaced.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The database's name, `<prefix>_<uuid>`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The URL of [`PG_ENV`]: the server's database the tests administer from.
    pub fn admin_url(&self) -> &str {
        &self.admin_url
    }

    /// Deletes the database, even if connections to it are still open. Panics if that fails.
    pub async fn drop(mut self) {
        if let Err(e) = drop_database(&self.admin_url, &self.name).await {
            panic!("cannot drop the test database {}: {e}", self.name);
        }
        self.armed = false;
    }
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // `Drop` cannot await, and the test's runtime may be a single thread, the one blocked
        // here: the statement runs on a runtime of its own, on a thread of its own.
        let outcome = std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(|e| e.to_string())?;
                    runtime
                        .block_on(drop_database(&self.admin_url, &self.name))
                        .map_err(|e| e.to_string())
                })
                .join()
        });
        let error = match outcome {
            Ok(Ok(())) => return,
            Ok(Err(error)) => error,
            Err(_) => "the cleanup thread panicked".to_owned(),
        };
        // Never a panic here: during unwinding a second one aborts the whole test binary.
        let _ = writeln!(
            std::io::stderr(),
            "kxp-testkit: could not drop the test database {}: {error}",
            self.name
        );
    }
}

async fn drop_database(admin_url: &str, name: &str) -> Result<(), sqlx::Error> {
    roll_back_prepared(&with_database(admin_url, name)).await;
    let mut admin = PgConnection::connect(admin_url).await?;
    sqlx::query(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
        .execute(&mut admin)
        .await?;
    admin.close().await
}

/// Rolls back the two-phase commits left prepared in the database at `url`, if it is there. A
/// Citus test that crashes a worker can leave one on it, which Citus would resolve from the
/// coordinator's database, the one being dropped: left, it refuses the drop and makes every
/// later shard move on that node wait for it for ever (a logical replication slot waits for
/// every open transaction of the server).
async fn roll_back_prepared(url: &str) {
    let Ok(mut conn) = PgConnection::connect(url).await else {
        return;
    };
    let prepared: Vec<String> =
        sqlx::query_scalar("SELECT gid FROM pg_prepared_xacts WHERE database = current_database()")
            .fetch_all(&mut conn)
            .await
            .unwrap_or_default();
    for gid in prepared {
        let statement = format!("ROLLBACK PREPARED '{}'", gid.replace('\'', "''"));
        if let Err(e) = sqlx::query(&statement).execute(&mut conn).await {
            eprintln!("kxp-testkit: could not roll back the prepared transaction {gid}: {e}");
        }
    }
    let _ = conn.close().await;
}

/// `admin_url` with its database name replaced by `name`, the query string kept.
pub(crate) fn with_database(admin_url: &str, name: &str) -> String {
    let (base, query) = match admin_url.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (admin_url, String::new()),
    };
    let authority_start = base
        .find("://")
        .unwrap_or_else(|| panic!("{PG_ENV} is not a URL"))
        + 3;
    let authority_end = base[authority_start..]
        .find('/')
        .map_or(base.len(), |i| authority_start + i);
    format!("{}/{name}{query}", &base[..authority_end])
}

/// A SQLite database file in a fresh temporary directory; the directory and everything in it
/// are removed when this value is dropped.
///
/// A file, not `:memory:`: WAL, the busy timeout and several connections behave as they do in
/// production. The file does not exist until something connects to [`SqliteFile::url`].
#[derive(Debug)]
pub struct SqliteFile {
    dir: tempfile::TempDir,
    url: String,
}

impl SqliteFile {
    /// A fresh directory, and the URL of the file `file_name` in it.
    pub fn new(file_name: &str) -> SqliteFile {
        let dir = tempfile::Builder::new()
            .prefix("kxp-test-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}"));
        let url = format!("sqlite://{}", dir.path().join(file_name).display());
        SqliteFile { dir, url }
    }

    /// `sqlite://<dir>/<file_name>`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The directory the file is in, which is removed with it.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// Which database a test runs on. A third backend is a variant here, its arms in this module
/// and in each suite's runner, and a line in [`each_backend!`](crate::each_backend).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// A [`SqliteFile`]: always available.
    Sqlite,
    /// A [`PgDatabase`]: only when [`PG_ENV`] is set.
    Postgres,
}

impl Backend {
    /// The backend's name: `sqlite` or `postgres` (what the sender's health says too).
    pub fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

/// Instantiates each named scenario of the calling module once per [`Backend`]: a module
/// named after the scenario, holding one `#[tokio::test]` per backend (`scenario::sqlite`,
/// `scenario::postgres`), each of which awaits `run(backend, "scenario", scenario)`. `run` is
/// the suite's own: it makes a fresh database of the backend (a [`TestDatabase`]), hands the
/// scenario what it works with (a store, a pool, a URL) and deletes the database; on
/// PostgreSQL without [`PG_ENV`] it returns after the `SKIPPED` line. Every suite that runs
/// its scenarios per backend uses this one macro, so a third backend is one line here. A
/// suite names its runner once, in a one-line macro of its own that calls this one with
/// `crate::support::run => $($scenario),+`.
#[macro_export]
macro_rules! each_backend {
    ($run:path => $($scenario:ident),+ $(,)?) => {
        $(
            mod $scenario {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    $run(
                        $crate::db::Backend::Sqlite,
                        stringify!($scenario),
                        super::$scenario,
                    )
                    .await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    $run(
                        $crate::db::Backend::Postgres,
                        stringify!($scenario),
                        super::$scenario,
                    )
                    .await;
                }
            }
        )+
    };
}

/// A fresh database of either [`Backend`], for suites that run each scenario on both.
#[derive(Debug)]
#[must_use = "the database is deleted as soon as this value is dropped"]
pub enum TestDatabase {
    /// A SQLite file `<prefix>.db` in a fresh directory.
    Sqlite(SqliteFile),
    /// A PostgreSQL database `<prefix>_<uuid>`.
    Postgres(PgDatabase),
}

impl TestDatabase {
    /// A fresh database of `backend`, named after `prefix` (see [`PgDatabase::create`]);
    /// `None` when PostgreSQL is skipped, after the `SKIPPED` line of [`pg_admin_url`].
    pub async fn create(backend: Backend, prefix: &str) -> Option<TestDatabase> {
        Some(match backend {
            Backend::Sqlite => TestDatabase::Sqlite(SqliteFile::new(&format!("{prefix}.db"))),
            Backend::Postgres => TestDatabase::Postgres(PgDatabase::create(prefix).await?),
        })
    }

    /// The URL to connect to.
    pub fn url(&self) -> &str {
        match self {
            TestDatabase::Sqlite(file) => file.url(),
            TestDatabase::Postgres(database) => database.url(),
        }
    }

    /// Deletes the database (see [`PgDatabase::drop`]).
    pub async fn drop(self) {
        match self {
            TestDatabase::Sqlite(file) => drop(file),
            TestDatabase::Postgres(database) => database.drop().await,
        }
    }
}

impl TestDatabase {
    /// Applies the migrations of `folder` (a crate's `migrations/sqlite` or
    /// `migrations/postgres`) whose version is below `before`, as a database of an earlier
    /// release has them, then runs `rows` (statements writing rows in that shape): the crate's
    /// own migrator then applies the rest, carrying them, on its next connect.
    pub async fn migrate_before(&self, folder: &Path, before: i64, rows: &[&str]) {
        let mut migrator = sqlx::migrate::Migrator::new(folder)
            .await
            .unwrap_or_else(|e| panic!("cannot read the migrations in {}: {e}", folder.display()));
        let earlier: Vec<_> = migrator
            .migrations
            .iter()
            .filter(|m| m.version < before)
            .cloned()
            .collect();
        migrator.migrations = earlier.into();
        match self {
            TestDatabase::Sqlite(file) => {
                let url = format!("{}?mode=rwc", file.url());
                let mut conn = sqlx::SqliteConnection::connect(&url)
                    .await
                    .unwrap_or_else(|e| panic!("cannot open {url}: {e}"));
                migrate_then(&mut conn, &migrator, rows).await;
            }
            TestDatabase::Postgres(database) => {
                let mut conn = PgConnection::connect(database.url())
                    .await
                    .unwrap_or_else(|e| panic!("cannot connect to {}: {e}", database.name()));
                migrate_then(&mut conn, &migrator, rows).await;
            }
        }
    }
}

/// Runs `migrator` on `conn`, then each of `rows`.
async fn migrate_then<C>(conn: &mut C, migrator: &sqlx::migrate::Migrator, rows: &[&str])
where
    C: sqlx::migrate::Migrate + Send,
    for<'e> &'e mut C: sqlx::Executor<'e>,
{
    migrator
        .run_direct(&mut *conn)
        .await
        .unwrap_or_else(|e| panic!("migrating: {e}"));
    for sql in rows {
        sqlx::raw_sql(sql)
            .execute(&mut *conn)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn with_database_replaces_the_name_and_keeps_the_rest() {
        let cases = [
            (
                "postgres://pg@127.0.0.1:5432/test",
                "postgres://pg@127.0.0.1:5432/x",
            ),
            (
                "postgres://u:p@h/test?sslmode=disable",
                "postgres://u:p@h/x?sslmode=disable",
            ),
            ("postgres://h", "postgres://h/x"),
            (
                "postgres://h?application_name=a/b",
                "postgres://h/x?application_name=a/b",
            ),
        ];
        for (admin_url, expected) in cases {
            assert_eq!(with_database(admin_url, "x"), expected, "{admin_url}");
        }
    }
}
