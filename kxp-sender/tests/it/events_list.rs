//! `POST /v1/events` with `tags`, and `GET /v1/events`: tags stored beside the event (never in
//! the envelope), the list newest first, paged by cursor, filtered by tag (on its index), type
//! and time, scoped to the account. One scenario, run on SQLite and on PostgreSQL.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kxp_api::{EventQuery, EventSummary, NewEvent, Timestamp};
use serde_json::{Value, json};

use crate::support::{Api, Database, Receiver, Sender};

/// `POST /v1/events` with `body` (and an `Idempotency-Key`): the status and the exact bytes.
async fn post(api: &Api, body: &Value, key: Option<&str>) -> (u16, String) {
    let mut request = api
        .http
        .post(format!("{}/v1/events", api.base))
        .bearer_auth(&api.key)
        .json(body);
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// `GET <path>`: the status and the exact bytes.
async fn get(api: &Api, path: &str) -> (u16, String) {
    let response = api
        .http
        .get(format!("{}{path}", api.base))
        .bearer_auth(&api.key)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// Emits an event of `event_type` with `tags` through the typed client; its id.
async fn emit(api: &Api, event_type: &str, n: u32, tags: &[&str]) -> String {
    let event = NewEvent::new(event_type, &json!({"n": n}))
        .unwrap()
        .tags(tags.iter().copied());
    let event = api.client.create_event(&event, None).await.unwrap();
    event.id.into_string()
}

/// Every event `query` selects, walking the pages `limit` at a time.
async fn listed(api: &Api, query: EventQuery) -> Vec<EventSummary> {
    api.client.all_events(&query).await.unwrap()
}

fn ids(events: &[EventSummary]) -> Vec<String> {
    events.iter().map(|e| e.id.to_string()).collect()
}

fn now_ms() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

async fn tags_are_stored_listed_and_never_delivered(s: &Sender) {
    let api = &s.api;
    let receiver = Receiver::start(Vec::new()).await;
    api.endpoint(&receiver.url, json!({})).await;

    // Tagged, with a repeat: stored once each, listed sorted.
    let body = json!({"type": "order.created", "data": {"order": 1},
        "tags": ["order:1", "customer:cus_9", "order:1"]});
    let (status, answer) = post(api, &body, None).await;
    assert_eq!(status, 202, "{answer}");
    let envelope: Value = serde_json::from_str(&answer).unwrap();
    let first = envelope["id"].as_str().unwrap().to_owned();
    // The envelope is what it always was: no tags, the same five fields in the same order.
    let keys: BTreeSet<&str> = envelope
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    assert_eq!(
        keys,
        BTreeSet::from(["id", "type", "api_version", "created_at", "data"])
    );
    let expected = format!(
        r#"{{"id":"{first}","type":"order.created","api_version":"{}","created_at":"{}","data":{{"order":1}}}}"#,
        envelope["api_version"].as_str().unwrap(),
        envelope["created_at"].as_str().unwrap()
    );
    assert_eq!(answer, expected);
    assert!(
        !answer.contains("tags") && !answer.contains("cus_9"),
        "{answer}"
    );
    let (status, stored) = get(api, &format!("/v1/events/{first}")).await;
    assert_eq!(
        (status, &stored),
        (200, &answer),
        "GET answers the same bytes"
    );
    api.wait_for(&first, "delivered", Duration::from_secs(10))
        .await;
    let seen = receiver.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        std::str::from_utf8(&seen[0].body).unwrap(),
        answer,
        "the receiver gets the envelope byte for byte, without tags"
    );

    let by_tag = listed(api, EventQuery::tag("customer:cus_9")).await;
    assert_eq!(ids(&by_tag), [first.as_str()]);
    assert_eq!(by_tag[0].tags, ["customer:cus_9", "order:1"]);
    assert_eq!(by_tag[0].event_type, "order.created");
    assert_eq!(
        by_tag[0].api_version,
        envelope["api_version"].as_str().unwrap()
    );
    assert_eq!(
        by_tag[0].created_at.as_str(),
        envelope["created_at"].as_str().unwrap()
    );

    // Seven events of one order, of two types, and untagged ones between them: each a few
    // milliseconds after the last, so newest first is the reverse of this order.
    let mut order_7 = Vec::new();
    let mut untagged = Vec::new();
    for n in 0..7 {
        let event_type = if n % 2 == 0 {
            "order.updated"
        } else {
            "order.paid"
        };
        order_7.push(emit(api, event_type, n, &["order:7", "customer:cus_9"]).await);
        tokio::time::sleep(Duration::from_millis(5)).await;
        untagged.push(emit(api, "order.updated", 100 + n, &[]).await);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let newest_first: Vec<String> = order_7.iter().rev().cloned().collect();

    // Pages of 3 with the tag: 3, 3, 1, each event once, newest first.
    let page = api
        .client
        .events(&EventQuery::tag("order:7").limit(3))
        .await
        .unwrap();
    assert_eq!(ids(&page.data), newest_first[..3]);
    let cursor = page.next_cursor.clone().expect("a full page has a cursor");
    let second = api
        .client
        .events(&EventQuery::tag("order:7").limit(3).after(Some(cursor)))
        .await
        .unwrap();
    assert_eq!(ids(&second.data), newest_first[3..6]);
    let third = api
        .client
        .events(
            &EventQuery::tag("order:7")
                .limit(3)
                .after(second.next_cursor),
        )
        .await
        .unwrap();
    assert_eq!(ids(&third.data), newest_first[6..]);
    assert_eq!(third.next_cursor, None, "a short page is the last");
    assert_eq!(
        ids(&listed(api, EventQuery::tag("order:7").limit(2)).await),
        newest_first
    );
    assert!(
        page.data
            .iter()
            .all(|e| e.tags == ["customer:cus_9", "order:7"])
    );

    // The tag and the type together; the type alone; neither.
    let paid: Vec<String> = order_7.iter().skip(1).step_by(2).rev().cloned().collect();
    assert_eq!(
        ids(&listed(
            api,
            EventQuery::tag("order:7").event_type("order.paid").limit(2)
        )
        .await),
        paid
    );
    assert_eq!(
        ids(&listed(api, EventQuery::default().event_type("order.paid").limit(2)).await),
        paid
    );
    let all = listed(api, EventQuery::default().limit(4)).await;
    assert_eq!(all.len(), 1 + 7 + 7);
    assert_eq!(
        all.last().unwrap().id.as_str(),
        first,
        "newest first: the first is last"
    );
    let untagged_listed = all.iter().find(|e| e.id.as_str() == untagged[0]).unwrap();
    assert!(untagged_listed.tags.is_empty());
    // customer:cus_9 is on the first event and on order 7's.
    assert_eq!(
        listed(api, EventQuery::tag("customer:cus_9")).await.len(),
        8
    );
    assert!(listed(api, EventQuery::tag("order:8")).await.is_empty());

    // A time range: `since` is inclusive, `until` exclusive (times are whole seconds).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let late = emit(api, "order.updated", 99, &["order:7"]).await;
    let late_at = listed(api, EventQuery::tag("order:7").limit(1))
        .await
        .into_iter()
        .find(|e| e.id.as_str() == late)
        .unwrap()
        .created_at;
    let since = listed(
        api,
        EventQuery::tag("order:7").between(Some(late_at.clone()), None),
    )
    .await;
    assert_eq!(ids(&since), [late.as_str()]);
    let until = listed(
        api,
        EventQuery::tag("order:7").between(None, Some(late_at.clone())),
    )
    .await;
    assert_eq!(ids(&until), newest_first);
    let before_all: Timestamp = "2000-01-01T00:00:00Z".parse().unwrap();
    assert!(
        listed(api, EventQuery::default().between(None, Some(before_all)))
            .await
            .is_empty()
    );
    let since_untagged = listed(api, EventQuery::default().between(Some(late_at), None)).await;
    assert_eq!(ids(&since_untagged), [late.as_str()]);
    // Through the raw query string too, as the console and curl send it.
    let (status, text) = get(api, "/v1/events?tag=order%3A7&type=order.paid&limit=500").await;
    assert_eq!(status, 200, "{text}");
    let raw: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(raw["data"].as_array().unwrap().len(), paid.len());
    assert_eq!(raw["next_cursor"], Value::Null);
}

async fn tags_are_checked(s: &Sender) {
    let api = &s.api;
    let before = listed(api, EventQuery::default()).await.len();
    let refuse = async |tags: Value, field: &str| {
        let body = json!({"type": "t", "data": {}, "tags": tags});
        let (status, text) = post(api, &body, None).await;
        let error: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            (status, error["error"].as_str()),
            (422, Some("invalid_request")),
            "{tags}: {text}"
        );
        let message = error["message"].as_str().unwrap();
        assert!(message.starts_with(field), "{tags}: {message}");
        assert!(
            !message.contains('\u{1}'),
            "the value is never quoted: {message}"
        );
    };
    let eleven: Vec<String> = (0..11).map(|n| format!("t:{n}")).collect();
    refuse(json!(eleven), "tags holds 11 entries").await;
    refuse(json!(["ok", "x".repeat(65)]), "tags[1]").await;
    refuse(json!(["bad\u{1}tag"]), "tags[0]").await;
    refuse(json!(["a b"]), "tags[0]").await;
    refuse(json!([""]), "tags[0]").await;
    refuse(json!(["caf\u{e9}"]), "tags[0]").await;
    refuse(json!(["tab\tbed"]), "tags[0]").await;
    let (status, text) = post(
        api,
        &json!({"type": "t", "data": {}, "tags": "order:1"}),
        None,
    )
    .await;
    assert_eq!(status, 422, "not an array: {text}");
    let (status, text) = post(api, &json!({"type": "t", "data": {}, "tags": [1]}), None).await;
    assert_eq!(status, 422, "not strings: {text}");
    assert_eq!(
        listed(api, EventQuery::default()).await.len(),
        before,
        "nothing refused was stored"
    );

    // The limits themselves are accepted: 10 tags of 64 characters, and every printable one.
    let ten: Vec<String> = (0..10).map(|n| format!("{n}{}", "x".repeat(63))).collect();
    let (status, text) = post(api, &json!({"type": "t", "data": {}, "tags": ten}), None).await;
    assert_eq!(status, 202, "{text}");
    let odd = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";
    let (status, text) = post(api, &json!({"type": "t", "data": {}, "tags": [odd]}), None).await;
    assert_eq!(status, 202, "{text}");
    assert_eq!(listed(api, EventQuery::tag(odd)).await.len(), 1);
    let found = listed(api, EventQuery::tag(ten[9].clone())).await;
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].tags, ten);

    // The list's own parameters.
    for (query, status, code) in [
        ("?tag=a%20b", 422, "invalid_request"),
        (&format!("?tag={}", "x".repeat(65)), 422, "invalid_request"),
        ("?since=yesterday", 422, "invalid_request"),
        ("?limit=0", 422, "invalid_request"),
        ("?limit=501", 422, "invalid_request"),
        ("?cursor=nope", 422, "invalid_request"),
        // A parameter of another list is refused, not silently ignored.
        ("?created_after=2026-01-01T00:00:00Z", 400, "invalid_query"),
        ("?status=dead", 400, "invalid_query"),
    ] {
        let (got, text) = get(api, &format!("/v1/events{query}")).await;
        let error: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            (got, error["error"].as_str()),
            (status, Some(code)),
            "{query}: {text}"
        );
    }
}

async fn idempotent_retries_carry_their_tags(s: &Sender) {
    let api = &s.api;
    let body = json!({"type": "order.created", "data": {"order": 42}, "tags": ["order:42"]});
    let (first_status, first) = post(api, &body, Some("order-42-created")).await;
    let (again_status, again) = post(api, &body, Some("order-42-created")).await;
    assert_eq!((first_status, again_status), (202, 202), "{first} {again}");
    assert_eq!(
        first, again,
        "the retry answers the first event, byte for byte"
    );
    // The tags are part of the request: the same key with other tags is another request.
    let other = json!({"type": "order.created", "data": {"order": 42}, "tags": ["order:43"]});
    let (status, text) = post(api, &other, Some("order-42-created")).await;
    assert_eq!(status, 422, "{text}");
    assert!(text.contains("idempotency_key_reused"), "{text}");
    let found = listed(api, EventQuery::tag("order:42")).await;
    let id: Value = serde_json::from_str(&first).unwrap();
    assert_eq!(ids(&found), [id["id"].as_str().unwrap().to_owned()]);
    assert_eq!(
        found[0].tags,
        ["order:42"],
        "the retry stored no second tag row"
    );
    assert!(listed(api, EventQuery::tag("order:43")).await.is_empty());
}

async fn concurrent_ingestions_keep_their_own_tags(s: &Sender) {
    // Concurrent requests are written together (the group commit); each event keeps its tags.
    let mut tasks = Vec::new();
    for n in 0..24u32 {
        let api = s.api.clone();
        tasks.push(tokio::spawn(async move {
            let own = format!("batch:{n}");
            (
                n,
                emit(&api, "batch.item", n, &[own.as_str(), "batch:all"]).await,
            )
        }));
    }
    let mut emitted = Vec::new();
    for task in tasks {
        emitted.push(task.await.unwrap());
    }
    let all = listed(&s.api, EventQuery::tag("batch:all").limit(5)).await;
    assert_eq!(all.len(), 24);
    let unique: BTreeSet<String> = ids(&all).into_iter().collect();
    assert_eq!(unique.len(), 24, "each once across pages");
    for (n, id) in emitted {
        let own = listed(&s.api, EventQuery::tag(format!("batch:{n}"))).await;
        assert_eq!(ids(&own), [id]);
        let mut expected = vec![format!("batch:{n}"), "batch:all".to_owned()];
        expected.sort();
        assert_eq!(own[0].tags, expected);
    }
}

async fn another_account_sees_none_of_them(s: &Sender) {
    let (other, key) = s
        .server
        .db()
        .create_account("Other shop", None)
        .await
        .unwrap();
    let b = s.api.with_key(&key);
    let a_events = listed(&s.api, EventQuery::default()).await;
    assert!(!a_events.is_empty());
    assert!(listed(&b, EventQuery::default()).await.is_empty());
    assert!(listed(&b, EventQuery::tag("order:7")).await.is_empty());
    let (status, text) = get(&b, &format!("/v1/events/{}", a_events[0].id)).await;
    assert_eq!(status, 404, "{text}");
    // B's own event with A's tag: B sees it alone, A does not see it.
    let mine = emit(&b, "order.created", 1, &["order:7"]).await;
    assert_eq!(
        ids(&listed(&b, EventQuery::tag("order:7")).await),
        [mine.as_str()]
    );
    assert!(
        !ids(&listed(&s.api, EventQuery::tag("order:7")).await).contains(&mine),
        "A never lists B's event"
    );
    // Naming B in X-Kxp-Account with A's key: 404, as for every route.
    let response = s
        .api
        .http
        .get(format!("{}/v1/events?tag=order:7", s.api.base))
        .bearer_auth(&s.api.key)
        .header(kxp_api::ACCOUNT_HEADER, other.id.as_str())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
}

async fn retention_takes_the_tags_with_the_events(s: &Sender) {
    // Delivered and old enough: the delivery goes, then the event, and its tags with it (the
    // foreign key cascades), so the tag finds nothing.
    let id = emit(&s.api, "gone.soon", 1, &["retention:1"]).await;
    s.api
        .wait_for(&id, "delivered", Duration::from_secs(10))
        .await;
    let purged = s
        .server
        .db()
        .purge(kxp_sender::Retention::until(Some(now_ms() + 60_000)))
        .await
        .unwrap();
    assert!(purged.events >= 1, "{purged:?}");
    assert!(
        listed(&s.api, EventQuery::tag("retention:1"))
            .await
            .is_empty()
    );
    let (status, _) = get(&s.api, &format!("/v1/events/{id}")).await;
    assert_eq!(status, 404, "the event itself is gone");
}

each_backend!(events_are_tagged_and_listed);
on_citus!(events_are_tagged_and_listed);

async fn events_are_tagged_and_listed(database: Database) {
    let s = database.sender("0s").await;
    tags_are_stored_listed_and_never_delivered(&s).await;
    tags_are_checked(&s).await;
    idempotent_retries_carry_their_tags(&s).await;
    concurrent_ingestions_keep_their_own_tags(&s).await;
    another_account_sees_none_of_them(&s).await;
    retention_takes_the_tags_with_the_events(&s).await;
    s.server.shutdown().await;
}
