//! The catch-up checkpoint: 0 until set, per endpoint, never moved back but by a reset, and
//! with the id of the event at its number.

use std::time::Duration;

use kxp_dedup::Store;

both_backends!(
    a_checkpoint_only_moves_forward,
    a_checkpoint_keeps_the_event_at_its_number,
    the_oldest_held_event_has_an_age
);

/// The sequence of `store`'s checkpoint of `endpoint`.
async fn at(store: &Store, endpoint: &str) -> u64 {
    store.checkpoint(endpoint).await.unwrap().sequence
}

async fn a_checkpoint_only_moves_forward(store: Store) {
    assert_eq!(at(&store, "ep_a").await, 0);
    assert!(store.checkpoints().await.unwrap().is_empty());
    for (endpoint, to, now) in [
        ("ep_a", 5, 5),
        ("ep_a", 3, 5),
        ("ep_b", 2, 2),
        ("ep_a", 9, 9),
    ] {
        let moved = store.advance_checkpoint(endpoint, to, None).await.unwrap();
        assert_eq!(moved.sequence, now, "{endpoint} to {to}");
    }
    assert_eq!(at(&store, "ep_a").await, 9);
    assert_eq!(
        store.checkpoints().await.unwrap(),
        vec![("ep_a".to_owned(), 9), ("ep_b".to_owned(), 2)]
    );
    // A reset moves it anywhere, back included.
    store.reset_checkpoint("ep_a", 4).await.unwrap();
    assert_eq!(at(&store, "ep_a").await, 4);
    store.reset_checkpoint("ep_c", 0).await.unwrap();
    assert_eq!(at(&store, "ep_c").await, 0);
}

async fn a_checkpoint_keeps_the_event_at_its_number(store: Store) {
    let moved = store
        .advance_checkpoint("ep_a", 3, Some("evt_3"))
        .await
        .unwrap();
    assert_eq!(
        (moved.sequence, moved.event_id.as_deref()),
        (3, Some("evt_3"))
    );
    // Not back, and not its event either.
    let kept = store
        .advance_checkpoint("ep_a", 2, Some("evt_2"))
        .await
        .unwrap();
    assert_eq!(kept.event_id.as_deref(), Some("evt_3"));
    // Set by hand at a number: no event; the catch-up fills it in when it reads that number.
    store.reset_checkpoint("ep_a", 7).await.unwrap();
    assert_eq!(store.checkpoint("ep_a").await.unwrap().event_id, None);
    let filled = store
        .advance_checkpoint("ep_a", 7, Some("evt_7"))
        .await
        .unwrap();
    assert_eq!(
        (filled.sequence, filled.event_id.as_deref()),
        (7, Some("evt_7"))
    );
    let same = store
        .advance_checkpoint("ep_a", 7, Some("evt_other"))
        .await
        .unwrap();
    assert_eq!(
        same.event_id.as_deref(),
        Some("evt_7"),
        "a number's event is kept"
    );
    let on = store.advance_checkpoint("ep_a", 8, None).await.unwrap();
    assert_eq!((on.sequence, on.event_id), (8, None));
}

async fn the_oldest_held_event_has_an_age(store: Store) {
    assert_eq!(store.held_oldest_age("ep_a").await.unwrap(), None);
    store.hold("ep_a", "evt_1", b"{}").await.unwrap();
    tokio::time::sleep(Duration::from_millis(30)).await;
    store.hold("ep_a", "evt_2", b"{}").await.unwrap();
    let age = store.held_oldest_age("ep_a").await.unwrap().unwrap();
    assert!(age >= Duration::from_millis(20), "{age:?}");
    assert_eq!(store.held_oldest_age("ep_b").await.unwrap(), None);
}
