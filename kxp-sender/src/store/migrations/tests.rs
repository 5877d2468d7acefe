//! The migrator's behaviour, with small migrations of the tests' own (the sender's are run by
//! every test that opens a database, and by `kxp migrate`'s tests).

use std::borrow::Cow;
use std::future::Future;
use std::time::Duration;

use kxp_testkit::db::{Backend, TestDatabase};
use sqlx::Connection;
use sqlx::migrate::{Migration, MigrationType, Migrator};

use super::*;

/// A migrator of `steps`: (version, SQL, without a transaction).
fn migrator(steps: &[(i64, &'static str, bool)]) -> Migrator {
    Migrator {
        migrations: Cow::Owned(
            steps
                .iter()
                .map(|&(version, sql, no_tx)| {
                    Migration::new(
                        version,
                        Cow::Owned(format!("step {version}")),
                        MigrationType::Simple,
                        Cow::Borrowed(sql),
                        no_tx,
                    )
                })
                .collect(),
        ),
        ..Migrator::DEFAULT
    }
}

const T: (i64, &str, bool) = (1, "CREATE TABLE t (id INTEGER)", false);
const U: (i64, &str, bool) = (2, "CREATE TABLE u (id INTEGER)", false);
const V: (i64, &str, bool) = (3, "CREATE TABLE v (id INTEGER)", false);

fn versions<T>(items: &[T], version: impl Fn(&T) -> i64) -> Vec<i64> {
    items.iter().map(version).collect()
}

async fn run<F, Fut>(backend: Backend, _name: &str, scenario: F)
where
    F: FnOnce(Db, String) -> Fut,
    Fut: Future<Output = ()>,
{
    let Some(database) = TestDatabase::create(backend, "kxp_migrations").await else {
        return;
    };
    let db = Db::open(database.url()).await.unwrap();
    scenario(db.clone(), database.url().to_owned()).await;
    db.close().await;
    database.drop().await;
}

kxp_testkit::each_backend!(super::run => applies_in_order_and_tolerates_a_newer_versions_migrations, refuses_a_migration_applied_with_other_sql);

async fn applies_in_order_and_tolerates_a_newer_versions_migrations(db: Db, _url: String) {
    let two = migrator(&[T, U]);
    let fresh = db.status_against(&two).await.unwrap();
    assert!(fresh.applied.is_empty());
    assert_eq!(versions(&fresh.pending, |m| m.version), [1, 2]);
    assert!(matches!(
        fresh.refusal(),
        Some(SchemaError::Pending { count: 2, .. })
    ));

    let mut reported = Vec::new();
    let applied = db
        .apply_from(&two, Duration::ZERO, |m, _| reported.push(m.version))
        .await
        .unwrap();
    assert_eq!(reported, [1, 2]);
    assert_eq!(versions(&applied, |m| m.version), [1, 2]);
    let status = db.status_against(&two).await.unwrap();
    assert!(status.is_current());
    assert!(
        status
            .applied
            .iter()
            .all(|m| m.known && m.applied_at.ends_with('Z'))
    );

    // An older version (it knows step 1 only) runs on the newer schema; a newer one applies
    // its own step and nothing twice.
    let older = db.status_against(&migrator(&[T])).await.unwrap();
    assert!(older.is_current());
    assert_eq!(
        older
            .applied
            .iter()
            .map(|m| (m.version, m.known))
            .collect::<Vec<_>>(),
        [(1, true), (2, false)]
    );
    let mut reported = Vec::new();
    db.apply_from(&migrator(&[T, U, V]), Duration::ZERO, |m, _| {
        reported.push(m.version)
    })
    .await
    .unwrap();
    assert_eq!(reported, [3]);
}

async fn refuses_a_migration_applied_with_other_sql(db: Db, _url: String) {
    db.apply_from(&migrator(&[T]), Duration::ZERO, |_, _| {})
        .await
        .unwrap();
    let changed = migrator(&[(1, "CREATE TABLE t (id BIGINT)", false), U]);
    let status = db.status_against(&changed).await.unwrap();
    assert_eq!(status.modified, [1]);
    assert!(matches!(status.refusal(), Some(SchemaError::Modified(1))));
    let refused = db.apply_from(&changed, Duration::ZERO, |_, _| {}).await;
    assert!(
        matches!(refused, Err(SchemaError::Modified(1))),
        "{refused:?}"
    );
    // Nothing after it ran either.
    assert_eq!(
        versions(&db.status_against(&changed).await.unwrap().pending, |m| m
            .version),
        [2]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_waiting_past_the_lock_timeout_is_rolled_back_and_stops_the_rest() {
    run(Backend::Postgres, "lock_timeout", |db, url| async move {
        db.apply_from(&migrator(&[T]), Duration::ZERO, |_, _| {})
            .await
            .unwrap();
        // A long transaction writing to t: the ALTER below needs the table to itself.
        let mut writer = sqlx::PgConnection::connect(&url).await.unwrap();
        sqlx::query("BEGIN").execute(&mut writer).await.unwrap();
        sqlx::query("INSERT INTO t VALUES (1)")
            .execute(&mut writer)
            .await
            .unwrap();

        let steps = migrator(&[
            T,
            (
                2,
                "ALTER TABLE t ADD COLUMN x INTEGER; CREATE TABLE w (id INTEGER)",
                false,
            ),
            (3, "CREATE INDEX CONCURRENTLY t_x ON t (x)", true),
        ]);
        let waited = db
            .apply_from(&steps, Duration::from_millis(200), |_, _| {})
            .await;
        assert!(
            matches!(waited, Err(SchemaError::LockTimeout { version: 2, .. })),
            "{waited:?}"
        );
        let message = waited.unwrap_err().to_string();
        assert!(message.contains("--lock-timeout"), "{message}");
        // Rolled back whole (no table w), and step 3 never ran.
        let status = db.status_against(&steps).await.unwrap();
        assert_eq!(versions(&status.pending, |m| m.version), [2, 3]);
        let Db::Postgres(pool) = &db else {
            unreachable!()
        };
        let w: Option<String> = sqlx::query_scalar("SELECT to_regclass('w')::text")
            .fetch_one(pool)
            .await
            .unwrap();
        assert_eq!(w, None);

        // Once the transaction ends, both apply: step 3 outside a transaction, as CONCURRENTLY
        // must be.
        sqlx::query("COMMIT").execute(&mut writer).await.unwrap();
        let applied = db
            .apply_from(&steps, Duration::from_millis(200), |_, _| {})
            .await
            .unwrap();
        assert_eq!(versions(&applied, |m| m.version), [2, 3]);
        assert!(!applied[1].transaction);
        writer.close().await.unwrap();
    })
    .await;
}

#[test]
fn the_indexes_a_migration_builds_concurrently_are_named() {
    let sql = "-- no-transaction\n-- CREATE INDEX CONCURRENTLY in a comment is not one\n\
               CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS kxp_a_key\n    ON kxp_a (x);\n\
               create index concurrently kxp_b ON kxp_b (y)";
    assert_eq!(concurrent_indexes(sql), ["kxp_a_key", "kxp_b"]);
    assert!(concurrent_indexes("CREATE INDEX kxp_c ON kxp_c (z)").is_empty());
    assert!(concurrent_indexes("CREATE INDEX CONCURRENTLY").is_empty());
}

/// A concurrent index build that failed leaves an invalid index and no record of its
/// migration: the next apply drops it and builds it again, rather than keeping it because of
/// `IF NOT EXISTS`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_index_a_failed_migration_left_is_built_again() {
    run(Backend::Postgres, "invalid_index", |db, _url| async move {
        let steps = migrator(&[
            T,
            (
                2,
                "CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS t_key ON t (id)",
                true,
            ),
        ]);
        db.apply_from(&steps, Duration::ZERO, |_, _| {})
            .await
            .unwrap();
        let Db::Postgres(pool) = &db else {
            unreachable!()
        };
        let valid = async || -> bool {
            sqlx::query_scalar(
                "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid \
                 WHERE c.relname = 't_key'",
            )
            .fetch_one(pool)
            .await
            .unwrap()
        };
        assert!(valid().await);
        // What a build that failed half-way leaves: the index, invalid, and no record.
        sqlx::query("UPDATE pg_index SET indisvalid = false WHERE indexrelid = 't_key'::regclass")
            .execute(pool)
            .await
            .unwrap();
        sqlx::query("DELETE FROM _sqlx_migrations WHERE version = 2")
            .execute(pool)
            .await
            .unwrap();
        let applied = db
            .apply_from(&steps, Duration::ZERO, |_, _| {})
            .await
            .unwrap();
        assert_eq!(versions(&applied, |m| m.version), [2]);
        assert!(valid().await, "built again, valid");
    })
    .await;
}
