//! The delivery pipeline end to end over loopback: the real sender (in-process, on SQLite, and
//! on every backend for the scenarios of `each_backend!`) delivering to scripted receivers.

use std::time::Duration;

use kxp_api::{BulkReplay, DeliveryQuery};
use serde_json::json;

use crate::support::{Database, Receiver, Reply, sender, typed, value, verifies};

const SECS_10: Duration = Duration::from_secs(10);

#[tokio::test]
async fn a_delivery_carries_the_envelope_headers_and_a_valid_signature() {
    let s = sender("0s").await;
    let receiver = Receiver::start(vec![]).await;
    let (endpoint_id, secret) = s.api.endpoint(&receiver.url, json!({})).await;
    let event_id = s
        .api
        .emit(
            "payment.succeeded",
            json!({"amount": 1999, "currency": "CNY"}),
        )
        .await;
    let delivery = s.api.wait_for(&event_id, "delivered", SECS_10).await;

    let seen = receiver.seen();
    assert_eq!(seen.len(), 1);
    let request = &seen[0];
    assert!(
        verifies(request, &secret),
        "the signature must verify with the endpoint's secret"
    );
    let envelope: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
    assert_eq!(envelope["id"], event_id.as_str());
    assert_eq!(envelope["type"], "payment.succeeded");
    assert_eq!(envelope["api_version"], "2026-11-01");
    assert_eq!(envelope["data"], json!({"amount": 1999, "currency": "CNY"}));
    assert!(uuid::Uuid::parse_str(&event_id).unwrap().get_version_num() == 4);
    assert_eq!(request.header("x-kxp-event-id"), event_id);
    assert_eq!(request.header("x-kxp-event-type"), "payment.succeeded");
    assert_eq!(
        request.header("x-kxp-delivery-id"),
        delivery["id"].as_str().unwrap()
    );
    assert_eq!(request.header("x-kxp-attempt"), "1");
    assert_eq!(request.header("content-type"), "application/json");
    assert!(request.header("user-agent").starts_with("kxp-webhooks/"));
    assert_eq!(delivery["endpoint_id"], endpoint_id.as_str());
    // The API shows exactly the bytes receivers get.
    let event = s.api.client.event(&event_id.as_str().into()).await.unwrap();
    assert_eq!(serde_json::to_value(&event).unwrap(), envelope);
    s.server.shutdown().await;
}

#[tokio::test]
async fn failures_follow_the_schedule_then_succeed_with_identical_bytes() {
    let s = sender("0s,200ms,600ms").await;
    let receiver = Receiver::start(vec![Reply::Status(500), Reply::Status(502)]).await;
    let (_, secret) = s.api.endpoint(&receiver.url, json!({})).await;
    let event_id = s.api.emit("payment.succeeded", json!({"n": 1})).await;
    let delivery = s.api.wait_for(&event_id, "delivered", SECS_10).await;

    let seen = receiver.seen();
    assert_eq!(seen.len(), 3);
    assert!(
        seen.iter().all(|r| r.body == seen[0].body),
        "every attempt sends the same bytes"
    );
    assert!(seen.iter().all(|r| verifies(r, &secret)));
    let attempts: Vec<String> = seen.iter().map(|r| r.header("x-kxp-attempt")).collect();
    assert_eq!(attempts, ["1", "2", "3"]);
    // Gaps of the schedule (jitter 0): 200 ms, then 400 ms.
    assert!(
        seen[1].at - seen[0].at >= Duration::from_millis(190),
        "{:?}",
        seen[1].at - seen[0].at
    );
    assert!(
        seen[2].at - seen[1].at >= Duration::from_millis(390),
        "{:?}",
        seen[2].at - seen[1].at
    );

    let attempts = s.api.attempts(delivery["id"].as_str().unwrap()).await;
    let statuses: Vec<i64> = attempts
        .iter()
        .map(|a| a["status_code"].as_i64().unwrap())
        .collect();
    assert_eq!(statuses, [500, 502, 200]);
    assert_eq!(delivery["attempts"], 3);
    s.server.shutdown().await;
}

#[tokio::test]
async fn nine_failures_make_a_dead_delivery_and_a_replay_delivers_the_same_event() {
    let s = sender("0s,10ms,20ms,30ms,40ms,50ms,60ms,70ms,80ms").await;
    let receiver = Receiver::start(vec![Reply::Status(500); 9]).await;
    let (endpoint_id, _) = s.api.endpoint(&receiver.url, json!({})).await;
    let event_id = s.api.emit("payment.failed", json!({})).await;
    let dead = s.api.wait_for(&event_id, "dead", SECS_10).await;
    let dead_id = dead["id"].as_str().unwrap().to_owned();
    assert_eq!(dead["attempts"], 9);
    assert_eq!(s.api.attempts(&dead_id).await.len(), 9);
    assert_eq!(receiver.seen().len(), 9);

    // The dead-letter queue lists it.
    let dlq = s
        .api
        .client
        .deliveries(&DeliveryQuery::dead().endpoint(endpoint_id.as_str().into()))
        .await
        .unwrap();
    let listed: Vec<&str> = dlq.data.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(listed, [dead_id.as_str()]);

    // Replay: a new delivery of the same event id, which now gets through.
    let replay = s
        .api
        .client
        .replay_delivery(&dead_id.as_str().into())
        .await
        .unwrap();
    assert_ne!(replay.id, dead_id.as_str());
    s.api.wait_for(&event_id, "delivered", SECS_10).await;
    let seen = receiver.seen();
    assert_eq!(seen.len(), 10);
    assert_eq!(
        seen[9].event_id(),
        event_id,
        "a replay delivers the same event id"
    );
    assert_eq!(seen[9].body, seen[0].body);

    // Replayed deliveries leave the queue, and the history keeps both.
    let dlq = s
        .api
        .client
        .deliveries(&DeliveryQuery::dead())
        .await
        .unwrap();
    assert!(dlq.data.is_empty(), "{dlq:?}");
    let history = s.api.deliveries_of(&event_id).await;
    assert_eq!(history.len(), 2);
    assert_eq!(history[0]["replayed_by"], replay.id.as_str());
    s.server.shutdown().await;
}

#[tokio::test]
async fn bulk_replay_queues_every_dead_delivery_of_an_endpoint() {
    let s = sender("0s").await;
    let receiver = Receiver::start(vec![Reply::Status(500); 3]).await;
    let (endpoint_id, _) = s.api.endpoint(&receiver.url, json!({})).await;
    let mut events = Vec::new();
    for n in 0..3 {
        let id = s.api.emit("payment.failed", json!({"n": n})).await;
        s.api.wait_for(&id, "dead", SECS_10).await;
        events.push(id);
    }
    let replayed = s
        .api
        .client
        .replay_endpoint(&endpoint_id.as_str().into(), &BulkReplay::default())
        .await
        .unwrap();
    assert_eq!(replayed.queued, 3);
    for id in &events {
        s.api.wait_for(id, "delivered", SECS_10).await;
    }
    // A second bulk replay finds nothing left in the queue (and a request without a body is
    // one with an empty body: raw HTTP, as the typed client always sends one).
    let (_, body) = s
        .api
        .call("POST", &format!("/v1/endpoints/{endpoint_id}/replay"), None)
        .await;
    assert_eq!(body["queued"], 0);
    s.server.shutdown().await;
}

#[tokio::test]
async fn redirects_are_followed_twice_with_the_same_post_and_a_third_fails() {
    let s = sender("0s,50ms").await;
    let target = Receiver::start(vec![]).await;
    let hop2 = Receiver::start(vec![Reply::Redirect(308, target.url.clone())]).await;
    let hop1 = Receiver::start(vec![Reply::Redirect(302, hop2.url.clone())]).await;
    let (_, secret) = s.api.endpoint(&hop1.url, json!({})).await;
    let event_id = s.api.emit("payment.succeeded", json!({})).await;
    s.api.wait_for(&event_id, "delivered", SECS_10).await;
    let arrived = &target.seen()[0];
    assert!(
        verifies(arrived, &secret),
        "re-POSTed with the same body and signature headers"
    );
    assert_eq!(arrived.event_id(), event_id);
    assert_eq!(arrived.header("x-kxp-event-id"), event_id);

    // Three hops: the attempt fails, and is retried.
    let r3 = Receiver::start(vec![]).await;
    let r2 = Receiver::start(vec![Reply::Redirect(307, r3.url.clone())]).await;
    let r1 = Receiver::start(vec![Reply::Redirect(307, r2.url.clone())]).await;
    let r0 = Receiver::start(vec![
        Reply::Redirect(307, r1.url.clone()),
        Reply::Status(200),
    ])
    .await;
    s.api
        .endpoint(&r0.url, json!({"event_types": ["refund.created"]}))
        .await;
    let event_id = s.api.emit("refund.created", json!({})).await;
    let delivery = s.api.wait_for(&event_id, "delivered", SECS_10).await;
    let attempts = s.api.attempts(delivery["id"].as_str().unwrap()).await;
    assert!(
        attempts[0]["error"]
            .as_str()
            .unwrap()
            .starts_with("too_many_redirects"),
        "{attempts:?}"
    );
    assert!(r3.seen().is_empty(), "the third redirect is not followed");
    s.server.shutdown().await;
}

#[tokio::test]
async fn a_4xx_is_retried_and_a_timeout_is_a_failed_attempt() {
    let s = sender("0s,50ms,100ms").await;
    let receiver = Receiver::start(vec![
        Reply::Status(400),
        Reply::Hang(Duration::from_secs(3)),
    ])
    .await;
    s.api
        .endpoint(&receiver.url, json!({"timeout_ms": 300}))
        .await;
    let event_id = s.api.emit("payment.succeeded", json!({})).await;
    let delivery = s.api.wait_for(&event_id, "delivered", SECS_10).await;
    let attempts = s.api.attempts(delivery["id"].as_str().unwrap()).await;
    assert_eq!(attempts.len(), 3, "{attempts:?}");
    assert_eq!(attempts[0]["status_code"], 400);
    assert!(
        attempts[1]["error"]
            .as_str()
            .unwrap()
            .starts_with("timeout"),
        "{attempts:?}"
    );
    assert!(attempts[1]["duration_ms"].as_i64().unwrap() < 2000);
    assert_eq!(attempts[2]["status_code"], 200);
    s.server.shutdown().await;
}

/// A receiver that answers `200` with a `Content-Length` of 100, sends 8 bytes of it, and then
/// holds every connection open without another byte: a 2xx whose body stalls.
async fn stalling_receiver() -> (String, tokio::sync::mpsc::UnboundedReceiver<()>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let (seen, requests) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut buf = vec![0u8; 64 * 1024];
            let mut read = 0;
            // The request's headers and body (the envelope is small): up to a quiet moment.
            while let Ok(Ok(n)) =
                tokio::time::timeout(Duration::from_millis(100), socket.read(&mut buf[read..]))
                    .await
            {
                if n == 0 {
                    break;
                }
                read += n;
            }
            let _ = seen.send(());
            let _ = socket
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\naccepted")
                .await;
            held.push(socket);
        }
    });
    (url, requests)
}

#[tokio::test]
async fn a_2xx_whose_body_stalls_is_delivered_not_a_timeout() {
    let s = sender("0s,50ms,100ms").await;
    let (url, mut requests) = stalling_receiver().await;
    s.api.endpoint(&url, json!({"timeout_ms": 2000})).await;
    let event_id = s.api.emit("payment.succeeded", json!({})).await;
    let delivery = s.api.wait_for(&event_id, "delivered", SECS_10).await;
    let attempts = s.api.attempts(delivery["id"].as_str().unwrap()).await;
    assert_eq!(attempts.len(), 1, "the status line decided: {attempts:?}");
    assert_eq!(attempts[0]["status_code"], 200);
    assert_eq!(
        attempts[0]["error"],
        serde_json::Value::Null,
        "{attempts:?}"
    );
    assert_eq!(
        attempts[0]["response_snippet"], "accepted",
        "what came is kept"
    );
    requests.recv().await.unwrap();
    assert!(requests.try_recv().is_err(), "sent once, never again");
    s.server.shutdown().await;
}

#[tokio::test]
async fn retry_after_on_429_and_503_delays_the_next_try() {
    let s = sender("0s,10ms,20ms").await;
    let receiver =
        Receiver::start(vec![Reply::RetryAfter(429, 1), Reply::RetryAfter(503, 1)]).await;
    s.api.endpoint(&receiver.url, json!({})).await;
    let event_id = s.api.emit("payment.succeeded", json!({})).await;
    s.api.wait_for(&event_id, "delivered", SECS_10).await;
    let seen = receiver.seen();
    assert_eq!(seen.len(), 3);
    assert!(
        seen[1].at - seen[0].at >= Duration::from_millis(990),
        "{:?}",
        seen[1].at - seen[0].at
    );
    assert!(
        seen[2].at - seen[1].at >= Duration::from_millis(990),
        "{:?}",
        seen[2].at - seen[1].at
    );
    s.server.shutdown().await;
}

#[tokio::test]
async fn a_hanging_endpoint_does_not_hold_back_a_healthy_one() {
    let s = sender_small_pool().await;
    let slow = Receiver::start(vec![Reply::Hang(Duration::from_secs(5)); 20]).await;
    let fast = Receiver::start(vec![]).await;
    s.api
        .endpoint(
            &slow.url,
            json!({"event_types": ["slow.*"], "timeout_ms": 2000}),
        )
        .await;
    s.api
        .endpoint(&fast.url, json!({"event_types": ["fast.*"]}))
        .await;
    for n in 0..20 {
        s.api.emit("slow.event", json!({"n": n})).await;
    }
    let started = std::time::Instant::now();
    let mut fast_events = Vec::new();
    for n in 0..10 {
        fast_events.push(s.api.emit("fast.event", json!({"n": n})).await);
    }
    for id in &fast_events {
        s.api.wait_for(id, "delivered", SECS_10).await;
    }
    // All ten arrived while the slow endpoint's attempts were still hanging (2 s timeout).
    assert!(
        started.elapsed() < Duration::from_millis(1800),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(fast.seen().len(), 10);
    s.server.shutdown().await;
}

async fn sender_small_pool() -> crate::support::Sender {
    crate::support::sender_with("0s,1m", |c| {
        c.workers = 8;
        c.per_endpoint_concurrency = 4;
    })
    .await
}

#[tokio::test]
async fn events_go_only_to_endpoints_subscribed_to_their_type() {
    let s = sender("0s").await;
    let payments = Receiver::start(vec![]).await;
    let refunds = Receiver::start(vec![]).await;
    let everything = Receiver::start(vec![]).await;
    s.api
        .endpoint(&payments.url, json!({"event_types": ["payment.*"]}))
        .await;
    s.api
        .endpoint(&refunds.url, json!({"event_types": ["refund.created"]}))
        .await;
    s.api.endpoint(&everything.url, json!({})).await;
    let paid = s.api.emit("payment.succeeded", json!({})).await;
    let refunded = s.api.emit("refund.created", json!({})).await;
    let other = s.api.emit("refund.failed", json!({})).await;
    for id in [&paid, &refunded, &other] {
        let deliveries = s.api.deliveries_of(id).await;
        for d in &deliveries {
            s.api
                .wait_for(d["event_id"].as_str().unwrap(), "delivered", SECS_10)
                .await;
        }
    }
    let ids = |r: &Receiver| r.seen().iter().map(|s| s.event_id()).collect::<Vec<_>>();
    assert_eq!(ids(&payments), std::slice::from_ref(&paid));
    assert_eq!(ids(&refunds), std::slice::from_ref(&refunded));
    let mut all = ids(&everything);
    all.sort();
    let mut expected = vec![paid, refunded, other];
    expected.sort();
    assert_eq!(all, expected);
    s.server.shutdown().await;
}

/// Issue 11, item 10: `Retry-After` as an HTTP-date was ignored (only seconds were read), so a
/// receiver asking for two hours was tried again on the schedule's 10 ms.
#[tokio::test]
async fn retry_after_as_an_http_date_schedules_the_next_try() {
    let s = sender("0s,10ms,20ms").await;
    let imf_fixdate = time::macros::format_description!(
        "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
    );
    let date = |from_now: time::Duration| {
        (time::OffsetDateTime::now_utc() + from_now)
            .format(imf_fixdate)
            .unwrap()
    };
    let two_hours = Receiver::start(vec![Reply::RetryAfterText(
        429,
        date(time::Duration::hours(2)),
    )])
    .await;
    let two_days = Receiver::start(vec![Reply::RetryAfterText(
        503,
        date(time::Duration::days(2)),
    )])
    .await;
    let past = Receiver::start(vec![Reply::RetryAfterText(
        503,
        date(-time::Duration::hours(1)),
    )])
    .await;
    let (two_hours_id, _) = s.api.endpoint(&two_hours.url, json!({})).await;
    let (two_days_id, _) = s.api.endpoint(&two_days.url, json!({})).await;
    let (past_id, _) = s.api.endpoint(&past.url, json!({})).await;
    let event_id = s.api.emit("payment.succeeded", json!({})).await;

    // Each endpoint's delivery once its first answer is recorded (the past date's: delivered
    // by its second attempt).
    let started = std::time::Instant::now();
    let [a, b, c] = loop {
        let deliveries = s.api.typed_deliveries_of(&event_id).await;
        let of = |endpoint: &str| {
            deliveries
                .iter()
                .find(|d| d.endpoint_id.as_str() == endpoint)
                .cloned()
        };
        let waiting = |d: &Option<kxp_api::Delivery>| {
            d.as_ref()
                .is_some_and(|d| d.attempts == 1 && d.next_attempt_at.is_some())
        };
        let (a, b, c) = (of(&two_hours_id), of(&two_days_id), of(&past_id));
        if waiting(&a)
            && waiting(&b)
            && c.as_ref().is_some_and(|d| d.status.as_str() == "delivered")
        {
            break [a.unwrap(), b.unwrap(), c.unwrap()];
        }
        assert!(started.elapsed() < SECS_10, "{deliveries:?}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    // The delay the sender scheduled, in seconds from the delivery's creation (its first
    // attempt starts within a poll interval of it; the date has whole seconds).
    let scheduled = |d: &kxp_api::Delivery| {
        let next = d.next_attempt_at.as_ref().unwrap().unix_ms().unwrap();
        (next - d.created_at.unix_ms().unwrap()) / 1000
    };
    let hours = |h: i64| h * 60 * 60;
    assert!(
        (hours(2) - 5..=hours(2) + 5).contains(&scheduled(&a)),
        "{a:?}"
    );
    // Two days is capped at MAX_RETRY_AFTER, as the seconds form is.
    let cap = i64::try_from(kxp_sender::MAX_RETRY_AFTER.as_secs()).unwrap();
    assert!((cap - 5..=cap + 5).contains(&scheduled(&b)), "{b:?}");
    // A date in the past asks for no extra delay: tried again on the schedule.
    assert_eq!(c.attempts, 2, "{c:?}");
    assert_eq!(two_hours.seen().len(), 1);
    assert_eq!(two_days.seen().len(), 1);
    assert_eq!(past.seen().len(), 2);
    s.server.shutdown().await;
}

each_backend!(retries_dead_letters_replays_and_idempotency);
on_citus!(retries_dead_letters_replays_and_idempotency);

/// The pipeline's main paths on one sender: retries to a dead letter, a replay, and an
/// idempotency key.
async fn retries_dead_letters_replays_and_idempotency(database: Database) {
    let s = database.sender("0s,20ms,40ms").await;
    let health = s.api.client.healthz().await.unwrap();
    assert_eq!(health.database, database.backend().name());

    let receiver = Receiver::start(vec![
        Reply::Status(500),
        Reply::Status(503),
        Reply::Status(500),
    ])
    .await;
    let (endpoint_id, _) = s.api.endpoint(&receiver.url, json!({})).await;
    let event_id = s.api.emit("payment.succeeded", json!({"amount": 1})).await;
    let dead = s
        .api
        .wait_for(&event_id, "dead", Duration::from_secs(10))
        .await;
    assert_eq!(s.api.attempts(dead["id"].as_str().unwrap()).await.len(), 3);
    let queued = s
        .api
        .client
        .replay_endpoint(&endpoint_id.as_str().into(), &typed(json!({})))
        .await
        .unwrap();
    assert_eq!(value(&queued)["queued"].as_u64(), Some(1), "{queued:?}");
    s.api
        .wait_for(&event_id, "delivered", Duration::from_secs(10))
        .await;
    assert!(receiver.seen().iter().all(|r| r.event_id() == event_id));

    let mut ids = Vec::new();
    for _ in 0..3 {
        let response = s
            .api
            .http
            .post(format!("{}/v1/events", s.api.base))
            .bearer_auth(&s.api.key)
            .header("Idempotency-Key", "pg-key")
            .json(&json!({"type": "t", "data": {}}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 202);
        ids.push(
            response.json::<serde_json::Value>().await.unwrap()["id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    ids.dedup();
    assert_eq!(ids.len(), 1);
    s.server.shutdown().await;
}
