//! `kxp serve --ingest`: events from a RabbitMQ queue or a NATS JetStream stream, with real
//! processes and real brokers (loopback only). Each message becomes exactly one event however
//! often the sender is killed or cut off from its broker, bad messages are set aside (RabbitMQ's
//! dead-letter queue, NATS's rejected subject) and counted by reason, and a full backlog pauses
//! consumption instead of rejecting.
//!
//! Without a broker on its standard port a test is skipped with a loud `SKIPPED (RabbitMQ)` or
//! `SKIPPED (NATS)` line, unless `KXP_REQUIRE_BROKERS=1` (CI), where it fails. No test sleeps a
//! fixed time: each polls for what it waits for, with a deadline.
//!
//! This module is the harness every broker's tests share (the sender's processes, the
//! receiver, `/healthz` and `/metrics`, the brokers behind one [`Broker`], the checks);
//! `scenarios` holds what each broker runs the same way (kills, bad messages, backpressure),
//! `amqp` and `nats` each broker's tests, and `both` the ones that consume from both at once.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use kxp_testkit::brokers::{AmqpHeader, Nats, NatsServer, Rabbit};
use kxp_testkit::citus::CitusDatabase;
use kxp_testkit::db::{PgDatabase, SqliteFile};
use serde_json::{Value, json};

use crate::crash::KEY;

// One module per broker, the tests that need both, and the scenarios each broker runs.
mod amqp;
mod both;
mod nats;
mod scenarios;

/// The type of every event the tests' messages make.
const EVENT_TYPE: &str = "test.ingested";

/// A well-formed account id no account has.
const UNKNOWN_ACCOUNT: &str = "acc_00000000000000000000000000000000";

/// The durable consumer of the NATS sources.
const DURABLE: &str = "kxp-test";

/// How long any one wait of these tests may take before it fails.
const PATIENCE: Duration = Duration::from_secs(90);

/// Where the `kxp serve` processes of one test write their stderr; when the test fails, the end
/// of each log is printed, so a failure shows what the sender said.
struct Logs {
    dir: tempfile::TempDir,
    next: AtomicUsize,
}

impl Logs {
    fn new() -> Arc<Logs> {
        Arc::new(Logs {
            dir: tempfile::tempdir().unwrap(),
            next: AtomicUsize::new(0),
        })
    }

    fn file(&self) -> (PathBuf, std::fs::File) {
        let n = self.next.fetch_add(1, Ordering::SeqCst);
        let path = self.dir.path().join(format!("serve-{n:02}.log"));
        let file = std::fs::File::create(&path).unwrap();
        (path, file)
    }
}

impl Drop for Logs {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let mut paths: Vec<PathBuf> = std::fs::read_dir(self.dir.path())
            .map(|entries| entries.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        paths.sort();
        let mut stderr = std::io::stderr();
        for path in paths {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(40)..];
            let _ = writeln!(
                stderr,
                "---- {} (last {} of {} lines) ----\n{}",
                path.file_name().unwrap_or_default().to_string_lossy(),
                tail.len(),
                lines.len(),
                tail.join("\n")
            );
        }
    }
}

/// A `kxp serve` process, killed when dropped.
struct Serve {
    child: Child,
    base: String,
}

impl Serve {
    fn start(database_url: &str, extra: &[String], env: &[(String, String)], logs: &Logs) -> Serve {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let (log, stderr) = logs.file();
        let mut child = Command::new(env!("CARGO_BIN_EXE_kxp"))
            .args([
                "serve",
                "--dev",
                "--migrate",
                "--listen",
                &format!("127.0.0.1:{port}"),
            ])
            .args(["--database-url", database_url])
            .args([
                "--retry-schedule",
                "0s,100ms,200ms,400ms,800ms,1s,1s,2s,5s",
                "--jitter",
                "0.1",
            ])
            .args(["--delivery-timeout", "1s", "--lease-extra", "500ms"])
            .args(extra)
            .env("KXP_API_KEY", KEY)
            .env("RUST_LOG", "warn")
            .env_remove("KXP_INGEST")
            .env_remove("KXP_DATABASE_URL")
            .env_remove("KXP_BACKLOG_LIMIT")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let ready = lines
            .by_ref()
            .map_while(Result::ok)
            .any(|line| line.contains("listening on"));
        if !ready {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "kxp serve {extra:?} did not start: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        // Keep draining stdout so the process never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Serve {
            child,
            base: format!("http://127.0.0.1:{port}"),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn start(database_url: &str, extra: &[String], logs: &Arc<Logs>) -> Serve {
    start_with_env(database_url, extra, &[], logs).await
}

async fn start_with_env(
    database_url: &str,
    extra: &[String],
    env: &[(&str, &str)],
    logs: &Arc<Logs>,
) -> Serve {
    let (url, extra, logs) = (database_url.to_owned(), extra.to_vec(), logs.clone());
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    tokio::task::spawn_blocking(move || Serve::start(&url, &extra, &env, &logs))
        .await
        .unwrap()
}

/// SIGKILL, and wait until the process is gone.
async fn kill(serve: Serve) {
    tokio::task::spawn_blocking(move || drop(serve))
        .await
        .unwrap();
}

fn ingest(urls: &[String]) -> Vec<String> {
    urls.iter()
        .flat_map(|url| ["--ingest".to_owned(), url.clone()])
        .collect()
}

/// What the receiver got: every event by id (a redelivery of one is the same id), and a gate
/// that, closed, holds each request until it opens.
#[derive(Clone)]
struct Inbox {
    events: Arc<Mutex<HashMap<String, Value>>>,
    deliveries: Arc<AtomicUsize>,
    waiting: Arc<AtomicUsize>,
    gate: Arc<tokio::sync::watch::Sender<bool>>,
}

impl Inbox {
    /// The events by `data.n`, and the ids of any event of another type or without `n`.
    fn by_n(&self) -> (BTreeMap<u64, BTreeSet<String>>, Vec<String>) {
        let events = self.events.lock().unwrap();
        let mut by_n: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
        let mut other = Vec::new();
        for (id, event) in events.iter() {
            match (event["type"].as_str(), event["data"]["n"].as_u64()) {
                (Some(EVENT_TYPE), Some(n)) => {
                    by_n.entry(n).or_default().insert(id.clone());
                }
                _ => other.push(format!("{id}: {event}")),
            }
        }
        (by_n, other)
    }

    /// How many distinct `n` have arrived.
    fn distinct_n(&self) -> usize {
        self.by_n().0.len()
    }

    fn ids(&self) -> HashSet<String> {
        self.events.lock().unwrap().keys().cloned().collect()
    }

    /// Closes the gate: requests are held until [`Inbox::release`].
    fn hold(&self) {
        self.gate.send_replace(false);
    }

    fn release(&self) {
        self.gate.send_replace(true);
    }
}

async fn receive(State(inbox): State<Inbox>, body: Bytes) -> &'static str {
    let mut open = inbox.gate.subscribe();
    if !*open.borrow_and_update() {
        inbox.waiting.fetch_add(1, Ordering::SeqCst);
        let _ = open.wait_for(|open| *open).await;
        inbox.waiting.fetch_sub(1, Ordering::SeqCst);
    }
    inbox.deliveries.fetch_add(1, Ordering::SeqCst);
    let event: Value = serde_json::from_slice(&body).unwrap();
    let id = event["id"].as_str().unwrap().to_owned();
    inbox.events.lock().unwrap().insert(id, event);
    "ok"
}

async fn receiver() -> (String, Inbox) {
    let inbox = Inbox {
        events: Arc::default(),
        deliveries: Arc::default(),
        waiting: Arc::default(),
        gate: Arc::new(tokio::sync::watch::channel(true).0),
    };
    let app = Router::new().fallback(receive).with_state(inbox.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, inbox)
}

/// One test's sender: its account (the one of [`KEY`]), the receiver its endpoint points to,
/// the logs of its processes.
struct Setup {
    account: String,
    inbox: Inbox,
    logs: Arc<Logs>,
}

/// Starts the sender once without sources, to learn the account's id (the `--ingest` URLs name
/// it) and register the receiver's endpoint (per-attempt timeout `timeout_ms`), then kills it.
async fn setup(database_url: &str, timeout_ms: u64) -> Setup {
    let logs = Logs::new();
    let (url, inbox) = receiver().await;
    let first = start(database_url, &[], &logs).await;
    let client = kxp_api::Client::new(&first.base, KEY).unwrap();
    let account = client.account().await.unwrap().id.into_string();
    let mut endpoint = kxp_api::NewEndpoint::new(&url);
    endpoint.timeout_ms = Some(timeout_ms);
    endpoint.skip_challenge = true;
    client.create_endpoint(&endpoint).await.unwrap();
    kill(first).await;
    Setup {
        account,
        inbox,
        logs,
    }
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

/// The entry of `GET /healthz`'s `sources` named `name`, if the server answers and lists it.
async fn source_health(base: &str, name: &str) -> Option<Value> {
    let health: Value = http()
        .get(format!("{base}/healthz"))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    health["sources"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == name)
        .cloned()
}

/// Waits until the source `name` of the server at `base` is in `state`; its health entry.
async fn wait_source(base: &str, name: &str, state: &str) -> Value {
    let start = Instant::now();
    loop {
        let health = source_health(base, name).await;
        if let Some(health) = &health
            && health["state"] == state
        {
            return health.clone();
        }
        assert!(
            start.elapsed() < PATIENCE,
            "the source {name} of {base} is not {state}: /healthz says {health:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn metrics(base: &str) -> String {
    http()
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The sum of the samples of `name` whose labels include `labels`.
fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (metric, set) = match series.split_once('{') {
                Some((metric, rest)) => (metric, rest.strip_suffix('}')?),
                None => (series, ""),
            };
            if metric != name {
                return None;
            }
            let set: HashMap<&str, &str> = set
                .split(',')
                .filter_map(|pair| {
                    let (k, v) = pair.split_once('=')?;
                    Some((k.trim(), v.trim().trim_matches('"')))
                })
                .collect();
            labels
                .iter()
                .all(|(k, v)| set.get(k) == Some(v))
                .then(|| value.parse::<f64>().ok())?
        })
        .sum()
}

/// The message of `n`: the body of `POST /v1/events`.
fn body(n: usize) -> Vec<u8> {
    json!({"type": EVENT_TYPE, "data": {"n": n}})
        .to_string()
        .into_bytes()
}

/// Half the messages have an id of their own (`message_id`, `Nats-Msg-Id`), half not (the
/// sender derives one).
fn message_id(n: usize) -> Option<String> {
    n.is_multiple_of(2).then(|| format!("msg-{n}"))
}

/// A queue or a stream, behind one interface for the scenarios both run.
#[derive(Clone, Copy)]
enum Broker<'a> {
    Rabbit(&'a Rabbit),
    Nats(&'a Nats),
}

impl Broker<'_> {
    fn ingest_url(&self, account: &str) -> String {
        match self {
            Broker::Rabbit(rabbit) => rabbit.ingest_url(account),
            Broker::Nats(nats) => nats.ingest_url(DURABLE, account),
        }
    }

    fn source(&self) -> String {
        match self {
            Broker::Rabbit(rabbit) => rabbit.source_name(),
            Broker::Nats(nats) => nats.source_name(DURABLE),
        }
    }

    async fn publish(&self, n: usize) {
        let id = message_id(n);
        match self {
            Broker::Rabbit(rabbit) => rabbit.publish(&body(n), id.as_deref()).await,
            Broker::Nats(nats) => {
                nats.publish(&body(n), id.as_deref()).await;
            }
        }
    }

    /// [`Broker::publish`] with these (text) headers too.
    async fn publish_with(&self, n: usize, headers: &[(&str, &str)]) {
        let id = message_id(n);
        match self {
            Broker::Rabbit(rabbit) => {
                rabbit
                    .publish_with_headers(&body(n), id.as_deref(), headers)
                    .await;
            }
            Broker::Nats(nats) => {
                let mut all = headers.to_vec();
                if let Some(id) = id.as_deref() {
                    all.push(("Nats-Msg-Id", id));
                }
                nats.publish_with_headers(&body(n), &all).await;
            }
        }
    }

    /// The messages the broker still holds: ready, or delivered and not acknowledged.
    async fn holding(&self) -> u64 {
        match self {
            Broker::Rabbit(rabbit) => {
                let (ready, unacked) = rabbit.queue_counts().await;
                ready + unacked
            }
            Broker::Nats(nats) => match nats.consumer_state(DURABLE).await {
                Some(state) => state.num_pending + state.num_ack_pending as u64,
                None => nats.stream_messages().await,
            },
        }
    }

    /// Whether every message was consumed and acknowledged (or rejected): nothing can make an
    /// event any more.
    async fn settled(&self) -> bool {
        self.holding().await == 0
    }
}

/// The events of the sender's database: `(id, type, envelope)`.
async fn stored_events(database_url: &str) -> Vec<(String, String, Value)> {
    let query = "SELECT id, event_type, payload FROM kxp_events";
    let rows: Vec<(String, String, String)> = if database_url.starts_with("sqlite") {
        let pool = sqlx::SqlitePool::connect(database_url).await.unwrap();
        let rows = sqlx::query_as(query).fetch_all(&pool).await.unwrap();
        pool.close().await;
        rows
    } else {
        let pool = sqlx::PgPool::connect(database_url).await.unwrap();
        let rows = sqlx::query_as(query).fetch_all(&pool).await.unwrap();
        pool.close().await;
        rows
    };
    rows.into_iter()
        .map(|(id, event_type, payload)| {
            let envelope = serde_json::from_str(&payload).unwrap_or(Value::String(payload));
            (id, event_type, envelope)
        })
        .collect()
}

/// The trace context stored with each event of the sender's database, by the message's `n`:
/// `(traceparent, tracestate)`.
async fn stored_trace_contexts(
    database_url: &str,
) -> BTreeMap<u64, (Option<String>, Option<String>)> {
    let pool = sqlx::SqlitePool::connect(database_url).await.unwrap();
    let rows: Vec<(String, Option<String>, Option<String>)> =
        sqlx::query_as("SELECT payload, traceparent, tracestate FROM kxp_events")
            .fetch_all(&pool)
            .await
            .unwrap();
    pool.close().await;
    rows.into_iter()
        .map(|(payload, traceparent, tracestate)| {
            let envelope: Value = serde_json::from_str(&payload).unwrap();
            (
                envelope["data"]["n"].as_u64().unwrap(),
                (traceparent, tracestate),
            )
        })
        .collect()
}

/// Waits until `done` holds, polling every 200 ms; panics with `what()` after `within`.
async fn wait_for<F, Fut>(within: Duration, mut done: F, what: impl Fn() -> String)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if done().await {
            return;
        }
        assert!(start.elapsed() < within, "after {within:?}: {}", what());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until the receiver has seen every `n` below `count` and the broker holds nothing.
async fn wait_all_consumed(broker: Broker<'_>, inbox: &Inbox, count: usize) {
    wait_for(
        PATIENCE,
        move || async move { inbox.distinct_n() >= count && broker.settled().await },
        || {
            let (by_n, _) = inbox.by_n();
            let missing: Vec<usize> = (0..count)
                .filter(|n| !by_n.contains_key(&(*n as u64)))
                .collect();
            format!(
                "{} of {count} messages never became a delivered event (first: {:?})",
                missing.len(),
                &missing[..missing.len().min(10)]
            )
        },
    )
    .await;
}

/// The point of it all: for every `n` below `count`, exactly one event in the database, of
/// the type the message gave, and nothing else; every one of them reached the receiver (maybe
/// more than once, deliveries being at-least-once), and the receiver got nothing else.
///
/// Call it once the broker is settled: then no message can make another event.
async fn assert_one_event_per_message(database_url: &str, inbox: &Inbox, count: usize) {
    let mut stored: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
    let mut other = Vec::new();
    for (id, event_type, envelope) in stored_events(database_url).await {
        match envelope["data"]["n"].as_u64() {
            Some(n) if event_type == EVENT_TYPE && n < count as u64 => {
                stored.entry(n).or_default().insert(id);
            }
            _ => other.push(format!("{id} {event_type} {envelope}")),
        }
    }
    let missing: Vec<usize> = (0..count)
        .filter(|n| !stored.contains_key(&(*n as u64)))
        .collect();
    let doubled: Vec<(&u64, &BTreeSet<String>)> =
        stored.iter().filter(|(_, ids)| ids.len() > 1).collect();
    assert!(
        missing.is_empty() && doubled.is_empty() && other.is_empty(),
        "not one event per message: {} messages without an event (first {:?}), {} with several \
         (first {:?}), {} other events (first {:?})",
        missing.len(),
        &missing[..missing.len().min(10)],
        doubled.len(),
        &doubled[..doubled.len().min(5)],
        other.len(),
        &other[..other.len().min(5)],
    );

    let expected: HashSet<String> = stored.values().flatten().cloned().collect();
    let expected = &expected;
    wait_for(
        PATIENCE,
        move || async move { expected.is_subset(&inbox.ids()) },
        || {
            let ids = inbox.ids();
            let missing: Vec<&String> = expected.iter().filter(|id| !ids.contains(*id)).collect();
            format!(
                "{} of {} stored events never reached the receiver (first {:?})",
                missing.len(),
                expected.len(),
                &missing[..missing.len().min(5)]
            )
        },
    )
    .await;
    let (received, other) = inbox.by_n();
    assert!(other.is_empty(), "the receiver got other events: {other:?}");
    assert_eq!(
        received, stored,
        "the receiver's events are not the stored ones"
    );
}
