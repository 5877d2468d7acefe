//! Fresh databases per test, and a little raw SQL for assertions.

use std::future::Future;

use kxp_dedup::sqlx;
use kxp_dedup::{Backend, Store};
pub(crate) use kxp_testkit::db::Backend as Db;
use kxp_testkit::db::TestDatabase;

/// Runs `scenario` on a fresh database of `db`, then deletes that database, also when the
/// scenario panics (the panic is re-raised afterwards).
pub(crate) async fn run<F, Fut>(db: Db, _name: &str, scenario: F)
where
    F: FnOnce(Store) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let Some(database) = TestDatabase::create(db, "kxp_dedup").await else {
        return;
    };
    let store = Store::connect(database.url()).await.unwrap();
    let result = tokio::spawn(scenario(store.clone())).await;
    store.close().await;
    database.drop().await;
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
