//! Scopes: one event id under two scopes is two events, in every mode.
//!
//! Event ids are unique per sender account, so a receiver serving two accounts sees the same id
//! from both; before scopes, the second account's event was answered as a duplicate and never
//! processed (security round 2, item 1).

use std::convert::Infallible;
use std::time::Duration;

use kxp_dedup::{
    Claim, EventStatus, InboxPut, InboxRun, LeaseClaim, Outcome, Store, process,
    process_in_transaction,
};

use crate::support::scalar;

const LEASE: Duration = Duration::from_secs(30);
const ID: &str = "0193a5f0-7c2e-7d4b-9a51-2f6c1e8d4b10";

both_backends!(
    one_id_in_two_scopes_is_two_events,
    leases_act_in_their_own_scope,
    inbox_workers_take_their_own_scope,
    held_events_and_checkpoints_stay_in_their_scope,
);

/// Claim/complete and in-transaction mode: each scope processes the id once, and the
/// default (empty) scope is a scope like the others.
async fn one_id_in_two_scopes_is_two_events(store: Store) {
    let (a, b) = (store.scoped("acc_a"), store.scoped("acc_b"));
    assert_eq!(
        (a.scope(), b.scope(), store.scope()),
        ("acc_a", "acc_b", "")
    );

    let ok = || async { Ok::<(), Infallible>(()) };
    assert_eq!(process(&a, ID, LEASE, ok).await, Outcome::Processed);
    assert_eq!(process(&a, ID, LEASE, ok).await, Outcome::Duplicate);
    assert_eq!(process(&b, ID, LEASE, ok).await, Outcome::Processed);
    assert_eq!(process(&b, ID, LEASE, ok).await, Outcome::Duplicate);
    assert_eq!(store.record(ID).await.unwrap(), None);
    assert_eq!(
        a.record(ID).await.unwrap().unwrap().status,
        EventStatus::Done
    );

    let marked = |tx| async move { Ok::<_, Infallible>(tx) };
    assert_eq!(
        process_in_transaction(&store, ID, marked).await,
        Outcome::Processed
    );
    assert_eq!(
        process_in_transaction(&store, ID, marked).await,
        Outcome::Duplicate
    );
    let other = store.scoped("acc_c");
    assert_eq!(
        process_in_transaction(&other, ID, marked).await,
        Outcome::Processed
    );
    assert_eq!(
        scalar(&store, "SELECT COUNT(*) FROM kxp_processed_events").await,
        4
    );
}

/// A lease completes, renews and fails in the scope that took it, even through another
/// handle; the unfenced calls act in their handle's scope.
async fn leases_act_in_their_own_scope(store: Store) {
    let a = store.scoped("acc_a");
    let LeaseClaim::Held(lease) = a.claim_lease(ID, LEASE).await.unwrap() else {
        panic!("the first claim holds");
    };
    assert_eq!(lease.scope(), "acc_a");
    // The same id in the empty scope is free, and its claim is not this lease's.
    assert_eq!(store.claim(ID, LEASE).await.unwrap(), Claim::Claimed);
    store.renew(&lease).await.unwrap();
    store.complete_lease(lease).await.unwrap();
    assert_eq!(
        a.record(ID).await.unwrap().unwrap().status,
        EventStatus::Done
    );
    assert_eq!(
        store.record(ID).await.unwrap().unwrap().status,
        EventStatus::Processing
    );
    store.fail(ID, "boom").await.unwrap();
    assert_eq!(
        store.record(ID).await.unwrap().unwrap().status,
        EventStatus::Failed
    );
    assert_eq!(
        a.record(ID).await.unwrap().unwrap().status,
        EventStatus::Done
    );
    let err = store.scoped("acc_z").complete(ID).await.unwrap_err();
    assert_eq!(err.kind(), "not_claimed");
}

/// Each scope's inbox worker takes its own items only: the handler of one route never sees
/// another route's events.
async fn inbox_workers_take_their_own_scope(store: Store) {
    let (a, b) = (store.scoped("acc_a"), store.scoped("acc_b"));
    assert_eq!(a.inbox_put(ID, b"from a").await.unwrap(), InboxPut::Stored);
    assert_eq!(b.inbox_put(ID, b"from b").await.unwrap(), InboxPut::Stored);
    assert_eq!(
        a.inbox_put(ID, b"from a").await.unwrap(),
        InboxPut::AlreadyStored
    );

    for (scope, body) in [(&a, "from a"), (&b, "from b")] {
        let ran = scope
            .inbox_run_once(LEASE, |event_id, payload| async move {
                assert_eq!(
                    (event_id.as_str(), payload.as_slice()),
                    (ID, body.as_bytes())
                );
                Ok::<(), String>(())
            })
            .await
            .unwrap();
        assert_eq!(
            ran,
            Some(InboxRun::Processed {
                event_id: ID.into()
            })
        );
        let nothing = scope
            .inbox_run_once(LEASE, |_, _| async { Ok::<(), String>(()) })
            .await
            .unwrap();
        assert_eq!(nothing, None);
    }
    let empty = store
        .inbox_run_once(LEASE, |_, _| async { Ok::<(), String>(()) })
        .await
        .unwrap();
    assert_eq!(empty, None, "the empty scope has no items");
}

/// Ordered mode's held rows and the catch-up checkpoints are per scope too.
async fn held_events_and_checkpoints_stay_in_their_scope(store: Store) {
    let (a, b) = (store.scoped("acc_a"), store.scoped("acc_b"));
    assert_eq!(a.hold("ep_1", ID, b"{}").await.unwrap(), InboxPut::Stored);
    assert_eq!(b.hold("ep_2", ID, b"{}").await.unwrap(), InboxPut::Stored);
    assert_eq!(a.held_endpoints().await.unwrap(), ["ep_1"]);
    assert_eq!(b.held_endpoints().await.unwrap(), ["ep_2"]);
    assert!(store.held_endpoints().await.unwrap().is_empty());

    // Done in scope a: only a's held row goes, whichever handle releases.
    assert_eq!(a.claim(ID, LEASE).await.unwrap(), Claim::Claimed);
    a.complete(ID).await.unwrap();
    assert_eq!(b.release_processed().await.unwrap(), 0);
    assert_eq!(a.release_processed().await.unwrap(), 1);
    assert_eq!(b.held_count("ep_2").await.unwrap(), 1);

    let moved = a.advance_checkpoint("ep_1", 7, Some(ID)).await.unwrap();
    assert_eq!(moved.sequence, 7);
    assert_eq!(b.checkpoint("ep_1").await.unwrap().sequence, 0);
    assert_eq!(
        b.advance_checkpoint("ep_1", 3, None)
            .await
            .unwrap()
            .sequence,
        3
    );
    assert_eq!(
        a.checkpoint("ep_1").await.unwrap().event_id.as_deref(),
        Some(ID)
    );
    assert_eq!(a.checkpoints().await.unwrap(), [("ep_1".to_owned(), 7)]);
    assert!(store.checkpoints().await.unwrap().is_empty());
}
