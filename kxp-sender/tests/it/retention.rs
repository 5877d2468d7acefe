//! Retention: what a purge removes and, above all, what it keeps (the dead-letter queue,
//! anything unfinished, the events they need, live console links and sessions).

use std::time::Duration;

use kxp_api::{DeliveryQuery, EndpointId, EndpointPatch, NewPortalLink, PortalScope, RotateSecret};
use kxp_sender::Db;
use kxp_sender::Purged;
use kxp_sender::now_ms;
use serde_json::json;

use crate::console::{Browser, cookie_pair, new_link};
use crate::support::{Database, Receiver, Reply, count, execute, sender_with};

const WITHIN: Duration = Duration::from_secs(10);

each_backend!(a_purge_removes_finished_data_and_keeps_the_dead_letter_queue);
on_citus!(a_purge_removes_finished_data_and_keeps_the_dead_letter_queue);

async fn a_purge_removes_finished_data_and_keeps_the_dead_letter_queue(database: Database) {
    // One try: a 500 makes a delivery dead at once. Nothing purged by the server itself.
    let s = database.sender_with("0s", |c| c.retention = None).await;
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
    execute(
        db,
        "INSERT INTO kxp_endpoint_stats_hourly (account_id, endpoint_id, hour, successes, failures, \
         le_10, le_25, le_50, le_100, le_250, le_500, le_1000, le_2500, le_5000, le_10000, le_30000, le_inf) \
         SELECT account_id, endpoint_id, 0, successes, failures, le_10, le_25, le_50, le_100, le_250, \
         le_500, le_1000, le_2500, le_5000, le_10000, le_30000, le_inf \
         FROM kxp_endpoint_stats_hourly WHERE hour > 0 LIMIT 1",
    )
    .await;
    assert_eq!(
        count(db, "SELECT COUNT(*) FROM kxp_endpoint_secrets").await,
        2
    );

    // Nothing is old enough for a cut-off in the past: only the expired secret and the old
    // statistics go.
    let purged = db
        .purge(kxp_sender::Retention::until(Some(now_ms() - 60_000)))
        .await
        .unwrap();
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
    let purged = db
        .purge(kxp_sender::Retention::until(Some(now_ms())))
        .await
        .unwrap();
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
    assert_eq!(
        db.purge(kxp_sender::Retention::until(Some(now_ms())))
            .await
            .unwrap(),
        Purged::default()
    );
    s.api.client.resume_endpoint(&endpoint).await.unwrap();
    s.api.wait_for(&held, "delivered", WITHIN).await;
    s.server.shutdown().await;
}

/// The `kxp_sessions` row a `kxp_session=<value>` cookie names: `WHERE` it.
fn session_row(cookie: &str) -> String {
    let value = cookie.strip_prefix("kxp_session=").unwrap();
    format!("id_hash = '{}'", kxp_sender::sha256_hex(value.as_bytes()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_removes_expired_portal_links_and_sessions_and_keeps_live_ones() {
    // No workers, so no purge but the test's own.
    let s = sender_with("0s", |c| {
        c.retention = None;
        c.run_workers = false;
    })
    .await;
    let db = s.server.db();
    let Db::Sqlite(pool) = db else { unreachable!() };
    let run = async |sql: &str| {
        sqlx::raw_sql(sql).execute(pool).await.unwrap();
    };
    let b = Browser::of(&s);
    let client = &s.api.client;

    // Links: 3,001 that expired unused (the review's count, over several batches), one that
    // expired after it was used, and one live.
    let account = s.api.client.account().await.unwrap().id;
    run(&format!(
        "INSERT INTO kxp_portal_links (token_hash, account_id, scope, created_at, expires_at) \
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3001) \
         SELECT 'expired-' || i, '{account}', 'manage', 0, 1000 FROM n"
    ))
    .await;
    let used = new_link(client, NewPortalLink::default()).await;
    let fresh = b.press_link(&used.url).await;
    let fresh = cookie_pair(&fresh, "kxp_session").unwrap();
    // Its first page takes the message the sign-in left ("Signed in to …").
    assert_eq!(b.home(&fresh).await.0, 200);
    run("UPDATE kxp_portal_links SET expires_at = 1000 WHERE used_at IS NOT NULL").await;
    let live = new_link(client, NewPortalLink::default()).await;

    // Sessions: one live, one idle for 8 hours, one opened 24 hours ago (busy until now), each
    // of the two expired ones still holding a one-time message nobody came back for.
    let idle = b.session(client, PortalScope::Manage).await;
    let old = b.session(client, PortalScope::Read).await;
    let hour = 60 * 60 * 1000;
    run(&format!(
        "UPDATE kxp_sessions SET last_seen_at = last_seen_at - {}, flash = 'ep_x kxps1.k.secret' \
         WHERE {}",
        8 * hour,
        session_row(&idle)
    ))
    .await;
    run(&format!(
        "UPDATE kxp_sessions SET created_at = created_at - {}, flash = 'ep_y kxps1.k.secret' \
         WHERE {}",
        24 * hour,
        session_row(&old)
    ))
    .await;
    // The two sessions' links are used but not expired yet: they stay too.
    assert_eq!(
        count(db, "SELECT COUNT(*) FROM kxp_portal_links").await,
        3005
    );
    assert_eq!(count(db, "SELECT COUNT(*) FROM kxp_sessions").await, 3);

    let purged = db.purge(kxp_sender::Retention::until(None)).await.unwrap();
    assert_eq!(
        purged,
        Purged {
            portal_links: 3002,
            sessions: 2,
            ..Purged::default()
        }
    );
    assert_eq!(count(db, "SELECT COUNT(*) FROM kxp_portal_links").await, 3);
    assert_eq!(count(db, "SELECT COUNT(*) FROM kxp_sessions").await, 1);
    assert_eq!(
        count(
            db,
            "SELECT COUNT(*) FROM kxp_sessions WHERE flash IS NOT NULL"
        )
        .await,
        0,
        "the messages went with their sessions"
    );
    // What is live still works.
    assert_eq!(b.home(&fresh).await.0, 200);
    assert_eq!(b.press_link(&live.url).await.status(), 303);
    for gone in [&idle, &old] {
        assert_eq!(b.home(gone).await.0, 303);
    }
    assert_eq!(
        db.purge(kxp_sender::Retention::until(None)).await.unwrap(),
        Purged::default()
    );
    s.server.shutdown().await;
}
