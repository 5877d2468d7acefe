//! Personal data's own retention: an event's `retention_days` erases its payload once they pass
//! (and ends its deliveries not made yet `expired`), that event's only; dead deliveries go after
//! the dead-letter retention, never before their account was told a day earlier. Purges are
//! run by the test with a clock of its own (`Retention::now`).

use std::time::Duration;

use kxp_api::{EndpointId, NewEvent, PageQuery};
use kxp_sender::{Purged, Retention, now_ms};
use serde_json::{Value, json};

use crate::support::{Database, Receiver, count, typed};

const WITHIN: Duration = Duration::from_secs(10);
const DAY: i64 = 24 * 60 * 60 * 1000;

/// A purge as of `days` days from now: expired payloads and, with `dead_letters`, dead
/// deliveries; nothing by the global retention.
fn at(days: f64, dead_letters: Option<Duration>) -> Retention {
    Retention {
        cutoff: None,
        dead_letters,
        now: now_ms() + (days * DAY as f64) as i64,
    }
}

each_backend!(a_payload_goes_when_its_own_retention_passes_and_no_other);
on_citus!(a_payload_goes_when_its_own_retention_passes_and_no_other);

async fn a_payload_goes_when_its_own_retention_passes_and_no_other(database: Database) {
    let s = database
        .sender_with("0s", |c| {
            c.retention = None;
            c.dead_letter_retention = None;
        })
        .await;
    let db = s.server.db();
    let api = &s.api;
    let rx = Receiver::start(Vec::new()).await;
    let (endpoint, _) = api.endpoint(&rx.url, json!({})).await;
    let endpoint = EndpointId::from(endpoint);
    api.client.pause_endpoint(&endpoint).await.unwrap();
    let emit = async |api: &crate::support::Api, days: Option<u32>, n: u32| {
        let mut event =
            NewEvent::new("customer.updated", &json!({"secret": format!("pii-{n}")})).unwrap();
        if let Some(days) = days {
            event = event.retention_days(days);
        }
        api.client
            .create_event(&event, None)
            .await
            .unwrap()
            .id
            .into_string()
    };
    let one_day = emit(api, Some(1), 1).await;
    let three_days = emit(api, Some(3), 2).await;
    let kept = emit(api, None, 3).await;
    // Another account's event, on the same schedule as the first.
    let (_, b_key) = db.create_account("b", None).await.unwrap();
    let b = api.with_key(&b_key);
    let b_one_day = emit(&b, Some(1), 4).await;

    for bad in [0, 3651] {
        let (status, body) = api
            .call(
                "POST",
                "/v1/events",
                Some(json!({"type": "t", "data": {}, "retention_days": bad})),
            )
            .await;
        assert_eq!(
            (status, body["error"].as_str()),
            (422, Some("invalid_request")),
            "{body}"
        );
        assert!(body["message"].as_str().unwrap().contains("retention_days"));
    }

    // Half a day on, nothing has expired.
    assert_eq!(db.purge(at(0.5, None)).await.unwrap(), Purged::default());

    // A day and a half on: the one-day payloads, of both accounts, and nothing else.
    let purged = db.purge(at(1.5, None)).await.unwrap();
    assert_eq!(purged.expired_payloads, 2, "{purged:?}");
    let (status, event) = api
        .call("GET", &format!("/v1/events/{one_day}"), None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(event["data"], Value::Null);
    assert_eq!(event["gone"], json!({"reason": "expired"}));
    assert_eq!(event["type"], "customer.updated");
    assert_eq!(api.deliveries_of(&one_day).await[0]["status"], "expired");
    for (client, id) in [(api, &three_days), (api, &kept)] {
        let (_, event) = client.call("GET", &format!("/v1/events/{id}"), None).await;
        assert!(event["data"]["secret"].is_string(), "{event}");
        assert_eq!(client.deliveries_of(id).await[0]["status"], "pending");
    }
    let (_, b_event) = b
        .call("GET", &format!("/v1/events/{b_one_day}"), None)
        .await;
    assert_eq!(b_event["gone"]["reason"], "expired");
    assert_eq!(
        count(
            db,
            "SELECT COUNT(*) FROM kxp_events WHERE payload LIKE '%pii-1%' OR payload LIKE '%pii-4%'"
        )
        .await,
        0
    );

    // An expired delivery is never replayed, nor sent when its endpoint resumes.
    let expired = api.typed_deliveries_of(&one_day).await.remove(0);
    let (status, refused) = api
        .call(
            "POST",
            &format!("/v1/deliveries/{}/replay", expired.id),
            None,
        )
        .await;
    assert_eq!(
        (status, refused["error"].as_str()),
        (410, Some("expired")),
        "{refused}"
    );
    api.client.resume_endpoint(&endpoint).await.unwrap();
    api.wait_for(&kept, "delivered", WITHIN).await;
    api.wait_for(&three_days, "delivered", WITHIN).await;
    let sent: Vec<String> = rx
        .seen()
        .iter()
        .map(|seen| String::from_utf8_lossy(&seen.body).into_owned())
        .collect();
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert!(sent.iter().all(|body| !body.contains("pii-1")));

    // Four days on, the three-day payload goes too, though it was delivered; the kept one
    // stays.
    let purged = db.purge(at(4.0, None)).await.unwrap();
    assert_eq!(purged.expired_payloads, 1, "{purged:?}");
    assert_eq!(
        api.deliveries_of(&three_days).await[0]["status"],
        "delivered"
    );
    let (_, event) = api
        .call("GET", &format!("/v1/events/{three_days}"), None)
        .await;
    assert_eq!(event["gone"]["reason"], "expired");
    let (_, event) = api.call("GET", &format!("/v1/events/{kept}"), None).await;
    assert_eq!(event["data"]["secret"], "pii-3");
    s.server.shutdown().await;
}

each_backend!(dead_letters_go_after_their_retention_and_a_notice_a_day_before);

async fn dead_letters_go_after_their_retention_and_a_notice_a_day_before(database: Database) {
    let s = database
        .sender_with("0s", |c| {
            c.retention = None;
            c.dead_letter_retention = None;
        })
        .await;
    let db = s.server.db();
    let api = &s.api;
    let ops = Receiver::start(Vec::new()).await;
    api.client
        .update_account(&typed(json!({"ops_url": ops.url})))
        .await
        .unwrap();
    let rx = Receiver::start(Vec::new()).await;
    rx.answer_rest_with(500);
    api.endpoint(&rx.url, json!({})).await;
    let first = api.emit("t", json!({"n": 1})).await;
    let second = api.emit("t", json!({"n": 2})).await;
    api.wait_for(&first, "dead", WITHIN).await;
    api.wait_for(&second, "dead", WITHIN).await;
    let kept = Some(Duration::from_secs(30 * 24 * 60 * 60));

    // What a purge did to the dead-letter queue: notices, dead letters, deliveries, attempts
    // (the hourly statistics also go, as of the test's clock).
    let purge = async |days: f64| {
        let p = db.purge(at(days, kept)).await.unwrap();
        (
            p.dead_letter_notices,
            p.dead_letters,
            p.deliveries,
            p.attempts,
        )
    };
    // Within the retention less a day: not a word.
    assert_eq!(purge(28.0).await, (0, 0, 0, 0));
    // Within a day of it: one notice for the endpoint's two, and nothing deleted yet.
    assert_eq!(purge(29.5).await, (1, 0, 0, 0));
    let notices = api
        .client
        .notifications(&PageQuery::default())
        .await
        .unwrap();
    let notice = notices
        .data
        .iter()
        .find(|n| n.kind.as_str() == "endpoint.dead_letters_expiring")
        .unwrap_or_else(|| panic!("{notices:?}"));
    let payload: String = sqlx_payload(db, notice.id.as_str()).await;
    let payload: Value = serde_json::from_str(&payload).unwrap();
    assert_eq!(payload["data"]["dead_letters"]["count"], 2, "{payload}");
    // Once only.
    assert_eq!(purge(29.6).await, (0, 0, 0, 0));
    // Past the retention, but the notice is not a day old: they stay.
    assert_eq!(purge(30.2).await, (0, 0, 0, 0));
    assert_eq!(
        api.client
            .deliveries(&kxp_api::DeliveryQuery::dead())
            .await
            .unwrap()
            .data
            .len(),
        2
    );
    // A day after the notice: gone, with their attempts; their events stay.
    assert_eq!(purge(30.6).await, (0, 2, 2, 2));
    assert!(
        api.client
            .deliveries(&kxp_api::DeliveryQuery::dead())
            .await
            .unwrap()
            .data
            .is_empty()
    );
    assert_eq!(
        api.call("GET", &format!("/v1/events/{first}"), None)
            .await
            .0,
        200
    );

    // A dead letter first seen long past its date still gets its day's notice.
    let late = api.emit("t", json!({"n": 3})).await;
    api.wait_for(&late, "dead", WITHIN).await;
    assert_eq!(purge(45.0).await, (1, 0, 0, 0));
    assert_eq!(purge(45.5).await, (0, 0, 0, 0));
    assert_eq!(purge(46.1).await, (0, 1, 1, 1));
    s.server.shutdown().await;
}

/// The stored envelope of the notification `id`.
async fn sqlx_payload(db: &kxp_sender::Db, id: &str) -> String {
    let sql = format!("SELECT payload FROM kxp_notifications WHERE id = '{id}'");
    match db {
        kxp_sender::Db::Sqlite(pool) => sqlx::query_scalar(&sql).fetch_one(pool).await.unwrap(),
        kxp_sender::Db::Postgres(pool) | kxp_sender::Db::Citus(pool) => {
            sqlx::query_scalar(&sql).fetch_one(pool).await.unwrap()
        }
    }
}
