//! Exactly once over HTTP: `kxp_actix::dedup` behind the middleware, on SQLite (a fresh
//! database file) always, and on PostgreSQL (a fresh database) when `KXP_TEST_DATABASE_URL` is
//! set.
//!
//! Each scenario is written once, as `async fn scenario(store: Store)`, and [`both_backends!`]
//! makes it two tests, `scenario::sqlite` and `scenario::postgres`, as kxp-dedup's and
//! kxp-axum's tests do. Without `KXP_TEST_DATABASE_URL` the PostgreSQL half says SKIPPED on
//! stderr and passes.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use actix_web::web;
use futures_util::FutureExt;
use kxp_actix::dedup::{self, Handled, Store, Tx};
use kxp_actix::{VerifiedEvent, VerifyMiddleware};
use kxp_dedup::sqlx;
use kxp_dedup::{Claim, EventStatus};
use kxp_testkit::db::{Backend as Db, TestDatabase};

use crate::harness::{SECRET, Server, client, event_body, receiver, serve_routes, sign};

/// The lease of the claim/complete handlers: far longer than any test.
const LEASE: Duration = Duration::from_secs(60);

/// Instantiates each named scenario for both backends.
macro_rules! both_backends {
    ($($scenario:ident),* $(,)?) => {
        $(
            mod $scenario {
                #[actix_web::test]
                async fn sqlite() {
                    super::run(super::Db::Sqlite, super::$scenario).await;
                }

                #[actix_web::test]
                async fn postgres() {
                    super::run(super::Db::Postgres, super::$scenario).await;
                }
            }
        )*
    };
}

both_backends!(
    fifty_concurrent_deliveries_run_the_handler_once,
    a_failed_handler_answers_500_and_the_next_delivery_processes,
    an_abandoned_claim_answers_409_until_its_lease_ends,
    a_replay_under_another_event_id_header_is_a_duplicate,
    in_transaction_mode_applies_the_side_effect_exactly_once,
    a_store_that_is_down_answers_503_never_200,
);

// --- Fresh databases -------------------------------------------------------------------------

/// Runs `scenario` on a fresh database of `db`, then deletes that database, also when the
/// scenario panics (the panic is re-raised afterwards).
async fn run<F, Fut>(db: Db, scenario: F)
where
    F: FnOnce(Store) -> Fut,
    Fut: Future<Output = ()>,
{
    let Some(database) = TestDatabase::create(db, "kxp_actix").await else {
        return;
    };
    let store = Store::connect(database.url()).await.unwrap();
    let result = AssertUnwindSafe(scenario(store.clone()))
        .catch_unwind()
        .await;
    store.close().await;
    database.drop().await;
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// Runs a statement with no parameters, the same text on both backends.
async fn exec(store: &Store, sql: &str) {
    if let Some(pool) = store.sqlite_pool() {
        sqlx::query(sql).execute(pool).await.unwrap();
    } else {
        let pool = store.postgres_pool().unwrap();
        sqlx::query(sql).execute(pool).await.unwrap();
    }
}

/// The first column of the first row, as an integer (a `COUNT(*)`).
async fn scalar(store: &Store, sql: &str) -> i64 {
    if let Some(pool) = store.sqlite_pool() {
        sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
    } else {
        let pool = store.postgres_pool().unwrap();
        sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
    }
}

// --- Servers and deliveries ------------------------------------------------------------------

/// Serves `handler` on `/webhooks` the way the crate docs show it: the middleware on the
/// resource, the store as `web::Data`.
async fn serve_handler<H, Fut>(store: &Store, handler: H) -> Server
where
    H: Fn(web::Data<Store>, VerifiedEvent) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Handled> + 'static,
{
    let store = store.clone();
    let verify = VerifyMiddleware::new(receiver());
    serve_routes(move |cfg: &mut web::ServiceConfig| {
        cfg.app_data(web::Data::new(store.clone())).service(
            web::resource("/webhooks")
                .wrap(verify.clone())
                .route(web::post().to(handler.clone())),
        );
    })
    .await
}

/// Serves a claim/complete handler; `work` gets the run number (0 for the first run).
async fn serve_claim_mode<W, WFut>(store: &Store, runs: &Arc<AtomicUsize>, work: W) -> Server
where
    W: Fn(usize) -> WFut + Clone + Send + 'static,
    WFut: Future<Output = Result<(), String>> + 'static,
{
    let runs = runs.clone();
    serve_handler(
        store,
        move |store: web::Data<Store>, event: VerifiedEvent| {
            let runs = runs.clone();
            let work = work.clone();
            async move {
                dedup::process(&store, &event, LEASE, || async move {
                    work(runs.fetch_add(1, Ordering::SeqCst)).await
                })
                .await
            }
        },
    )
    .await
}

struct Answer {
    status: u16,
    retry_after: Option<u64>,
    body: String,
}

/// POSTs `body`, correctly signed, with `X-Kxp-Event-Id: <event_id_header>` if given.
async fn deliver(url: &str, body: &str, event_id_header: Option<&str>) -> Answer {
    let mut request = client()
        .post(format!("{url}/webhooks"))
        .header("X-Kxp-Signature", sign(SECRET, body.as_bytes()))
        .header("Content-Type", "application/json")
        .body(body.to_owned());
    if let Some(id) = event_id_header {
        request = request.header("X-Kxp-Event-Id", id);
    }
    let response = request.send().await.unwrap();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().parse().unwrap());
    Answer {
        status: response.status().as_u16(),
        retry_after,
        body: response.text().await.unwrap(),
    }
}

/// The `outcome` field of each request log line, in order.
fn logged_outcomes(server: &Server) -> Vec<String> {
    server
        .logs
        .requests()
        .iter()
        .map(|l| l["outcome"].as_str().unwrap().to_owned())
        .collect()
}

// --- Scenarios -------------------------------------------------------------------------------

async fn fifty_concurrent_deliveries_run_the_handler_once(store: Store) {
    let runs = Arc::new(AtomicUsize::new(0));
    let server = serve_claim_mode(&store, &runs, |_| async {
        // Long enough that most deliveries arrive while the first one holds the claim.
        tokio::time::sleep(Duration::from_millis(300)).await;
        Ok(())
    })
    .await;
    let url = &server.url;
    let body = event_body("evt_fifty");

    let answers = futures_util::future::join_all((0..50).map(|_| deliver(url, &body, None))).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "{:?}", store.backend());
    for answer in &answers {
        match answer.status {
            200 => assert!(answer.retry_after.is_none()),
            409 => {
                assert!(answer.retry_after.is_some_and(|s| s >= 1));
                assert_eq!(answer.body, r#"{"outcome":"in_progress"}"#);
            }
            other => panic!("{other} {}", answer.body),
        }
    }
    let processed = answers
        .iter()
        .filter(|a| a.body == r#"{"outcome":"processed"}"#)
        .count();
    assert_eq!(processed, 1);
    let record = store.record("evt_fifty").await.unwrap().unwrap();
    assert_eq!((record.status, record.attempts), (EventStatus::Done, 1));

    // Once done, a delivery is a plain duplicate, and its log line says so.
    let again = deliver(url, &body, None).await;
    assert_eq!(
        (again.status, again.body.as_str()),
        (200, r#"{"outcome":"duplicate"}"#)
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let outcomes = logged_outcomes(&server);
    assert_eq!(outcomes.len(), 51, "one log line per request");
    assert_eq!(outcomes.iter().filter(|o| *o == "processed").count(), 1);
    assert_eq!(outcomes.last().unwrap(), "duplicate");
    let answered_200 = answers.iter().filter(|a| a.status == 200).count();
    let logged_duplicates = outcomes.iter().filter(|o| *o == "duplicate").count();
    assert_eq!(
        logged_duplicates, answered_200,
        "every 200 but the one that ran is logged as a duplicate, plus the late one"
    );
}

async fn a_failed_handler_answers_500_and_the_next_delivery_processes(store: Store) {
    let runs = Arc::new(AtomicUsize::new(0));
    let server = serve_claim_mode(&store, &runs, |run| async move {
        if run == 0 {
            Err("the card processor timed out".to_owned())
        } else {
            Ok(())
        }
    })
    .await;
    let url = &server.url;
    let body = event_body("evt_fails_once");

    let first = deliver(url, &body, None).await;
    assert_eq!(
        (first.status, first.body.as_str(), first.retry_after),
        (500, r#"{"outcome":"failed"}"#, None)
    );
    let second = deliver(url, &body, None).await;
    assert_eq!(
        (second.status, second.body.as_str()),
        (200, r#"{"outcome":"processed"}"#)
    );
    let third = deliver(url, &body, None).await;
    assert_eq!(
        (third.status, third.body.as_str()),
        (200, r#"{"outcome":"duplicate"}"#)
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);

    let record = store.record("evt_fails_once").await.unwrap().unwrap();
    assert_eq!((record.status, record.attempts), (EventStatus::Done, 2));
    assert_eq!(
        record.last_error.as_deref(),
        Some("the card processor timed out")
    );
    assert_eq!(
        logged_outcomes(&server),
        ["failed", "processed", "duplicate"]
    );
    let statuses: Vec<u64> = server
        .logs
        .requests()
        .iter()
        .map(|l| l["status"].as_u64().unwrap())
        .collect();
    assert_eq!(statuses, [500, 200, 200]);
}

async fn an_abandoned_claim_answers_409_until_its_lease_ends(store: Store) {
    let runs = Arc::new(AtomicUsize::new(0));
    let server = serve_claim_mode(&store, &runs, |_| async { Ok(()) }).await;
    let url = &server.url;
    let lease = Duration::from_millis(300);

    // The lease is short, so the delivery must follow the claim quickly. On a machine so loaded
    // that it arrives after the lease, that try proves nothing: take another id.
    let mut tries = 0;
    let (id, claimed_at) = loop {
        tries += 1;
        let id = format!("evt_abandoned_{tries}");
        let claimed_at = Instant::now();
        // What a process killed mid-handler leaves behind: a claim nobody will complete.
        assert_eq!(store.claim(&id, lease).await.unwrap(), Claim::Claimed);
        let answer = deliver(url, &event_body(&id), None).await;
        if answer.status == 409 {
            assert!(answer.retry_after.is_some_and(|s| s >= 1));
            assert_eq!(answer.body, r#"{"outcome":"in_progress"}"#);
            break (id, claimed_at);
        }
        assert!(
            claimed_at.elapsed() >= lease && tries < 5,
            "status {} within the lease",
            answer.status
        );
    };
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    // After the lease the event is anyone's again, and this delivery processes it.
    let after_lease = lease + Duration::from_millis(150);
    tokio::time::sleep(after_lease.saturating_sub(claimed_at.elapsed())).await;
    let answer = deliver(url, &event_body(&id), None).await;
    assert_eq!(
        (answer.status, answer.body.as_str()),
        (200, r#"{"outcome":"processed"}"#)
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let outcomes = logged_outcomes(&server);
    assert_eq!(outcomes[outcomes.len() - 2..], ["in_progress", "processed"]);
}

async fn a_replay_under_another_event_id_header_is_a_duplicate(store: Store) {
    let runs = Arc::new(AtomicUsize::new(0));
    let server = serve_claim_mode(&store, &runs, |_| async { Ok(()) }).await;
    let url = &server.url;
    let body = event_body("evt_replayed");

    let first = deliver(url, &body, Some("evt_replayed")).await;
    assert_eq!(
        (first.status, first.body.as_str()),
        (200, r#"{"outcome":"processed"}"#)
    );
    // The unsigned header is whatever the replayer wants; the verified body decides.
    let replay = deliver(url, &body, Some("evt_fresh_looking")).await;
    assert_eq!(
        (replay.status, replay.body.as_str()),
        (200, r#"{"outcome":"duplicate"}"#)
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // And a new event is new, whatever its header claims.
    let other = deliver(url, &event_body("evt_other"), Some("evt_replayed")).await;
    assert_eq!(
        (other.status, other.body.as_str()),
        (200, r#"{"outcome":"processed"}"#)
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);

    let lines = server.logs.requests();
    let logged: Vec<(&str, &str)> = lines
        .iter()
        .map(|l| {
            (
                l["event_id"].as_str().unwrap(),
                l["outcome"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        logged,
        [
            ("evt_replayed", "processed"),
            ("evt_replayed", "duplicate"),
            ("evt_other", "processed")
        ]
    );
    assert!(!server.logs.text().contains("evt_fresh_looking"));
}

/// The side effect: one row per run, written on the dedup transaction's own connection.
async fn record_payment(mut tx: Tx, event_id: &str) -> Result<Tx, String> {
    if let Some(conn) = tx.sqlite() {
        sqlx::query("INSERT INTO actix_payments (event_id) VALUES (?1)")
            .bind(event_id)
            .execute(conn)
            .await
            .map_err(|e| e.to_string())?;
    } else if let Some(conn) = tx.postgres() {
        sqlx::query("INSERT INTO actix_payments (event_id) VALUES ($1)")
            .bind(event_id)
            .execute(conn)
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(tx)
}

async fn in_transaction_mode_applies_the_side_effect_exactly_once(store: Store) {
    // No unique key on purpose: only the dedup transaction keeps the effect single.
    exec(
        &store,
        "CREATE TABLE actix_payments (event_id TEXT NOT NULL)",
    )
    .await;
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    let server = serve_handler(
        &store,
        move |store: web::Data<Store>, event: VerifiedEvent| {
            let runs = counter.clone();
            async move {
                let id = event.id().to_owned();
                dedup::process_in_transaction(&store, &event, |tx| async move {
                    let tx = record_payment(tx, &id).await?;
                    if runs.fetch_add(1, Ordering::SeqCst) == 0 {
                        // After the write: the rollback must take the row with it.
                        return Err("the ledger refused the first try".to_owned());
                    }
                    // Hold the transaction open so concurrent duplicates must wait for it.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    Ok(tx)
                })
                .await
            }
        },
    )
    .await;
    let url = &server.url;
    let body = event_body("evt_in_tx");
    let payments = "SELECT COUNT(*) FROM actix_payments";

    let first = deliver(url, &body, None).await;
    assert_eq!(
        (first.status, first.body.as_str()),
        (500, r#"{"outcome":"failed"}"#)
    );
    assert_eq!(
        scalar(&store, payments).await,
        0,
        "the failed run rolled back"
    );

    let answers = futures_util::future::join_all((0..10).map(|_| deliver(url, &body, None))).await;
    for answer in &answers {
        // In this mode duplicates wait for the first transaction, so none is "in progress".
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
    let processed = answers
        .iter()
        .filter(|a| a.body == r#"{"outcome":"processed"}"#)
        .count();
    assert_eq!(processed, 1);
    assert_eq!(scalar(&store, payments).await, 1, "exactly one effect");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(
        store.record("evt_in_tx").await.unwrap().unwrap().status,
        EventStatus::Done
    );

    let outcomes = logged_outcomes(&server);
    assert_eq!(outcomes.len(), 11);
    assert_eq!(outcomes[0], "failed");
    assert_eq!(outcomes.iter().filter(|o| *o == "duplicate").count(), 9);
}

async fn a_store_that_is_down_answers_503_never_200(store: Store) {
    let runs = Arc::new(AtomicUsize::new(0));
    let claim_mode = serve_claim_mode(&store, &runs, |_| async { Ok(()) }).await;
    let counter = runs.clone();
    let tx_mode = serve_handler(
        &store,
        move |store: web::Data<Store>, event: VerifiedEvent| {
            let runs = counter.clone();
            async move {
                dedup::process_in_transaction(&store, &event, |tx| async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, String>(tx)
                })
                .await
            }
        },
    )
    .await;
    // A closed pool is what an unreachable database looks like from a running app (a store
    // cannot even be built for a server that is down: see the test below): every operation
    // fails as `unavailable`.
    store.close().await;

    for server in [&claim_mode, &tx_mode] {
        for id in ["evt_down_1", "evt_down_1", "evt_down_2"] {
            let answer = deliver(&server.url, &event_body(id), None).await;
            assert_eq!(
                (answer.status, answer.body.as_str()),
                (503, r#"{"outcome":"failed"}"#)
            );
            assert!(answer.retry_after.is_some_and(|s| s >= 1));
        }
        let lines = server.logs.requests();
        assert_eq!(lines.len(), 3);
        assert!(
            lines.iter().all(|l| l["status"] == 503
                && l["outcome"] == "failed"
                && l["verification"] == "ok"),
            "{}",
            server.logs.text()
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

/// Nothing listens on port 1 of the loopback interface: there is no store to build an app with,
/// which is why the test above closes a working one instead.
#[actix_web::test]
async fn a_store_cannot_be_built_for_a_database_that_is_down() {
    let started = Instant::now();
    let error = Store::connect("postgres://postgres@127.0.0.1:1/x")
        .await
        .unwrap_err();
    assert_eq!(error.kind(), "unavailable", "{error}");
    assert!(started.elapsed() < Duration::from_secs(3));
}
