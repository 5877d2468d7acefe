//! In-transaction mode: the mark and the caller's own write commit together.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kxp_dedup::sqlx;
use kxp_dedup::{Backend, Claim, EventStatus, Outcome, Store, Tx, process, process_in_transaction};

use crate::support::{exec, scalar};

both_backends!(
    concurrent_deliveries_commit_the_effect_once,
    handler_error_rolls_back_effect_and_mark,
    concurrent_mark_waits_for_the_first_transaction,
    reading_before_the_mark_does_not_fail_with_busy,
    mark_takes_over_failed_and_expired_claims_but_not_live_ones,
    ids_that_look_like_sql_are_only_data,
    every_outcome_gives_the_connection_back_idle,
);

/// The caller's table. No unique constraint on purpose: a second effect would show as a
/// second row instead of being stopped by the schema.
async fn create_effects_table(store: &Store) {
    exec(
        store,
        "CREATE TABLE caller_effects (event_id TEXT NOT NULL)",
    )
    .await;
}

/// The caller's side effect, on the transaction's own connection.
async fn insert_effect(mut tx: Tx, event_id: String) -> Result<Tx, sqlx::Error> {
    if let Some(conn) = tx.sqlite() {
        sqlx::query("INSERT INTO caller_effects (event_id) VALUES (?1)")
            .bind(&event_id)
            .execute(conn)
            .await?;
    } else if let Some(conn) = tx.postgres() {
        sqlx::query("INSERT INTO caller_effects (event_id) VALUES ($1)")
            .bind(&event_id)
            .execute(conn)
            .await?;
    }
    Ok(tx)
}

/// 50 concurrent deliveries, each inserting a row in the same transaction as its mark: exactly
/// one row, one `Processed`, 49 `Duplicate` (in this mode duplicates wait, so none is "in
/// progress"). On PostgreSQL this is the unique-index wait: the 49 block in their INSERT until
/// the first commits, then conflict.
async fn concurrent_deliveries_commit_the_effect_once(store: Store) {
    create_effects_table(&store).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let store = store.clone();
        let runs = runs.clone();
        tasks.push(tokio::spawn(async move {
            process_in_transaction(&store, "evt_tx", |tx| async move {
                runs.fetch_add(1, Ordering::SeqCst);
                let tx = insert_effect(tx, "evt_tx".to_owned()).await?;
                // Hold the transaction open so the others really have to wait for it.
                tokio::time::sleep(Duration::from_millis(20)).await;
                Ok::<_, sqlx::Error>(tx)
            })
            .await
        }));
    }
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.unwrap());
    }
    let processed = outcomes
        .iter()
        .filter(|o| **o == Outcome::Processed)
        .count();
    let duplicates = outcomes
        .iter()
        .filter(|o| **o == Outcome::Duplicate)
        .count();
    assert_eq!((processed, duplicates), (1, 49), "{outcomes:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(
        scalar(&store, "SELECT COUNT(*) FROM caller_effects").await,
        1
    );
}

/// A handler error rolls back its effect and the mark together; the next delivery runs it.
async fn handler_error_rolls_back_effect_and_mark(store: Store) {
    create_effects_table(&store).await;
    let failed = process_in_transaction(&store, "evt_tx_fail", |tx| async move {
        let _tx = insert_effect(tx, "evt_tx_fail".to_owned()).await?;
        // The effect is written, then the handler fails: both must vanish.
        Err::<Tx, Box<dyn std::error::Error + Send + Sync>>("shipping API said no".into())
    })
    .await;
    assert_eq!(failed, Outcome::Failed);
    assert_eq!(
        scalar(&store, "SELECT COUNT(*) FROM caller_effects").await,
        0
    );
    assert_eq!(store.record("evt_tx_fail").await.unwrap(), None);

    let retried = process_in_transaction(&store, "evt_tx_fail", |tx| {
        insert_effect(tx, "evt_tx_fail".to_owned())
    })
    .await;
    assert_eq!(retried, Outcome::Processed);
    let again = process_in_transaction(&store, "evt_tx_fail", |tx| {
        insert_effect(tx, "evt_tx_fail".to_owned())
    })
    .await;
    assert_eq!(again, Outcome::Duplicate);
    assert_eq!(
        scalar(&store, "SELECT COUNT(*) FROM caller_effects").await,
        1
    );
}

/// The mechanism behind exactly-once, step by step: a second transaction marking the same id
/// does not finish while the first is open (PostgreSQL: it waits on the primary key; SQLite: on
/// the write lock); after a commit it sees a duplicate, after a rollback it goes through.
async fn concurrent_mark_waits_for_the_first_transaction(store: Store) {
    for first_commits in [true, false] {
        let id = if first_commits {
            "evt_wait_commit"
        } else {
            "evt_wait_rollback"
        };
        let mut first = store.begin().await.unwrap();
        assert!(first.mark_processed(id).await.unwrap());

        let second_store = store.clone();
        let second = tokio::spawn(async move {
            let mut tx = second_store.begin().await.unwrap();
            let marked = tx.mark_processed(id).await.unwrap();
            tx.commit().await.unwrap();
            marked
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !second.is_finished(),
            "the second mark must wait for the first transaction"
        );

        if first_commits {
            first.commit().await.unwrap();
        } else {
            first.rollback().await.unwrap();
        }
        let second_marked = tokio::time::timeout(Duration::from_secs(10), second)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            second_marked, !first_commits,
            "first_commits = {first_commits}"
        );
    }
}

/// A caller that reads before it marks (with `Store::begin` directly) must still serialize, not
/// fail. Regression guard for SQLite's deferred `BEGIN`: in WAL mode a transaction that read
/// first and then writes gets `SQLITE_BUSY` at once, without waiting, when another writer
/// committed since its read. `BEGIN IMMEDIATE` takes the write lock before the read.
async fn reading_before_the_mark_does_not_fail_with_busy(store: Store) {
    create_effects_table(&store).await;
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut tx = store.begin().await?;
            let sql = "SELECT COUNT(*) FROM caller_effects";
            let _seen: i64 = if let Some(conn) = tx.sqlite() {
                sqlx::query_scalar(sql).fetch_one(conn).await?
            } else {
                sqlx::query_scalar(sql)
                    .fetch_one(tx.postgres().unwrap())
                    .await?
            };
            if !tx.mark_processed("evt_read_first").await? {
                return Ok::<bool, Box<dyn std::error::Error + Send + Sync>>(false);
            }
            let tx = insert_effect(tx, "evt_read_first".to_owned()).await?;
            tokio::time::sleep(Duration::from_millis(10)).await;
            tx.commit().await?;
            Ok(true)
        }));
    }
    let mut firsts = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(true) => firsts += 1,
            Ok(false) => {}
            Err(error) => panic!("a concurrent delivery failed instead of waiting: {error}"),
        }
    }
    assert_eq!(firsts, 1);
    assert_eq!(
        scalar(&store, "SELECT COUNT(*) FROM caller_effects").await,
        1
    );
}

/// The claim rules hold in this mode too: a failed or expired claim of claim/complete mode is
/// taken over (attempts counted, `last_error` kept), a live one answers `InProgress` with the
/// rest of its lease, a completed one `Duplicate`; the handler runs only when marked.
async fn mark_takes_over_failed_and_expired_claims_but_not_live_ones(store: Store) {
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = |runs: Arc<AtomicUsize>| {
        move |tx: Tx| async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<Tx, sqlx::Error>(tx)
        }
    };

    assert_eq!(
        store
            .claim("evt_mix_live", Duration::from_secs(60))
            .await
            .unwrap(),
        Claim::Claimed
    );
    let live = process_in_transaction(&store, "evt_mix_live", counted(runs.clone())).await;
    assert!(
        matches!(live, Outcome::InProgress { retry_after } if retry_after >= Duration::from_secs(50)),
        "{live:?}"
    );

    store
        .claim("evt_mix_failed", Duration::from_secs(60))
        .await
        .unwrap();
    store
        .fail("evt_mix_failed", "first try failed")
        .await
        .unwrap();
    store
        .claim("evt_mix_expired", Duration::from_millis(1))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    for id in ["evt_mix_failed", "evt_mix_expired"] {
        let outcome = process_in_transaction(&store, id, counted(runs.clone())).await;
        assert_eq!(outcome, Outcome::Processed, "{id}");
        let record = store.record(id).await.unwrap().unwrap();
        assert_eq!(
            (record.status, record.attempts),
            (EventStatus::Done, 2),
            "{id}"
        );
    }
    let failed = store.record("evt_mix_failed").await.unwrap().unwrap();
    assert_eq!(failed.last_error.as_deref(), Some("first try failed"));

    let done = process(&store, "evt_mix_done", Duration::from_secs(60), || async {
        Ok::<(), sqlx::Error>(())
    })
    .await;
    assert_eq!(done, Outcome::Processed);
    let duplicate = process_in_transaction(&store, "evt_mix_done", counted(runs.clone())).await;
    assert_eq!(duplicate, Outcome::Duplicate);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

/// Ids are data, never SQL: every character that could end or bend a string literal (quotes,
/// backslashes, dollar quotes, control characters, non-ASCII) is tried, so that a version that
/// puts the id into a query's text, to save a round trip, cannot slip in unnoticed. Each id is
/// marked once, stored exactly as given (read back with a bound parameter), then refused; the
/// table and its row count show that nothing else ran.
async fn ids_that_look_like_sql_are_only_data(store: Store) {
    let ids = [
        "evt_'; DROP TABLE kxp_processed_events; --",
        "evt_' OR '1'='1",
        "'",
        "''",
        "\\",
        "\\'",
        "evt_\\'); SELECT 1; --",
        "E'evt'",
        "$$",
        "evt_$$; DROP TABLE kxp_processed_events; $$",
        "$kxp$ $1 $2",
        "evt_\\x27\\u0027",
        "evt_line\nbreak\ttab\r",
        "evt_\u{1}\u{7f}",
        "evt_é_ü_日本_🦀",
        "evt_é'\\",
        "evt_ \u{a0}\u{feff}",
        "",
    ];
    for id in ids {
        let first =
            process_in_transaction(&store, id, |tx| async move { Ok::<Tx, sqlx::Error>(tx) }).await;
        assert_eq!(first, Outcome::Processed, "{id:?}");
        let again = process_in_transaction(&store, id, |_tx| async move {
            Err::<Tx, &str>("a duplicate must not run")
        })
        .await;
        assert_eq!(again, Outcome::Duplicate, "{id:?}");
        let record = store.record(id).await.unwrap();
        assert_eq!(
            record.map(|r| (r.status, r.attempts)),
            Some((EventStatus::Done, 1)),
            "{id:?}"
        );
        assert_eq!(
            store.claim(id, Duration::from_secs(60)).await.unwrap(),
            Claim::AlreadyDone,
            "{id:?}"
        );
    }
    let rows = scalar(&store, "SELECT COUNT(*) FROM kxp_processed_events").await;
    assert_eq!(rows, i64::try_from(ids.len()).unwrap());
}

/// After each outcome (processed, duplicate, in progress, handler error, handler panic) the
/// connection goes back to the pool outside any transaction, and the next user sees only what
/// was committed: nothing leaves a transaction open (or aborted) that sqlx does not know about.
/// One connection, so every step reuses it. A guard for any cheaper way to begin and mark: a
/// `BEGIN; <mark>` sent as one query whose mark fails leaves the connection in an aborted
/// transaction, which this test catches (tried).
async fn every_outcome_gives_the_connection_back_idle(store: Store) {
    let store = match store.backend() {
        Backend::Sqlite => {
            let options = store.sqlite_pool().unwrap().connect_options();
            let pool = sqlx::sqlite::SqlitePoolOptions::new()
                .max_connections(1)
                .connect_with((*options).clone())
                .await
                .unwrap();
            Store::from_sqlite_pool(pool).await.unwrap()
        }
        Backend::Postgres => {
            let options = store.postgres_pool().unwrap().connect_options();
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(1)
                .connect_with((*options).clone())
                .await
                .unwrap();
            Store::from_postgres_pool(pool).await.unwrap()
        }
    };
    create_effects_table(&store).await;
    // Outside a transaction, a simple query's transaction starts with it: `now()` (the
    // transaction's start) is the statement's own time. (A simple query: with sqlx's prepared
    // statements the two differ even outside a transaction.) SQLite has
    // no open transaction to linger: a `BEGIN IMMEDIATE` left open would hold the lock and fail
    // the next `begin`.
    let assert_idle = |step: &'static str| {
        let store = store.clone();
        async move {
            if let Some(pool) = store.postgres_pool() {
                tokio::time::sleep(Duration::from_millis(5)).await;
                let row = sqlx::raw_sql("SELECT now() = statement_timestamp()")
                    .fetch_one(pool)
                    .await
                    .unwrap();
                let idle: bool = sqlx::Row::get(&row, 0);
                assert!(idle, "after {step}: the connection is inside a transaction");
            }
            let mut tx = store.begin().await.unwrap();
            assert!(
                tx.mark_processed(&format!("evt_probe_{step}"))
                    .await
                    .unwrap()
            );
            tx.rollback().await.unwrap();
        }
    };

    let processed = process_in_transaction(&store, "evt_idle", |tx| {
        insert_effect(tx, "evt_idle".to_owned())
    })
    .await;
    assert_eq!(processed, Outcome::Processed);
    assert_idle("processed").await;

    for _ in 0..3 {
        let duplicate = process_in_transaction(&store, "evt_idle", |tx| {
            insert_effect(tx, "evt_idle".to_owned())
        })
        .await;
        assert_eq!(duplicate, Outcome::Duplicate);
        assert_idle("duplicate").await;
    }

    store
        .claim("evt_idle_live", Duration::from_secs(60))
        .await
        .unwrap();
    let in_progress = process_in_transaction(&store, "evt_idle_live", |tx| async move {
        Ok::<Tx, sqlx::Error>(tx)
    })
    .await;
    assert!(
        matches!(in_progress, Outcome::InProgress { .. }),
        "{in_progress:?}"
    );
    assert_idle("in_progress").await;

    let failed = process_in_transaction(&store, "evt_idle_failed", |tx| async move {
        let _tx = insert_effect(tx, "evt_idle_failed".to_owned()).await?;
        Err::<Tx, Box<dyn std::error::Error + Send + Sync>>("the handler said no".into())
    })
    .await;
    assert_eq!(failed, Outcome::Failed);
    assert_idle("failed").await;

    let panicked = tokio::spawn({
        let store = store.clone();
        async move {
            process_in_transaction(&store, "evt_idle_panic", |tx| async move {
                let tx = insert_effect(tx, "evt_idle_panic".to_owned()).await?;
                if true {
                    panic!("handler panic (expected by this test)");
                }
                Ok::<Tx, sqlx::Error>(tx)
            })
            .await
        }
    })
    .await;
    assert!(panicked.is_err_and(|e| e.is_panic()));
    assert_idle("panic").await;

    // Only the processed event's effect was committed; the rolled-back ones left nothing.
    assert_eq!(
        scalar(&store, "SELECT COUNT(*) FROM caller_effects").await,
        1
    );
    assert_eq!(store.record("evt_idle_failed").await.unwrap(), None);
    assert_eq!(store.record("evt_idle_panic").await.unwrap(), None);
    store.close().await;
}
