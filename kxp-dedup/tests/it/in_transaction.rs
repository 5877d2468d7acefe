//! In-transaction mode: the mark and the caller's own write commit together.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kxp_dedup::sqlx;
use kxp_dedup::{Outcome, Store, Tx, process_in_transaction};

use crate::support::{exec, scalar};

both_backends!(
    concurrent_deliveries_commit_the_effect_once,
    handler_error_rolls_back_effect_and_mark,
    concurrent_mark_waits_for_the_first_transaction,
    reading_before_the_mark_does_not_fail_with_busy,
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
