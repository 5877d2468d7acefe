//! The ordered inbox: a hold is recorded once, and released once dedup has the event done.

use std::time::Duration;

use kxp_dedup::{Claim, InboxPut, Store};

both_backends!(held_events_wait_until_processed);

async fn held_events_wait_until_processed(store: Store) {
    assert_eq!(
        store.hold("ep_a", "evt_1", b"{}").await.unwrap(),
        InboxPut::Stored
    );
    assert_eq!(
        store.hold("ep_a", "evt_1", b"{}").await.unwrap(),
        InboxPut::AlreadyStored
    );
    assert_eq!(
        store.hold("ep_a", "evt_2", b"{}").await.unwrap(),
        InboxPut::Stored
    );
    assert_eq!(
        store.hold("ep_b", "evt_3", b"{}").await.unwrap(),
        InboxPut::Stored
    );
    assert_eq!(store.held_endpoints().await.unwrap(), ["ep_a", "ep_b"]);
    assert_eq!(store.held_count("ep_a").await.unwrap(), 2);
    assert_eq!(store.release_processed().await.unwrap(), 0);

    // evt_1 done, evt_3 only claimed: only evt_1's row goes.
    for id in ["evt_1", "evt_3"] {
        assert!(matches!(
            store.claim(id, Duration::from_secs(60)).await.unwrap(),
            Claim::Claimed
        ));
    }
    store.complete("evt_1").await.unwrap();
    assert_eq!(store.release_processed().await.unwrap(), 1);
    assert_eq!(store.held_count("ep_a").await.unwrap(), 1);
    assert_eq!(store.held_count("ep_b").await.unwrap(), 1);
    assert_eq!(store.held_count("ep_c").await.unwrap(), 0);
}
