//! Backpressure (issue 10): an account whose due backlog reaches `backlog_limit` is refused
//! with 503 `backlog_full` and `Retry-After`, and nothing is stored; held deliveries (a paused
//! endpoint's) never count; other accounts ingest meanwhile; the retry of an accepted
//! `Idempotency-Key` still answers its event; once the workers drain the backlog, ingestion is
//! accepted again.
//!
//! The first server runs no workers, so the backlog stays exactly where the test put it; a
//! second server on the same database, with workers, drains it. No timing assertions: every
//! wait polls a condition, bounded.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Api, Database, Receiver, sender_with};

const LIMIT: u64 = 5;

/// A raw `POST /v1/events`: the status, the `Retry-After` header and the body.
async fn post_event(api: &Api, data: Value, key: Option<&str>) -> (u16, Option<String>, Value) {
    let mut request = api
        .http
        .post(format!("{}/v1/events", api.base))
        .bearer_auth(&api.key)
        .json(&json!({"type": "order.paid", "data": data}));
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, retry_after, response.json().await.unwrap())
}

/// The value of one sample of `/metrics`.
async fn metric(api: &Api, sample: &str) -> f64 {
    let text = reqwest::get(format!("{}/metrics", api.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("{sample} missing from\n{text}"))
}

/// How many deliveries the account has (up to 100).
async fn deliveries_count(api: &Api) -> usize {
    let page = api
        .client
        .deliveries(&kxp_api::DeliveryQuery::default().limit(100))
        .await
        .unwrap_or_else(|e| panic!("GET /v1/deliveries: {e}"));
    page.data.len()
}

each_backend!(backlog_full_refuses_only_the_account_behind_it);
on_citus!(backlog_full_refuses_only_the_account_behind_it);

async fn backlog_full_refuses_only_the_account_behind_it(database: Database) {
    let s = database
        .sender_with("0s", |c| {
            c.backlog_limit = LIMIT;
            c.run_workers = false;
        })
        .await;
    let rx = Receiver::start(vec![]).await;
    let a = s.api.clone();
    let (_, b_key) = s.server.db().create_account("b", None).await.unwrap();
    let b = s.api.with_key(&b_key);
    let (_, c_key) = s.server.db().create_account("c", None).await.unwrap();
    let c = s.api.with_key(&c_key);
    for api in [&a, &b] {
        api.endpoint(&rx.url, json!({})).await;
    }

    // C's endpoint is paused: its 50 held deliveries are no backlog, and C keeps ingesting.
    let (c_ep, _) = c.endpoint(&rx.url, json!({})).await;
    c.client
        .pause_endpoint(&c_ep.as_str().into())
        .await
        .unwrap();
    for n in 0..50 {
        let (status, _, body) = post_event(&c, json!({"n": n}), None).await;
        assert_eq!(status, 202, "held deliveries must not count: {body}");
    }

    // A fills its due backlog to the limit; the first event carries an idempotency key.
    let (status, _, first) = post_event(&a, json!({"n": 0}), Some("order-0")).await;
    assert_eq!(status, 202, "{first}");
    for n in 1..LIMIT {
        let (status, _, body) = post_event(&a, json!({"n": n}), None).await;
        assert_eq!(status, 202, "{body}");
    }
    let stored = deliveries_count(&a).await;
    let (status, retry_after, body) = post_event(&a, json!({"n": "over"}), None).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"], "backlog_full", "{body}");
    let seconds: u64 = retry_after.expect("Retry-After").parse().unwrap();
    assert!((1..=60).contains(&seconds));
    assert_eq!(
        deliveries_count(&a).await,
        stored,
        "a refused event stores nothing"
    );

    // The retry of an accepted request answers its event, full or not.
    let (status, _, again) = post_event(&a, json!({"n": 0}), Some("order-0")).await;
    assert_eq!(status, 202, "{again}");
    assert_eq!(again["id"], first["id"]);
    // A new key is new work: refused.
    let (status, _, body) = post_event(&a, json!({"n": 9}), Some("order-9")).await;
    assert_eq!(status, 503, "{body}");

    // B is not behind: it ingests while A is refused.
    for n in 0..3 {
        let (status, _, body) = post_event(&b, json!({"n": n}), None).await;
        assert_eq!(status, 202, "another account is unaffected: {body}");
    }

    // /metrics: the refusals, and the due backlog with its age.
    assert!(metric(&a, "kxp_events_refused_total{reason=\"backlog_full\"}").await >= 2.0);
    assert!(metric(&a, "kxp_deliveries{state=\"due\"}").await >= LIMIT as f64);
    assert_eq!(metric(&a, "kxp_deliveries{state=\"held\"}").await, 50.0);

    // Workers (another process on the same database) drain A's backlog: accepted again.
    let url = s.database_url.clone();
    let workers = sender_with("0s", move |c| c.database_url = url).await;
    let start = Instant::now();
    loop {
        let (status, _, body) = post_event(&a, json!({"n": "after"}), None).await;
        if status == 202 {
            break;
        }
        assert_eq!(body["error"], "backlog_full", "{body}");
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the backlog never drained: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    workers.server.shutdown().await;
    s.server.shutdown().await;
}

#[tokio::test]
async fn no_limit_never_refuses() {
    let s = sender_with("0s", |c| {
        c.backlog_limit = 0;
        c.run_workers = false;
    })
    .await;
    let rx = Receiver::start(vec![]).await;
    s.api.endpoint(&rx.url, json!({})).await;
    for n in 0..20 {
        let (status, _, body) = post_event(&s.api, json!({"n": n}), None).await;
        assert_eq!(status, 202, "{body}");
    }
    s.server.shutdown().await;
}
