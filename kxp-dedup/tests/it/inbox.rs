//! Inbox mode: store now, process in a worker, under the claim rules.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kxp_dedup::sqlx;
use kxp_dedup::{Backend, Claim, EventStatus, InboxPut, InboxRun, Outcome, Store};
use tokio::sync::oneshot;

use crate::support::{backdate, scalar};

const LEASE: Duration = Duration::from_secs(30);

both_backends!(
    repeated_puts_store_once_and_run_once,
    failed_item_is_retried_after_its_back_off,
    concurrent_workers_run_each_item_once,
    item_held_by_a_dead_worker_runs_after_the_lease,
    inbox_handler_slower_than_its_lease_is_not_run_twice_while_alive,
    inbox_run_after_a_takeover_leaves_the_new_claim_alone,
);

/// Five deliveries of one event: stored once, processed once, with the first payload.
async fn repeated_puts_store_once_and_run_once(store: Store) {
    let mut tasks = Vec::new();
    for i in 0..5 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let payload = format!(r#"{{"id":"evt_inbox","delivery":{i}}}"#);
            store
                .inbox_put("evt_inbox", payload.as_bytes())
                .await
                .unwrap()
        }));
    }
    let mut puts = Vec::new();
    for task in tasks {
        puts.push(task.await.unwrap());
    }
    let stored = puts.iter().filter(|p| **p == InboxPut::Stored).count();
    assert_eq!(stored, 1, "{puts:?}");
    assert_eq!(scalar(&store, "SELECT COUNT(*) FROM kxp_inbox").await, 1);

    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen_in = seen.clone();
    let ran = store
        .inbox_run_once(LEASE, |event_id, payload| async move {
            seen_in.lock().unwrap().push((event_id, payload));
            Ok::<(), String>(())
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        ran,
        InboxRun::Processed {
            event_id: "evt_inbox".into()
        }
    );
    assert_eq!(ran.outcome(), Outcome::Processed);
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].0, "evt_inbox");
        assert!(String::from_utf8_lossy(&seen[0].1).starts_with(r#"{"id":"evt_inbox""#));
    }

    let nothing = store
        .inbox_run_once(LEASE, |_, _| async { Err::<(), _>("must not run") })
        .await
        .unwrap();
    assert_eq!(nothing, None);
    // A redelivery after processing is still a duplicate, and does not reopen the item.
    assert_eq!(
        store.inbox_put("evt_inbox", b"{}").await.unwrap(),
        InboxPut::AlreadyStored
    );
    let nothing = store
        .inbox_run_once(LEASE, |_, _| async { Err::<(), _>("must not run") })
        .await
        .unwrap();
    assert_eq!(nothing, None);
    assert_eq!(
        store.record("evt_inbox").await.unwrap().unwrap().status,
        EventStatus::Done
    );
}

/// A failing handler leaves the item to be retried: not due at once (no hot loop), due after
/// the back-off, and then processed.
async fn failed_item_is_retried_after_its_back_off(store: Store) {
    store.inbox_put("evt_inbox_flaky", b"{}").await.unwrap();
    let failed = store
        .inbox_run_once(LEASE, |_, _| async { Err::<(), _>("warehouse offline") })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        failed,
        InboxRun::Failed {
            event_id: "evt_inbox_flaky".into(),
            error: "warehouse offline".into(),
            retry_after: Duration::from_secs(1),
        }
    );
    let record = store.record("evt_inbox_flaky").await.unwrap().unwrap();
    assert_eq!(record.status, EventStatus::Failed);
    assert_eq!(record.last_error.as_deref(), Some("warehouse offline"));

    let too_soon = store
        .inbox_run_once(LEASE, |_, _| async { Err::<(), _>("must not run yet") })
        .await
        .unwrap();
    assert_eq!(too_soon, None);

    tokio::time::sleep(Duration::from_millis(1200)).await;
    let ran = store
        .inbox_run_once(LEASE, |_, _| async { Ok::<(), String>(()) })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ran.event_id(), "evt_inbox_flaky");
    assert_eq!(ran.outcome(), Outcome::Processed);
    let record = store.record("evt_inbox_flaky").await.unwrap().unwrap();
    assert_eq!((record.status, record.attempts), (EventStatus::Done, 2));
}

/// Four workers drain ten items: each item runs exactly once.
async fn concurrent_workers_run_each_item_once(store: Store) {
    for i in 0..10 {
        let id = format!("evt_batch_{i}");
        store.inbox_put(&id, id.as_bytes()).await.unwrap();
    }
    let runs: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let mut workers = Vec::new();
    for _ in 0..4 {
        let store = store.clone();
        let runs = runs.clone();
        workers.push(tokio::spawn(async move {
            loop {
                let runs = runs.clone();
                let ran = store
                    .inbox_run_once(LEASE, |event_id, payload| async move {
                        assert_eq!(event_id.as_bytes(), payload.as_slice());
                        *runs.lock().unwrap().entry(event_id).or_default() += 1;
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        Ok::<(), String>(())
                    })
                    .await
                    .unwrap();
                if ran.is_none() {
                    break;
                }
            }
        }));
    }
    for worker in workers {
        worker.await.unwrap();
    }
    let runs = runs.lock().unwrap().clone();
    assert_eq!(runs.len(), 10, "{runs:?}");
    assert!(runs.values().all(|n| *n == 1), "{runs:?}");
    assert_eq!(
        scalar(
            &store,
            "SELECT COUNT(*) FROM kxp_inbox WHERE done_at IS NOT NULL"
        )
        .await,
        10
    );
}

/// An item whose worker died mid-run (its claim never completed) is left alone while the lease
/// is live, then runs.
async fn item_held_by_a_dead_worker_runs_after_the_lease(store: Store) {
    store.inbox_put("evt_inbox_orphan", b"{}").await.unwrap();
    assert_eq!(
        store
            .claim("evt_inbox_orphan", Duration::from_millis(500))
            .await
            .unwrap(),
        Claim::Claimed
    );
    let held = store
        .inbox_run_once(LEASE, |_, _| async { Err::<(), _>("must not run yet") })
        .await
        .unwrap();
    assert_eq!(held, None);
    tokio::time::sleep(Duration::from_millis(700)).await;
    let ran = store
        .inbox_run_once(LEASE, |_, _| async { Ok::<(), String>(()) })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ran.outcome(), Outcome::Processed);
}

/// Inbox runs outlived their lease: `inbox_run_once` claimed without renewing, so once a
/// handler was slower than its lease another worker claimed the item and ran it a second time.
/// Now the lease is renewed while the handler runs: other workers trying for five leases' worth
/// of handler time find nothing due.
async fn inbox_handler_slower_than_its_lease_is_not_run_twice_while_alive(store: Store) {
    let lease = Duration::from_millis(600);
    store.inbox_put("evt_inbox_slow", b"{}").await.unwrap();
    let (started, started_rx) = oneshot::channel();
    let (release, release_rx) = oneshot::channel::<()>();
    let slow = {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .inbox_run_once(lease, |_, _| async move {
                    started.send(()).unwrap();
                    release_rx.await.unwrap();
                    Ok::<(), String>(())
                })
                .await
                .unwrap()
        })
    };
    started_rx.await.unwrap();
    let second_runs = Arc::new(AtomicUsize::new(0));
    let mut answers = Vec::new();
    let tried_since = Instant::now();
    while tried_since.elapsed() < lease * 5 {
        let runs = second_runs.clone();
        let answer = store
            .inbox_run_once(lease, |_, _| async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<(), String>(())
            })
            .await
            .unwrap();
        answers.push(answer);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    release.send(()).unwrap();
    assert_eq!(
        slow.await.unwrap(),
        Some(InboxRun::Processed {
            event_id: "evt_inbox_slow".into()
        })
    );
    assert_eq!(second_runs.load(Ordering::SeqCst), 0, "{answers:?}");
    assert!(answers.iter().all(Option::is_none), "{answers:?}");
    let record = store.record("evt_inbox_slow").await.unwrap().unwrap();
    assert_eq!((record.status, record.attempts), (EventStatus::Done, 1));
}

/// Inbox completion had no fencing token: a worker whose claim was taken over marked the
/// event and the item done (or failed, and pushed back) under the worker now holding it. Now
/// it gets `ClaimLost`, nothing of its run is written, and the new holder finishes the item.
async fn inbox_run_after_a_takeover_leaves_the_new_claim_alone(store: Store) {
    for (event_id, first_result) in [
        ("evt_inbox_taken_ok", Ok(())),
        ("evt_inbox_taken_err", Err("stale failure")),
    ] {
        store.inbox_put(event_id, b"{}").await.unwrap();
        let available_at = available_at_ms(&store, event_id).await;
        let (second_running, second_running_rx) = oneshot::channel();
        let (release_second, release_rx) = oneshot::channel::<()>();
        let mut second = None;
        let ran = {
            let (store_in, second_slot) = (store.clone(), &mut second);
            store
                .inbox_run_once(LEASE, |id, _| async move {
                    // This worker stalls past its lease (renewals could not happen); a second
                    // worker claims the item and is busy with it when this handler returns.
                    backdate(&store_in, "kxp_processed_events", "locked_until", &id, 1).await;
                    let second_store = store_in.clone();
                    *second_slot = Some(tokio::spawn(async move {
                        second_store
                            .inbox_run_once(LEASE, |_, _| async move {
                                second_running.send(()).unwrap();
                                release_rx.await.unwrap();
                                Ok::<(), &str>(())
                            })
                            .await
                            .unwrap()
                    }));
                    second_running_rx.await.unwrap();
                    first_result
                })
                .await
                .unwrap()
        };
        assert_eq!(
            ran,
            Some(InboxRun::ClaimLost {
                event_id: event_id.into()
            })
        );
        assert_eq!(ran.unwrap().outcome(), Outcome::Failed);
        // The second holder's claim is as it was: not done, not failed, item not pushed back.
        let record = store.record(event_id).await.unwrap().unwrap();
        assert_eq!(
            (record.status, record.attempts, record.last_error),
            (EventStatus::Processing, 2, None)
        );
        assert_eq!(available_at_ms(&store, event_id).await, available_at);
        assert_eq!(open_items(&store).await, 1);

        release_second.send(()).unwrap();
        assert_eq!(
            second.unwrap().await.unwrap(),
            Some(InboxRun::Processed {
                event_id: event_id.into()
            })
        );
        let record = store.record(event_id).await.unwrap().unwrap();
        assert_eq!(
            (record.status, record.attempts, record.last_error),
            (EventStatus::Done, 2, None)
        );
        assert_eq!(open_items(&store).await, 0);
    }
}

async fn open_items(store: &Store) -> i64 {
    scalar(
        store,
        "SELECT COUNT(*) FROM kxp_inbox WHERE done_at IS NULL",
    )
    .await
}

/// When the item is due, in milliseconds, in each backend's representation of time.
async fn available_at_ms(store: &Store, event_id: &str) -> i64 {
    let sql = match store.backend() {
        Backend::Sqlite => "SELECT available_at FROM kxp_inbox WHERE event_id = ?1",
        Backend::Postgres => {
            "SELECT (EXTRACT(EPOCH FROM available_at) * 1000)::bigint FROM kxp_inbox
             WHERE event_id = $1"
        }
    };
    match store.backend() {
        Backend::Sqlite => sqlx::query_scalar(sql)
            .bind(event_id)
            .fetch_one(store.sqlite_pool().unwrap())
            .await
            .unwrap(),
        Backend::Postgres => sqlx::query_scalar(sql)
            .bind(event_id)
            .fetch_one(store.postgres_pool().unwrap())
            .await
            .unwrap(),
    }
}
