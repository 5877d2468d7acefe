//! Upgrading a database of the release before scopes: its rows land in the empty scope, where a
//! store without a scope finds them as before.

use std::path::Path;
use std::time::Duration;

use kxp_dedup::{EventStatus, InboxRun, Store};
use kxp_testkit::db::TestDatabase;

use crate::support::Db;

/// The first migration of scopes.
const SCOPES: i64 = 20261203000001;

#[tokio::test]
async fn sqlite_rows_before_scopes_are_in_the_empty_scope() {
    upgrade(Db::Sqlite).await;
}

#[tokio::test]
async fn postgres_rows_before_scopes_are_in_the_empty_scope() {
    upgrade(Db::Postgres).await;
}

async fn upgrade(db: Db) {
    let Some(database) = TestDatabase::create(db, "kxp_dedup_upgrade").await else {
        return;
    };
    let (folder, rows) = match db {
        Db::Sqlite => (
            "migrations/sqlite",
            [
                "INSERT INTO kxp_processed_events (event_id, status, attempts, first_seen_at, updated_at) \
                 VALUES ('evt_done', 'done', 1, 1, 1)",
                "INSERT INTO kxp_inbox (event_id, payload, received_at, available_at) \
                 VALUES ('evt_inbox', x'7b7d', 1, 1)",
                "INSERT INTO kxp_held_events (event_id, endpoint_id, payload, received_at) \
                 VALUES ('evt_held', 'ep_1', x'7b7d', 1)",
                "INSERT INTO kxp_checkpoints (endpoint_id, sequence, updated_at) VALUES ('ep_1', 9, 1)",
            ],
        ),
        Db::Postgres => (
            "migrations/postgres",
            [
                "INSERT INTO kxp_processed_events (event_id, status) VALUES ('evt_done', 'done')",
                "INSERT INTO kxp_inbox (event_id, payload) VALUES ('evt_inbox', '\\x7b7d')",
                "INSERT INTO kxp_held_events (event_id, endpoint_id, payload) \
                 VALUES ('evt_held', 'ep_1', '\\x7b7d')",
                "INSERT INTO kxp_checkpoints (endpoint_id, sequence) VALUES ('ep_1', 9)",
            ],
        ),
    };
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join(folder);
    database.migrate_before(&folder, SCOPES, &rows).await;

    let store = Store::connect(database.url()).await.unwrap();
    let done = store.record("evt_done").await.unwrap().unwrap();
    assert_eq!(done.status, EventStatus::Done);
    assert_eq!(
        store.scoped("acc_a").record("evt_done").await.unwrap(),
        None
    );
    assert_eq!(store.checkpoints().await.unwrap(), [("ep_1".to_owned(), 9)]);
    assert_eq!(store.held_endpoints().await.unwrap(), ["ep_1"]);
    let ran = store
        .inbox_run_once(Duration::from_secs(30), |_, payload| async move {
            assert_eq!(payload, b"{}");
            Ok::<(), String>(())
        })
        .await
        .unwrap();
    assert_eq!(
        ran,
        Some(InboxRun::Processed {
            event_id: "evt_inbox".into()
        })
    );
    store.close().await;
    database.drop().await;
}
