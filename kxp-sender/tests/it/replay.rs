//! Bulk replay acts on a snapshot (issue 11, item 5): `POST /v1/endpoints/{id}/replay
//! {"status":"delivered"}` replays what matched when the call started, exactly once each. It
//! used to page on by id while queueing, so its own replays (new ids, after the cursor) matched
//! the filter once the workers had delivered them, and were replayed again.
//!
//! Deterministic rather than a race with the workers: a trigger on the sender's own database
//! marks the first replay of each delivery delivered the instant it is inserted, as infinitely
//! fast workers would. Later replays stay pending, so the old code shows up as twice the count
//! instead of looping forever.

use std::time::{Duration, Instant};

use kxp_sender::Db;
use serde_json::json;

use crate::support::{Database, Receiver, typed};

/// More than one page of the replay's scan (500 rows), so the cursor moves on past the point
/// where the first replays are already queued.
const EVENTS: i64 = 501;
const WITHIN: Duration = Duration::from_secs(60);

each_backend!(bulk_replay_of_delivered_replays_each_delivery_once_not_its_own_replays);

async fn bulk_replay_of_delivered_replays_each_delivery_once_not_its_own_replays(
    database: Database,
) {
    let s = database.sender("0s").await;
    let db = s.server.db();
    let receiver = Receiver::start(Vec::new()).await;
    let (endpoint_id, _) = s
        .api
        .endpoint(&receiver.url, json!({"event_types": ["payment.*"]}))
        .await;
    // Bystanders, each with one delivered delivery: another endpoint of the same account, and
    // another account's endpoint (which is the caller's only by id).
    let (other_endpoint, _) = s
        .api
        .endpoint(&receiver.url, json!({"event_types": ["other.*"]}))
        .await;
    let (_, b_key) = db.create_account("b", None).await.unwrap();
    let b = s.api.with_key(&b_key);
    let (b_endpoint, _) = b.endpoint(&receiver.url, json!({})).await;
    let other_event = s.api.emit("other.thing", json!({})).await;
    let b_event = b.emit("payment.succeeded", json!({})).await;

    let mut events = Vec::new();
    for n in 0..EVENTS {
        events.push(s.api.emit("payment.succeeded", json!({"n": n})).await);
    }
    let start = Instant::now();
    while count(db, DELIVERED, &endpoint_id).await < EVENTS {
        assert!(start.elapsed() < WITHIN, "the events were not delivered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    s.api.wait_for(&other_event, "delivered", WITHIN).await;
    b.wait_for(&b_event, "delivered", WITHIN).await;

    install_instant_delivery(db).await;
    let replayed = s
        .api
        .client
        .replay_endpoint(
            &endpoint_id.as_str().into(),
            &typed(json!({"status": "delivered"})),
        )
        .await
        .unwrap();
    assert_eq!(
        replayed.queued as i64, EVENTS,
        "queued counts what matched at the start, once each"
    );
    assert_eq!(
        count(
            db,
            "SELECT COUNT(*) FROM kxp_deliveries WHERE endpoint_id = $1",
            &endpoint_id
        )
        .await,
        2 * EVENTS,
        "one new delivery per event, and no replay of a replay"
    );
    assert_eq!(
        count(
            db,
            "SELECT COUNT(*) FROM (SELECT event_id FROM kxp_deliveries WHERE endpoint_id = $1 \
             GROUP BY event_id HAVING COUNT(*) <> 2) AS odd",
            &endpoint_id
        )
        .await,
        0,
        "every event has its delivery and exactly one replay"
    );
    // Through the API: the original records its one replay, of the same event.
    let history = s.api.deliveries_of(&events[0]).await;
    assert_eq!(history.len(), 2, "{history:?}");
    assert_eq!(history[0]["replayed_by"], history[1]["id"], "{history:?}");
    assert!(history[1]["replayed_by"].is_null(), "{history:?}");

    for endpoint in [&other_endpoint, &b_endpoint] {
        assert_eq!(
            count(
                db,
                "SELECT COUNT(*) FROM kxp_deliveries WHERE endpoint_id = $1",
                endpoint
            )
            .await,
            1,
            "only the caller's endpoint is replayed"
        );
    }
    s.server.shutdown().await;
}

const DELIVERED: &str =
    "SELECT COUNT(*) FROM kxp_deliveries WHERE endpoint_id = $1 AND status = 'delivered'";

/// Infinitely fast workers, for the first replay of each delivery only: marked delivered in the
/// statement that inserts it.
async fn install_instant_delivery(db: &Db) {
    const COUNT: &str = "(SELECT COUNT(*) FROM kxp_deliveries \
         WHERE event_id = NEW.event_id AND endpoint_id = NEW.endpoint_id) = 2";
    const DELIVER: &str = "UPDATE kxp_deliveries SET status = 'delivered' WHERE id = NEW.id;";
    match db {
        Db::Sqlite(pool) => {
            sqlx::raw_sql(&format!(
                "CREATE TRIGGER test_instant_delivery AFTER INSERT ON kxp_deliveries \
                 WHEN {COUNT} BEGIN {DELIVER} END"
            ))
            .execute(pool)
            .await
            .unwrap();
        }
        Db::Postgres(pool) | Db::Citus(pool) => {
            sqlx::raw_sql(&format!(
                "CREATE FUNCTION test_instant_delivery() RETURNS trigger LANGUAGE plpgsql AS $$ \
                 BEGIN IF {COUNT} THEN {DELIVER} END IF; RETURN NULL; END $$; \
                 CREATE TRIGGER test_instant_delivery AFTER INSERT ON kxp_deliveries \
                 FOR EACH ROW EXECUTE FUNCTION test_instant_delivery();"
            ))
            .execute(pool)
            .await
            .unwrap();
        }
    }
}

/// A `COUNT(*)` with `$1` bound to an endpoint id.
async fn count(db: &Db, sql: &str, endpoint_id: &str) -> i64 {
    match db {
        Db::Sqlite(pool) => {
            sqlx::query_scalar(sql)
                .bind(endpoint_id)
                .fetch_one(pool)
                .await
        }
        Db::Postgres(pool) | Db::Citus(pool) => {
            sqlx::query_scalar(sql)
                .bind(endpoint_id)
                .fetch_one(pool)
                .await
        }
    }
    .unwrap()
}
