//! Retention: `purge` removes what is older than the age, and nothing else.

use std::time::Duration;

use kxp_dedup::{Claim, DEFAULT_RETENTION, Outcome, Store, process};

use crate::support::{backdate, exec, scalar};

both_backends!(
    purge_removes_only_rows_older_than_the_age,
    migrations_tolerate_foreign_versions
);

async fn done(store: &Store, event_id: &str) {
    assert_eq!(
        store
            .claim(event_id, Duration::from_secs(30))
            .await
            .unwrap(),
        Claim::Claimed
    );
    store.complete(event_id).await.unwrap();
}

/// Rows last changed 31 days ago go; 29 days ago and fresh ones stay; an inbox item that was
/// never processed stays whatever its age.
async fn purge_removes_only_rows_older_than_the_age(store: Store) {
    done(&store, "evt_old").await;
    done(&store, "evt_recent").await;
    done(&store, "evt_fresh").await;
    backdate(&store, "kxp_processed_events", "updated_at", "evt_old", 31).await;
    backdate(
        &store,
        "kxp_processed_events",
        "updated_at",
        "evt_recent",
        29,
    )
    .await;

    // An inbox item processed 31 days ago, and one received 31 days ago but never processed.
    store.inbox_put("evt_inbox_old_done", b"{}").await.unwrap();
    let ran = store
        .inbox_run_once(Duration::from_secs(30), |_, _| async {
            Ok::<(), String>(())
        })
        .await
        .unwrap();
    assert!(ran.is_some());
    backdate(&store, "kxp_inbox", "done_at", "evt_inbox_old_done", 31).await;
    backdate(
        &store,
        "kxp_processed_events",
        "updated_at",
        "evt_inbox_old_done",
        31,
    )
    .await;
    exec(
        &store,
        "INSERT INTO kxp_inbox (event_id, payload, received_at, available_at) \
         SELECT 'evt_inbox_pending', payload, received_at, available_at FROM kxp_inbox \
         WHERE event_id = 'evt_inbox_old_done'",
    )
    .await;

    // 2 event rows (evt_old, evt_inbox_old_done) + 1 inbox item.
    assert_eq!(store.purge(DEFAULT_RETENTION).await.unwrap(), 3);
    assert_eq!(store.record("evt_old").await.unwrap(), None);
    assert!(store.record("evt_recent").await.unwrap().is_some());
    assert!(store.record("evt_fresh").await.unwrap().is_some());
    assert_eq!(
        scalar(
            &store,
            "SELECT COUNT(*) FROM kxp_inbox WHERE event_id = 'evt_inbox_old_done'"
        )
        .await,
        0
    );
    assert_eq!(
        scalar(
            &store,
            "SELECT COUNT(*) FROM kxp_inbox WHERE event_id = 'evt_inbox_pending'"
        )
        .await,
        1
    );
    assert_eq!(store.purge(DEFAULT_RETENTION).await.unwrap(), 0);

    // The documented cost of retention: a purged event id is processed again.
    let again = process(&store, "evt_old", Duration::from_secs(30), || async {
        Ok::<(), String>(())
    })
    .await;
    assert_eq!(again, Outcome::Processed);
}

/// sqlx keeps one `_sqlx_migrations` table per database: versions applied by the application's
/// own migrator must not stop ours.
async fn migrations_tolerate_foreign_versions(store: Store) {
    let foreign = match store.backend() {
        kxp_dedup::Backend::Sqlite => {
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
             VALUES (1, 'the application''s own', TRUE, X'00', 0)"
        }
        kxp_dedup::Backend::Postgres => {
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
             VALUES (1, 'the application''s own', TRUE, '\\x00'::bytea, 0)"
        }
    };
    exec(&store, foreign).await;
    store.migrate().await.unwrap();
    store.migrate().await.unwrap();
}
