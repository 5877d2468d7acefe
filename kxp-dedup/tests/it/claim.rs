//! Claim/complete mode: `Store::claim`, `complete`, `fail`, their fenced `claim_lease`,
//! `renew`, `complete_lease`, `fail_lease`, and `process`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kxp_dedup::{Claim, EventStatus, LeaseClaim, Outcome, Store, StoreError, process};

use crate::support::backdate;

const LEASE: Duration = Duration::from_secs(30);

both_backends!(
    concurrent_deliveries_run_the_handler_once,
    failed_handler_runs_again_and_keeps_last_error,
    abandoned_claim_is_taken_over_after_its_lease,
    in_progress_retry_after_is_the_rest_of_the_lease,
    complete_and_fail_need_a_claim_and_never_undo_done,
    panicking_handler_is_recorded_as_failed,
    handler_slower_than_its_lease_is_not_run_twice_while_alive,
    dropped_process_stops_renewing_its_lease,
    completion_after_a_takeover_is_refused,
    process_after_a_takeover_leaves_the_new_claim_alone,
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

/// Issue 11, item 10: a handler that outlived its lease could run twice (claim/complete had no
/// heartbeat). Now `process` renews the lease while the handler runs: deliveries of the same
/// event during five leases' worth of handler time are all told "in progress".
async fn handler_slower_than_its_lease_is_not_run_twice_while_alive(store: Store) {
    let lease = Duration::from_millis(600);
    let slow = {
        let store = store.clone();
        tokio::spawn(async move {
            process(&store, "evt_slow_handler", lease, || async {
                tokio::time::sleep(lease * 5).await;
                Ok::<(), String>(())
            })
            .await
        })
    };
    // The slow handler's claim first.
    while store.record("evt_slow_handler").await.unwrap().is_none() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let second_runs = Arc::new(AtomicUsize::new(0));
    let mut answers = Vec::new();
    while !slow.is_finished() {
        let runs = second_runs.clone();
        let answer = process(&store, "evt_slow_handler", lease, || async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<(), String>(())
        })
        .await;
        answers.push(answer);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(slow.await.unwrap(), Outcome::Processed);
    assert_eq!(second_runs.load(Ordering::SeqCst), 0, "{answers:?}");
    // Deliveries were tried over the whole run (more than one lease), and every one that came
    // while the slow handler was alive was told to come back.
    assert!(answers.len() > 5, "{answers:?}");
    for answer in &answers {
        assert!(
            matches!(answer, Outcome::InProgress { .. } | Outcome::Duplicate),
            "{answers:?}"
        );
    }
    let record = store.record("evt_slow_handler").await.unwrap().unwrap();
    assert_eq!((record.status, record.attempts), (EventStatus::Done, 1));
}

/// The renewals belong to the `process` future: dropped mid-handler (the client went away),
/// it renews no more, and the next delivery takes the event over once the lease has run out.
async fn dropped_process_stops_renewing_its_lease(store: Store) {
    let lease = Duration::from_millis(300);
    let abandoned = {
        let store = store.clone();
        tokio::spawn(async move {
            process(&store, "evt_dropped", lease, || async {
                std::future::pending::<()>().await;
                Ok::<(), String>(())
            })
            .await
        })
    };
    // Claimed and renewed for a while, then dropped.
    tokio::time::sleep(lease * 2).await;
    let record = store.record("evt_dropped").await.unwrap().unwrap();
    assert_eq!(record.status, EventStatus::Processing);
    abandoned.abort();
    assert!(abandoned.await.unwrap_err().is_cancelled());
    // Liveness bound only: taken over well within 10 s.
    let started = std::time::Instant::now();
    loop {
        let outcome = process(&store, "evt_dropped", lease, || async {
            Ok::<(), String>(())
        })
        .await;
        if outcome == Outcome::Processed {
            break;
        }
        assert!(matches!(outcome, Outcome::InProgress { .. }), "{outcome:?}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "never taken over"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let record = store.record("evt_dropped").await.unwrap().unwrap();
    assert_eq!((record.status, record.attempts), (EventStatus::Done, 2));
}

/// Issue 11, item 10: completion had no fencing token, so a holder whose lease ran out marked
/// the event done under the delivery that had taken it over. The fenced statements refuse:
/// `claim_lost`, and the new holder's claim stays as it was.
async fn completion_after_a_takeover_is_refused(store: Store) {
    let LeaseClaim::Held(first) = store.claim_lease("evt_fenced", LEASE).await.unwrap() else {
        panic!("the first claim wins");
    };
    assert_eq!((first.event_id(), first.token()), ("evt_fenced", 1));
    store.renew(&first).await.unwrap();
    // The first holder stalls past its lease; another delivery takes the event over.
    backdate(
        &store,
        "kxp_processed_events",
        "locked_until",
        "evt_fenced",
        1,
    )
    .await;
    let LeaseClaim::Held(second) = store.claim_lease("evt_fenced", LEASE).await.unwrap() else {
        panic!("an expired claim is taken over");
    };
    assert_eq!(second.token(), 2);

    let lost = |result: Result<(), StoreError>| {
        let error = result.unwrap_err();
        assert!(matches!(error, StoreError::ClaimLost { .. }), "{error:?}");
        assert_eq!(error.kind(), "claim_lost");
    };
    lost(store.renew(&first).await);
    lost(store.complete_lease(first.clone()).await);
    lost(store.fail_lease(first.clone(), "late failure").await);
    let record = store.record("evt_fenced").await.unwrap().unwrap();
    assert_eq!(
        (record.status, record.attempts, record.last_error),
        (EventStatus::Processing, 2, None)
    );
    assert!(matches!(
        store.claim_lease("evt_fenced", LEASE).await.unwrap(),
        LeaseClaim::InProgress { .. }
    ));

    // The new holder's lease is untouched: it renews and completes.
    store.renew(&second).await.unwrap();
    store.complete_lease(second).await.unwrap();
    lost(store.complete_lease(first.clone()).await);
    assert_eq!(
        store.claim_lease("evt_fenced", LEASE).await.unwrap(),
        LeaseClaim::AlreadyDone
    );
    let record = store.record("evt_fenced").await.unwrap().unwrap();
    assert_eq!((record.status, record.attempts), (EventStatus::Done, 2));

    // No row at all (never claimed, or purged): `not_claimed`, as for `complete`.
    let LeaseClaim::Held(gone) = store.claim_lease("evt_purged", LEASE).await.unwrap() else {
        panic!("a new id is claimed");
    };
    crate::support::exec(
        &store,
        "DELETE FROM kxp_processed_events WHERE event_id = 'evt_purged'",
    )
    .await;
    let error = store.complete_lease(gone).await.unwrap_err();
    assert_eq!(error.kind(), "not_claimed");
}

/// `process` whose claim is taken over while its handler runs: neither its success nor its
/// failure is written over the new holder's claim, and its answer sends the sender back.
async fn process_after_a_takeover_leaves_the_new_claim_alone(store: Store) {
    let take_over = |event_id: &'static str| {
        let store = store.clone();
        async move {
            backdate(&store, "kxp_processed_events", "locked_until", event_id, 1).await;
            match store.claim_lease(event_id, LEASE).await.unwrap() {
                LeaseClaim::Held(lease) => lease,
                other => panic!("not taken over: {other:?}"),
            }
        }
    };

    let mut taken = None;
    let outcome = process(&store, "evt_taken_ok", LEASE, || async {
        taken = Some(take_over("evt_taken_ok").await);
        Ok::<(), String>(())
    })
    .await;
    assert!(matches!(outcome, Outcome::InProgress { .. }), "{outcome:?}");
    let record = store.record("evt_taken_ok").await.unwrap().unwrap();
    assert_eq!(
        (record.status, record.attempts),
        (EventStatus::Processing, 2)
    );
    // The new holder completes; the next delivery is a duplicate.
    store.complete_lease(taken.unwrap()).await.unwrap();
    let again = process(&store, "evt_taken_ok", LEASE, || async {
        Err::<(), _>("must not run")
    })
    .await;
    assert_eq!(again, Outcome::Duplicate);

    let outcome = process(&store, "evt_taken_err", LEASE, || async {
        take_over("evt_taken_err").await;
        Err::<(), _>("stale failure")
    })
    .await;
    assert_eq!(outcome, Outcome::Failed);
    let record = store.record("evt_taken_err").await.unwrap().unwrap();
    assert_eq!(
        (record.status, record.attempts, record.last_error),
        (EventStatus::Processing, 2, None)
    );
}
