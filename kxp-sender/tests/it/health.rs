//! `GET /v1/endpoints/{id}/health`: statistics kept as attempts finish, checked against a
//! receiver answering a known pattern, on SQLite and (with `KXP_TEST_DATABASE_URL`) PostgreSQL.

use std::time::Duration;

use kxp_sender::Db;
use kxp_sender::Protection;
use kxp_sender::{AttemptError, AttemptRecord, FinishAttempt, Finished, NextState};
use kxp_sender::{LATENCY_BOUNDS_MS, bucket_of};
use serde_json::{Value, json};

use crate::support::{Database, Receiver, Reply, Sender, sender_with, value};

const WITHIN: Duration = Duration::from_secs(10);

async fn health(s: &Sender, endpoint_id: &str) -> Value {
    let health = s
        .api
        .client
        .endpoint_health(&endpoint_id.into())
        .await
        .unwrap_or_else(|e| panic!("GET /v1/endpoints/{endpoint_id}/health: {e}"));
    value(&health)
}

/// Both windows hold every attempt of the test (it runs within the current hour or the one
/// before).
fn assert_window(h: &Value, successes: i64, failures: i64) {
    for window in ["last_1h", "last_24h"] {
        let w = &h[window];
        assert_eq!(w["attempts"], successes + failures, "{window}: {h}");
        assert_eq!(w["successes"], successes, "{window}: {h}");
        assert_eq!(w["failures"], failures, "{window}: {h}");
        let rate = w["success_rate"].as_f64().unwrap();
        assert!(
            (rate - successes as f64 / (successes + failures) as f64).abs() < 1e-9,
            "{window}: {h}"
        );
    }
}

/// The bucket bound of the nearest-rank percentile of `durations`.
fn expected_percentile(durations: &[i64], p: f64) -> i64 {
    let mut sorted = durations.to_vec();
    sorted.sort_unstable();
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    LATENCY_BOUNDS_MS[bucket_of(sorted[rank - 1])]
}

each_backend!(health_follows_attempts);
on_citus!(health_follows_attempts);

async fn health_follows_attempts(database: Database) {
    let s = database.sender("0s,20ms,40ms").await;
    // ev1: 500, 500, 200 · ev2: 200 · ev3: 503 ×3 (dead) · ev4: a slow 200.
    let receiver = Receiver::start(vec![
        Reply::Status(500),
        Reply::Status(500),
        Reply::Status(200),
        Reply::Status(200),
        Reply::Status(503),
        Reply::Status(503),
        Reply::Status(503),
        Reply::Hang(Duration::from_millis(300)),
    ])
    .await;
    let (endpoint_id, _) = s.api.endpoint(&receiver.url, json!({})).await;

    let h = health(&s, &endpoint_id).await;
    assert_eq!(h["endpoint_id"], endpoint_id.as_str());
    assert_eq!(h["last_24h"]["attempts"], 0, "{h}");
    assert!(
        h["last_success_at"].is_null() && h["last_error"].is_null(),
        "{h}"
    );

    let mut events = Vec::new();
    let ev1 = s.api.emit("t", json!({"n": 1})).await;
    s.api.wait_for(&ev1, "delivered", WITHIN).await;
    events.push(ev1);
    let h = health(&s, &endpoint_id).await;
    assert_window(&h, 1, 2);
    assert_eq!(h["consecutive_failures"], 0, "reset by the success: {h}");
    assert_eq!(h["last_error"], "http_500", "{h}");
    assert!(h["last_success_at"].is_string() && h["last_failure_at"].is_string());

    let ev2 = s.api.emit("t", json!({"n": 2})).await;
    s.api.wait_for(&ev2, "delivered", WITHIN).await;
    events.push(ev2);
    let ev3 = s.api.emit("t", json!({"n": 3})).await;
    s.api.wait_for(&ev3, "dead", WITHIN).await;
    events.push(ev3);
    let h = health(&s, &endpoint_id).await;
    assert_window(&h, 2, 5);
    assert_eq!(
        h["consecutive_failures"], 3,
        "counted after the success: {h}"
    );
    assert_eq!(h["last_error"], "http_503", "{h}");
    assert_eq!(
        (h["pending"].as_i64(), h["dead"].as_i64()),
        (Some(0), Some(1))
    );

    let ev4 = s.api.emit("t", json!({"n": 4})).await;
    s.api.wait_for(&ev4, "delivered", WITHIN).await;
    events.push(ev4.clone());
    let h = health(&s, &endpoint_id).await;
    assert_window(&h, 3, 5);
    assert_eq!(h["last_1h"]["success_rate"], 0.375, "{h}");
    assert_eq!(h["consecutive_failures"], 0, "{h}");
    assert_eq!(h["last_error"], "http_503", "kept after a success: {h}");
    assert_eq!(
        (h["pending"].as_i64(), h["dead"].as_i64()),
        (Some(0), Some(1))
    );
    assert_eq!(
        (&h["status"], &h["circuit_state"], &h["failing_since"]),
        (&json!("active"), &json!("closed"), &Value::Null),
        "{h}"
    );

    // Percentiles: the bucket bounds of the recorded durations.
    let mut durations = Vec::new();
    for event in &events {
        for delivery in s.api.deliveries_of(event).await {
            for attempt in s.api.attempts(delivery["id"].as_str().unwrap()).await {
                durations.push(attempt["duration_ms"].as_i64().unwrap());
            }
        }
    }
    assert_eq!(durations.len(), 8);
    for window in ["last_1h", "last_24h"] {
        let w = &h[window];
        assert_eq!(
            w["latency_p50_ms"],
            expected_percentile(&durations, 0.5),
            "{h}"
        );
        assert_eq!(
            w["latency_p95_ms"],
            expected_percentile(&durations, 0.95),
            "{h}"
        );
        assert!(
            w["latency_p95_ms"].as_i64().unwrap() >= 500,
            "the slow reply: {h}"
        );
    }

    // A paused endpoint holds its new deliveries: pending.
    s.api
        .client
        .pause_endpoint(&endpoint_id.as_str().into())
        .await
        .unwrap();
    s.api.emit("t", json!({"n": 5})).await;
    let h = health(&s, &endpoint_id).await;
    assert_eq!(
        (h["pending"].as_i64(), h["dead"].as_i64()),
        (Some(1), Some(1))
    );

    // A finished attempt whose lease was lost writes nothing, statistics included, and does
    // not keep the others of its batch from being recorded.
    let db = Db::connect(&s.database_url).await.unwrap();
    let delivered = s.api.wait_for(&ev4, "delivered", WITHIN).await;
    let record = AttemptRecord {
        started_at: 0,
        duration_ms: 99_999,
        status_code: Some(500),
        error: Some(AttemptError::Http(500)),
        response_snippet: None,
        signed_with: String::new(),
        verified_key: None,
    };
    let account = db.account_by_key(&s.api.key).await.unwrap().unwrap();
    let lost = FinishAttempt {
        delivery_id: delivered["id"].as_str().unwrap().into(),
        endpoint_id: endpoint_id.as_str().into(),
        account_id: account.id,
        owner: "not-the-owner".to_owned(),
        attempt: 2,
        record,
        next: NextState::Dead,
        keys: None,
    };
    let finished: Vec<Finished> = db
        .finish_attempts(&[lost.clone(), lost], &Protection::default())
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(finished, [Finished::LeaseLost, Finished::LeaseLost]);
    assert_eq!(health(&s, &endpoint_id).await, h);
    db.close().await;

    // An endpoint with no attempts: zeros and nulls.
    let (empty_id, _) = s.api.endpoint(&receiver.url, json!({})).await;
    let h = health(&s, &empty_id).await;
    for window in ["last_1h", "last_24h"] {
        assert_eq!(
            h[window],
            json!({"attempts": 0, "successes": 0, "failures": 0, "success_rate": null,
                   "latency_p50_ms": null, "latency_p95_ms": null}),
            "{h}"
        );
    }
    assert_eq!(h["consecutive_failures"], 0);
    assert!(h["last_success_at"].is_null() && h["last_failure_at"].is_null());
    assert!(h["last_error"].is_null());
    assert_eq!(
        (h["pending"].as_i64(), h["dead"].as_i64()),
        (Some(0), Some(0))
    );

    // Unknown ids are not found.
    let (status, _) = s
        .api
        .call(
            "GET",
            "/v1/endpoints/ep_00000000000000000000000000000000/health",
            None,
        )
        .await;
    assert_eq!(status, 404);
    s.server.shutdown().await;
}

#[tokio::test]
async fn the_backlog_and_its_age_show_in_the_health() {
    // No workers: what is emitted stays due, waiting.
    let s = sender_with("0s", |c| c.run_workers = false).await;
    let receiver = Receiver::start(Vec::new()).await;
    let (endpoint_id, _) = s.api.endpoint(&receiver.url, json!({})).await;
    let h = health(&s, &endpoint_id).await;
    assert_eq!(
        (h["due"].as_i64(), &h["oldest_due_at"]),
        (Some(0), &Value::Null)
    );
    let before = kxp_sender::now_ms();
    for n in 0..3 {
        s.api.emit("t", json!({"n": n})).await;
    }
    let h = health(&s, &endpoint_id).await;
    assert_eq!(
        (h["pending"].as_i64(), h["due"].as_i64()),
        (Some(3), Some(3)),
        "{h}"
    );
    let oldest = kxp_sender::parse_rfc3339(h["oldest_due_at"].as_str().unwrap()).unwrap();
    // The API's times are whole seconds.
    assert!(
        (before / 1000 * 1000..=kxp_sender::now_ms()).contains(&oldest),
        "came due when it was emitted: {h}"
    );
    // Held deliveries (a paused endpoint) are pending but not due: no backlog.
    s.api
        .client
        .pause_endpoint(&endpoint_id.as_str().into())
        .await
        .unwrap();
    let h = health(&s, &endpoint_id).await;
    assert_eq!(
        (h["pending"].as_i64(), h["due"].as_i64()),
        (Some(3), Some(0)),
        "{h}"
    );
    assert!(h["oldest_due_at"].is_null(), "{h}");
}
