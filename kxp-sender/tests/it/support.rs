//! A sender started in-process on a temporary SQLite database (or on the database of a
//! [`Backend`]), and scripted receivers on 127.0.0.1 that record what reaches them.

use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use kxp_sender::Protection;
use kxp_sender::{Config, Migrations, Schedule, Server};
use kxp_testkit::citus::CitusDatabase;
pub(crate) use kxp_testkit::db::Backend;
use kxp_testkit::db::PgDatabase;
use serde_json::{Value, json};

/// A running sender and an API client holding its key.
pub(crate) struct Sender {
    pub server: Server,
    pub api: Api,
    pub database_url: String,
    _dir: tempfile::TempDir,
}

/// Starts a sender in development mode with `schedule` (jitter 0 unless the schedule says
/// otherwise) on a fresh SQLite file.
pub(crate) async fn sender(schedule: &str) -> Sender {
    sender_with(schedule, |_| {}).await
}

pub(crate) async fn sender_with(schedule: &str, tweak: impl FnOnce(&mut Config)) -> Sender {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config {
        database_url: format!("sqlite://{}", dir.path().join("kxp.db").display()),
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        dev: true,
        schedule: schedule
            .parse::<Schedule>()
            .unwrap()
            .with_jitter(0.0)
            .unwrap(),
        poll_interval: Duration::from_millis(20),
        api_key: Some("kxp_test_key".to_owned()),
        // Tests of retries and the dead-letter queue fail endpoints on purpose: the breaker
        // stays out of their way unless a test turns it on (tests/it/protection.rs).
        protection: Protection {
            breaker_failures: u32::MAX,
            ..Protection::default()
        },
        // A fresh PostgreSQL database is migrated by the sender that opens it, as `kxp serve
        // --migrate` would (SQLite always is).
        migrations: Migrations::Apply {
            lock_timeout: Duration::ZERO,
        },
        // `.ci/run` runs the PostgreSQL scenarios a second time with the per-account
        // statement forms kxp uses on Citus.
        per_account_statements: std::env::var("KXP_TEST_PER_ACCOUNT").is_ok_and(|v| v == "1"),
        ..Config::default()
    };
    tweak(&mut config);
    let database_url = config.database_url.clone();
    let server = kxp_sender::start(config).await.unwrap();
    let api = Api::new(format!("http://{}", server.addr()), "kxp_test_key");
    Sender {
        server,
        api,
        database_url,
        _dir: dir,
    }
}

/// Runs `scenario` (named `name`) on a fresh database of `backend`, then deletes the
/// database; on PostgreSQL without `KXP_TEST_DATABASE_URL`, returns after the SKIPPED line
/// instead. The scenario shuts its senders down before it returns: the database is deleted
/// with `WITH (FORCE)`, which a sender still running would see as an outage. SQLite's file is
/// each sender's own ([`sender_with`]'s temporary directory).
pub(crate) async fn run<F, Fut>(backend: Backend, name: &str, scenario: F)
where
    F: FnOnce(Database) -> Fut,
    Fut: Future<Output = ()>,
{
    match backend {
        Backend::Sqlite => {
            scenario(Database {
                backend,
                url: None,
                citus: false,
            })
            .await;
        }
        Backend::Postgres => {
            // PgDatabase takes prefixes of up to 30 bytes (names are at most 63).
            let mut prefix = format!("kxp_sender_{name}");
            prefix.truncate(30);
            let Some(database) = PgDatabase::create(&prefix).await else {
                return;
            };
            scenario(Database {
                backend,
                url: Some(database.url().to_owned()),
                citus: false,
            })
            .await;
            database.drop().await;
        }
    }
}

/// Runs `scenario` (named `name`) on a fresh database of a Citus cluster, which its senders
/// distribute as `kxp serve --migrate` does, then deletes it; without `KXP_TEST_CITUS_URL`,
/// returns after the SKIPPED line (fails where `KXP_REQUIRE_CITUS=1`). To the scenario it is
/// PostgreSQL: the coordinator's URL.
pub(crate) async fn run_citus<F, Fut>(name: &str, scenario: F)
where
    F: FnOnce(Database) -> Fut,
    Fut: Future<Output = ()>,
{
    let mut prefix = format!("kxp_citus_{name}");
    prefix.truncate(30);
    let Some(database) = CitusDatabase::create(&prefix).await else {
        return;
    };
    scenario(Database {
        backend: Backend::Postgres,
        url: Some(database.url().to_owned()),
        citus: true,
    })
    .await;
    database.drop().await;
}

/// A database of `backend` migrated with this crate's migrations before `version`, then
/// `rows` written (in the shape of then): an earlier release's database, for a test of what
/// the later migrations do to it. `None` (said loudly) without PostgreSQL.
pub(crate) async fn database_before(
    backend: Backend,
    name: &str,
    version: i64,
    rows: &[String],
) -> Option<kxp_testkit::db::TestDatabase> {
    let database = kxp_testkit::db::TestDatabase::create(backend, name).await?;
    let folder = match backend {
        Backend::Sqlite => "migrations/sqlite",
        Backend::Postgres => "migrations/postgres",
    };
    let rows: Vec<&str> = rows.iter().map(String::as_str).collect();
    database
        .migrate_before(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(folder),
            version,
            &rows,
        )
        .await;
    Some(database)
}

/// The database one scenario's senders run on.
#[derive(Debug, Clone)]
pub(crate) struct Database {
    backend: Backend,
    /// `None` on SQLite: each sender makes its own file, and a process that shares it takes
    /// the first one's [`Sender::database_url`].
    url: Option<String>,
    /// A Citus cluster's coordinator ([`run_citus`]).
    citus: bool,
}

impl Database {
    /// Which backend this is.
    pub(crate) fn backend(&self) -> Backend {
        self.backend
    }

    /// Whether this is a Citus cluster (whose `backend` is PostgreSQL).
    pub(crate) fn is_citus(&self) -> bool {
        self.citus
    }

    /// [`sender_with`] on this database (`tweak` runs after the URL is set).
    pub(crate) async fn sender_with(
        &self,
        schedule: &str,
        tweak: impl FnOnce(&mut Config),
    ) -> Sender {
        let url = self.url.clone();
        sender_with(schedule, move |config| {
            if let Some(url) = url {
                config.database_url = url;
            }
            tweak(config);
        })
        .await
    }

    /// [`sender`] on this database.
    pub(crate) async fn sender(&self, schedule: &str) -> Sender {
        self.sender_with(schedule, |_| {}).await
    }
}

/// A client of the sender's API, holding one account's key: the typed client for what the
/// tests do on the way to what they check, and [`Api::call`] for raw HTTP.
#[derive(Clone, Debug)]
pub(crate) struct Api {
    pub base: String,
    pub key: String,
    /// Raw HTTP, for requests the typed client cannot (or must not) make.
    pub http: reqwest::Client,
    /// The typed client, with the same base and key.
    pub client: kxp_api::Client,
}

impl Api {
    /// A client of the server at `base` calling with `key`.
    pub(crate) fn new(base: String, key: &str) -> Api {
        Api {
            client: kxp_api::Client::new(&base, key).unwrap(),
            base,
            key: key.to_owned(),
            http: reqwest::Client::new(),
        }
    }

    /// The same server with another account's key. (Not `Api { key, ..api }`: the typed
    /// client would keep the old key.)
    pub(crate) fn with_key(&self, key: &str) -> Api {
        Api::new(self.base.clone(), key)
    }

    /// Raw HTTP: the status and the body (JSON, or the text as a JSON string). For negative
    /// tests only (error statuses and bodies, bad JSON, bad auth, wrong methods, headers the
    /// typed client does not send): everything else goes through [`Api::client`], so every
    /// test also proves kxp-api's types read the server's real answers.
    pub(crate) async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// Creates an endpoint for `url`; returns (id, secret). The scripted receivers do not
    /// answer the endpoint challenge, so it is skipped unless `extra` says
    /// `"skip_challenge": false`. `extra` holds more fields of [`kxp_api::NewEndpoint`].
    pub(crate) async fn endpoint(&self, url: &str, extra: Value) -> (String, String) {
        let mut body = json!({"url": url, "skip_challenge": true});
        if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
            body.extend(extra.clone());
        }
        let new: kxp_api::NewEndpoint = serde_json::from_value(body).unwrap();
        let created = self
            .client
            .create_endpoint(&new)
            .await
            .unwrap_or_else(|e| panic!("POST /v1/endpoints: {e}"));
        (
            created.endpoint.id.into_string(),
            created.secret.as_ref().unwrap().expose().to_owned(),
        )
    }

    /// Emits an event; returns its id.
    pub(crate) async fn emit(&self, event_type: &str, data: Value) -> String {
        let event = kxp_api::NewEvent::new(event_type, &data).unwrap();
        let event = self
            .client
            .create_event(&event, None)
            .await
            .unwrap_or_else(|e| panic!("POST /v1/events: {e}"));
        event.id.into_string()
    }

    /// The deliveries of an event, as typed.
    pub(crate) async fn typed_deliveries_of(&self, event_id: &str) -> Vec<kxp_api::Delivery> {
        self.client
            .event_deliveries(&event_id.into())
            .await
            .unwrap_or_else(|e| panic!("GET /v1/events/{event_id}/deliveries: {e}"))
            .data
    }

    /// The deliveries of an event.
    pub(crate) async fn deliveries_of(&self, event_id: &str) -> Vec<Value> {
        values(self.typed_deliveries_of(event_id).await)
    }

    /// Polls until the event's latest delivery reaches `status`, for at most `within`.
    pub(crate) async fn wait_for(&self, event_id: &str, status: &str, within: Duration) -> Value {
        let start = Instant::now();
        loop {
            let deliveries = self.typed_deliveries_of(event_id).await;
            if let Some(latest) = deliveries.last()
                && latest.status.as_str() == status
            {
                return serde_json::to_value(latest).unwrap();
            }
            assert!(
                start.elapsed() < within,
                "event {event_id} did not reach {status} within {within:?}: {deliveries:?}"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// The attempts of a delivery.
    pub(crate) async fn attempts(&self, delivery_id: &str) -> Vec<Value> {
        let page = self
            .client
            .delivery_attempts(&delivery_id.into())
            .await
            .unwrap_or_else(|e| panic!("GET /v1/deliveries/{delivery_id}/attempts: {e}"));
        values(page.data)
    }
}

/// Typed answers as JSON values, for the assertions written against JSON.
pub(crate) fn values<T: serde::Serialize>(items: Vec<T>) -> Vec<Value> {
    items
        .iter()
        .map(|item| serde_json::to_value(item).unwrap())
        .collect()
}

/// A typed answer as a JSON value, for the assertions written against JSON.
pub(crate) fn value<T: serde::Serialize>(item: &T) -> Value {
    serde_json::to_value(item).unwrap()
}

/// A typed request written as JSON (as the API documents it).
pub(crate) fn typed<T: serde::de::DeserializeOwned>(body: Value) -> T {
    serde_json::from_value(body.clone()).unwrap_or_else(|e| panic!("{body}: {e}"))
}

/// How a scripted receiver answers one request.
#[derive(Debug, Clone)]
pub(crate) enum Reply {
    Status(u16),
    RetryAfter(u16, u64),
    /// `Retry-After` as written (an HTTP-date).
    RetryAfterText(u16, String),
    Redirect(u16, String),
    Hang(Duration),
}

/// One request as a receiver saw it.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub headers: HeaderMap,
    pub body: Bytes,
    pub at: Instant,
}

impl Seen {
    pub(crate) fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    }

    pub(crate) fn event_id(&self) -> String {
        serde_json::from_slice::<Value>(&self.body).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned()
    }
}

#[derive(Clone, Default)]
struct Script {
    replies: Arc<Mutex<VecDeque<Reply>>>,
    /// The status once the script runs out (200 unless changed).
    rest: Arc<Mutex<Option<u16>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

/// A receiver on 127.0.0.1 that answers from a script (then 200 once the script runs out, or
/// what [`Receiver::answer_rest_with`] says) and records every request.
#[derive(Clone)]
pub(crate) struct Receiver {
    pub url: String,
    script: Script,
}

impl Receiver {
    pub(crate) async fn start(replies: Vec<Reply>) -> Receiver {
        let script = Script {
            replies: Arc::new(Mutex::new(replies.into())),
            ..Script::default()
        };
        let app = Router::new().fallback(answer).with_state(script.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver {
            url: format!("{base}/hook"),
            script,
        }
    }

    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.script.seen.lock().unwrap().clone()
    }

    /// Answers `status` to every request once the script has run out (an outage, or its end).
    pub(crate) fn answer_rest_with(&self, status: u16) {
        *self.script.rest.lock().unwrap() = Some(status);
    }
}

async fn answer(State(script): State<Script>, headers: HeaderMap, body: Bytes) -> Response {
    script.seen.lock().unwrap().push(Seen {
        headers,
        body,
        at: Instant::now(),
    });
    let reply = script
        .replies
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or_else(|| Reply::Status(script.rest.lock().unwrap().unwrap_or(200)));
    match reply {
        Reply::Status(code) => (StatusCode::from_u16(code).unwrap(), "answer").into_response(),
        Reply::RetryAfter(code, secs) => (
            StatusCode::from_u16(code).unwrap(),
            [("retry-after", secs.to_string())],
            "later",
        )
            .into_response(),
        Reply::RetryAfterText(code, value) => (
            StatusCode::from_u16(code).unwrap(),
            [("retry-after", value)],
            "later",
        )
            .into_response(),
        Reply::Redirect(code, location) => (
            StatusCode::from_u16(code).unwrap(),
            [("location", location)],
            "",
        )
            .into_response(),
        Reply::Hang(d) => {
            tokio::time::sleep(d).await;
            (StatusCode::OK, "too late").into_response()
        }
    }
}

/// Verifies a request as a kxp receiver would, with `secret`.
pub(crate) fn verifies(seen: &Seen, secret: &str) -> bool {
    let verifier = kxp_verify::Verifier::from_secret_list(secret).unwrap();
    verifier
        .verify_now(&seen.header("x-kxp-signature"), &seen.body)
        .is_ok()
}

/// Verifies a request as a Standard Webhooks receiver would, with `verifier`: whether its
/// `webhook-*` headers pass.
pub(crate) fn verifies_standard(seen: &Seen, verifier: &kxp_verify::Verifier) -> bool {
    verifier
        .verify_standard_now(
            &seen.header("webhook-id"),
            &seen.header("webhook-timestamp"),
            &seen.header("webhook-signature"),
            &seen.body,
        )
        .is_ok()
}

/// The value of the unlabelled sample `name` on the server's `/metrics`.
pub(crate) async fn metric(api: &Api, name: &str) -> u64 {
    let text = api
        .http
        .get(format!("{}/metrics", api.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
        .parse()
        .unwrap()
}

/// The number the test's own query `sql` reads on `db`.
pub(crate) async fn count(db: &kxp_sender::Db, sql: &str) -> i64 {
    match db {
        kxp_sender::Db::Sqlite(pool) => sqlx::query_scalar(sql).fetch_one(pool).await.unwrap(),
        kxp_sender::Db::Postgres(pool) | kxp_sender::Db::Citus(pool) => {
            sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
        }
    }
}

/// Runs a statement of the test's own on `db`.
pub(crate) async fn execute(db: &kxp_sender::Db, sql: &str) {
    match db {
        kxp_sender::Db::Sqlite(pool) => {
            sqlx::query(sql).execute(pool).await.unwrap();
        }
        kxp_sender::Db::Postgres(pool) | kxp_sender::Db::Citus(pool) => {
            sqlx::query(sql).execute(pool).await.unwrap();
        }
    }
}
