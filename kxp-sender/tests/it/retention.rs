//! Retention: what a purge removes and, above all, what it keeps (the dead-letter queue,
//! anything unfinished, the events they need).

use std::time::Duration;

use kxp_api::{DeliveryQuery, EndpointId, EndpointPatch, RotateSecret};
use kxp_sender::Db;
use kxp_sender::Purged;
use kxp_sender::now_ms;
use serde_json::json;

use crate::support::{Receiver, Reply, sender_with};

const WITHIN: Duration = Duration::from_secs(10);

async fn count(db: &Db, sql: &str) -> i64 {
    let Db::Sqlite(pool) = db else {
        panic!("the test sender runs on SQLite")
    };
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_removes_finished_data_and_keeps_the_dead_letter_queue() {
    // One try: a 500 makes a delivery dead at once. Nothing purged by the server itself.
    let s = sender_with("0s", |c| c.retention = None).await;
    let db = s.server.db();
    let rx = Receiver::start(vec![Reply::Status(500), Reply::Status(500)]).await;
    let (ep, _) = s.api.endpoint(&rx.url, json!({})).await;
    let endpoint = EndpointId::from(ep);

    // Two dead letters: one stays dead, the other is replayed and delivered.
    let kept_dead = s.api.emit("t", json!({"n": 1})).await;
    s.api.wait_for(&kept_dead, "dead", WITHIN).await;
    let replayed = s.api.emit("t", json!({"n": 2})).await;
    let dead = s.api.wait_for(&replayed, "dead", WITHIN).await;
    s.api
        .client
        .replay_delivery(&dead["id"].as_str().unwrap().into())
        .await
        .unwrap();
    s.api.wait_for(&replayed, "delivered", WITHIN).await;
    let delivered = s.api.emit("t", json!({"n": 3})).await;
    s.api.wait_for(&delivered, "delivered", WITHIN).await;
    // One still pending: held by a pause.
    s.api.client.pause_endpoint(&endpoint).await.unwrap();
    let held = s.api.emit("t", json!({"n": 4})).await;
    // An event no endpoint takes.
    let mut patch = EndpointPatch::default();
    patch.event_types = Some(vec!["t".to_owned()]);
    s.api
        .client
        .update_endpoint(&endpoint, &patch)
        .await
        .unwrap();
    let unsubscribed = s.api.emit("other", json!({"n": 5})).await;
    // A rotation with no overlap leaves an expired secret behind; statistics of long ago.
    s.api
        .client
        .rotate_secret(&endpoint, &RotateSecret::overlap("0s"))
        .await
        .unwrap();
    let Db::Sqlite(pool) = db else { unreachable!() };
    sqlx::query(
        "INSERT INTO kxp_endpoint_stats_hourly SELECT endpoint_id, 0, successes, failures, le_10, le_25, \
         le_50, le_100, le_250, le_500, le_1000, le_2500, le_5000, le_10000, le_30000, le_inf \
         FROM kxp_endpoint_stats_hourly LIMIT 1",
    )
    .execute(pool)
    .await
    .unwrap();
    assert_eq!(
        count(db, "SELECT COUNT(*) FROM kxp_endpoint_secrets").await,
        2
    );

    // Nothing is old enough for a cut-off in the past: only the expired secret and the old
    // statistics go.
    let purged = db.purge(Some(now_ms() - 60_000)).await.unwrap();
    assert_eq!(
        purged,
        Purged {
            stats_rows: 1,
            secrets: 1,
            ..Purged::default()
        }
    );

    // A cut-off after everything: finished deliveries go, with their attempts and events.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let purged = db.purge(Some(now_ms())).await.unwrap();
    // Gone: the replayed dead letter, its delivered replay, the delivered one (three
    // deliveries, three attempts), and two events (`replayed`, `delivered`) plus the one no
    // endpoint took.
    assert_eq!(
        purged,
        Purged {
            deliveries: 3,
            attempts: 3,
            events: 3,
            ..Purged::default()
        }
    );
    let exists = async |event: &str| {
        s.api
            .call("GET", &format!("/v1/events/{event}"), None)
            .await
            .0
    };
    assert_eq!(
        exists(&kept_dead).await,
        200,
        "a dead letter never replayed stays"
    );
    assert_eq!(exists(&held).await, 200, "a pending delivery's event stays");
    for gone in [&replayed, &delivered, &unsubscribed] {
        assert_eq!(exists(gone).await, 404);
    }
    let dlq = s
        .api
        .client
        .deliveries(&DeliveryQuery::dead())
        .await
        .unwrap();
    assert_eq!(dlq.data.len(), 1, "{dlq:?}");
    assert_eq!(s.api.deliveries_of(&held).await[0]["status"], "pending");
    assert_eq!(count(db, "SELECT COUNT(*) FROM kxp_attempts").await, 1);
    assert_eq!(
        count(db, "SELECT COUNT(*) FROM kxp_endpoint_secrets").await,
        1
    );

    // A second purge finds nothing, and the endpoint still works.
    assert_eq!(db.purge(Some(now_ms())).await.unwrap(), Purged::default());
    s.api.client.resume_endpoint(&endpoint).await.unwrap();
    s.api.wait_for(&held, "delivered", WITHIN).await;
    s.server.shutdown().await;
}
