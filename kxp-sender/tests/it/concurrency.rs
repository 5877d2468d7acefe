//! Adaptive per-endpoint concurrency, end to end: a receiver on 127.0.0.1 that counts the
//! attempts it is answering at once. A fast endpoint is given more than a small fixed cap, up to
//! the ceiling; one that answers 503 is given less and less; a backlog held through an outage
//! drains from the initial limit. No assertion is about speed: the
//! receiver counts requests in flight, which the sender's limit bounds whatever the machine's
//! load.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::json;

use crate::support::sender_with;

const WITHIN: Duration = Duration::from_secs(60);

/// A receiver that answers its current status after its current delay (both changeable, so a
/// test can stage an outage), and records how many requests it was answering when each one
/// arrived (that one included).
#[derive(Clone)]
struct Counting {
    busy: Arc<AtomicUsize>,
    at_arrival: Arc<Mutex<Vec<usize>>>,
    delay_ms: Arc<AtomicU64>,
    status: Arc<AtomicU16>,
}

impl Counting {
    async fn start(delay: Duration, status: u16) -> (String, Counting) {
        let counting = Counting {
            busy: Arc::default(),
            at_arrival: Arc::default(),
            delay_ms: Arc::new(AtomicU64::new(delay.as_millis() as u64)),
            status: Arc::new(AtomicU16::new(status)),
        };
        let app = Router::new().fallback(answer).with_state(counting.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (url, counting)
    }

    fn at_arrival(&self) -> Vec<usize> {
        self.at_arrival.lock().unwrap().clone()
    }

    /// From now on, answer `status` after `delay`.
    fn answer(&self, delay: Duration, status: u16) {
        self.delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
        self.status.store(status, Ordering::SeqCst);
    }
}

async fn answer(State(c): State<Counting>) -> StatusCode {
    let now = c.busy.fetch_add(1, Ordering::SeqCst) + 1;
    c.at_arrival.lock().unwrap().push(now);
    let status = StatusCode::from_u16(c.status.load(Ordering::SeqCst)).unwrap();
    tokio::time::sleep(Duration::from_millis(c.delay_ms.load(Ordering::SeqCst))).await;
    c.busy.fetch_sub(1, Ordering::SeqCst);
    status
}

async fn wait_for_requests(c: &Counting, n: usize) {
    let deadline = tokio::time::Instant::now() + WITHIN;
    while c.at_arrival().len() < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {} of {n} requests arrived",
            c.at_arrival().len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_endpoint_is_given_more_than_a_fixed_cap_up_to_the_ceiling() {
    let s = sender_with("0s", |c| {
        c.per_endpoint_concurrency = 24;
        c.backlog_limit = 0;
    })
    .await;
    let (url, receiver) = Counting::start(Duration::from_millis(40), 200).await;
    s.api.endpoint(&url, json!({})).await;
    let events = 400;
    let emits: Vec<_> = (0..events)
        .map(|n| {
            let api = s.api.clone();
            tokio::spawn(async move { api.emit("t", json!({"n": n})).await })
        })
        .collect();
    for emit in emits {
        emit.await.unwrap();
    }
    wait_for_requests(&receiver, events).await;
    let seen = receiver.at_arrival();
    let most = seen.iter().copied().max().unwrap();
    assert!(
        most > 8,
        "an endpoint that keeps up grows past 8 in flight (the old fixed cap): at most {most}"
    );
    assert!(most <= 24, "never above the ceiling: {most}");
    assert_eq!(
        seen.len(),
        events,
        "each event once: {} requests",
        seen.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_answering_503_is_given_less_and_less() {
    // Quick retries and a breaker that never opens: the adaptive limit alone paces it.
    let s = sender_with("0s,1ms,2ms,3ms,4ms,5ms,6ms,7ms,8ms", |c| {
        c.per_endpoint_concurrency = 64;
        c.protection.breaker_failures = 1_000_000;
        c.backlog_limit = 0;
    })
    .await;
    let (url, receiver) = Counting::start(Duration::from_millis(20), 503).await;
    s.api.endpoint(&url, json!({})).await;
    for n in 0..40 {
        s.api.emit("t", json!({"n": n})).await;
    }
    wait_for_requests(&receiver, 120).await;
    let seen = receiver.at_arrival();
    let most = seen.iter().copied().max().unwrap();
    assert!(
        most <= 4,
        "an overloaded endpoint never grows past where it starts: {most} in flight"
    );
    let later = seen[60..].iter().copied().max().unwrap();
    assert!(
        later <= 2,
        "after repeated 503s it gets one or two attempts at a time, not {later}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_outage_the_held_backlog_drains_from_the_initial_limit() {
    let s = sender_with("0s,10ms,20ms,30ms,40ms,50ms,60ms,70ms,80ms", |c| {
        c.per_endpoint_concurrency = 24;
        c.protection.breaker_failures = 3;
        c.protection.breaker_cooldown = Duration::from_millis(300);
        c.backlog_limit = 0;
    })
    .await;
    let (url, receiver) = Counting::start(Duration::from_millis(20), 200).await;
    let (endpoint_id, _) = s.api.endpoint(&url, json!({})).await;
    let emit_all = |from: usize, to: usize| {
        let emits: Vec<_> = (from..to)
            .map(|n| {
                let api = s.api.clone();
                tokio::spawn(async move { api.emit("t", json!({"n": n})).await })
            })
            .collect();
        async move {
            for emit in emits {
                emit.await.unwrap();
            }
        }
    };
    // A healthy spell: the endpoint's limit grows well past where it starts.
    emit_all(0, 120).await;
    wait_for_requests(&receiver, 120).await;
    assert!(receiver.at_arrival().iter().any(|&n| n > 8));
    // An outage of 500s (which say nothing about load, so they leave the limit alone) opens
    // the circuit; what is emitted meanwhile is held.
    receiver.answer(Duration::ZERO, 500);
    emit_all(120, 123).await;
    let health = |s: &crate::support::Sender| {
        let api = s.api.clone();
        let id = endpoint_id.clone();
        async move {
            crate::support::value(
                &api.client
                    .endpoint_health(&id.as_str().into())
                    .await
                    .unwrap(),
            )
        }
    };
    let deadline = tokio::time::Instant::now() + WITHIN;
    while health(&s).await["circuit_state"] != "open" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the circuit never opened"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Held while open; the endpoint recovers before the probe.
    emit_all(123, 163).await;
    let before = receiver.at_arrival().len();
    receiver.answer(Duration::from_millis(50), 200);
    wait_for_requests(&receiver, before + 43).await;
    let drain = &receiver.at_arrival()[before..];
    let first = drain.iter().take(12).copied().max().unwrap();
    assert!(
        first <= 8,
        "the drain starts from the initial limit (4, then 8 as those succeed), \
         not the limit of before the outage: {first} in flight among its first 12 requests"
    );
}
