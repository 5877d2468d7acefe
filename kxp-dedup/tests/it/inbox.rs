//! Inbox mode: store now, process in a worker, under the claim rules.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kxp_dedup::{Claim, EventStatus, InboxPut, InboxRun, Outcome, Store};

use crate::support::scalar;

const LEASE: Duration = Duration::from_secs(30);

both_backends!(
    repeated_puts_store_once_and_run_once,
    failed_item_is_retried_after_its_back_off,
    concurrent_workers_run_each_item_once,
    item_held_by_a_dead_worker_runs_after_the_lease,
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
