//! Pull endpoints: no URL and no attempts; the receiver long-polls the feed with the endpoint's
//! own credential and commits a cursor (forward only), which a read without `after` resumes
//! from; deliveries are `unread` until the cursor passes them; at most four long polls per
//! endpoint; a shutdown answers them at once.

use std::time::{Duration, Instant};

use kxp_api::{EndpointCreated, EndpointHealth, FeedPage, NewEndpoint};
use kxp_verify::{Secret, Signer, feed_request_message};
use serde_json::{Value, json};

use crate::support::{Api, Database, Receiver, metric, typed};

/// `method` on the endpoint's `path` (`/feed?…`, `/cursor`) with `body`, signed with the feed
/// key of `secret` over the method, the target and the body; the status and the body.
pub(crate) async fn signed(
    api: &Api,
    method: &str,
    target: &str,
    body: &str,
    secret: &str,
) -> (u16, Value) {
    let key = Secret::new(secret).unwrap().feed_key();
    let header = Signer::new(key)
        .sign(
            now(),
            &feed_request_message(method, target, body.as_bytes()),
        )
        .to_string();
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let response = api
        .http
        .request(method, format!("{}{target}", api.base))
        .header("x-kxp-feed-signature", header)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A new pull endpoint of the account: its id and secret.
pub(crate) async fn pull_endpoint(api: &Api) -> (String, String) {
    let created: EndpointCreated = api
        .client
        .create_endpoint(&NewEndpoint::pull())
        .await
        .unwrap();
    (
        created.endpoint.id.into_string(),
        created.secret.unwrap().expose().to_owned(),
    )
}

/// A long poll of the feed (`wait` seconds) from `query`, as a page.
async fn poll(api: &Api, id: &str, query: &str, secret: &str) -> FeedPage {
    let (status, body) = signed(
        api,
        "GET",
        &format!("/v1/endpoints/{id}/feed{query}"),
        "",
        secret,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    typed(body)
}

/// Long-polls from `query` until the page holds `count` items, for at most a minute. A poll
/// answers at once with the items numbered so far, so a loaded machine's slow sequencer is
/// waited out by time, not by a count of polls.
async fn items(api: &Api, id: &str, query: &str, secret: &str, count: usize) -> FeedPage {
    let start = Instant::now();
    loop {
        let page = poll(api, id, query, secret).await;
        if page.items.len() >= count {
            return page;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the feed of {id} did not list {count} items in a minute: {} listed",
            page.items.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn commit(api: &Api, id: &str, body: &str, secret: &str) -> (u16, Value) {
    signed(
        api,
        "PUT",
        &format!("/v1/endpoints/{id}/cursor"),
        body,
        secret,
    )
    .await
}

each_backend!(
    a_pull_endpoint_is_read_and_committed,
    a_long_poll_wakes_for_a_new_event_and_is_capped,
    a_temporary_endpoint_no_one_reads_is_removed,
    a_listen_token_makes_reads_and_deletes_temporary_pull_endpoints_only,
    a_reader_that_stops_committing_is_announced_once_per_stall
);
on_citus!(
    a_pull_endpoint_is_read_and_committed,
    a_reader_that_stops_committing_is_announced_once_per_stall
);

async fn a_pull_endpoint_is_read_and_committed(db: Database) {
    let s = db.sender("0s").await;
    // What only an HTTP attempt uses is refused, and a push endpoint needs its URL.
    for (body, field) in [
        (
            json!({"mode": "pull", "url": "https://merchant.example/hooks"}),
            "url",
        ),
        (json!({"mode": "pull", "signing": "ed25519"}), "signing"),
        (json!({"mode": "pull", "timeout_ms": 1000}), "timeout_ms"),
        (json!({"mode": "push", "skip_challenge": true}), "url"),
        (
            json!({"url": "https://merchant.example/hooks", "temporary": true}),
            "temporary",
        ),
    ] {
        let (status, answer) = s
            .api
            .call("POST", "/v1/endpoints", Some(body.clone()))
            .await;
        assert_eq!(
            (status, answer["error"].as_str()),
            (422, Some("invalid_request")),
            "{body}: {answer}"
        );
        assert!(
            answer["message"].as_str().unwrap().starts_with(field),
            "{answer}"
        );
    }
    let (id, secret) = pull_endpoint(&s.api).await;
    let endpoint = s.api.client.endpoint(&id.as_str().into()).await.unwrap();
    assert_eq!(endpoint.endpoint.url, None);
    assert_eq!(endpoint.endpoint.mode, kxp_api::EndpointMode::Pull);
    // A push endpoint beside it, which must not see the pull endpoint's cursor routes.
    let receiver = Receiver::start(vec![]).await;
    let (push, push_secret) = s.api.endpoint(&receiver.url, json!({})).await;

    let mut events = Vec::new();
    for n in 0..5 {
        events.push(s.api.emit("payment.succeeded", json!({"n": n})).await);
    }
    // Read from the committed cursor (none yet: from the start), long-polling.
    let page = items(&s.api, &id, "?wait=10", &secret, 5).await;
    let numbers: Vec<u64> = page.items.iter().map(|item| item.sequence).collect();
    assert_eq!(numbers, vec![1, 2, 3, 4, 5]);
    let read: Vec<&str> = page
        .items
        .iter()
        .map(|item| item.event_id.as_str())
        .collect();
    assert_eq!(read, events.iter().map(String::as_str).collect::<Vec<_>>());
    // Nothing is attempted: the deliveries wait, unread, with no attempt.
    let delivery = &s.api.typed_deliveries_of(&events[0]).await;
    let pulled = delivery
        .iter()
        .find(|d| d.endpoint_id.as_str() == id)
        .unwrap();
    assert_eq!((pulled.status.as_str(), pulled.attempts), ("unread", 0));
    assert!(s.api.attempts(pulled.id.as_str()).await.is_empty());

    // Commits move forward only, and never past the newest number.
    assert_eq!(
        commit(&s.api, &id, r#"{"sequence": 3}"#, &secret).await.0,
        204
    );
    assert_eq!(
        commit(&s.api, &id, r#"{"sequence": 3}"#, &secret).await.0,
        204,
        "the same again"
    );
    let (status, body) = commit(&s.api, &id, r#"{"sequence": 2}"#, &secret).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("cursor_behind")),
        "{body}"
    );
    let (status, body) = commit(&s.api, &id, r#"{"sequence": 6}"#, &secret).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (422, Some("invalid_request")),
        "{body}"
    );
    let (status, body) = commit(&s.api, &id, r#"{"sequence": "4"}"#, &secret).await;
    assert_eq!(status, 422, "{body}");
    let (status, cursor) = signed(
        &s.api,
        "GET",
        &format!("/v1/endpoints/{id}/cursor"),
        "",
        &secret,
    )
    .await;
    assert_eq!(status, 200, "{cursor}");
    assert_eq!(
        (cursor["sequence"].as_u64(), cursor["latest"].as_u64()),
        (Some(3), Some(5))
    );
    assert!(cursor["committed_at"].is_string(), "{cursor}");

    // The signature covers the body: another number under a signature of this one is refused.
    let target = format!("/v1/endpoints/{id}/cursor");
    let key = Secret::new(&secret).unwrap().feed_key();
    let header = Signer::new(key)
        .sign(
            now(),
            &feed_request_message("PUT", &target, br#"{"sequence": 4}"#),
        )
        .to_string();
    let forged = s
        .api
        .http
        .put(format!("{}{target}", s.api.base))
        .header("x-kxp-feed-signature", header)
        .body(r#"{"sequence": 5}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status().as_u16(), 401);
    // An API key is no feed credential; the push endpoint's secret opens only its own feed,
    // and a push endpoint has no cursor.
    let (status, _) = s.api.call("GET", &target, None).await;
    assert_eq!(status, 401);
    assert_eq!(
        commit(&s.api, &id, r#"{"sequence": 4}"#, &push_secret)
            .await
            .0,
        401
    );
    let (status, body) = commit(&s.api, &push, r#"{"sequence": 1}"#, &push_secret).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (422, Some("invalid_request")),
        "{body}"
    );

    // Retention purges what the reader committed, never what it has not read.
    s.server
        .db()
        .purge(kxp_sender::Retention::until(Some(i64::MAX / 2)))
        .await
        .unwrap();
    let (status, body) = signed(
        &s.api,
        "GET",
        &format!("/v1/endpoints/{id}/feed?after=0"),
        "",
        &secret,
    )
    .await;
    assert_eq!(
        (status, body["earliest"].as_u64()),
        (410, Some(4)),
        "{body}"
    );
    // A read without `after` resumes after the cursor; the committed ones are delivered.
    let page = poll(&s.api, &id, "", &secret).await;
    let numbers: Vec<u64> = page.items.iter().map(|item| item.sequence).collect();
    assert_eq!((numbers, page.latest), (vec![4, 5], 5));
    for (n, event) in events.iter().enumerate().skip(3) {
        let deliveries = s.api.typed_deliveries_of(event).await;
        let pulled = deliveries
            .iter()
            .find(|d| d.endpoint_id.as_str() == id)
            .unwrap();
        assert_eq!(pulled.status.as_str(), "unread", "event {n}");
    }
    // Health shows the lag; a pull endpoint's delivery cannot be replayed.
    let (_, health) = s
        .api
        .call("GET", &format!("/v1/endpoints/{id}/health"), None)
        .await;
    let health: EndpointHealth = typed(health);
    let pull = health.pull.expect("a pull endpoint's health says its lag");
    assert_eq!((pull.cursor, pull.latest, pull.lag), (3, 5, 2));
    assert!(pull.read_at.is_some() && pull.committed_at.is_some());
    let unread = s.api.typed_deliveries_of(&events[4]).await;
    let unread = unread
        .iter()
        .find(|d| d.endpoint_id.as_str() == id)
        .unwrap();
    let (status, body) = s
        .api
        .call(
            "POST",
            &format!("/v1/deliveries/{}/replay", unread.id),
            None,
        )
        .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (422, Some("invalid_request")),
        "{body}"
    );
    // Another account sees none of it.
    let (_, other_key) = s.server.db().create_account("other", None).await.unwrap();
    let other = s.api.with_key(&other_key);
    let (status, _) = other
        .call("GET", &format!("/v1/endpoints/{id}/health"), None)
        .await;
    assert_eq!(status, 404);
    s.server.shutdown().await;
}

async fn a_long_poll_wakes_for_a_new_event_and_is_capped(db: Database) {
    let s = db.sender("0s").await;
    let (id, secret) = pull_endpoint(&s.api).await;
    // A long poll waits for the first event, and answers with it: had the event not woken it,
    // it would answer empty after the minute.
    let waiting = {
        let (api, id, secret) = (s.api.clone(), id.clone(), secret.clone());
        tokio::spawn(async move { poll(&api, &id, "?wait=60", &secret).await })
    };
    while metric(&s.api, "kxp_feed_waiters").await == 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let event = s.api.emit("payment.succeeded", json!({})).await;
    let page = waiting.await.unwrap();
    assert_eq!(page.items.len(), 1, "{page:?}");
    assert_eq!(page.items[0].event_id.as_str(), event);
    assert_eq!(page.latest, 1);

    // Four wait on one endpoint; a fifth is refused.
    let polls: Vec<_> = (0..4)
        .map(|_| {
            let (api, id, secret) = (s.api.clone(), id.clone(), secret.clone());
            tokio::spawn(async move { poll(&api, &id, "?after=1&wait=60", &secret).await })
        })
        .collect();
    while metric(&s.api, "kxp_feed_waiters").await < 4 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, body) = signed(
        &s.api,
        "GET",
        &format!("/v1/endpoints/{id}/feed?after=1&wait=60"),
        "",
        &secret,
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (429, Some("too_many_waiters")),
        "{body}"
    );
    let (status, body) = signed(
        &s.api,
        "GET",
        &format!("/v1/endpoints/{id}/feed?wait=61"),
        "",
        &secret,
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("invalid_query")),
        "{body}"
    );
    // The shutdown answers them at once, empty, instead of after their minute.
    s.server.shutdown().await;
    for waiting in polls {
        let page = waiting.await.unwrap();
        assert!(page.items.is_empty(), "{page:?}");
    }
}

async fn a_temporary_endpoint_no_one_reads_is_removed(db: Database) {
    let s = db
        .sender_with("0s", |config| {
            config.temporary_idle = Duration::from_secs(2);
        })
        .await;
    let temporary = json!({"mode": "pull", "temporary": true});
    let (_, abandoned) = s.api.call("POST", "/v1/endpoints", Some(temporary)).await;
    assert_eq!(abandoned["temporary"], json!(true), "{abandoned}");
    let abandoned = abandoned["id"].as_str().unwrap().to_owned();
    let created: EndpointCreated = s
        .api
        .client
        .create_endpoint(&NewEndpoint::pull().temporary())
        .await
        .unwrap();
    let read = created.endpoint.id.as_str().to_owned();
    let secret = created.secret.unwrap().expose().to_owned();
    // The other is read all along, as `kxp listen` reads it.
    let reading = {
        let (api, read, secret) = (s.api.clone(), read.clone(), secret.clone());
        tokio::spawn(async move {
            loop {
                poll(&api, &read, "", &secret).await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let event = s.api.emit("payment.succeeded", json!({})).await;
    // The one no one reads goes, its unread delivery with it (dead, `endpoint_deleted`).
    let start = std::time::Instant::now();
    loop {
        let (status, _) = s
            .api
            .call("GET", &format!("/v1/endpoints/{abandoned}"), None)
            .await;
        if status == 404 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "not removed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // What it never read is discarded with it: nothing lands in the dead-letter queue. The
    // endpoint being read keeps its delivery.
    let deliveries = s.api.typed_deliveries_of(&event).await;
    assert!(
        deliveries
            .iter()
            .all(|d| d.endpoint_id.as_str() != abandoned),
        "{deliveries:?}"
    );
    assert!(deliveries.iter().any(|d| d.endpoint_id.as_str() == read));
    let (_, dead) = s.api.call("GET", "/v1/deliveries?status=dead", None).await;
    assert_eq!(dead["data"], json!([]), "{dead}");
    // Twice the idle time later, the one being read is still there.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (status, body) = s
        .api
        .call("GET", &format!("/v1/endpoints/{read}"), None)
        .await;
    assert_eq!(status, 200, "{body}");
    reading.abort();
    s.server.shutdown().await;
}

async fn a_listen_token_makes_reads_and_deletes_temporary_pull_endpoints_only(db: Database) {
    let s = db.sender("0s").await;
    let (status, token) = s
        .api
        .call(
            "POST",
            "/v1/listen-tokens",
            Some(json!({"ttl_seconds": 600})),
        )
        .await;
    assert_eq!(status, 201, "{token}");
    let token = token["token"].as_str().unwrap().to_owned();
    assert!(token.starts_with("kxp_lt_"), "{token}");
    for ttl in [0, 86_401] {
        let (status, body) = s
            .api
            .call(
                "POST",
                "/v1/listen-tokens",
                Some(json!({"ttl_seconds": ttl})),
            )
            .await;
        assert_eq!(
            (status, body["error"].as_str()),
            (400, Some("invalid_ttl")),
            "{body}"
        );
    }
    let listening = s.api.with_key(&token);
    // Only a temporary pull endpoint.
    for body in [
        json!({"mode": "pull"}),
        json!({"url": "https://merchant.example/hooks", "skip_challenge": true}),
    ] {
        let (status, answer) = listening.call("POST", "/v1/endpoints", Some(body)).await;
        assert_eq!(
            (status, answer["error"].as_str()),
            (403, Some("forbidden")),
            "{answer}"
        );
    }
    let created: EndpointCreated = listening
        .client
        .create_endpoint(&NewEndpoint::pull().temporary())
        .await
        .unwrap();
    let id = created.endpoint.id;
    assert!(created.endpoint.temporary && created.secret.is_some());
    listening.client.endpoint(&id).await.unwrap();
    // The account's own pull endpoint that is not temporary is not the token's to see.
    let (other, _) = pull_endpoint(&s.api).await;
    let (status, _) = listening
        .call("GET", &format!("/v1/endpoints/{other}"), None)
        .await;
    assert_eq!(status, 404);
    let (status, _) = listening
        .call("DELETE", &format!("/v1/endpoints/{other}"), None)
        .await;
    assert_eq!(status, 404);
    // At most ten at once: a leaked token cannot fill the account.
    let mut made = vec![id.clone()];
    for _ in 1..10 {
        let more = listening
            .client
            .create_endpoint(&NewEndpoint::pull().temporary())
            .await
            .unwrap();
        made.push(more.endpoint.id);
    }
    let (status, body) = listening
        .call(
            "POST",
            "/v1/endpoints",
            Some(json!({"mode": "pull", "temporary": true})),
        )
        .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("too_many_endpoints")),
        "{body}"
    );
    for more in &made[1..] {
        listening.client.delete_endpoint(more).await.unwrap();
    }
    listening.client.delete_endpoint(&id).await.unwrap();
    let (status, _) = s
        .api
        .call("GET", &format!("/v1/endpoints/{id}"), None)
        .await;
    assert_eq!(status, 404, "deleted");
    let (status, _) = s
        .api
        .call("GET", &format!("/v1/endpoints/{other}"), None)
        .await;
    assert_eq!(status, 200, "untouched");
    // Past its time, it is no credential at all.
    s.server
        .db()
        .purge(kxp_sender::Retention::until(None))
        .await
        .unwrap();
    let expired = s
        .api
        .call("POST", "/v1/listen-tokens", Some(json!({"ttl_seconds": 1})))
        .await
        .1;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (status, _) = s
        .api
        .with_key(expired["token"].as_str().unwrap())
        .call(
            "POST",
            "/v1/endpoints",
            Some(json!({"mode": "pull", "temporary": true})),
        )
        .await;
    assert_eq!(status, 401);
    s.server.shutdown().await;
}

async fn a_reader_that_stops_committing_is_announced_once_per_stall(db: Database) {
    let s = db
        .sender_with("0s", |config| {
            config.reader_stall_notice = Duration::from_secs(1);
        })
        .await;
    let ops = Receiver::start(vec![]).await;
    let (status, body) = s
        .api
        .call("PATCH", "/v1/account", Some(json!({"ops_url": ops.url})))
        .await;
    assert_eq!(status, 200, "{body}");
    let (id, secret) = pull_endpoint(&s.api).await;
    // A temporary one never is: the server removes it instead.
    s.api
        .client
        .create_endpoint(&NewEndpoint::pull().temporary())
        .await
        .unwrap();
    let stalled_notices = async || {
        let (_, page) = s.api.call("GET", "/v1/notifications", None).await;
        page["data"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["kind"] == "endpoint.reader_stalled")
            .map(|n| n["endpoint_id"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    s.api.emit("payment.succeeded", json!({"n": 1})).await;
    let start = std::time::Instant::now();
    while stalled_notices().await.is_empty() {
        assert!(start.elapsed() < Duration::from_secs(20), "no notice");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Once per stall, about this endpoint only, and signed to the ops URL.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(stalled_notices().await, vec![id.clone()]);
    let start = std::time::Instant::now();
    while !ops
        .seen()
        .iter()
        .any(|r| String::from_utf8_lossy(&r.body).contains("endpoint.reader_stalled"))
    {
        assert!(start.elapsed() < Duration::from_secs(20), "not sent");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The reader commits: the stall is over; a new one is announced again.
    let page = items(&s.api, &id, "?wait=5", &secret, 1).await;
    let body = format!(r#"{{"sequence": {}}}"#, page.items[0].sequence);
    assert_eq!(commit(&s.api, &id, &body, &secret).await.0, 204);
    s.api.emit("payment.succeeded", json!({"n": 2})).await;
    let start = std::time::Instant::now();
    while stalled_notices().await.len() < 2 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no second notice"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    s.server.shutdown().await;
}
