//! Claim/complete mode: `Store::claim`, `complete`, `fail` and `process`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kxp_dedup::{Claim, EventStatus, Outcome, Store, StoreError, process};

const LEASE: Duration = Duration::from_secs(30);

both_backends!(
    concurrent_deliveries_run_the_handler_once,
    failed_handler_runs_again_and_keeps_last_error,
    abandoned_claim_is_taken_over_after_its_lease,
    in_progress_retry_after_is_the_rest_of_the_lease,
    complete_and_fail_need_a_claim_and_never_undo_done,
    panicking_handler_is_recorded_as_failed,
);

/// 50 concurrent deliveries of one event: the handler runs exactly once; the others are told
/// "duplicate" or "in progress", never processed a second time.
async fn concurrent_deliveries_run_the_handler_once(store: Store) {
    let runs = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let store = store.clone();
        let runs = runs.clone();
        tasks.push(tokio::spawn(async move {
            process(&store, "evt_concurrent", LEASE, || async move {
                runs.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(50)).await;
                Ok::<(), String>(())
            })
            .await
        }));
    }
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.unwrap());
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1, "handler runs: {outcomes:?}");
    let processed = outcomes
        .iter()
        .filter(|o| **o == Outcome::Processed)
        .count();
    assert_eq!(processed, 1, "{outcomes:?}");
    for outcome in &outcomes {
        match outcome {
            Outcome::Processed | Outcome::Duplicate => {}
            Outcome::InProgress { retry_after } => assert!(*retry_after >= Duration::from_secs(1)),
            other => panic!("unexpected outcome {other:?} in {outcomes:?}"),
        }
    }
    let record = store.record("evt_concurrent").await.unwrap().unwrap();
    assert_eq!(record.status, EventStatus::Done);
    assert_eq!(record.attempts, 1);
    let later = process(&store, "evt_concurrent", LEASE, || async {
        Err::<(), _>("must not run")
    })
    .await;
    assert_eq!(later, Outcome::Duplicate);
}

/// A handler that fails once: 500, the error is recorded, and the next delivery runs it.
async fn failed_handler_runs_again_and_keeps_last_error(store: Store) {
    let first = process(&store, "evt_flaky", LEASE, || async {
        Err::<(), _>("card processor timed out")
    })
    .await;
    assert_eq!(first, Outcome::Failed);
    assert_eq!(first.status(), 500);
    let record = store.record("evt_flaky").await.unwrap().unwrap();
    assert_eq!(record.status, EventStatus::Failed);
    assert_eq!(record.attempts, 1);
    assert_eq!(
        record.last_error.as_deref(),
        Some("card processor timed out")
    );

    let runs = AtomicUsize::new(0);
    let second = process(&store, "evt_flaky", LEASE, || async {
        runs.fetch_add(1, Ordering::SeqCst);
        Ok::<(), String>(())
    })
    .await;
    assert_eq!(second, Outcome::Processed);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let record = store.record("evt_flaky").await.unwrap().unwrap();
    assert_eq!(record.status, EventStatus::Done);
    assert_eq!(record.attempts, 2);
    // Kept for the record after the success.
    assert_eq!(
        record.last_error.as_deref(),
        Some("card processor timed out")
    );

    let third = process(&store, "evt_flaky", LEASE, || async {
        Err::<(), _>("must not run")
    })
    .await;
    assert_eq!(third, Outcome::Duplicate);
}

/// A claim that is never completed (the process was killed): in progress until its lease ends,
/// then the next claim takes it over.
async fn abandoned_claim_is_taken_over_after_its_lease(store: Store) {
    let lease = Duration::from_millis(500);
    assert_eq!(
        store.claim("evt_orphan", lease).await.unwrap(),
        Claim::Claimed
    );
    // No complete(): the claimant "died" here.
    assert_eq!(
        store.claim("evt_orphan", lease).await.unwrap(),
        Claim::InProgress {
            retry_after: Duration::from_secs(1)
        }
    );
    let outcome = process(&store, "evt_orphan", lease, || async {
        Err::<(), _>("must not run while the lease is live")
    })
    .await;
    assert_eq!(outcome.status(), 409);
    assert_eq!(outcome.retry_after(), Some(Duration::from_secs(1)));

    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        store.claim("evt_orphan", lease).await.unwrap(),
        Claim::Claimed
    );
    store.complete("evt_orphan").await.unwrap();
    assert_eq!(
        store.claim("evt_orphan", lease).await.unwrap(),
        Claim::AlreadyDone
    );
    let record = store.record("evt_orphan").await.unwrap().unwrap();
    assert_eq!((record.status, record.attempts), (EventStatus::Done, 2));
}

/// `retry_after` is the rest of the holder's lease, in whole seconds rounded up.
async fn in_progress_retry_after_is_the_rest_of_the_lease(store: Store) {
    let lease = Duration::from_secs(90);
    assert_eq!(
        store.claim("evt_slow", lease).await.unwrap(),
        Claim::Claimed
    );
    assert_eq!(
        store.claim("evt_slow", LEASE).await.unwrap(),
        Claim::InProgress {
            retry_after: Duration::from_secs(90)
        }
    );
}

/// `complete` / `fail` of an id nobody claimed are caller bugs (`not_claimed`); a `fail` after
/// another delivery completed the event leaves it done.
async fn complete_and_fail_need_a_claim_and_never_undo_done(store: Store) {
    let err = store.complete("evt_never_claimed").await.unwrap_err();
    assert!(matches!(err, StoreError::NotClaimed { .. }), "{err:?}");
    assert_eq!(err.kind(), "not_claimed");
    let err = store.fail("evt_never_claimed", "x").await.unwrap_err();
    assert_eq!(err.kind(), "not_claimed");

    assert_eq!(
        store.claim("evt_done", LEASE).await.unwrap(),
        Claim::Claimed
    );
    store.complete("evt_done").await.unwrap();
    store.fail("evt_done", "late failure").await.unwrap();
    let record = store.record("evt_done").await.unwrap().unwrap();
    assert_eq!(record.status, EventStatus::Done);
    assert_eq!(record.last_error, None);
    assert_eq!(
        store.claim("evt_done", LEASE).await.unwrap(),
        Claim::AlreadyDone
    );
}

/// A panicking handler is recorded as failed at once (the retry need not wait for the lease)
/// and the panic still reaches the caller.
async fn panicking_handler_is_recorded_as_failed(store: Store) {
    let task_store = store.clone();
    let joined = tokio::spawn(async move {
        process(&task_store, "evt_panic", LEASE, || async {
            if true {
                panic!("handler panic (expected by this test)");
            }
            Ok::<(), String>(())
        })
        .await
    })
    .await;
    assert!(joined.unwrap_err().is_panic());
    let record = store.record("evt_panic").await.unwrap().unwrap();
    assert_eq!(record.status, EventStatus::Failed);
    assert_eq!(record.last_error.as_deref(), Some("handler panicked"));
    let retried = process(&store, "evt_panic", LEASE, || async {
        Ok::<(), String>(())
    })
    .await;
    assert_eq!(retried, Outcome::Processed);
}
