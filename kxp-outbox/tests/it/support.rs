//! A sender in-process on a temporary SQLite file, a receiver that records what reaches it, a
//! proxy that can lose the sender's answers, and outbox helpers, on each [`Backend`].

use std::collections::BTreeSet;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use kxp_outbox::sqlx::{self, PgPool, Pool, SqlitePool};
use kxp_outbox::{NewEvent, Relay, emit};
use kxp_sender::{Config, Schedule, Server};
use kxp_testkit::db::{Backend, PgDatabase};
use serde_json::json;

const KEY: &str = "kxp_outbox_test_key";

/// A running sender.
pub(crate) struct Sender {
    pub base: String,
    /// Kept so the server runs as long as the value lives.
    _server: Server,
    database_url: String,
    _dir: Arc<tempfile::TempDir>,
}

impl Sender {
    /// A sender in development mode on a fresh SQLite file, retrying at once, `tweak`ed.
    pub(crate) async fn start(tweak: impl FnOnce(&mut Config)) -> Sender {
        let dir = Arc::new(tempfile::tempdir().unwrap());
        let url = format!("sqlite://{}", dir.path().join("kxp.db").display());
        Sender::on(url, dir, tweak).await
    }

    async fn on(
        database_url: String,
        dir: Arc<tempfile::TempDir>,
        tweak: impl FnOnce(&mut Config),
    ) -> Sender {
        let mut config = Config {
            database_url: database_url.clone(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            dev: true,
            schedule: "0s,100ms,100ms"
                .parse::<Schedule>()
                .unwrap()
                .with_jitter(0.0)
                .unwrap(),
            poll_interval: Duration::from_millis(20),
            api_key: Some(KEY.to_owned()),
            // A fresh PostgreSQL database is migrated by the sender that opens it.
            migrations: kxp_sender::Migrations::Apply {
                lock_timeout: Duration::ZERO,
            },
            ..Config::default()
        };
        tweak(&mut config);
        let server = kxp_sender::start(config).await.unwrap();
        Sender {
            base: format!("http://{}", server.addr()),
            _server: server,
            database_url,
            _dir: dir,
        }
    }

    /// A second server on the same database, with workers and default limits.
    pub(crate) async fn restart_with_workers(&self) -> Sender {
        Sender::on(self.database_url.clone(), self._dir.clone(), |_| {}).await
    }

    pub(crate) fn client(&self) -> kxp_api::Client {
        self.client_at(&self.base)
    }

    /// A client of this sender's account that calls `base` (a proxy in front of it).
    pub(crate) fn client_at(&self, base: &str) -> kxp_api::Client {
        kxp_api::Client::new(base, KEY).unwrap()
    }

    /// Subscribes `url` to every event.
    pub(crate) async fn endpoint(&self, url: &str) {
        let new: kxp_api::NewEndpoint =
            serde_json::from_value(json!({"url": url, "skip_challenge": true})).unwrap();
        self.client().create_endpoint(&new).await.unwrap();
    }
}

/// A receiver answering 200 to everything, recording each delivery's event id.
pub(crate) struct Receiver {
    pub url: String,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Receiver {
    pub(crate) async fn start() -> Receiver {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let app = Router::new()
            .fallback(
                |State(seen): State<Arc<Mutex<Vec<String>>>>, body: Bytes| async move {
                    let event: serde_json::Value = serde_json::from_slice(&body).unwrap();
                    seen.lock()
                        .unwrap()
                        .push(event["id"].as_str().unwrap().to_owned());
                    StatusCode::OK
                },
            )
            .with_state(seen.clone());
        let url = serve(app).await;
        Receiver { url, seen }
    }

    pub(crate) fn event_ids(&self) -> BTreeSet<String> {
        self.seen.lock().unwrap().iter().cloned().collect()
    }

    pub(crate) fn deliveries(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    /// Waits (at most 30 s) until `n` distinct events arrived.
    pub(crate) async fn wait_for(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.event_ids().len() < n {
            assert!(
                Instant::now() < deadline,
                "{} of {n} events arrived",
                self.event_ids().len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Let a stray second delivery, if there were one, arrive before the caller counts.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A proxy to a sender that passes every request on and, while told to, answers 502 instead
/// of the sender's answer: a hand-off the sender took whose answer never came back. It can
/// also answer requests itself, 503 with a `Retry-After` of its choosing, as a gateway in
/// maintenance does.
pub(crate) struct Proxy {
    pub url: String,
    lose: Arc<AtomicBool>,
    forwarded: Arc<AtomicUsize>,
    unavailable: Arc<Mutex<Option<(usize, String)>>>,
}

#[derive(Clone)]
struct ProxyState {
    target: String,
    http: reqwest::Client,
    lose: Arc<AtomicBool>,
    forwarded: Arc<AtomicUsize>,
    /// How many requests more to answer 503 without passing them on, and their `Retry-After`.
    unavailable: Arc<Mutex<Option<(usize, String)>>>,
}

impl Proxy {
    pub(crate) async fn start(target: &str) -> Proxy {
        let state = ProxyState {
            target: target.to_owned(),
            http: reqwest::Client::new(),
            lose: Arc::new(AtomicBool::new(false)),
            forwarded: Arc::new(AtomicUsize::new(0)),
            unavailable: Arc::new(Mutex::new(None)),
        };
        let (lose, forwarded) = (state.lose.clone(), state.forwarded.clone());
        let unavailable = state.unavailable.clone();
        let app = Router::new().fallback(forward).with_state(state);
        Proxy {
            url: serve(app).await,
            lose,
            forwarded,
            unavailable,
        }
    }

    /// Answers the next `n` requests 503 with `Retry-After: <retry_after>`, passing none on.
    pub(crate) fn unavailable(&self, n: usize, retry_after: &str) {
        *self.unavailable.lock().unwrap() = Some((n, retry_after.to_owned()));
    }

    pub(crate) fn lose_answers(&self, lose: bool) {
        self.lose.store(lose, Ordering::SeqCst);
    }

    pub(crate) fn forwarded(&self) -> usize {
        self.forwarded.load(Ordering::SeqCst)
    }
}

async fn forward(State(state): State<ProxyState>, request: Request) -> Response {
    if let Some(retry_after) = take_unavailable(&state) {
        // In the API's error form, as a gateway in front of it answers: the client reads it.
        let body = json!({"error": "maintenance", "message": "down for maintenance"});
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [("retry-after", retry_after)],
            axum::Json(body),
        )
            .into_response();
    }
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20).await.unwrap();
    let mut outgoing = state
        .http
        .request(parts.method, format!("{}{}", state.target, parts.uri));
    for (name, value) in &parts.headers {
        if name != "host" {
            outgoing = outgoing.header(name, value);
        }
    }
    let answer = outgoing.body(body).send().await.unwrap();
    state.forwarded.fetch_add(1, Ordering::SeqCst);
    let status = answer.status();
    let content_type = answer.headers().get("content-type").cloned();
    let bytes = answer.bytes().await.unwrap();
    if state.lose.load(Ordering::SeqCst) {
        return (StatusCode::BAD_GATEWAY, "answer lost").into_response();
    }
    let mut response = (status, bytes).into_response();
    if let Some(content_type) = content_type {
        response.headers_mut().insert("content-type", content_type);
    }
    response
}

/// The `Retry-After` to answer this request with, if the proxy was told to answer it 503.
fn take_unavailable(state: &ProxyState) -> Option<String> {
    let mut unavailable = state.unavailable.lock().unwrap();
    let (left, retry_after) = unavailable.as_mut()?;
    let retry_after = retry_after.clone();
    *left -= 1;
    if *left == 0 {
        *unavailable = None;
    }
    Some(retry_after)
}

async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

/// A producer's database on a temporary SQLite file, with the outbox table.
pub(crate) async fn sqlite_outbox() -> (tempfile::TempDir, SqlitePool) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("producer.db").display()
    );
    let pool = SqlitePool::connect(&url).await.unwrap();
    kxp_outbox::migrate(&pool).await.unwrap();
    (dir, pool)
}

/// Emits `n` `payment.succeeded` events, each in its own committed transaction; their ids.
pub(crate) async fn emit_payments<DB: kxp_outbox::Backend>(
    pool: &Pool<DB>,
    n: usize,
) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    for i in 0..n {
        let mut tx = pool.begin().await.unwrap();
        let event = NewEvent::new("payment.succeeded", &json!({"payment": i})).unwrap();
        ids.insert(emit(&mut tx, event).await.unwrap().to_string());
        tx.commit().await.unwrap();
    }
    ids
}

/// The event ids in the outbox.
pub(crate) async fn outbox_ids(pool: &SqlitePool) -> BTreeSet<String> {
    sqlx::query_scalar::<_, String>("SELECT event_id FROM kxp_outbox")
        .fetch_all(pool)
        .await
        .unwrap()
        .into_iter()
        .collect()
}

/// Runs passes until the outbox has nothing waiting (at most 60 s), sleeping the waits the
/// passes ask for.
pub(crate) async fn drain<DB: kxp_outbox::Backend>(relay: &Relay<DB>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while relay.waiting().await.unwrap() > 0 {
        assert!(Instant::now() < deadline, "the outbox did not drain");
        match relay.relay_once().await {
            Ok(pass) => {
                if let Some(wait) = pass.wait {
                    tokio::time::sleep(wait).await;
                } else if pass.handed_off == 0 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            Err(e) => panic!("relay pass: {e}"),
        }
    }
}

/// Runs `scenario` on a migrated outbox in a fresh database of `backend`, then deletes the
/// database; on PostgreSQL without `KXP_TEST_DATABASE_URL`, returns after the SKIPPED line
/// instead. (`each_backend!` passes the scenario's name, which the outbox's databases do not
/// need.)
pub(crate) async fn run<F, Fut>(backend: Backend, _name: &str, scenario: F)
where
    F: FnOnce(Outbox) -> Fut,
    Fut: Future<Output = ()>,
{
    match backend {
        Backend::Sqlite => {
            let (_dir, pool) = sqlite_outbox().await;
            scenario(Outbox::Sqlite(pool)).await;
        }
        Backend::Postgres => {
            let Some(database) = PgDatabase::create("kxp_outbox").await else {
                return;
            };
            let pool = PgPool::connect(database.url()).await.unwrap();
            kxp_outbox::migrate(&pool).await.unwrap();
            scenario(Outbox::Postgres(pool.clone())).await;
            pool.close().await;
            database.drop().await;
        }
    }
}

/// A producer's database with the outbox table, on one of the [`Backend`]s.
pub(crate) enum Outbox {
    /// On [`Backend::Sqlite`].
    Sqlite(SqlitePool),
    /// On [`Backend::Postgres`].
    Postgres(PgPool),
}

impl Outbox {
    /// [`emit_payments`] into this outbox.
    pub(crate) async fn emit_payments(&self, n: usize) -> BTreeSet<String> {
        match self {
            Outbox::Sqlite(pool) => emit_payments(pool, n).await,
            Outbox::Postgres(pool) => emit_payments(pool, n).await,
        }
    }

    /// [`drain`]s this outbox with a relay handing off through `client`.
    pub(crate) async fn drain(&self, client: kxp_api::Client) {
        match self {
            Outbox::Sqlite(pool) => drain(&Relay::new(pool.clone(), client)).await,
            Outbox::Postgres(pool) => drain(&Relay::new(pool.clone(), client)).await,
        }
    }

    /// How many rows the outbox holds.
    pub(crate) async fn rows(&self) -> i64 {
        let sql = "SELECT COUNT(*) FROM kxp_outbox";
        match self {
            Outbox::Sqlite(pool) => sqlx::query_scalar(sql).fetch_one(pool).await.unwrap(),
            Outbox::Postgres(pool) => sqlx::query_scalar(sql).fetch_one(pool).await.unwrap(),
        }
    }
}
