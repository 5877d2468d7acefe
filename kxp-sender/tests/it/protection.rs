//! Protecting endpoints: the circuit breaker's transitions, held deliveries that burn no
//! attempt, the rate-limited drain of a recovered backlog, the steady-state rate limit, and
//! auto-disable. Real HTTP on 127.0.0.1; the breaker on SQLite and on PostgreSQL.
//!
//! No assertion here is about speed. The rate limit is checked by lower bounds on when
//! attempts started (a slow machine only starts them later), and the probe back-off by the
//! times the sender stored.

use std::time::{Duration, Instant};

use kxp_sender::Db;
use kxp_sender::Protection;
use serde_json::{Value, json};

use crate::support::{Database, Receiver, Sender, sender_with, typed, value};

const WITHIN: Duration = Duration::from_secs(20);

/// Nine quick tries: the breaker, not the schedule, decides what happens here.
const SCHEDULE: &str = "0s,10ms,20ms,30ms,40ms,50ms,60ms,70ms,80ms";

fn breaker(failures: u32, cooldown_ms: u64, max_ms: u64) -> Protection {
    Protection {
        breaker_failures: failures,
        breaker_cooldown: Duration::from_millis(cooldown_ms),
        breaker_cooldown_max: Duration::from_millis(max_ms),
        rate_limit: 0,
        ..Protection::default()
    }
}

/// Runs a query returning `(text, number)` rows on either backend.
pub(crate) async fn rows(db: &Db, sql: &str, bind: &str) -> Vec<(String, i64)> {
    match db {
        Db::Sqlite(pool) => sqlx::query_as(sql)
            .bind(bind)
            .fetch_all(pool)
            .await
            .unwrap(),
        Db::Postgres(pool) | Db::Citus(pool) => sqlx::query_as(sql)
            .bind(bind)
            .fetch_all(pool)
            .await
            .unwrap(),
    }
}

/// The endpoint's stored breaker: (state, next probe, failed probes, last failure), in ms.
async fn circuit(db: &Db, endpoint_id: &str) -> (String, i64, i64, i64) {
    let sql = "SELECT p.circuit_state, COALESCE(p.circuit_probe_at, -1), p.circuit_failed_probes, \
               COALESCE(s.last_failure_at, -1) FROM kxp_endpoints p \
               LEFT JOIN kxp_endpoint_stats s ON s.account_id = p.account_id AND s.endpoint_id = p.id \
               WHERE p.id = $1";
    match db {
        Db::Sqlite(pool) => sqlx::query_as(sql)
            .bind(endpoint_id)
            .fetch_one(pool)
            .await
            .unwrap(),
        Db::Postgres(pool) | Db::Citus(pool) => sqlx::query_as(sql)
            .bind(endpoint_id)
            .fetch_one(pool)
            .await
            .unwrap(),
    }
}

async fn endpoint(s: &Sender, id: &str) -> Value {
    let endpoint = s
        .api
        .client
        .endpoint(&id.into())
        .await
        .unwrap_or_else(|e| panic!("GET /v1/endpoints/{id}: {e}"));
    value(&endpoint)
}

async fn health_of(s: &Sender, id: &str) -> Value {
    let health = s
        .api
        .client
        .endpoint_health(&id.into())
        .await
        .unwrap_or_else(|e| panic!("GET /v1/endpoints/{id}/health: {e}"));
    value(&health)
}

/// Polls `check` until it holds, for at most [`WITHIN`].
async fn until<F: AsyncFnMut() -> bool>(what: &str, mut check: F) {
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < WITHIN, "gave up waiting: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The only delivery of an event.
async fn delivery(s: &Sender, event_id: &str) -> Value {
    let deliveries = s.api.deliveries_of(event_id).await;
    assert_eq!(deliveries.len(), 1, "{deliveries:?}");
    deliveries[0].clone()
}

each_backend!(the_breaker_opens_holds_probes_and_closes);
on_citus!(the_breaker_opens_holds_probes_and_closes);

/// The breaker, end to end: opens after the threshold, holds new and retrying deliveries
/// without an attempt, probes with one delivery, backs off after a failed probe, closes on a
/// successful one, and then delivers everything it held exactly once.
async fn the_breaker_opens_holds_probes_and_closes(database: Database) {
    let s = database
        .sender_with(SCHEDULE, |c| c.protection = breaker(3, 200, 800))
        .await;
    let db = s.server.db();
    let rx = Receiver::start(vec![]).await;
    rx.answer_rest_with(500);
    let (ep, _) = s.api.endpoint(&rx.url, json!({})).await;

    let first = s.api.emit("payment.failed", json!({"n": 0})).await;
    until("the circuit opens", async || {
        circuit(db, &ep).await.0 != "closed"
    })
    .await;
    let h = endpoint(&s, &ep).await;
    assert_eq!(h["status"], "active", "{h}");
    let health = health_of(&s, &ep).await;
    assert!(health["circuit_opened_at"].is_string(), "{health}");

    // While open, new events queue up held: pending, not attempted — but for one of them,
    // which may be the probe once the 200 ms cool-down has passed (emitting five can take
    // that long on a loaded machine).
    let mut held = Vec::new();
    for n in 1..=5 {
        held.push(s.api.emit("payment.failed", json!({"n": n})).await);
    }
    let mut attempted = 0;
    for event in &held {
        let d = delivery(&s, event).await;
        // The probe may be in flight (`delivering`) or back to pending after its one attempt.
        if d["status"] == "delivering" || d["attempts"] != 0 {
            assert!(
                d["attempts"] == 0 || d["attempts"] == 1,
                "only a probe's one attempt: {d}"
            );
            attempted += 1;
        } else {
            assert_eq!(d["status"], "pending", "{d}");
        }
    }
    assert!(attempted <= 1, "{attempted} held deliveries were attempted");

    // A probe fails: the circuit opens again and waits twice as long (the stored probe time is
    // computed from the same instant as the stored failure).
    until("a probe fails", async || circuit(db, &ep).await.2 >= 1).await;
    let (_, probe_at, failed_probes, failed_at) = circuit(db, &ep).await;
    let expected = (200 << failed_probes.min(10)).min(800);
    assert_eq!(
        probe_at - failed_at,
        expected,
        "failed probes: {failed_probes}"
    );

    // While open, the only requests were the probes, one per failed probe, each a recorded
    // attempt: holding burned nothing. (Read while the circuit is open, no probe in flight.)
    let mut all = held.clone();
    all.push(first.clone());
    let (seen, failed_probes) = loop {
        let before = circuit(db, &ep).await;
        let seen = rx.seen().len();
        let mut attempts = 0;
        for event in &all {
            attempts += delivery(&s, event).await["attempts"].as_u64().unwrap();
        }
        if before.0 == "open" && circuit(db, &ep).await == before {
            assert_eq!(
                attempts as usize, seen,
                "every request is a recorded attempt"
            );
            break (seen, before.2);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(
        seen,
        3 + failed_probes as usize,
        "three failures, then only probes"
    );

    rx.answer_rest_with(200);
    for event in &all {
        s.api.wait_for(event, "delivered", WITHIN).await;
    }
    let (state, _, failed_probes_after, _) = circuit(db, &ep).await;
    assert_eq!((state.as_str(), failed_probes_after), ("closed", 0));
    let health = health_of(&s, &ep).await;
    assert_eq!(
        (&health["circuit_state"], &health["consecutive_failures"]),
        (&json!("closed"), &json!(0)),
        "{health}"
    );

    // Each event: as many requests as recorded attempts, the last one its success; the probes
    // went to the deliveries with the most tries left, so the first event (three failures)
    // probed only once the others had caught up, if at all.
    let seen = rx.seen();
    let mut total = 0;
    for event in &all {
        let requests = seen.iter().filter(|r| r.event_id() == *event).count();
        let attempts = delivery(&s, event).await["attempts"].as_u64().unwrap() as usize;
        assert_eq!(requests, attempts, "{event}");
        total += requests;
    }
    assert_eq!(total, seen.len());
    assert!(delivery(&s, &first).await["attempts"].as_u64().unwrap() >= 4);
    s.server.shutdown().await;
}

/// When each of the endpoint's deliveries was first tried (Unix ms), oldest delivery first.
async fn first_tries(db: &Db, endpoint_id: &str) -> Vec<(String, i64)> {
    rows(
        db,
        "SELECT d.id, MIN(a.started_at) FROM kxp_deliveries d JOIN kxp_attempts a ON a.delivery_id = d.id \
         WHERE d.endpoint_id = $1 GROUP BY d.id ORDER BY d.id",
        endpoint_id,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovered_backlog_drains_at_the_rate_limit_not_as_a_storm() {
    let s = sender_with(SCHEDULE, |c| c.protection = breaker(1, 100, 100)).await;
    let db = s.server.db();
    let rx = Receiver::start(vec![]).await;
    rx.answer_rest_with(503);
    let (ep, _) = s
        .api
        .endpoint(&rx.url, json!({"rate_limit_per_second": 10}))
        .await;
    let first = s.api.emit("t", json!({"n": 0})).await;
    until("the circuit opens", async || {
        circuit(db, &ep).await.0 != "closed"
    })
    .await;
    let mut backlog = Vec::new();
    for n in 1..=30 {
        backlog.push(s.api.emit("t", json!({"n": n})).await);
    }
    rx.answer_rest_with(200);
    for event in backlog.iter().chain([&first]) {
        s.api.wait_for(event, "delivered", WITHIN).await;
    }

    // The probe closed the circuit with the first success; the rest was then released one
    // every 100 ms, oldest first. No delivery can start before its release.
    let successes = rows(
        db,
        "SELECT d.id, a.started_at FROM kxp_deliveries d JOIN kxp_attempts a ON a.delivery_id = d.id \
         WHERE d.endpoint_id = $1 AND a.status_code = 200 ORDER BY d.id",
        &ep,
    )
    .await;
    assert_eq!(successes.len(), 31);
    let (probe, closed_no_earlier_than) =
        successes.iter().min_by_key(|(_, at)| *at).cloned().unwrap();
    let drained: Vec<i64> = successes
        .iter()
        .filter(|(id, _)| *id != probe)
        .map(|(_, at)| *at)
        .collect();
    assert_eq!(drained.len(), 30);
    for (k, at) in drained.iter().enumerate() {
        let release = closed_no_earlier_than + 100 * k as i64;
        assert!(
            *at >= release,
            "delivery {k} of the backlog started {} ms before its release",
            release - at
        );
    }
    // Holding burned no attempt: each delivery's attempts are exactly the requests the
    // receiver saw for it — its success, and any probe that failed while the backlog was
    // still being emitted (the probe is the held delivery with the most tries left).
    let seen = rx.seen();
    for event in backlog.iter().chain([&first]) {
        let requests = seen.iter().filter(|r| r.event_id() == *event).count();
        assert_eq!(
            delivery(&s, event).await["attempts"],
            json!(requests),
            "{event}"
        );
    }
    s.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_deliveries_is_sent_at_the_rate_limit() {
    // The server default applies to an endpoint without its own limit.
    let s = sender_with("0s", |c| c.protection.rate_limit = 5).await;
    let rx = Receiver::start(vec![]).await;
    let (ep, _) = s
        .api
        .endpoint(&rx.url, json!({"rate_limit_per_second": 10000}))
        .await;
    let mut events = Vec::new();
    for n in 0..20 {
        events.push(s.api.emit("t", json!({"n": n})).await);
    }
    for event in &events {
        s.api.wait_for(event, "delivered", WITHIN).await;
    }
    // Back to the default limit, and all 20 due at the same instant: a bulk replay.
    s.api
        .client
        .update_endpoint(
            &ep.as_str().into(),
            &typed(json!({"rate_limit_per_second": null})),
        )
        .await
        .unwrap();
    let queued = s
        .api
        .client
        .replay_endpoint(&ep.as_str().into(), &typed(json!({"status": "delivered"})))
        .await
        .unwrap();
    assert_eq!(value(&queued)["queued"].as_u64(), Some(20), "{queued:?}");
    let mut replayed = Vec::new();
    for event in &events {
        replayed.push(s.api.wait_for(event, "delivered", WITHIN).await);
        assert_eq!(s.api.deliveries_of(event).await.len(), 2);
    }
    let mut starts: Vec<i64> = first_tries(s.server.db(), &ep)
        .await
        .into_iter()
        .filter(|(id, _)| replayed.iter().any(|d| d["id"] == id.as_str()))
        .map(|(_, at)| at)
        .collect();
    starts.sort_unstable();
    assert_eq!(starts.len(), 20);
    // A burst of one second's worth (5), then one every 200 ms: the last of 20 is granted at
    // least 3 s after the first. Attempt start times trail their grants by a database read,
    // so the bound allows the first start half a second of that.
    let span = starts[19] - starts[0];
    assert!(
        span >= 2500,
        "20 attempts within {span} ms at 5/s: {starts:?}"
    );
    assert_eq!(rx.seen().len(), 40);
    s.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_failing_for_the_whole_period_is_disabled_and_resumes_on_request() {
    let s = sender_with("0s,10ms,20ms,30ms,40ms,50ms,60ms,70ms,80ms,90ms,100ms,110ms,120ms,130ms,140ms,150ms,160ms,170ms,180ms,190ms", |c| {
        c.protection = Protection {
            disable_after: Duration::from_millis(800),
            ..breaker(2, 50, 100)
        };
    })
    .await;
    let db = s.server.db();
    let rx = Receiver::start(vec![]).await;
    rx.answer_rest_with(500);
    let (ep, _) = s.api.endpoint(&rx.url, json!({})).await;
    let first = s.api.emit("t", json!({"n": 0})).await;
    until("the endpoint is disabled", async || {
        endpoint(&s, &ep).await["status"] == "disabled"
    })
    .await;

    // Disabled: the circuit is reset, the failing delivery is held (pending, its attempts
    // kept), and new events queue up held.
    let d = delivery(&s, &first).await;
    assert_eq!(d["status"], "pending", "{d}");
    let attempts = d["attempts"].as_i64().unwrap();
    assert!(attempts >= 3, "{d}");
    let health = health_of(&s, &ep).await;
    assert_eq!(
        (&health["status"], &health["circuit_state"]),
        (&json!("disabled"), &json!("closed")),
        "{health}"
    );
    let during = s.api.emit("t", json!({"n": 1})).await;
    let seen = rx.seen().len();
    // Nothing is tried while disabled, however long it stays so (a look after a while: a bug
    // would show as more requests, never as a false failure).
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(rx.seen().len(), seen);
    assert_eq!(delivery(&s, &during).await["attempts"], 0);
    assert_eq!(
        delivery(&s, &first).await["attempts"].as_i64(),
        Some(attempts)
    );

    // The merchant fixes the endpoint and resumes it: the backlog is delivered, and the
    // failure period starts again.
    rx.answer_rest_with(200);
    let resumed = value(
        &s.api
            .client
            .resume_endpoint(&ep.as_str().into())
            .await
            .unwrap(),
    );
    assert_eq!(
        (&resumed["status"], &resumed["circuit_state"]),
        (&json!("active"), &json!("closed")),
        "{resumed}"
    );
    for event in [&first, &during] {
        s.api.wait_for(event, "delivered", WITHIN).await;
    }
    let health = health_of(&s, &ep).await;
    assert_eq!(health["failing_since"], Value::Null, "{health}");
    assert_eq!(circuit(db, &ep).await.0, "closed");
    s.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_that_escaped_holding_are_still_probed_and_delivered() {
    // A delivery put back by a worker, or reclaimed after a crash, while the circuit is open
    // is pending but not held; the probe must still find something to probe with.
    let s = sender_with(SCHEDULE, |c| c.protection = breaker(1, 100, 100)).await;
    let db = s.server.db();
    let rx = Receiver::start(vec![]).await;
    rx.answer_rest_with(500);
    let (ep, _) = s.api.endpoint(&rx.url, json!({})).await;
    let mut events = vec![s.api.emit("t", json!({"n": 0})).await];
    until("the circuit opens", async || {
        circuit(db, &ep).await.0 != "closed"
    })
    .await;
    for n in 1..=3 {
        events.push(s.api.emit("t", json!({"n": n})).await);
    }
    let Db::Sqlite(pool) = db else { unreachable!() };
    let escaped = sqlx::query(
        "UPDATE kxp_deliveries SET next_attempt_at = 0 WHERE endpoint_id = $1 AND status = 'pending'",
    )
    .bind(&ep)
    .execute(pool)
    .await
    .unwrap()
    .rows_affected();
    assert_eq!(escaped, 4);
    rx.answer_rest_with(200);
    for event in &events {
        s.api.wait_for(event, "delivered", WITHIN).await;
    }
    assert_eq!(circuit(db, &ep).await.0, "closed");
    s.server.shutdown().await;
}
