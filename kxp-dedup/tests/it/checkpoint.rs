//! The catch-up checkpoint: 0 until set, per endpoint, and never moved back.

use kxp_dedup::Store;

both_backends!(a_checkpoint_only_moves_forward);

async fn a_checkpoint_only_moves_forward(store: Store) {
    assert_eq!(store.checkpoint("ep_a").await.unwrap(), 0);
    assert!(store.checkpoints().await.unwrap().is_empty());
    assert_eq!(store.advance_checkpoint("ep_a", 5).await.unwrap(), 5);
    assert_eq!(store.advance_checkpoint("ep_a", 3).await.unwrap(), 5);
    assert_eq!(store.advance_checkpoint("ep_b", 2).await.unwrap(), 2);
    assert_eq!(store.advance_checkpoint("ep_a", 9).await.unwrap(), 9);
    assert_eq!(store.checkpoint("ep_a").await.unwrap(), 9);
    assert_eq!(
        store.checkpoints().await.unwrap(),
        vec![("ep_a".to_owned(), 9), ("ep_b".to_owned(), 2)]
    );
}
