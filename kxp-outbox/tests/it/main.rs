//! The outbox against a real `kxp serve` (in-process, over loopback): an event exists if and
//! only if its transaction commits; the relay hands each row off once as an event, even when
//! an answer is lost; it waits out the sender's backpressure; refusals are kept; two relays
//! share a PostgreSQL outbox without a second event.

// Helpers outside #[test] functions unwrap too: in a test, a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

/// Each named scenario, once per backend of the outbox ([`kxp_testkit::each_backend!`] with
/// [`support::run`]): `scenario::sqlite` and `scenario::postgres`. A scenario is
/// `async fn(support::Outbox)`.
macro_rules! each_backend {
    ($($scenario:ident),+ $(,)?) => {
        kxp_testkit::each_backend!(crate::support::run => $($scenario),+);
    };
}

mod support;

use std::collections::BTreeSet;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kxp_outbox::sqlx::{self, SqlitePool};
use kxp_outbox::{
    EmitError, NewEvent, Relay, RelayConfig, RelayError, TraceContext, emit, emit_in_trace,
};
use serde_json::json;

use support::{Outbox, Proxy, Receiver, Sender, drain, emit_payments, outbox_ids};

#[tokio::test]
async fn an_event_exists_if_and_only_if_its_transaction_commits() {
    let pool = SqlitePool::connect("sqlite::memory:").await.unwrap();
    kxp_outbox::migrate(&pool).await.unwrap();
    kxp_outbox::migrate(&pool).await.unwrap();

    let mut tx = pool.begin().await.unwrap();
    let rolled_back = emit(&mut tx, NewEvent::new("t", &json!({})).unwrap())
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert!(
        outbox_ids(&pool).await.is_empty(),
        "a rolled-back emit left a row"
    );

    let chosen = "0190f1e2-7c3a-7def-8abc-0123456789ab";
    let mut tx = pool.begin().await.unwrap();
    let fresh = emit(&mut tx, NewEvent::new("t", &json!({})).unwrap())
        .await
        .unwrap();
    let kept = emit(&mut tx, NewEvent::new("t", &json!({})).unwrap().id(chosen))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(kept.as_str(), chosen);
    assert_ne!(fresh, rolled_back);
    assert_eq!(
        outbox_ids(&pool).await,
        BTreeSet::from([fresh.to_string(), chosen.to_owned()])
    );

    let mut tx = pool.begin().await.unwrap();
    let error = emit(&mut tx, NewEvent::new("t", &json!({})).unwrap().id("PAY-1"))
        .await
        .unwrap_err();
    assert!(matches!(error, EmitError::InvalidId), "{error}");
    let error = emit(&mut tx, NewEvent::new("t", &json!({})).unwrap().id(chosen))
        .await
        .unwrap_err();
    assert!(
        matches!(error, EmitError::Database(_)),
        "one id is one event: {error}"
    );
}

each_backend!(the_relay_hands_each_event_to_kxp_serve_once_and_empties_the_outbox);

async fn the_relay_hands_each_event_to_kxp_serve_once_and_empties_the_outbox(outbox: Outbox) {
    let sender = Sender::start(|_| {}).await;
    let receiver = Receiver::start().await;
    sender.endpoint(&receiver.url).await;
    let ids = outbox.emit_payments(25).await;
    outbox.drain(sender.client()).await;
    for id in &ids {
        let event = sender.client().event(&id.as_str().into()).await.unwrap();
        assert_eq!(event.event_type, "payment.succeeded");
    }
    receiver.wait_for(ids.len()).await;
    assert_eq!(
        receiver.event_ids(),
        ids,
        "each event delivered, with its emitted id"
    );
    assert_eq!(outbox.rows().await, 0);
}

#[tokio::test]
async fn a_hand_off_whose_answer_was_lost_is_sent_again_and_makes_no_second_event() {
    let sender = Sender::start(|_| {}).await;
    let receiver = Receiver::start().await;
    sender.endpoint(&receiver.url).await;
    let (_dir, pool) = support::sqlite_outbox().await;
    let ids = emit_payments(&pool, 3).await;

    // The proxy passes each request on and throws the sender's answer away.
    let proxy = Proxy::start(&sender.base).await;
    proxy.lose_answers(true);
    let relay = Relay::new(pool.clone(), sender.client_at(&proxy.url)).with_config(quick());
    let pass = relay.relay_once().await.unwrap();
    assert_eq!((pass.handed_off, pass.refused), (0, 0));
    assert!(pass.wait.is_some(), "a lost answer is tried again later");
    assert_eq!(outbox_ids(&pool).await, ids, "nothing left the outbox");
    assert_eq!(
        proxy.forwarded(),
        1,
        "the pass stopped at the first lost answer"
    );

    proxy.lose_answers(false);
    drain(&relay).await;
    receiver.wait_for(3).await;
    assert_eq!(receiver.event_ids(), ids);
    assert_eq!(
        receiver.deliveries(),
        3,
        "the resent row made no second event"
    );
}

#[tokio::test]
async fn the_relay_waits_out_the_senders_backpressure_and_loses_nothing() {
    // No workers: the due backlog stays at its limit until the second server drains it.
    let full = Sender::start(|c| {
        c.backlog_limit = 2;
        c.run_workers = false;
    })
    .await;
    let receiver = Receiver::start().await;
    full.endpoint(&receiver.url).await;
    let (_dir, pool) = support::sqlite_outbox().await;
    let ids = emit_payments(&pool, 5).await;
    // Room for the sender's Retry-After (2 s): this relay waits it as asked.
    let relay = Relay::new(pool.clone(), full.client()).with_config(RelayConfig {
        max_backoff: Duration::from_secs(10),
        ..quick()
    });

    let before = kxp_outbox_now();
    let pass = relay.relay_once().await.unwrap();
    assert_eq!(pass.handed_off, 2);
    let wait = pass.wait.expect("503 backlog_full stops the pass");
    assert!(
        wait >= Duration::from_secs(1),
        "the sender's Retry-After: {wait:?}"
    );
    assert_eq!(
        relay.waiting().await.unwrap(),
        3,
        "the refused hand-offs stay"
    );
    let due: Vec<i64> = sqlx::query_scalar("SELECT next_attempt_at FROM kxp_outbox")
        .fetch_all(&pool)
        .await
        .unwrap();
    let waited = u128::from(before) + wait.as_millis();
    assert!(
        due.iter().all(|&at| at as u128 >= waited),
        "every row waits the Retry-After: {due:?}"
    );

    let draining = full.restart_with_workers().await;
    drain(&Relay::new(pool.clone(), draining.client()).with_config(quick())).await;
    receiver.wait_for(5).await;
    assert_eq!(receiver.event_ids(), ids);
}

// The subscriber is the process's global one (the only test here that sets one): a scoped one
// misses events whose callsites other tests' threads registered first.
#[tokio::test]
async fn a_huge_retry_after_waits_only_max_backoff_and_the_row_is_handed_off_again() {
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::set_global_default(subscriber).expect("no other test sets one");
    let sender = Sender::start(|_| {}).await;
    let (_dir, pool) = support::sqlite_outbox().await;
    let ids = emit_payments(&pool, 1).await;
    // A proxy in front of the sender answers the first hand-off 503 with the largest
    // `Retry-After` a client reads (u64::MAX seconds), as a proxy in maintenance might.
    let proxy = Proxy::start(&sender.base).await;
    proxy.unavailable(1, &u64::MAX.to_string());
    let max_backoff = Duration::from_millis(300);
    let relay = Relay::new(pool.clone(), sender.client_at(&proxy.url)).with_config(RelayConfig {
        max_backoff,
        ..quick()
    });

    let pass = relay.relay_once().await.unwrap();
    let after = kxp_outbox_now();
    assert_eq!(pass.handed_off, 0);
    assert_eq!(
        pass.wait,
        Some(max_backoff),
        "the wait is cut to max_backoff"
    );
    let due: i64 = sqlx::query_scalar("SELECT next_attempt_at FROM kxp_outbox")
        .fetch_one(&pool)
        .await
        .unwrap();
    let due = u64::try_from(due).unwrap();
    assert!(
        due <= after + 300,
        "the row is due within max_backoff of the answer, not at {due}"
    );
    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(
        text.contains("Retry-After is longer than max_backoff")
            && text.contains(&format!("asked={}s", u64::MAX))
            && text.contains("used=300ms"),
        "a warning names the asked and the used wait: {text}"
    );

    // The relay's own loop hands the row off again once the cut wait is over.
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(async move {
        relay
            .run(async move {
                let _ = stopped.await;
            })
            .await;
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !outbox_ids(&pool).await.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the row was not handed off again"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.send(()).unwrap();
    running.await.unwrap();
    let id = ids.first().unwrap();
    sender.client().event(&id.as_str().into()).await.unwrap();
}

/// Everything logged, kept in memory.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn an_event_the_sender_refuses_stays_in_the_outbox_and_can_be_requeued() {
    let sender = Sender::start(|_| {}).await;
    let (_dir, pool) = support::sqlite_outbox().await;
    let mut tx = pool.begin().await.unwrap();
    let bad = emit(&mut tx, NewEvent::new("not a type!", &json!({})).unwrap())
        .await
        .unwrap();
    let good = emit(
        &mut tx,
        NewEvent::new("payment.succeeded", &json!({})).unwrap(),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let relay = Relay::new(pool.clone(), sender.client());

    let pass = relay.relay_once().await.unwrap();
    assert_eq!(
        (pass.handed_off, pass.refused),
        (1, 1),
        "a refusal does not stop the pass"
    );
    let refused = relay.refused(10).await.unwrap();
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0].event_id, bad);
    assert!(
        refused[0].error.starts_with("422 invalid_request"),
        "{}",
        refused[0].error
    );
    assert_eq!(
        relay.waiting().await.unwrap(),
        0,
        "a refused row is not waiting"
    );
    sender.client().event(&good).await.unwrap();

    assert!(relay.requeue(&refused[0].id).await.unwrap());
    assert!(
        !relay.requeue(&refused[0].id).await.unwrap(),
        "only a refused row"
    );
    assert_eq!(relay.waiting().await.unwrap(), 1);
    let pass = relay.relay_once().await.unwrap();
    assert_eq!(pass.refused, 1, "still refused: its cause was not fixed");
}

#[tokio::test]
async fn a_wrong_api_key_refuses_the_relay_and_no_event() {
    let sender = Sender::start(|_| {}).await;
    let (_dir, pool) = support::sqlite_outbox().await;
    emit_payments(&pool, 2).await;
    let client = kxp_api::Client::new(&sender.base, "kxp_wrong").unwrap();
    let relay = Relay::new(pool.clone(), client).with_config(quick());
    let error = relay.relay_once().await.unwrap_err();
    assert!(matches!(error, RelayError::NotAccepted(_)), "{error}");
    assert_eq!(error.code(), "not_accepted");
    assert!(
        !error.to_string().contains("kxp_wrong"),
        "the key is never shown: {error}"
    );
    assert!(relay.refused(10).await.unwrap().is_empty());
    assert_eq!(relay.waiting().await.unwrap(), 2);
}

#[tokio::test]
async fn two_relays_share_a_postgresql_outbox_without_a_second_event() {
    let Some(db) = kxp_testkit::db::PgDatabase::create("kxp_outbox").await else {
        return;
    };
    let pool = sqlx::PgPool::connect(db.url()).await.unwrap();
    kxp_outbox::migrate(&pool).await.unwrap();
    let sender = Sender::start(|_| {}).await;
    let receiver = Receiver::start().await;
    sender.endpoint(&receiver.url).await;
    let ids = emit_payments(&pool, 200).await;
    let config = RelayConfig {
        batch: 10,
        ..quick()
    };
    let a = Relay::new(pool.clone(), sender.client()).with_config(config.clone());
    let b = Relay::new(pool.clone(), sender.client()).with_config(config);
    tokio::join!(drain(&a), drain(&b));
    receiver.wait_for(ids.len()).await;
    assert_eq!(receiver.event_ids(), ids);
    assert_eq!(receiver.deliveries(), ids.len());
}

/// Unix ms now.
fn kxp_outbox_now() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    u64::try_from(now.as_millis()).unwrap()
}

/// Short waits, so a test that meets one finishes quickly.
fn quick() -> RelayConfig {
    RelayConfig {
        poll_interval: Duration::from_millis(20),
        max_backoff: Duration::from_millis(200),
        ..RelayConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_emitted_in_a_trace_is_handed_off_in_that_trace() {
    const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const PRODUCER_SPAN: &str = "00f067aa0ba902b7";
    let sink = kxp_testkit::otlp::OtlpSink::start().await;
    let endpoint = sink.endpoint();
    let sender = Sender::start(|c| c.otlp_endpoint = Some(endpoint)).await;
    let (_dir, pool) = support::sqlite_outbox().await;
    let trace = TraceContext {
        traceparent: format!("00-{TRACE_ID}-{PRODUCER_SPAN}-01"),
        tracestate: Some("producer=1".to_owned()),
    };
    let mut tx = pool.begin().await.unwrap();
    let event = || NewEvent::new("payment.succeeded", &json!({})).unwrap();
    let traced = emit_in_trace(&mut tx, event(), &trace).await.unwrap();
    let plain = emit(&mut tx, event()).await.unwrap();
    tx.commit().await.unwrap();
    // Inside the stored request: the outbox's table has no column for it.
    let stored: String = sqlx::query_scalar("SELECT request FROM kxp_outbox WHERE event_id = $1")
        .bind(traced.as_str())
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(stored.contains(&trace.traceparent), "{stored}");

    let pass = Relay::new(pool.clone(), sender.client())
        .relay_once()
        .await
        .unwrap();
    assert_eq!(pass.handed_off, 2);
    // The sender's exporter sends its batch within seconds; nothing here times it.
    let spans = sink
        .wait_for(Duration::from_secs(30), |spans| {
            spans.iter().filter(|s| s.name == "kxp.ingest").count() == 2
        })
        .await;
    let ingest_of = |id: &kxp_outbox::EventId| {
        spans
            .iter()
            .find(|s| s.name == "kxp.ingest" && s.attribute("kxp.event.id") == Some(id.as_str()))
            .unwrap_or_else(|| panic!("no ingestion span of {id:?}: {spans:#?}"))
    };
    let joined = ingest_of(&traced);
    assert_eq!(
        (joined.trace_id.as_str(), joined.parent_span_id.as_str()),
        (TRACE_ID, PRODUCER_SPAN)
    );
    assert_eq!(
        ingest_of(&plain).parent_span_id,
        "",
        "no context, a trace of its own"
    );
}
