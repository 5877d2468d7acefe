//! The outbox under SIGKILL (issue 14): a producer process commits payments and emits their
//! events in the same transaction (rolling some back after the emit), with its relay running;
//! it and `kxp serve` are SIGKILLed at random instants, cycle after cycle (a fixed number of
//! cycles, seeded: the seed is printed, `KXP_OUTBOX_CRASH_SEED` replays it). Then a last
//! producer, emitting nothing, drains the outbox, and the checks run: every committed payment
//! has exactly one event, with the id stored beside it; no rolled-back payment has one; the
//! deduplicating receiver processed each event exactly once.
//!
//! The producer is this test binary run again ([`producer_process`], ignored unless the
//! parent starts it), so it can be killed as a process.

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use kxp_axum::dedup::{self, Handled, Store, Tx};
use kxp_axum::{VerifiedEvent, VerifyLayer};
use kxp_outbox::sqlx::{self, SqlitePool};
use kxp_outbox::{NewEvent, Relay, RelayConfig};
use kxp_testkit::citus::CitusDatabase;
use kxp_verify::Verifier;
use serde::Deserialize;
use serde_json::json;

use crate::crash::{KEY, Rng, Serve};

const CYCLES: u64 = 8;

/// The environment the producer process is started with.
const PRODUCER_DB: &str = "KXP_OUTBOX_CRASH_DB";
const PRODUCER_SERVER: &str = "KXP_OUTBOX_CRASH_SERVER";
const PRODUCER_EMIT: &str = "KXP_OUTBOX_CRASH_EMIT";
const PRODUCER_SEED: &str = "KXP_OUTBOX_CRASH_PRODUCER_SEED";

/// The producer: payments and their events in one transaction each, one in five rolled back
/// after the emit, while the relay hands events to the sender; or, with emitting off, only the
/// relay, until the outbox is empty (then it exits 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the producer process of the_outbox_loses_no_event_and_invents_none_under_sigkill"]
async fn producer_process() {
    let (Ok(db), Ok(server)) = (std::env::var(PRODUCER_DB), std::env::var(PRODUCER_SERVER)) else {
        eprintln!("producer_process only runs as the outbox crash test's producer");
        return;
    };
    let emitting = std::env::var(PRODUCER_EMIT).as_deref() == Ok("1");
    let pool = SqlitePool::connect(&db).await.unwrap();
    let client = kxp_api::Client::new(&server, KEY).unwrap();
    let relay = Relay::new(pool.clone(), client).with_config(RelayConfig {
        poll_interval: Duration::from_millis(20),
        // Rows a killed relay held come back after this.
        lease: Duration::from_secs(2),
        request_timeout: Duration::from_secs(2),
        max_backoff: Duration::from_millis(500),
        ..RelayConfig::default()
    });
    if !emitting {
        let deadline = Instant::now() + Duration::from_secs(60);
        while relay.waiting().await.unwrap() > 0 {
            assert!(Instant::now() < deadline, "the outbox did not drain");
            if let Ok(pass) = relay.relay_once().await {
                tokio::time::sleep(pass.wait.unwrap_or(Duration::from_millis(20))).await;
            }
        }
        println!("drained");
        return;
    }
    tokio::spawn(async move { relay.run(std::future::pending()).await });
    let seed: u64 = std::env::var(PRODUCER_SEED).unwrap().parse().unwrap();
    let mut rng = Rng(seed);
    loop {
        let payment = uuid::Uuid::new_v4().to_string();
        let mut tx = pool.begin().await.unwrap();
        let event = NewEvent::new("payment.succeeded", &json!({"payment_id": payment})).unwrap();
        let event_id = kxp_outbox::emit(&mut tx, event).await.unwrap();
        sqlx::query("INSERT INTO payments (id, event_id) VALUES ($1, $2)")
            .bind(&payment)
            .bind(event_id.as_str())
            .execute(&mut *tx)
            .await
            .unwrap();
        if rng.next().is_multiple_of(5) {
            tx.rollback().await.unwrap();
        } else {
            tx.commit().await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Starts the producer process against the sender at `server`.
fn producer(db: &str, server: &str, emitting: bool, seed: u64) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "outbox_crash::producer_process",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env(PRODUCER_DB, db)
        .env(PRODUCER_SERVER, server)
        .env(PRODUCER_EMIT, if emitting { "1" } else { "0" })
        .env(PRODUCER_SEED, seed.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

#[derive(Deserialize)]
struct Payment {
    payment_id: String,
}

/// The receiver's business write, in the dedup transaction: one row per processing.
async fn record(mut tx: Tx, event_id: String, payment_id: String) -> Result<Tx, String> {
    let conn = tx.sqlite().ok_or("the receiver is on SQLite")?;
    sqlx::query("INSERT INTO processed (event_id, payment_id) VALUES ($1, $2)")
        .bind(event_id)
        .bind(payment_id)
        .execute(&mut *conn)
        .await
        .map_err(|e| e.to_string())?;
    Ok(tx)
}

async fn handle(State(store): State<Arc<Store>>, event: VerifiedEvent<Payment>) -> Handled {
    let (id, payment) = (event.id().to_owned(), event.data().payment_id.clone());
    dedup::process_in_transaction(&store, &event, |tx| record(tx, id, payment)).await
}

/// A kxp-axum receiver on kxp-dedup (SQLite at `url`) recording what it processed, served on
/// `listener`.
async fn receiver(listener: tokio::net::TcpListener, url: &str, secret: &str) -> SqlitePool {
    let store = Store::connect(url).await.unwrap();
    let pool = store.sqlite_pool().unwrap().clone();
    sqlx::query("CREATE TABLE processed (event_id TEXT NOT NULL, payment_id TEXT NOT NULL)")
        .execute(&pool)
        .await
        .unwrap();
    let verify = VerifyLayer::new(kxp_axum::Receiver::new(
        Verifier::from_secret_list(secret).unwrap(),
    ));
    let app = Router::new()
        .route("/hook", post(handle).layer(verify))
        .with_state(Arc::new(store));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    pool
}

async fn pairs(pool: &SqlitePool, sql: &str) -> Vec<(String, String)> {
    sqlx::query_as(sql).fetch_all(pool).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outbox_loses_no_event_and_invents_none_under_sigkill() {
    outbox_under_sigkill(None).await;
}

/// The same with `kxp serve` on a Citus cluster (issue 31).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outbox_into_kxp_serve_on_citus_loses_no_event_and_invents_none_under_sigkill() {
    let Some(database) = CitusDatabase::create("kxp_outbox_citus").await else {
        return;
    };
    outbox_under_sigkill(Some(database.url())).await;
    database.drop().await;
}

/// The events `kxp serve` stored at `sender_db`: each id with its `data.payment_id`.
async fn sender_events(sender_db: &str) -> Vec<(String, String)> {
    if sender_db.starts_with("sqlite") {
        let sender = SqlitePool::connect(sender_db).await.unwrap();
        pairs(
            &sender,
            "SELECT id, json_extract(payload, '$.data.payment_id') FROM kxp_events",
        )
        .await
    } else {
        let sender = sqlx::PgPool::connect(sender_db).await.unwrap();
        sqlx::query_as("SELECT id, payload::jsonb -> 'data' ->> 'payment_id' FROM kxp_events")
            .fetch_all(&sender)
            .await
            .unwrap()
    }
}

/// The scenario, with `kxp serve` on `sender_db` (a SQLite file of its own when `None`).
async fn outbox_under_sigkill(sender_db: Option<&str>) {
    let seed = std::env::var("KXP_OUTBOX_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            now.unwrap().as_nanos() as u64
        });
    println!("outbox crash seed: {seed} (KXP_OUTBOX_CRASH_SEED={seed} replays the schedule)");
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().unwrap();
    let sqlite = |name: &str| format!("sqlite://{}?mode=rwc", dir.path().join(name).display());
    let sender_db = sender_db.map_or_else(|| sqlite("kxp.db"), str::to_owned);
    let producer_db = sqlite("producer.db");

    let pool = SqlitePool::connect(&producer_db).await.unwrap();
    sqlx::query("PRAGMA journal_mode = WAL")
        .execute(&pool)
        .await
        .unwrap();
    kxp_outbox::migrate(&pool).await.unwrap();
    sqlx::query("CREATE TABLE payments (id TEXT PRIMARY KEY, event_id TEXT NOT NULL)")
        .execute(&pool)
        .await
        .unwrap();

    let serve = Serve::start(&sender_db);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut endpoint =
        kxp_api::NewEndpoint::new(format!("http://{}/hook", listener.local_addr().unwrap()));
    endpoint.skip_challenge = true;
    let created = kxp_api::Client::new(&serve.base, KEY)
        .unwrap()
        .create_endpoint(&endpoint)
        .await
        .unwrap();
    let secret = created.secret.as_ref().unwrap().expose().to_owned();
    let processed = receiver(listener, &sqlite("receiver.db"), &secret).await;
    drop(serve);

    for cycle in 0..CYCLES {
        let serve = Serve::start(&sender_db);
        let mut child = producer(&producer_db, &serve.base, true, rng.next());
        let (first, second) = (rng.millis(200, 1200), rng.millis(0, 400));
        tokio::time::sleep(first).await;
        // Which dies first, and how long the other runs on alone, is the seed's.
        if rng.next().is_multiple_of(2) {
            child.kill().unwrap();
            child.wait().unwrap();
            tokio::time::sleep(second).await;
            serve.kill();
        } else {
            serve.kill();
            tokio::time::sleep(second).await;
            child.kill().unwrap();
            child.wait().unwrap();
        }
        println!("cycle {cycle}: killed after {first:?} and {second:?}");
    }

    let serve = Serve::start(&sender_db);
    let mut drain = producer(&producer_db, &serve.base, false, 0);
    let status = drain.wait().unwrap();
    assert!(status.success(), "the draining producer failed: {status}");

    let committed: BTreeMap<String, String> = pairs(&pool, "SELECT id, event_id FROM payments")
        .await
        .into_iter()
        .collect();
    assert!(
        committed.len() > 50,
        "too few payments to tell: {}",
        committed.len()
    );
    let events = sender_events(&sender_db).await;
    let mut of_payment: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (event_id, payment) in &events {
        of_payment
            .entry(payment.clone())
            .or_default()
            .push(event_id.clone());
    }
    for (payment, event_id) in &committed {
        assert_eq!(
            of_payment.get(payment),
            Some(&vec![event_id.clone()]),
            "payment {payment}: exactly one event, the one stored beside it (seed {seed})"
        );
    }
    let invented: Vec<_> = of_payment
        .keys()
        .filter(|p| !committed.contains_key(*p))
        .collect();
    assert!(
        invented.is_empty(),
        "events of rolled-back payments: {invented:?} (seed {seed})"
    );

    // Every event reaches the receiver, which processes each once.
    let expected: BTreeSet<String> = committed.values().cloned().collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let seen = pairs(&processed, "SELECT event_id, payment_id FROM processed").await;
        let distinct: BTreeSet<String> = seen.iter().map(|(e, _)| e.clone()).collect();
        if distinct == expected {
            assert_eq!(
                seen.len(),
                expected.len(),
                "an event processed twice (seed {seed})"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {} events processed (seed {seed})",
            distinct.len(),
            expected.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(serve);
    println!(
        "outbox crash: {} payments committed, {} events, each processed once, over {CYCLES} kill cycles",
        committed.len(),
        events.len()
    );
}
