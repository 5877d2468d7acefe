//! The receiver closes its gaps by itself, end to end: a real `kxp serve` (in process) over
//! loopback, a kxp-axum receiver with kxp-dedup and catch-up on; deliveries that go dead while
//! the receiver is down, and events it acknowledged but lost to a restored backup, all end
//! processed exactly once with no replay from the sender.

// Helpers outside #[test] functions unwrap too: in a test, a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod actix;
mod feed_integrity;
mod ordered;
mod pull;
mod scopes;
mod stops;
mod thin;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use kxp_axum::catch_up::{CatchUp, CatchUpConfig, CatchUpExt, Credential};
use kxp_axum::dedup::{self, Handled, Store};
use kxp_axum::{Receiver, VerifiedEvent, VerifyLayer};
use kxp_dedup::sqlx;
use kxp_sender::{Config, Schedule, Server};
use serde_json::json;

const SECS_20: Duration = Duration::from_secs(20);

/// A sender with a schedule of three tries in 100 ms, so a receiver down for a second leaves
/// dead deliveries behind.
async fn sender(dir: &Path) -> (Server, kxp_api::Client) {
    let url = format!("sqlite://{}", dir.join("sender.db").display());
    sender_at(&url, SocketAddr::from(([127, 0, 0, 1], 0))).await
}

/// [`sender`] on `database_url` at `listen` (a restarted sender keeps its address).
pub(crate) async fn sender_at(database_url: &str, listen: SocketAddr) -> (Server, kxp_api::Client) {
    let config = Config {
        database_url: database_url.to_owned(),
        listen,
        dev: true,
        schedule: "0s,50ms,50ms"
            .parse::<Schedule>()
            .unwrap()
            .with_jitter(0.0)
            .unwrap(),
        poll_interval: Duration::from_millis(20),
        api_key: Some("kxp_test_key".to_owned()),
        protection: kxp_sender::Protection {
            breaker_failures: u32::MAX,
            ..kxp_sender::Protection::default()
        },
        // A fresh PostgreSQL database is migrated by the sender that opens it.
        migrations: kxp_sender::Migrations::Apply {
            lock_timeout: Duration::ZERO,
        },
        ..Config::default()
    };
    let server = kxp_sender::start(config).await.unwrap();
    let client =
        kxp_api::Client::new(&format!("http://{}", server.addr()), "kxp_test_key").unwrap();
    (server, client)
}

/// The merchant's app: each event recorded in `handled` in the same transaction as its dedup
/// mark (so a restored backup loses both together), behind a switch that answers 503 while
/// "down" — to the sender's deliveries and to the catch-up's alike.
struct App {
    url: String,
    store: Store,
    catch_up: CatchUp,
    down: Arc<AtomicBool>,
    server: tokio::task::JoinHandle<()>,
}

async fn webhook(State(store): State<Store>, event: VerifiedEvent) -> Handled {
    let id = event.id().to_owned();
    dedup::process_in_transaction(&store, &event, |mut tx| async move {
        sqlx::query("INSERT INTO handled (event_id) VALUES (?1)")
            .bind(&id)
            .execute(tx.sqlite().unwrap())
            .await?;
        Ok::<_, sqlx::Error>(tx)
    })
    .await
}

/// Answers 503 while `down` is set: a receiver that is down.
async fn switch(State(down): State<Arc<AtomicBool>>, request: Request, next: Next) -> Response {
    if down.load(Ordering::SeqCst) {
        return (axum::http::StatusCode::SERVICE_UNAVAILABLE, "down").into_response();
    }
    next.run(request).await
}

/// Serves `app` on a loopback port: the URL of its `/hook`, and the server's task.
async fn serve(app: Router) -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, server)
}

async fn start_app(db: &Path, secret: &str, catch_up: CatchUpConfig) -> App {
    let store = Store::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    sqlx::query("CREATE TABLE IF NOT EXISTS handled (event_id TEXT NOT NULL)")
        .execute(store.sqlite_pool().unwrap())
        .await
        .unwrap();
    let config = catch_up.with_page_size(3);
    let catch_up = CatchUp::new(config, store.clone()).unwrap();
    let down = Arc::new(AtomicBool::new(false));
    let route: axum::routing::MethodRouter<Store> = post(webhook)
        .layer(VerifyLayer::new(Receiver::new(
            kxp_verify::Verifier::from_secret_list(secret).unwrap(),
        )))
        .layer(from_fn_with_state(down.clone(), switch))
        .layer(catch_up.layer());
    let (url, server) = serve(
        Router::new()
            .route("/hook", route)
            .with_state(store.clone()),
    )
    .await;
    App {
        url,
        store,
        catch_up,
        down,
        server,
    }
}

impl App {
    async fn stop(self) {
        self.catch_up.stop();
        self.server.abort();
        let _ = self.server.await;
        self.store.close().await;
    }

    /// (rows in `handled`, distinct event ids among them).
    async fn handled(&self) -> (i64, i64) {
        sqlx::query_as("SELECT COUNT(*), COUNT(DISTINCT event_id) FROM handled")
            .fetch_one(self.store.sqlite_pool().unwrap())
            .await
            .unwrap()
    }

    async fn wait_handled(&self, count: i64) {
        let start = Instant::now();
        loop {
            let (rows, distinct) = self.handled().await;
            assert_eq!(rows, distinct, "an event was processed twice");
            if rows == count {
                return;
            }
            assert!(
                start.elapsed() < SECS_20,
                "{rows} of {count} events processed"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

async fn emit(client: &kxp_api::Client, n: u32) -> String {
    let event = kxp_api::NewEvent::new("payment.succeeded", &json!({"n": n})).unwrap();
    client
        .create_event(&event, None)
        .await
        .unwrap()
        .id
        .into_string()
}

async fn wait_status(client: &kxp_api::Client, event: &str, status: &str) {
    let start = Instant::now();
    loop {
        let deliveries = client.event_deliveries(&event.into()).await.unwrap().data;
        if deliveries
            .last()
            .is_some_and(|d| d.status.as_str() == status)
        {
            return;
        }
        assert!(start.elapsed() < SECS_20, "{event}: {deliveries:?}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn register(client: &kxp_api::Client, url: &str) -> (String, String) {
    let new: kxp_api::NewEndpoint =
        serde_json::from_value(json!({"url": url, "skip_challenge": true})).unwrap();
    let created = client.create_endpoint(&new).await.unwrap();
    (
        created.endpoint.id.into_string(),
        created.secret.unwrap().expose().to_owned(),
    )
}

async fn point(client: &kxp_api::Client, endpoint: &str, url: &str) {
    let patch: kxp_api::EndpointPatch =
        serde_json::from_value(json!({"url": url, "skip_challenge": true})).unwrap();
    client
        .update_endpoint(&endpoint.into(), &patch)
        .await
        .unwrap();
}

fn copy_db(from: &Path, to: &PathBuf) {
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", to.display()));
    }
    std::fs::copy(from, to).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_deliveries_and_a_restored_backup_end_processed_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let (sender_server, client) = sender(dir.path()).await;
    let base = format!("http://{}", sender_server.addr());
    let (endpoint, secret) = register(&client, "http://127.0.0.1:9/hook").await;
    let db = dir.path().join("receiver.db");
    let config = || {
        CatchUpConfig::new(
            &base,
            Credential::Secret(kxp_verify::Secret::new(&secret).unwrap()),
        )
        .with_delay(Duration::from_millis(200))
        .with_interval(Duration::from_millis(500))
        .endpoint(&endpoint)
    };
    let app = start_app(&db, &secret, config()).await;
    point(&client, &endpoint, &app.url).await;

    // 1–5 processed, then a backup of the receiver's database (dedup rows, business rows and
    // checkpoint together), then 6–10 processed and acknowledged.
    let mut events = Vec::new();
    for n in 1..=5 {
        events.push(emit(&client, n).await);
    }
    app.wait_handled(5).await;
    let backup = dir.path().join("backup.db");
    sqlx::query(&format!("VACUUM INTO '{}'", backup.display()))
        .execute(app.store.sqlite_pool().unwrap())
        .await
        .unwrap();
    for n in 6..=10 {
        events.push(emit(&client, n).await);
    }
    app.wait_handled(10).await;

    // The receiver down longer than the schedule: 11–15 go dead.
    app.down.store(true, Ordering::SeqCst);
    for n in 11..=15 {
        let event = emit(&client, n).await;
        wait_status(&client, &event, "dead").await;
        events.push(event);
    }
    app.stop().await;

    // Restored from the backup: 6–10 are lost (acknowledged, no longer recorded), 11–15 were
    // never processed. The catch-up finds all ten in the feed by itself.
    copy_db(&backup, &db);
    let app = start_app(&db, &secret, config()).await;
    assert_eq!(app.handled().await, (5, 5), "the backup holds 1–5");
    point(&client, &endpoint, &app.url).await;
    app.wait_handled(15).await;
    events.push(emit(&client, 16).await);
    app.wait_handled(16).await;
    let handled: Vec<String> = sqlx::query_scalar("SELECT event_id FROM handled")
        .fetch_all(app.store.sqlite_pool().unwrap())
        .await
        .unwrap();
    let mut expected = events.clone();
    expected.sort();
    let mut handled = handled;
    handled.sort();
    assert_eq!(handled, expected, "every event exactly once");
    // The checkpoint follows at the next sweep, over all sixteen.
    let start = Instant::now();
    while app.store.checkpoint(&endpoint).await.unwrap().sequence < 16 {
        assert!(start.elapsed() < SECS_20, "the checkpoint stays behind");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(app.store.checkpoint(&endpoint).await.unwrap().sequence, 16);

    // Nothing was replayed by the sender: the dead deliveries are still dead, unreplayed.
    for event in &events[10..15] {
        let deliveries = client
            .event_deliveries(&event.as_str().into())
            .await
            .unwrap()
            .data;
        assert_eq!(deliveries.len(), 1, "{deliveries:?}");
        assert_eq!(deliveries[0].status.as_str(), "dead");
        assert!(deliveries[0].replayed_by.is_none());
    }
    app.stop().await;
    sender_server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gap_in_the_sequence_hints_is_closed_before_the_timer_comes() {
    let dir = tempfile::tempdir().unwrap();
    let (sender_server, client) = sender(dir.path()).await;
    let base = format!("http://{}", sender_server.addr());
    let (endpoint, secret) = register(&client, "http://127.0.0.1:9/hook").await;
    // The timer sweeps once at the start, then not within the test: only a hint can start the
    // catch-up that finds the dead event.
    let config = CatchUpConfig::new(
        &base,
        Credential::Secret(kxp_verify::Secret::new(&secret).unwrap()),
    )
    .with_delay(Duration::from_millis(200))
    .with_interval(Duration::from_secs(3600));
    let app = start_app(&dir.path().join("receiver.db"), &secret, config).await;
    point(&client, &endpoint, &app.url).await;
    emit(&client, 1).await;
    app.wait_handled(1).await;
    app.down.store(true, Ordering::SeqCst);
    let dead = emit(&client, 2).await;
    wait_status(&client, &dead, "dead").await;
    app.down.store(false, Ordering::SeqCst);
    // Number 3 arrives with number 2 missing: after the delay, the feed brings 2.
    emit(&client, 3).await;
    app.wait_handled(3).await;
    let handled: Vec<String> = sqlx::query_scalar("SELECT event_id FROM handled")
        .fetch_all(app.store.sqlite_pool().unwrap())
        .await
        .unwrap();
    assert!(handled.contains(&dead));
    app.stop().await;
    sender_server.shutdown().await;
}
