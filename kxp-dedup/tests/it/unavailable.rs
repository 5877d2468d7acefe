//! A store that is down answers 503, and no error shows the database password.

use std::time::{Duration, Instant};

use kxp_dedup::{Backend, Outcome, STORE_UNAVAILABLE_RETRY_AFTER, Store, process};
use kxp_dedup::{process_in_transaction, sqlx};

use kxp_testkit::db::SqliteFile;

both_backends!(closed_store_answers_store_unavailable);

/// Nothing listens on port 1 of the loopback interface.
const DOWN: &str = "postgres://postgres@127.0.0.1:1/x";

#[tokio::test]
async fn connect_to_a_server_that_is_down_is_unavailable_at_once() {
    let started = Instant::now();
    let err = Store::connect(DOWN).await.unwrap_err();
    assert_eq!(err.kind(), "unavailable", "{err}");
    assert!(err.is_unavailable());
    assert!(err.to_string().starts_with("unavailable: "), "{err}");
    // One direct attempt, not the pool's retries until its acquire timeout.
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn errors_never_show_the_password() {
    for url in [
        "postgres://postgres:hunter2@127.0.0.1:1/x",
        "postgresql://postgres:hunter2@[::1]:1/x",
        "postgres://postgres@127.0.0.1:1/x?password=hunter2",
        "postgres://postgres:hunter2@127.0.0.1:notaport/x",
        "postgres://postgres:hunter2@127.0.0.1:1/x?sslmode=bogus",
    ] {
        let err = Store::connect(url).await.unwrap_err();
        for text in [err.to_string(), format!("{err:?}")] {
            assert!(!text.contains("hunter2"), "{url} -> {text}");
        }
        assert!(
            matches!(err.kind(), "unavailable" | "invalid_url"),
            "{url} -> {err}"
        );
    }
}

#[tokio::test]
async fn urls_of_other_databases_are_invalid() {
    for url in ["mysql://root@127.0.0.1/x", "kxp.db", ""] {
        let err = Store::connect(url).await.unwrap_err();
        assert_eq!(err.kind(), "invalid_url", "{url} -> {err}");
    }
}

#[tokio::test]
async fn sqlite_in_a_missing_directory_is_unavailable() {
    let file = SqliteFile::new("dedup.db");
    let url = format!("sqlite://{}/no/such/dir/dedup.db", file.dir().display());
    let err = Store::connect(&url).await.unwrap_err();
    assert_eq!(err.kind(), "unavailable", "{err}");
}

/// A file database is WAL, created on first use, and reconnecting keeps its rows (the
/// migrations run again as a no-op).
#[tokio::test]
async fn sqlite_file_is_wal_and_survives_reconnect() {
    let file = SqliteFile::new("dedup.db");
    let url = file.url();
    let store = Store::connect(url).await.unwrap();
    assert_eq!(store.backend(), Backend::Sqlite);
    assert_eq!(
        format!("{store:?}"),
        "Store { backend: Sqlite, scope: \"\", .. }"
    );
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(store.sqlite_pool().unwrap())
        .await
        .unwrap();
    assert_eq!(mode, "wal");
    let first = process(&store, "evt_durable", Duration::from_secs(30), || async {
        Ok::<(), String>(())
    })
    .await;
    assert_eq!(first, Outcome::Processed);
    store.close().await;

    let store = Store::connect(url).await.unwrap();
    let again = process(&store, "evt_durable", Duration::from_secs(30), || async {
        Err::<(), _>("must not run")
    })
    .await;
    assert_eq!(again, Outcome::Duplicate);
    store.close().await;
}

/// `sqlite::memory:` is one database for the whole store, across its pool.
#[tokio::test]
async fn in_memory_sqlite_is_one_shared_database() {
    let store = Store::connect("sqlite::memory:").await.unwrap();
    let clone = store.clone();
    let first = process(&store, "evt_mem", Duration::from_secs(30), || async {
        Ok::<(), String>(())
    })
    .await;
    assert_eq!(first, Outcome::Processed);
    let handle = tokio::spawn(async move {
        process(&clone, "evt_mem", Duration::from_secs(30), || async {
            Err::<(), _>("must not run")
        })
        .await
    });
    assert_eq!(handle.await.unwrap(), Outcome::Duplicate);
}

/// A store whose pool is closed: every mode answers 503, every call fails as `unavailable`.
async fn closed_store_answers_store_unavailable(store: Store) {
    store.close().await;
    let unavailable = Outcome::StoreUnavailable {
        retry_after: STORE_UNAVAILABLE_RETRY_AFTER,
    };
    let outcome = process(&store, "evt_down", Duration::from_secs(30), || async {
        Err::<(), _>("must not run")
    })
    .await;
    assert_eq!(outcome, unavailable);
    assert_eq!(outcome.status(), 503);
    assert_eq!(outcome.as_str(), "failed");
    let outcome = process_in_transaction(&store, "evt_down", |tx| async move {
        Err::<kxp_dedup::Tx, _>(format!("must not run: {tx:?}"))
    })
    .await;
    assert_eq!(outcome, unavailable);
    let err = store
        .claim("evt_down", Duration::from_secs(30))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "unavailable", "{err}");
    let err = store.inbox_put("evt_down", b"{}").await.unwrap_err();
    assert_eq!(err.kind(), "unavailable", "{err}");
}
