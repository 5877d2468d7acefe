//! Erasure by tag (`POST /v1/erasures`): one customer's payloads leave every table (the event,
//! the receivers' response snippets), their deliveries not made yet end `erased` whatever state
//! they were in (pending, held by a pause, dead, unread in a pull endpoint's feed), none of
//! them is attempted or replayed again, the feed keeps every number with a MACed
//! `{"erased":true}`, and the other customers are untouched. No delivery of the tag starts
//! once the 202 is answered, even in another process whose erasure loop has not reached it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use kxp_api::{BulkReplay, DeliveryStatus, EndpointId, ErasureStatus, NewEvent};
use kxp_sender::Db;
use serde_json::{Value, json};

use crate::pull::{pull_endpoint, signed};
use crate::support::{Database, Receiver, count};

const WITHIN: Duration = Duration::from_secs(60);

/// What every payload of customer `k` carries, and nothing else does.
fn marker(k: usize) -> String {
    format!("pii-marker-cus-{k}")
}

/// A receiver on 127.0.0.1 that answers 200 with the body it was sent (as a receiver that
/// echoes its input would: the snippet then holds the payload), and keeps every body.
async fn echo() -> (String, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = seen.clone();
    let app = Router::new().fallback(move |body: Bytes| {
        let kept = kept.clone();
        async move {
            let body = String::from_utf8_lossy(&body).into_owned();
            kept.lock().unwrap().push(body.clone());
            body
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, seen)
}

/// Every `table.column` of the database whose text holds `needle`: a search of the whole
/// database as a dump would show it (every table, every column, the migrations' own too).
async fn holding(db: &Db, needle: &str) -> Vec<String> {
    let columns: Vec<(String, String)> = match db {
        Db::Sqlite(pool) => sqlx::query_as(
            "SELECT m.name, c.name FROM sqlite_master m, pragma_table_info(m.name) c \
             WHERE m.type = 'table' ORDER BY 1, 2",
        )
        .fetch_all(pool)
        .await
        .unwrap(),
        Db::Postgres(pool) | Db::Citus(pool) => sqlx::query_as(
            "SELECT CAST(table_name AS TEXT), CAST(column_name AS TEXT) FROM information_schema.columns \
             WHERE table_schema = 'public' ORDER BY 1, 2",
        )
        .fetch_all(pool)
        .await
        .unwrap(),
    };
    let mut found = Vec::new();
    for (table, column) in columns {
        let sql = format!(
            "SELECT COUNT(*) FROM \"{table}\" WHERE CAST(\"{column}\" AS TEXT) LIKE '%{needle}%'"
        );
        if count(db, &sql).await > 0 {
            found.push(format!("{table}.{column}"));
        }
    }
    found
}

/// `pg_dump --data-only` of the database, when this is PostgreSQL (not Citus, whose shards are
/// on the workers) and `pg_dump` is installed.
fn pg_dump(database: &Database, url: &str) -> Option<String> {
    if database.is_citus() || !url.starts_with("postgres") {
        return None;
    }
    let output = std::process::Command::new("pg_dump")
        .args(["--data-only", "--dbname", url])
        .output()
        .ok()?;
    assert!(
        output.status.success(),
        "pg_dump: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Some(String::from_utf8(output.stdout).unwrap())
}

/// The deliveries of the events tagged with customer `k` (by the marker in their payload, read
/// before the erasure) to `endpoint`, by status.
async fn statuses(db: &Db, endpoint: &str, events: &[String]) -> Vec<(String, i64)> {
    let ids = events
        .iter()
        .map(|id| format!("'{id}'"))
        .collect::<Vec<_>>()
        .join(", ");
    let sql = format!(
        "SELECT status, COUNT(*) FROM kxp_deliveries WHERE endpoint_id = '{endpoint}' \
         AND event_id IN ({ids}) GROUP BY status ORDER BY status"
    );
    match db {
        Db::Sqlite(pool) => sqlx::query_as(&sql).fetch_all(pool).await.unwrap(),
        Db::Postgres(pool) | Db::Citus(pool) => sqlx::query_as(&sql).fetch_all(pool).await.unwrap(),
    }
}

async fn wait_until_counted(db: &Db, sql: &str, expected: i64) {
    let start = Instant::now();
    loop {
        let n = count(db, sql).await;
        if n == expected {
            return;
        }
        assert!(start.elapsed() < WITHIN, "{sql}: {n}, not {expected}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

each_backend!(an_erasure_leaves_no_byte_of_one_customer_and_spares_the_others);
on_citus!(an_erasure_leaves_no_byte_of_one_customer_and_spares_the_others);

async fn an_erasure_leaves_no_byte_of_one_customer_and_spares_the_others(database: Database) {
    // One try: a 500 makes a delivery dead at once. Nothing purged by the server.
    let s = database
        .sender_with("0s", |c| {
            c.retention = None;
            c.dead_letter_retention = None;
        })
        .await;
    let db = s.server.db();
    let api = &s.api;
    let n: usize = if database.is_citus() { 300 } else { 1000 };

    let (echo_url, echoed) = echo().await;
    let (delivered_to, _) = api.endpoint(&echo_url, json!({})).await;
    let failing = Receiver::start(Vec::new()).await;
    failing.answer_rest_with(500);
    let (dead_at, _) = api.endpoint(&failing.url, json!({})).await;
    let (held_at, _) = api.endpoint(&echo_url, json!({})).await;
    let held = EndpointId::from(held_at.clone());
    api.client.pause_endpoint(&held).await.unwrap();
    let (pull_at, pull_secret) = pull_endpoint(api).await;

    let mut of_customer: [Vec<String>; 3] = Default::default();
    for i in 0..n {
        let k = i % 3;
        let event = NewEvent::new("customer.updated", &json!({"name": marker(k), "i": i}))
            .unwrap()
            .tags([format!("customer:cus_{k}"), format!("order:{i}")]);
        let created = api.client.create_event(&event, None).await.unwrap();
        of_customer[k].push(created.id.into_string());
    }
    let total = n as i64;
    wait_until_counted(
        db,
        &format!("SELECT COUNT(*) FROM kxp_deliveries WHERE endpoint_id = '{delivered_to}' AND status = 'delivered'"),
        total,
    )
    .await;
    wait_until_counted(
        db,
        &format!("SELECT COUNT(*) FROM kxp_deliveries WHERE endpoint_id = '{dead_at}' AND status = 'dead'"),
        total,
    )
    .await;
    // The receiver echoed every payload: its snippets hold customer 1's marker too.
    assert!(
        holding(db, &marker(1))
            .await
            .contains(&"kxp_attempts.response_snippet".to_owned())
    );

    let accepted_at = Instant::now();
    let (status, accepted) = api
        .call(
            "POST",
            "/v1/erasures",
            Some(json!({"tag": "customer:cus_1"})),
        )
        .await;
    assert_eq!(status, 202, "{accepted}");
    assert_eq!(accepted["status"], "running");
    assert_eq!(accepted["tag"], "customer:cus_1");
    let id = kxp_api::ErasureId::from(accepted["id"].as_str().unwrap());
    let start = Instant::now();
    let done = loop {
        let erasure = api.client.erasure(&id).await.unwrap();
        if erasure.status == ErasureStatus::Done {
            break erasure;
        }
        assert!(start.elapsed() < WITHIN, "{erasure:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let erased = &of_customer[1];
    assert_eq!(done.events, erased.len() as u64);
    assert!(done.finished_at.is_some());

    // No byte of customer 1's payloads anywhere; the others' are all still there.
    assert_eq!(holding(db, &marker(1)).await, Vec::<String>::new());
    for k in [0, 2] {
        let found = holding(db, &marker(k)).await;
        assert!(
            found.contains(&"kxp_events.payload".to_owned()),
            "{found:?}"
        );
        assert!(
            found.contains(&"kxp_attempts.response_snippet".to_owned()),
            "{found:?}"
        );
    }
    if let Some(dump) = pg_dump(&database, &s.database_url) {
        assert!(
            !dump.contains(&marker(1)),
            "pg_dump holds the erased marker"
        );
        assert!(dump.contains(&marker(0)) && dump.contains(&marker(2)));
    }
    // Every delivery of theirs not made yet ended `erased`; made ones stay `delivered`.
    let per = erased.len() as i64;
    assert_eq!(
        statuses(db, &delivered_to, erased).await,
        vec![("delivered".into(), per)]
    );
    for endpoint in [&dead_at, &held_at] {
        assert_eq!(
            statuses(db, endpoint, erased).await,
            vec![("erased".into(), per)],
            "{endpoint}"
        );
    }
    // A pull endpoint's stay in its reader's way, unread, until the cursor passes them: the
    // feed serves the marker in their place.
    assert_eq!(
        statuses(db, &pull_at, erased).await,
        vec![("unread".into(), per)]
    );
    assert_eq!(
        statuses(db, &dead_at, &of_customer[0]).await,
        vec![("dead".into(), of_customer[0].len() as i64)]
    );

    // The event keeps what it was, without its payload and the erased tag.
    let (status, event) = api
        .call("GET", &format!("/v1/events/{}", erased[0]), None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(event["data"], Value::Null);
    assert_eq!(event["type"], "customer.updated");
    assert_eq!(
        event["gone"],
        json!({"reason": "erased", "erasure_id": id.as_str()})
    );
    let typed = api.client.event(&erased[0].as_str().into()).await.unwrap();
    assert_eq!(typed.gone.unwrap().reason, kxp_api::GoneReason::Erased);
    let tagged = api
        .client
        .events(&kxp_api::EventQuery::tag("customer:cus_1"))
        .await
        .unwrap();
    assert!(tagged.data.is_empty(), "{tagged:?}");
    let by_order = api
        .client
        .events(&kxp_api::EventQuery::tag("order:1"))
        .await
        .unwrap();
    assert_eq!(by_order.data.len(), 1);
    assert_eq!(by_order.data[0].tags, vec!["order:1".to_owned()]);

    // Replaying one is refused; replaying the dead-letter queue replays the others only.
    let dead_one = &api.typed_deliveries_of(&erased[0]).await;
    let dead_one = dead_one
        .iter()
        .find(|d| d.endpoint_id.as_str() == dead_at)
        .unwrap();
    let (status, refused) = api
        .call(
            "POST",
            &format!("/v1/deliveries/{}/replay", dead_one.id),
            None,
        )
        .await;
    assert_eq!(
        (status, refused["error"].as_str()),
        (410, Some("erased")),
        "{refused}"
    );
    failing.answer_rest_with(200);
    let queued = api
        .client
        .replay_endpoint(
            &EndpointId::from(dead_at.clone()),
            &BulkReplay::status(DeliveryStatus::Dead),
        )
        .await
        .unwrap();
    assert_eq!(queued.queued, total as u64 - per as u64);

    // The paused endpoint, resumed, delivers the others; nothing of customer 1 is sent again.
    let echoed_before = echoed.lock().unwrap().len();
    api.client.resume_endpoint(&held).await.unwrap();
    wait_until_counted(
        db,
        &format!("SELECT COUNT(*) FROM kxp_deliveries WHERE endpoint_id = '{held_at}' AND status = 'delivered'"),
        total - per,
    )
    .await;
    let sent_after = echoed.lock().unwrap()[echoed_before..].to_vec();
    assert_eq!(sent_after.len() as i64, total - per);
    assert!(sent_after.iter().all(|body| !body.contains(&marker(1))));
    assert!(failing.seen().iter().all(|seen| {
        !String::from_utf8_lossy(&seen.body).contains(&marker(1)) || seen.at < accepted_at
    }));

    // The pull endpoint's feed keeps every number: customer 1's items are MACed markers.
    let (status, page) = signed(
        api,
        "GET",
        &format!("/v1/endpoints/{pull_at}/feed?after=0&limit=500"),
        "",
        &pull_secret,
    )
    .await;
    assert_eq!(status, 200, "{page}");
    let page: kxp_api::FeedPage = serde_json::from_value(page).unwrap();
    let shown = page.items.len().min(n);
    assert_eq!(
        page.items.iter().map(|i| i.sequence).collect::<Vec<_>>(),
        (1..=shown as u64).collect::<Vec<_>>()
    );
    let mut markers = 0;
    for item in &page.items {
        if erased.contains(&item.event_id.as_str().to_owned()) {
            assert_eq!(item.body, r#"{"erased":true}"#);
            assert!(item.headers.is_empty());
            assert!(item.mac.is_some());
            markers += 1;
        } else {
            assert!(!item.body.contains(&marker(1)));
            assert!(item.headers.contains_key("x-kxp-signature"));
        }
    }
    assert!(markers > 0);

    // Erasing the same tag again erases nothing more, and says so.
    let again = api.client.create_erasure("customer:cus_1").await.unwrap();
    let start = Instant::now();
    loop {
        let erasure = api.client.erasure(&again.id).await.unwrap();
        if erasure.status == ErasureStatus::Done {
            assert_eq!(erasure.events, 0);
            break;
        }
        assert!(start.elapsed() < WITHIN);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // An invalid tag is refused.
    let (status, body) = api
        .call("POST", "/v1/erasures", Some(json!({"tag": "has space"})))
        .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (422, Some("invalid_request"))
    );
    s.server.shutdown().await;
}

each_backend!(no_delivery_of_an_erased_tag_starts_after_the_202);

/// An API-only process accepts the erasure while the tag's deliveries are due; a process with
/// workers starts only then, its erasure loop racing its workers: the receiver never sees the
/// tag, because the workers refuse what a running erasure covers.
async fn no_delivery_of_an_erased_tag_starts_after_the_202(database: Database) {
    let api_only = database.sender_with("0s", |c| c.run_workers = false).await;
    let (url, echoed) = echo().await;
    api_only.api.endpoint(&url, json!({})).await;
    for i in 0..600 {
        let event = NewEvent::new("customer.updated", &json!({"name": marker(i % 2), "i": i}))
            .unwrap()
            .tags([format!("customer:cus_{}", i % 2)]);
        api_only
            .api
            .client
            .create_event(&event, None)
            .await
            .unwrap();
    }
    let erasure = api_only
        .api
        .client
        .create_erasure("customer:cus_1")
        .await
        .unwrap();
    assert_eq!(erasure.status, ErasureStatus::Running);

    let url_of_first = api_only.database_url.clone();
    let workers = database
        .sender_with("0s", move |c| c.database_url = url_of_first)
        .await;
    let db = workers.server.db();
    wait_until_counted(
        db,
        "SELECT COUNT(*) FROM kxp_deliveries WHERE status IN ('delivered', 'erased')",
        600,
    )
    .await;
    let start = Instant::now();
    while workers
        .api
        .client
        .erasure(&erasure.id)
        .await
        .unwrap()
        .status
        != ErasureStatus::Done
    {
        assert!(start.elapsed() < WITHIN);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let sent = echoed.lock().unwrap().clone();
    assert_eq!(sent.len(), 300);
    assert!(sent.iter().all(|body| !body.contains(&marker(1))));
    assert_eq!(
        count(
            db,
            "SELECT COUNT(*) FROM kxp_deliveries WHERE status = 'erased'"
        )
        .await,
        300
    );
    workers.server.shutdown().await;
    api_only.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_erases_with_a_manage_session_only_and_shows_who_did() {
    let s = crate::support::sender("0s").await;
    let api = &s.api;
    let event = NewEvent::new("customer.updated", &json!({"name": marker(9)}))
        .unwrap()
        .tags(["customer:cus_9"]);
    let event = api.client.create_event(&event, None).await.unwrap().id;
    let account = api.client.account().await.unwrap().id;
    let page = format!("/console/a/{account}/erasures");
    let b = crate::console::Browser::of(&s);

    // A read session sees the erasures, no form, and its POST is refused.
    let read = b.session(&api.client, kxp_api::PortalScope::Read).await;
    let shown = b.get(&page, Some(&read)).await;
    assert_eq!(shown.status(), 200);
    let html = shown.text().await.unwrap();
    assert!(
        html.contains("A read-only session cannot erase data"),
        "{html}"
    );
    let csrf = b.csrf(&read).await;
    let refused = b
        .post(
            &page,
            &read,
            &[("csrf_token", &csrf), ("tag", "customer:cus_9")],
        )
        .await;
    assert_eq!(refused.status(), 403);

    // A manage session erases; the list says who and how far, the event says by what.
    let manage = b.session(&api.client, kxp_api::PortalScope::Manage).await;
    let csrf = b.csrf(&manage).await;
    let done = b
        .post(
            &page,
            &manage,
            &[("csrf_token", &csrf), ("tag", "customer:cus_9")],
        )
        .await;
    assert_eq!(done.status(), 303);
    let start = Instant::now();
    let html = loop {
        let html = b.get(&page, Some(&manage)).await.text().await.unwrap();
        if html.contains(">done<") {
            break html;
        }
        assert!(start.elapsed() < WITHIN, "{html}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        html.contains("customer:cus_9") && html.contains("(console)"),
        "{html}"
    );
    let shown = b
        .get(
            &format!("/console/a/{account}/events/{event}"),
            Some(&manage),
        )
        .await
        .text()
        .await
        .unwrap();
    assert!(shown.contains("The payload was erased by"), "{shown}");
    assert!(!shown.contains(&marker(9)), "{shown}");
    // A tag that is no tag is refused with the rule.
    let bad = b
        .post(&page, &manage, &[("csrf_token", &csrf), ("tag", "")])
        .await;
    assert_eq!(bad.status(), 409);
    assert!(bad.text().await.unwrap().contains("printable ASCII"));
    s.server.shutdown().await;
}
