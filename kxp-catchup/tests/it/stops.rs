//! Ordered mode fails loudly (issue 26): past its bounds it answers 503 instead of holding
//! and answering 200, so the sender's retries, notices and dead-letter queue take over; and a
//! sender reset (its database restored from an older backup) is found by content, logged and
//! counted, and stops ordered mode until the documented reset.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use kxp_axum::catch_up::{CatchUp, CatchUpConfig, Credential};
use kxp_catchup::{OrderedBounds, Stop};
use kxp_dedup::sqlx::{self, Connection};
use kxp_testkit::db::{Backend, PgDatabase, SqliteFile};

use crate::ordered::{App, deliver, emit, start};
use crate::{SECS_20, point, register, sender_at, wait_status};

/// Waits until `ready` says yes, or fails with `what`.
async fn until(what: &str, mut ready: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !ready().await {
        assert!(start.elapsed() < SECS_20, "{what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The endpoint's state in the catch-up's status.
fn state(catch_up: &CatchUp, endpoint: &str) -> Option<kxp_catchup::EndpointStatus> {
    catch_up
        .status()
        .endpoints
        .into_iter()
        .find(|e| e.endpoint_id == endpoint)
}

/// With refusals answered `Retry-After: 0`, so the sender's schedule of 100 ms dead-letters
/// what is refused.
fn config(base: &str, secret: &str) -> CatchUpConfig {
    CatchUpConfig::new(
        base,
        Credential::Secret(kxp_verify::Secret::new(secret).unwrap()),
    )
    .with_bounds(OrderedBounds::default().with_retry_after(Duration::ZERO))
    .with_delay(Duration::from_millis(200))
    .with_interval(Duration::from_millis(500))
    .with_page_size(3)
}

/// Event `n`, of the ordering key `key`.
async fn emit_keyed(client: &kxp_api::Client, n: u32, key: &str) -> String {
    let event = kxp_api::NewEvent::new("payment.updated", &serde_json::json!({"n": n}))
        .unwrap()
        .ordering_key(key);
    client
        .create_event(&event, None)
        .await
        .unwrap()
        .id
        .into_string()
}

/// A handler that refuses key A's first event forever: its later events pile up held until
/// the bound, then deliveries are answered 503 and the sender dead-letters them; once the
/// event is taken, ordered mode holds and answers 200 again, and the catch-up reads what was
/// refused from the feed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_event_stops_holding_past_the_bound_and_the_sender_dead_letters() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("sender.db").display());
    let (server, client) = sender_at(&url, SocketAddr::from(([127, 0, 0, 1], 0))).await;
    let base = format!("http://{}", server.addr());
    let (endpoint, secret) = register(&client, "http://127.0.0.1:9/hook").await;
    let bounds = OrderedBounds::default()
        .with_max_held(2)
        .with_retry_after(Duration::ZERO);
    let app = start(
        &dir.path().join("receiver.db"),
        &secret,
        config(&base, &secret).with_bounds(bounds),
        true,
    )
    .await;
    point(&client, &endpoint, &app.url).await;

    // Every event of one key: event 1 is refused, and the others wait behind it. Past two
    // held, refusals.
    let mut events = Vec::new();
    let mut n = 0;
    while state(&app.catch_up, &endpoint).is_none_or(|s| s.refused_total == 0) {
        n += 1;
        assert!(n < 200, "never refused: {:?}", app.catch_up.status());
        events.push(emit_keyed(&client, n, "pay_A").await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let status = state(&app.catch_up, &endpoint).unwrap();
    assert_eq!(status.stopped, Some(Stop::TooManyHeld), "{status:?}");
    let refused = events.last().unwrap().clone();
    // The sender saw 503s for it, and gave it up after its schedule.
    wait_status(&client, &refused, "dead").await;
    let deliveries = client
        .event_deliveries(&refused.as_str().into())
        .await
        .unwrap()
        .data;
    let attempts = client
        .delivery_attempts(&deliveries[0].id)
        .await
        .unwrap()
        .data;
    assert!(
        attempts.iter().all(|a| a.status_code == Some(503)),
        "{attempts:?}"
    );
    let text = app.catch_up.status().prometheus();
    assert!(
        text.contains(&format!(
            "kxp_catchup_stopped{{endpoint=\"{endpoint}\",reason=\"too_many_held\"}} 1"
        )),
        "{text}"
    );

    // Fixed: every event is handled once, the refused ones from the feed, and a new delivery
    // is held and answered 200 again.
    app.shop.a_stuck.store(false, Ordering::SeqCst);
    app.wait_handled(1..=n).await;
    until("ordered mode stays stopped", async || {
        state(&app.catch_up, &endpoint).is_some_and(|s| s.stopped.is_none())
    })
    .await;
    let next = emit_keyed(&client, n + 1, "pay_A").await;
    wait_status(&client, &next, "delivered").await;
    app.wait_handled(1..=n + 1).await;
    app.stop().await;
    server.shutdown().await;
}

/// A feed that cannot be read from the start (here: nobody listens at the sender URL the
/// receiver was given): deliveries are held and answered 200 only until the feed has failed
/// for longer than its bound, then 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feed_that_never_answers_stops_holding_after_its_bound() {
    let dir = tempfile::tempdir().unwrap();
    let secret = "whsec_feed_down";
    let bounds = OrderedBounds::default()
        .with_max_feed_failure(Duration::from_millis(300))
        .with_retry_after(Duration::ZERO);
    let config = config("http://127.0.0.1:9", secret).with_bounds(bounds);
    let app = start(&dir.path().join("receiver.db"), secret, config, false).await;
    let endpoint = [(kxp_verify::ENDPOINT_ID_HEADER, "ep_feed_down")];

    let mut answers = Vec::new();
    for n in 1..=400 {
        let answer = deliver(&app.url, secret, &format!("evt_{n}"), n, &endpoint).await;
        let stopped = answer.0 == 503;
        answers.push(answer);
        if stopped {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (last_status, last_body) = answers.last().unwrap();
    assert_eq!(
        (*last_status, last_body.as_str()),
        (503, r#"{"outcome":"stopped","reason":"feed_failing"}"#),
        "{answers:?}"
    );
    assert_eq!(answers[0].0, 200, "held while the feed had failed for less");
    let status = app.catch_up.status();
    assert!(!status.is_healthy());
    let ep = state(&app.catch_up, "ep_feed_down").unwrap();
    assert_eq!(
        (ep.feed_error, ep.stopped),
        (Some("transport"), Some(Stop::FeedFailing))
    );
    assert!(status.json().contains(r#""status":"failing""#));
    app.stop().await;
}

/// Log lines of the whole test binary at warn and above, from the first test that asks.
fn logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Arc::new(Mutex::new(Vec::new()));
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .with_writer(move || Capture(writer.clone()))
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("no other test sets one");
        logs
    })
    .clone()
}

struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The sender's database, kept aside and put back while the sender is stopped.
enum SenderDb {
    Sqlite(SqliteFile),
    Postgres(PgDatabase),
}

impl SenderDb {
    async fn create(backend: Backend) -> Option<SenderDb> {
        Some(match backend {
            Backend::Sqlite => SenderDb::Sqlite(SqliteFile::new("sender.db")),
            Backend::Postgres => SenderDb::Postgres(PgDatabase::create("kxp_catchup_reset").await?),
        })
    }

    fn url(&self) -> &str {
        match self {
            SenderDb::Sqlite(file) => file.url(),
            SenderDb::Postgres(db) => db.url(),
        }
    }

    /// A copy of the database as it is (the sender stopped).
    async fn back_up(&self) {
        match self {
            SenderDb::Sqlite(file) => {
                let from = file.dir().join("sender.db");
                std::fs::copy(&from, file.dir().join("backup.db")).unwrap();
            }
            SenderDb::Postgres(db) => {
                admin(
                    db,
                    &format!("CREATE DATABASE {0}_b TEMPLATE {0}", db.name()),
                )
                .await;
            }
        }
    }

    /// The copy of [`back_up`](SenderDb::back_up) in place of the database (the sender
    /// stopped).
    async fn restore(&self) {
        match self {
            SenderDb::Sqlite(file) => {
                let to = file.dir().join("sender.db");
                for suffix in ["-wal", "-shm"] {
                    let _ = std::fs::remove_file(format!("{}{suffix}", to.display()));
                }
                std::fs::copy(file.dir().join("backup.db"), to).unwrap();
            }
            SenderDb::Postgres(db) => {
                admin(db, &format!("DROP DATABASE {} WITH (FORCE)", db.name())).await;
                admin(
                    db,
                    &format!("ALTER DATABASE {0}_b RENAME TO {0}", db.name()),
                )
                .await;
            }
        }
    }

    async fn drop(self) {
        if let SenderDb::Postgres(db) = self {
            db.drop().await;
        }
    }
}

async fn admin(db: &PgDatabase, sql: &str) {
    let mut conn = sqlx::PgConnection::connect(db.admin_url()).await.unwrap();
    sqlx::query(sql).execute(&mut conn).await.unwrap();
    let _ = conn.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_sender_restored_from_a_backup_is_found_reset() {
    sender_restored_from_a_backup(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_sender_restored_from_a_backup_is_found_reset() {
    sender_restored_from_a_backup(Backend::Postgres).await;
}

/// The sender's database restored from a backup taken after event 3 while an ordered
/// receiver had processed up to event 6: the sender numbers new events 4, 5, 6… again. The
/// catch-up finds the reset by content (another event at its checkpoint's number, or none),
/// logs it as an error and counts it once; ordered mode answers 503 until the documented
/// reset, after which every event, old and new, is processed exactly once.
async fn sender_restored_from_a_backup(backend: Backend) {
    let logs = logs();
    let Some(db) = SenderDb::create(backend).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (server, client) = sender_at(db.url(), SocketAddr::from(([127, 0, 0, 1], 0))).await;
    let listen = server.addr();
    let base = format!("http://{listen}");
    let (endpoint, secret) = register(&client, "http://127.0.0.1:9/hook").await;
    let app: App = start(
        &dir.path().join("receiver.db"),
        &secret,
        config(&base, &secret).endpoint(&endpoint),
        false,
    )
    .await;
    point(&client, &endpoint, &app.url).await;
    for n in 1..=3 {
        emit(&client, n).await;
    }
    app.wait_handled(1..=3).await;
    server.shutdown().await;
    db.back_up().await;
    let (server, client) = sender_at(db.url(), listen).await;
    for n in 4..=6 {
        emit(&client, n).await;
    }
    app.wait_handled(1..=6).await;
    until("the checkpoint reaches 6", async || {
        app.shop.store.checkpoint(&endpoint).await.unwrap().sequence == 6
    })
    .await;

    // Restored: the sender's feed ends at 3 again, and it numbers 7, 8, 9 as 4, 5, 6.
    server.shutdown().await;
    db.restore().await;
    let (server, client) = sender_at(db.url(), listen).await;
    // The first delivery after it is held (nothing is known yet) and prompts the catch-up,
    // which finds the reset; the next ones are refused while it waits to be dealt with.
    emit(&client, 7).await;
    until("the reset is found", async || {
        state(&app.catch_up, &endpoint).is_some_and(|s| s.reset.is_some())
    })
    .await;
    for n in 8..=9 {
        let event = emit(&client, n).await;
        wait_status(&client, &event, "dead").await;
    }
    let ep = state(&app.catch_up, &endpoint).unwrap();
    assert_eq!(
        (ep.stopped, ep.resets_total),
        (Some(Stop::Reset), 1),
        "{ep:?}"
    );
    assert_eq!(ep.reset.as_ref().unwrap().checkpoint, 6);
    assert!(ep.refused_total >= 2, "{ep:?}");
    let logged = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    let line = logged
        .lines()
        .find(|l| l.contains("the sender was reset") && l.contains(&endpoint))
        .unwrap_or_else(|| panic!("no reset logged for {endpoint}:\n{logged}"));
    assert!(line.contains("ERROR"), "{line}");
    assert_eq!(app.handled().await.len(), 6, "nothing processed meanwhile");

    // The documented reset: from 0, dedup skips 1–6, and 7–9 are read from the feed.
    app.catch_up.reset_checkpoint(&endpoint, 0).await.unwrap();
    app.wait_handled(1..=9).await;
    until("the checkpoint follows the restored sender", async || {
        app.shop.store.checkpoint(&endpoint).await.unwrap().sequence == 6
    })
    .await;
    let ep = state(&app.catch_up, &endpoint).unwrap();
    assert_eq!((ep.reset, ep.stopped, ep.resets_total), (None, None, 1));
    app.stop().await;
    server.shutdown().await;
    db.drop().await;
}

/// Plain catch-up (no ordered mode) resets its checkpoint to 0 by itself and relies on dedup
/// for what it sees again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_catch_up_starts_again_from_zero_after_a_reset() {
    let Some(db) = SenderDb::create(Backend::Sqlite).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (server, client) = sender_at(db.url(), SocketAddr::from(([127, 0, 0, 1], 0))).await;
    let listen = server.addr();
    let base = format!("http://{listen}");
    let (endpoint, secret) = register(&client, "http://127.0.0.1:9/hook").await;
    // No timer: only the catch-up this test calls reads the feed after the restore.
    let app = crate::start_app(
        &dir.path().join("receiver.db"),
        &secret,
        config(&base, &secret)
            .with_interval(Duration::from_secs(3600))
            .endpoint(&endpoint),
    )
    .await;
    point(&client, &endpoint, &app.url).await;
    let first = crate::emit(&client, 1).await;
    app.wait_handled(1).await;
    server.shutdown().await;
    db.back_up().await;
    let (server, client) = sender_at(db.url(), listen).await;
    crate::emit(&client, 2).await;
    crate::emit(&client, 3).await;
    app.wait_handled(3).await;
    let report = app.catch_up.catch_up(&endpoint).await.unwrap();
    assert_eq!((report.checkpoint, report.reset), (3, false), "{report:?}");
    server.shutdown().await;
    db.restore().await;
    let (server, client) = sender_at(db.url(), listen).await;
    // With the receiver down, the restored sender's new event 2 goes dead: only the feed
    // brings it, and only once the catch-up reads from 0 again.
    app.down.store(true, Ordering::SeqCst);
    let lost = crate::emit(&client, 4).await;
    wait_status(&client, &lost, "dead").await;
    app.down.store(false, Ordering::SeqCst);
    let report = app.catch_up.catch_up(&endpoint).await.unwrap();
    assert!(report.reset, "{report:?}");
    assert_eq!(report.checkpoint, 2, "{report:?}");
    assert_eq!(
        report.already, 1,
        "event 1 again, skipped by dedup: {report:?}"
    );
    app.wait_handled(4).await;
    let checkpoint = app.store.checkpoint(&endpoint).await.unwrap();
    assert_eq!(checkpoint.sequence, 2);
    assert_ne!(checkpoint.event_id.as_deref(), Some(first.as_str()));
    app.stop().await;
    server.shutdown().await;
    db.drop().await;
}
