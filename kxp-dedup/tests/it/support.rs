//! Fresh databases per test, and a little raw SQL for assertions.

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use kxp_dedup::sqlx::{self, Connection, PgConnection};
use kxp_dedup::{Backend, Store};

/// The environment variable that enables the PostgreSQL half of the suite.
pub(crate) const PG_ENV: &str = "KXP_TEST_DATABASE_URL";

/// Which backend a test instance runs on.
pub(crate) enum Db {
    Sqlite,
    Postgres,
}

enum Cleanup {
    Dir(PathBuf),
    Database { admin_url: String, name: String },
}

/// A name no other test, and no other run, uses.
pub(crate) fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}_{}_{nanos}_{n}", std::process::id())
}

/// A SQLite database file in a fresh directory (not `:memory:`: WAL, the busy timeout and
/// several connections are part of what is tested).
pub(crate) async fn sqlite_url() -> (String, PathBuf) {
    let dir = std::env::temp_dir().join(unique_name("kxp-dedup-test"));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}/dedup.db", dir.display());
    (url, dir)
}

/// `admin_url` with its database name replaced by `name`, query string kept.
fn with_database(admin_url: &str, name: &str) -> String {
    let (base, query) = match admin_url.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (admin_url, String::new()),
    };
    let authority_start = base.find("://").unwrap() + 3;
    let authority_end = base[authority_start..]
        .find('/')
        .map_or(base.len(), |i| authority_start + i);
    format!("{}/{name}{query}", &base[..authority_end])
}

/// Runs `scenario` on a fresh database of `db`, then deletes that database, also when the
/// scenario panics (the panic is re-raised afterwards).
pub(crate) async fn run<F, Fut>(db: Db, scenario: F)
where
    F: FnOnce(Store) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (url, cleanup) = match db {
        Db::Sqlite => {
            let (url, dir) = sqlite_url().await;
            (url, Cleanup::Dir(dir))
        }
        Db::Postgres => {
            let Ok(admin_url) = std::env::var(PG_ENV) else {
                // Straight to stderr: libtest hides `eprintln!` of passing tests, and a skip
                // nobody sees is a silent pass.
                let _ = std::io::Write::write_fmt(
                    &mut std::io::stderr(),
                    format_args!("SKIPPED (PostgreSQL): {PG_ENV} is not set\n"),
                );
                return;
            };
            let name = unique_name("kxp_dedup");
            let mut admin = PgConnection::connect(&admin_url).await.unwrap();
            sqlx::query(&format!("CREATE DATABASE \"{name}\""))
                .execute(&mut admin)
                .await
                .unwrap();
            admin.close().await.unwrap();
            (
                with_database(&admin_url, &name),
                Cleanup::Database { admin_url, name },
            )
        }
    };
    let store = Store::connect(&url).await.unwrap();
    let result = tokio::spawn(scenario(store.clone())).await;
    store.close().await;
    match cleanup {
        Cleanup::Dir(dir) => {
            let _ = std::fs::remove_dir_all(dir);
        }
        Cleanup::Database { admin_url, name } => {
            let mut admin = PgConnection::connect(&admin_url).await.unwrap();
            sqlx::query(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
                .execute(&mut admin)
                .await
                .unwrap();
            admin.close().await.unwrap();
        }
    }
    if let Err(error) = result {
        match error.try_into_panic() {
            Ok(payload) => std::panic::resume_unwind(payload),
            Err(error) => panic!("scenario did not finish: {error}"),
        }
    }
}

/// Runs a statement with no parameters, the same text on both backends.
pub(crate) async fn exec(store: &Store, sql: &str) {
    match store.backend() {
        Backend::Sqlite => {
            sqlx::query(sql)
                .execute(store.sqlite_pool().unwrap())
                .await
                .unwrap();
        }
        Backend::Postgres => {
            sqlx::query(sql)
                .execute(store.postgres_pool().unwrap())
                .await
                .unwrap();
        }
    }
}

/// The first column of the first row, as an integer (e.g. a `COUNT(*)`).
pub(crate) async fn scalar(store: &Store, sql: &str) -> i64 {
    match store.backend() {
        Backend::Sqlite => sqlx::query_scalar(sql)
            .fetch_one(store.sqlite_pool().unwrap())
            .await
            .unwrap(),
        Backend::Postgres => sqlx::query_scalar(sql)
            .fetch_one(store.postgres_pool().unwrap())
            .await
            .unwrap(),
    }
}

/// Moves `column` of the row of `event_id` in `table` `days` into the past, in each backend's
/// representation of time.
pub(crate) async fn backdate(store: &Store, table: &str, column: &str, event_id: &str, days: i64) {
    let sql = match store.backend() {
        Backend::Sqlite => format!(
            "UPDATE {table} SET {column} = {column} - {days} * 86400000 WHERE event_id = '{event_id}'"
        ),
        Backend::Postgres => format!(
            "UPDATE {table} SET {column} = {column} - interval '{days} days' WHERE event_id = '{event_id}'"
        ),
    };
    exec(store, &sql).await;
}
