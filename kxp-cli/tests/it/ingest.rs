//! `kxp serve --ingest`: events from a RabbitMQ queue or a NATS JetStream stream, with real
//! processes and real brokers (loopback only). Each message becomes exactly one event however
//! often the sender is killed or cut off from its broker, bad messages are set aside (RabbitMQ's
//! dead-letter queue, NATS's rejected subject) and counted by reason, and a full backlog pauses
//! consumption instead of rejecting.
//!
//! Without a broker on its standard port a test is skipped with a loud `SKIPPED (RabbitMQ)` or
//! `SKIPPED (NATS)` line, unless `KXP_REQUIRE_BROKERS=1` (CI), where it fails. No test sleeps a
//! fixed time: each polls for what it waits for, with a deadline.

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
use kxp_testkit::db::{PgDatabase, SqliteFile};
use serde_json::{Value, json};

use crate::crash::KEY;

/// The type of every event the tests' messages make.
const EVENT_TYPE: &str = "test.ingested";

/// A well-formed account id no account has.
const UNKNOWN_ACCOUNT: &str = "acc_00000000000000000000000000000000";

/// The durable consumer of the NATS sources.
const DURABLE: &str = "kxp-test";

/// How long any one wait of these tests may take before it fails.
const PATIENCE: Duration = Duration::from_secs(90);

// ---------------------------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------------------------

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
            .args(["serve", "--dev", "--listen", &format!("127.0.0.1:{port}")])
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

// ---------------------------------------------------------------------------------------------
// The receiver
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// The sender's health and metrics
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// Brokers
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// The checks
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// Kills: every message becomes one event
// ---------------------------------------------------------------------------------------------

/// `total` messages published all along while `processes` senders consume them and are
/// SIGKILLed `kills` times mid-consumption (each time once the receiver has got some more) and
/// restarted; then a last start finishes the work, and every message must be one event.
async fn kill_loop(broker: Broker<'_>, database_url: &str, s: &Setup, processes: usize) {
    const TOTAL: usize = 1000;
    const KILLS: usize = 5;
    /// How far the publisher runs ahead of what the receiver has got.
    const AHEAD: usize = 200;
    let args = ingest(&[broker.ingest_url(&s.account)]);
    let inbox = &s.inbox;

    let publishing = async {
        for n in 0..TOTAL {
            let start = Instant::now();
            while n >= inbox.distinct_n() + AHEAD {
                assert!(
                    start.elapsed() < PATIENCE,
                    "no progress: {} of {n} published messages arrived",
                    inbox.distinct_n()
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            broker.publish(n).await;
        }
    };
    let killing = async {
        for round in 0..KILLS {
            let mut servers = Vec::new();
            for _ in 0..processes {
                servers.push(start(database_url, &args, &s.logs).await);
            }
            let target = (inbox.distinct_n() + 60 + 25 * round).min(TOTAL);
            wait_for(
                PATIENCE,
                move || async move { inbox.distinct_n() >= target },
                || {
                    format!(
                        "kill round {round}: the receiver has {} distinct messages, waiting for {target}",
                        inbox.distinct_n()
                    )
                },
            )
            .await;
            for server in servers {
                kill(server).await;
            }
        }
        let mut survivors = Vec::new();
        for _ in 0..processes {
            survivors.push(start(database_url, &args, &s.logs).await);
        }
        survivors
    };
    let ((), survivors) = tokio::join!(publishing, killing);

    wait_all_consumed(broker, inbox, TOTAL).await;
    assert_one_event_per_message(database_url, inbox, TOTAL).await;
    let mut created = 0.0;
    for server in &survivors {
        let health = wait_source(&server.base, &broker.source(), "up").await;
        assert!(
            health["last_error"].is_null() || health["last_error"].is_string(),
            "{health}"
        );
        created += metric(
            &metrics(&server.base).await,
            "kxp_ingest_messages_total",
            &[("source", &broker.source())],
        );
    }
    let _ = writeln!(
        std::io::stderr(),
        "{}: {TOTAL} messages, one event each after {KILLS} kills of {processes} process(es); \
         {} deliveries; the last start ingested {created} messages",
        broker.source(),
        inbox.deliveries.load(Ordering::SeqCst),
    );
    drop(survivors);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_messages_become_one_event_each_across_kills_on_sqlite() {
    let Some(rabbit) = Rabbit::connect().await else {
        return;
    };
    let db = SqliteFile::new("kxp.db");
    let s = setup(db.url(), 1000).await;
    kill_loop(Broker::Rabbit(&rabbit), db.url(), &s, 1).await;
    rabbit.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_two_processes_on_postgresql_compete_and_make_one_event_each_across_kills() {
    let Some(rabbit) = Rabbit::connect().await else {
        return;
    };
    let Some(database) = PgDatabase::create("kxp_ingest_rabbit").await else {
        return;
    };
    let s = setup(database.url(), 1000).await;

    // Two processes on one queue are two consumers of it.
    let url = rabbit.ingest_url(&s.account);
    let a = start(database.url(), &ingest(std::slice::from_ref(&url)), &s.logs).await;
    let b = start(database.url(), &ingest(std::slice::from_ref(&url)), &s.logs).await;
    wait_source(&a.base, &rabbit.source_name(), "up").await;
    wait_source(&b.base, &rabbit.source_name(), "up").await;
    let connections = rabbit.kxp_connections().await;
    for server in [&a, &b] {
        let name = format!("kxp serve {} pid {}", rabbit.source_name(), server.pid());
        assert!(
            connections.iter().any(|c| c.contains(&name)),
            "no connection named {name:?}: {connections:#?}"
        );
    }
    kill(a).await;
    kill(b).await;

    kill_loop(Broker::Rabbit(&rabbit), database.url(), &s, 2).await;
    rabbit.delete().await;
    database.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_messages_become_one_event_each_across_kills_on_sqlite() {
    let Some(nats) = Nats::connect().await else {
        return;
    };
    let db = SqliteFile::new("kxp.db");
    let s = setup(db.url(), 1000).await;
    kill_loop(Broker::Nats(&nats), db.url(), &s, 1).await;
    let state = nats.consumer_state(DURABLE).await.unwrap();
    assert_eq!((state.num_pending, state.num_ack_pending), (0, 0));
    nats.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_two_processes_on_postgresql_compete_and_make_one_event_each_across_kills() {
    let Some(nats) = Nats::connect().await else {
        return;
    };
    let Some(database) = PgDatabase::create("kxp_ingest_nats").await else {
        return;
    };
    let s = setup(database.url(), 1000).await;
    kill_loop(Broker::Nats(&nats), database.url(), &s, 2).await;
    nats.delete().await;
    database.drop().await;
}

// ---------------------------------------------------------------------------------------------
// Bad messages
// ---------------------------------------------------------------------------------------------

/// A message the sender must set aside: its body, its headers, the reason it is rejected for.
struct Bad {
    body: Vec<u8>,
    message_id: Option<&'static str>,
    headers: Vec<(&'static str, &'static str)>,
    reason: &'static str,
}

/// `--max-event-bytes` of the bad-message tests.
const MAX_EVENT_BYTES: usize = 4096;

/// The bad messages of `broker`. RabbitMQ also gets a message reusing message 0's id with
/// another body (on NATS, the stream itself drops a second `Nats-Msg-Id` within its duplicate
/// window, so the sender never sees one).
fn bad_messages(broker: Broker<'_>) -> Vec<Bad> {
    let mut bad = vec![
        Bad {
            body: br#"{"type": "test.ingested", "data": {"n": 100}"#.to_vec(),
            headers: vec![],
            reason: "invalid_json",
            message_id: None,
        },
        Bad {
            body: br#"{"data": {"n": 101}}"#.to_vec(),
            headers: vec![],
            reason: "invalid_request",
            message_id: None,
        },
        Bad {
            body: json!({"type": EVENT_TYPE, "data": {"n": 102}})
                .to_string()
                .into_bytes(),
            headers: vec![("x-kxp-account", UNKNOWN_ACCOUNT)],
            reason: "unknown_account",
            message_id: None,
        },
        Bad {
            body:
                json!({"type": EVENT_TYPE, "data": {"n": 103, "pad": "x".repeat(MAX_EVENT_BYTES)}})
                    .to_string()
                    .into_bytes(),
            headers: vec![],
            reason: "payload_too_large",
            message_id: None,
        },
        // Longer than any request the API reads, and not JSON: refused by its length before
        // anything parses it (parsed first, it would be `invalid_json`).
        Bad {
            body: format!(
                r#"{{"type": "test.ingested", "data": {{"n": 105, "pad": "{}"#,
                "x".repeat(MAX_EVENT_BYTES + kxp_sender::REQUEST_OVERHEAD)
            )
            .into_bytes(),
            headers: vec![],
            reason: "payload_too_large",
            message_id: None,
        },
    ];
    if let Broker::Rabbit(_) = broker {
        bad.push(Bad {
            body: json!({"type": EVENT_TYPE, "data": {"n": 104}})
                .to_string()
                .into_bytes(),
            headers: vec![],
            reason: "idempotency_key_reused",
            message_id: Some("msg-0"),
        });
    }
    bad
}

/// Publishes good messages 0..5 with the bad ones between them; message 3 names its account
/// (the URL's) in `x-kxp-account`. Returns each bad message's NATS stream sequence (RabbitMQ: 0).
async fn publish_good_and_bad(broker: Broker<'_>, account: &str, bad: &[Bad]) -> Vec<u64> {
    let mut sequences = Vec::new();
    for n in 0..5 {
        let id = message_id(n);
        let own: &[(&str, &str)] = if n == 3 {
            &[("x-kxp-account", account)]
        } else {
            &[]
        };
        match broker {
            Broker::Rabbit(rabbit) => {
                rabbit
                    .publish_with_headers(&body(n), id.as_deref(), own)
                    .await
            }
            Broker::Nats(nats) => {
                let mut headers = own.to_vec();
                if let Some(id) = &id {
                    headers.push(("Nats-Msg-Id", id));
                }
                nats.publish_with_headers(&body(n), &headers).await;
            }
        }
        if let Some(bad) = bad.get(n) {
            sequences.push(match broker {
                Broker::Rabbit(rabbit) => {
                    rabbit
                        .publish_with_headers(&bad.body, bad.message_id, &bad.headers)
                        .await;
                    0
                }
                Broker::Nats(nats) => nats.publish_with_headers(&bad.body, &bad.headers).await,
            });
        }
    }
    sequences
}

async fn assert_rejections_counted(base: &str, source: &str, bad: &[Bad]) {
    let text = metrics(base).await;
    let mut by_reason: BTreeMap<&str, f64> = BTreeMap::new();
    for bad in bad {
        *by_reason.entry(bad.reason).or_default() += 1.0;
    }
    for (reason, count) in by_reason {
        assert_eq!(
            metric(
                &text,
                "kxp_ingest_rejected_total",
                &[("source", source), ("reason", reason)]
            ),
            count,
            "kxp_ingest_rejected_total{{reason=\"{}\"}}: {}",
            reason,
            text.lines()
                .filter(|l| l.contains("kxp_ingest"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    assert_eq!(
        metric(&text, "kxp_ingest_rejected_total", &[("source", source)]),
        bad.len() as f64,
        "{}",
        text.lines()
            .filter(|l| l.contains("kxp_ingest"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(
        metric(
            &text,
            "kxp_ingest_messages_total",
            &[("source", source), ("outcome", "created")]
        ),
        5.0,
        "{}",
        text.lines()
            .filter(|l| l.contains("kxp_ingest"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_bad_messages_go_to_the_dead_letter_queue_and_are_counted_by_reason() {
    let Some(rabbit) = Rabbit::connect().await else {
        return;
    };
    let db = SqliteFile::new("kxp.db");
    let s = setup(db.url(), 1000).await;
    let url = format!("{}&account_header=allow", rabbit.ingest_url(&s.account));
    let mut args = ingest(&[url]);
    args.extend(["--max-event-bytes".to_owned(), MAX_EVENT_BYTES.to_string()]);
    let serve = start(db.url(), &args, &s.logs).await;
    wait_source(&serve.base, &rabbit.source_name(), "up").await;

    let bad = bad_messages(Broker::Rabbit(&rabbit));
    let (reuse, others) = bad.split_last().unwrap();
    publish_good_and_bad(Broker::Rabbit(&rabbit), &s.account, others).await;
    wait_all_consumed(Broker::Rabbit(&rabbit), &s.inbox, 5).await;
    // Message 0's id again with another body, once message 0 is in: which of two messages with
    // one id comes first decides which one is refused, and a consumer may take messages out of
    // order (a redelivery), so the test publishes it only after.
    rabbit
        .publish_with_headers(&reuse.body, reuse.message_id, &reuse.headers)
        .await;
    // The same messages again, one with its own id and one without: no new event.
    rabbit.publish(&body(1), None).await;
    rabbit.publish(&body(2), Some("msg-2")).await;
    wait_all_consumed(Broker::Rabbit(&rabbit), &s.inbox, 5).await;
    let start_at = Instant::now();
    let dead = loop {
        let dead = rabbit.dead_letters().await;
        if dead.len() >= bad.len() {
            break dead;
        }
        assert!(
            start_at.elapsed() < PATIENCE,
            "the dead-letter queue {} got {} of the {} bad messages",
            rabbit.dead_letter_queue(),
            dead.len(),
            bad.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let got: BTreeSet<&[u8]> = dead.iter().map(|m| m.body.as_slice()).collect();
    let want: BTreeSet<&[u8]> = bad.iter().map(|b| b.body.as_slice()).collect();
    assert_eq!(got, want, "the dead-letter queue holds other messages");
    assert_eq!(
        dead.len(),
        bad.len(),
        "a bad message was dead-lettered twice"
    );
    let unknown = dead.iter().find(|m| m.body == bad[2].body).unwrap();
    assert_eq!(
        unknown.headers.get("x-kxp-account").map(String::as_str),
        Some(UNKNOWN_ACCOUNT)
    );
    assert!(
        unknown
            .headers
            .get("x-first-death-reason")
            .map(String::as_str)
            == Some("rejected"),
        "dead-lettered by a reject: {:?}",
        unknown.headers
    );

    let reused = dead.iter().find(|m| m.body == reuse.body).unwrap();
    assert_eq!(reused.message_id.as_deref(), Some("msg-0"), "{reused:?}");

    assert_rejections_counted(&serve.base, &rabbit.source_name(), &bad).await;
    let text = metrics(&serve.base).await;
    assert_eq!(
        metric(
            &text,
            "kxp_ingest_messages_total",
            &[("source", &rabbit.source_name()), ("outcome", "replayed")]
        ),
        2.0,
        "{}",
        text.lines()
            .filter(|l| l.contains("kxp_ingest"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_one_event_per_message(db.url(), &s.inbox, 5).await;
    assert_eq!(
        rabbit.queue_counts().await,
        (0, 0),
        "nothing went back to the queue"
    );
    drop(serve);
    rabbit.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_bad_messages_go_to_the_rejected_subject_with_their_reason_and_are_terminated() {
    let Some(nats) = Nats::connect().await else {
        return;
    };
    let db = SqliteFile::new("kxp.db");
    let s = setup(db.url(), 1000).await;
    let mut rejected = nats.subscribe(&nats.rejected_subject()).await;
    let url = format!(
        "{}&account_header=allow",
        nats.ingest_url(DURABLE, &s.account)
    );
    let mut args = ingest(&[url]);
    args.extend(["--max-event-bytes".to_owned(), MAX_EVENT_BYTES.to_string()]);
    let serve = start(db.url(), &args, &s.logs).await;
    wait_source(&serve.base, &nats.source_name(DURABLE), "up").await;
    // The sender made the durable consumer: explicit acks, on the URL's subject.
    let state = nats.consumer_state(DURABLE).await.unwrap();
    assert!(
        state.explicit_ack && state.filter_subject == nats.subject(),
        "{state:?}"
    );

    let bad = bad_messages(Broker::Nats(&nats));
    let sequences = publish_good_and_bad(Broker::Nats(&nats), &s.account, &bad).await;
    let mut got = BTreeMap::new();
    let start_at = Instant::now();
    while got.len() < bad.len() {
        let left = PATIENCE.saturating_sub(start_at.elapsed());
        let Some(message) = rejected.next_within(left).await else {
            panic!(
                "{} of {} bad messages arrived on {} within {PATIENCE:?}: {got:#?}",
                got.len(),
                bad.len(),
                nats.rejected_subject()
            );
        };
        let sequence: u64 = message
            .header("Kxp-Source-Sequence")
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no Kxp-Source-Sequence: {message:?}"));
        assert!(
            got.insert(sequence, message).is_none(),
            "message {sequence} was rejected twice"
        );
    }
    for (bad, sequence) in bad.iter().zip(&sequences) {
        let message = got
            .get(sequence)
            .unwrap_or_else(|| panic!("no rejection of sequence {sequence}: {got:#?}"));
        assert_eq!(message.body, bad.body, "{message:?}");
        assert_eq!(
            message.header("Kxp-Reject-Reason"),
            Some(bad.reason),
            "{message:?}"
        );
        assert!(
            message
                .header("Kxp-Reject-Detail")
                .is_some_and(|d| !d.is_empty()),
            "{message:?}"
        );
        assert_eq!(
            message.header("Kxp-Source-Stream"),
            Some(nats.stream()),
            "{message:?}"
        );
    }

    wait_all_consumed(Broker::Nats(&nats), &s.inbox, 5).await;
    assert_rejections_counted(&serve.base, &nats.source_name(DURABLE), &bad).await;
    assert_one_event_per_message(db.url(), &s.inbox, 5).await;
    // Terminated, not redelivered: nothing is pending, and no second rejection came.
    let state = nats.consumer_state(DURABLE).await.unwrap();
    assert_eq!(
        (
            state.num_pending,
            state.num_ack_pending,
            state.num_redelivered
        ),
        (0, 0, 0),
        "{state:?}"
    );
    nats.client().flush().await.unwrap();
    if let Some(again) = rejected.next_within(Duration::from_millis(500)).await {
        panic!("a rejected message was rejected again: {again:?}");
    }
    drop(serve);
    nats.delete().await;
}

// ---------------------------------------------------------------------------------------------
// Rejects that could come back
// ---------------------------------------------------------------------------------------------

/// Whether the durable consumer `durable` of `nats` has nothing left to hand out or settle.
async fn consumer_idle(nats: &Nats, durable: &str) -> bool {
    nats.consumer_state(durable)
        .await
        .is_some_and(|state| state.num_pending == 0 && state.num_ack_pending == 0)
}

/// `kxp_ingest_rejected_total{source, reason}` of the server at `base`.
async fn rejections(base: &str, source: &str, reason: &str) -> f64 {
    metric(
        &metrics(base).await,
        "kxp_ingest_rejected_total",
        &[("source", source), ("reason", reason)],
    )
}

/// A NATS source whose rejected subject is in its own filter would consume each of its rejects
/// again, reject it again and publish it again, forever: it does not start (down, the reason in
/// `/healthz`, no consumer made, no reconnects), while a source on the same stream whose filter
/// leaves the rejects out consumes as usual and rejects into the stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_a_source_whose_rejects_fall_in_its_own_filter_does_not_start() {
    let Some(nats) = Nats::connect_capturing_prefix().await else {
        return;
    };
    let db = SqliteFile::new("kxp.db");
    let s = setup(db.url(), 1000).await;
    let prefix = nats.prefix();
    let looping = format!(
        "{}?stream={}&subject={prefix}.>&durable={DURABLE}&account={}&rejected_subject={prefix}.rejected",
        nats.url(),
        nats.stream(),
        s.account
    );
    const FINE: &str = "kxp-fine";
    let fine = format!(
        "{}&rejected_subject={prefix}.rejected",
        nats.ingest_url(FINE, &s.account)
    );
    let serve = start(db.url(), &ingest(&[looping, fine]), &s.logs).await;
    let refused = nats.source_name(DURABLE);
    let health = wait_source(&serve.base, &refused, "down").await;
    let error = health["last_error"].as_str().unwrap_or_default();
    assert!(
        error.contains(&format!("{prefix}.rejected")) && error.contains("filter"),
        "{health}"
    );
    let consuming = nats.source_name(FINE);
    wait_source(&serve.base, &consuming, "up").await;

    nats.publish(b"not json", None).await;
    let (nats_ref, base) = (&nats, serve.base.as_str());
    wait_for(
        PATIENCE,
        move || async move {
            rejections(base, &nats_ref.source_name(FINE), "invalid_json").await >= 1.0
                && consumer_idle(nats_ref, FINE).await
        },
        || "the consuming source did not reject the bad message".to_owned(),
    )
    .await;
    // The message and its one reject, both in the stream; the refused source read neither.
    assert_eq!(nats.stream_messages().await, 2);
    assert_eq!(rejections(base, &consuming, "invalid_json").await, 1.0);
    assert_eq!(
        nats.consumer_state(DURABLE).await,
        None,
        "the refused source made its consumer"
    );
    let text = metrics(base).await;
    assert_eq!(
        metric(
            &text,
            "kxp_ingest_reconnects_total",
            &[("source", &refused)]
        ),
        0.0
    );
    assert_eq!(
        metric(&text, "kxp_ingest_source_up", &[("source", &refused)]),
        0.0
    );
    assert_eq!(
        source_health(base, &refused).await.unwrap()["state"],
        "down"
    );
    drop(serve);
    nats.delete().await;
}

/// Two NATS sources, each consuming the subject the other publishes its rejects to (neither's
/// rejects are in its own filter, so both start): a bad message rejected by the first is
/// consumed by the second, which finds `Kxp-Reject-Reason` on it and terminates it instead of
/// publishing it back. One rejection each, and the stream keeps the message and its one reject.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_a_reject_consumed_again_is_terminated_not_published_again() {
    let Some(nats) = Nats::connect_capturing_prefix().await else {
        return;
    };
    let db = SqliteFile::new("kxp.db");
    let s = setup(db.url(), 1000).await;
    let rejects = format!("{}.rejected", nats.prefix());
    const A: &str = "kxp-a";
    const B: &str = "kxp-b";
    let source = |durable: &str, subject: &str, rejected: &str| {
        format!(
            "{}?stream={}&subject={subject}&durable={durable}&account={}&rejected_subject={rejected}",
            nats.url(),
            nats.stream(),
            s.account
        )
    };
    let urls = [
        source(A, nats.subject(), &rejects),
        source(B, &rejects, nats.subject()),
    ];
    let serve = start(db.url(), &ingest(&urls), &s.logs).await;
    for durable in [A, B] {
        wait_source(&serve.base, &nats.source_name(durable), "up").await;
    }

    nats.publish(b"not json", None).await;
    let (nats_ref, base) = (&nats, serve.base.as_str());
    wait_for(
        PATIENCE,
        move || async move {
            rejections(base, &nats_ref.source_name(A), "invalid_json").await >= 1.0
                && rejections(base, &nats_ref.source_name(B), "invalid_json").await >= 1.0
                && consumer_idle(nats_ref, A).await
                && consumer_idle(nats_ref, B).await
        },
        || "the bad message did not come to rest".to_owned(),
    )
    .await;
    for durable in [A, B] {
        assert_eq!(
            rejections(base, &nats.source_name(durable), "invalid_json").await,
            1.0,
            "{durable}"
        );
    }
    assert_eq!(
        nats.stream_messages().await,
        2,
        "the reject was published again"
    );
    drop(serve);
    nats.delete().await;
}

// ---------------------------------------------------------------------------------------------
// Connection cuts
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_connection_closed_by_the_broker_reconnects_and_loses_nothing() {
    let Some(rabbit) = Rabbit::connect().await else {
        return;
    };
    let broker = Broker::Rabbit(&rabbit);
    let db = SqliteFile::new("kxp.db");
    let s = setup(db.url(), 1000).await;
    let serve = start(db.url(), &ingest(&[rabbit.ingest_url(&s.account)]), &s.logs).await;
    wait_source(&serve.base, &rabbit.source_name(), "up").await;

    for n in 0..50 {
        broker.publish(n).await;
    }
    wait_all_consumed(broker, &s.inbox, 50).await;
    let closed = rabbit.close_kxp_connections().await;
    assert!(
        closed >= 1,
        "no connection of kxp serve for {}: {:#?}",
        rabbit.queue(),
        rabbit.kxp_connections().await
    );
    for n in 50..100 {
        broker.publish(n).await;
    }
    wait_all_consumed(broker, &s.inbox, 100).await;
    assert_one_event_per_message(db.url(), &s.inbox, 100).await;

    wait_source(&serve.base, &rabbit.source_name(), "up").await;
    let text = metrics(&serve.base).await;
    let source = rabbit.source_name();
    let reconnects = metric(&text, "kxp_ingest_reconnects_total", &[("source", &source)]);
    assert!(
        reconnects >= 1.0,
        "kxp_ingest_reconnects_total is {reconnects}: {}",
        text.lines()
            .filter(|l| l.contains("kxp_ingest"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(
        metric(&text, "kxp_ingest_source_up", &[("source", &source)]),
        1.0
    );
    drop(serve);
    rabbit.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_server_restart_reconnects_and_loses_nothing() {
    let Some(mut server) = NatsServer::spawn() else {
        return;
    };
    let nats = Nats::connect_to(&server.url()).await;
    let broker = Broker::Nats(&nats);
    let db = SqliteFile::new("kxp.db");
    let s = setup(db.url(), 1000).await;
    let serve = start(
        db.url(),
        &ingest(&[nats.ingest_url(DURABLE, &s.account)]),
        &s.logs,
    )
    .await;
    let source = nats.source_name(DURABLE);
    wait_source(&serve.base, &source, "up").await;

    for n in 0..50 {
        broker.publish(n).await;
    }
    wait_all_consumed(broker, &s.inbox, 50).await;

    server = tokio::task::spawn_blocking(move || {
        server.stop();
        server
    })
    .await
    .unwrap();
    // The sender notices (the state is not `up` while the server is away).
    let start_at = Instant::now();
    let noticed = loop {
        let health = source_health(&serve.base, &source).await;
        if health.as_ref().is_some_and(|h| h["state"] != "up") {
            break health;
        }
        if start_at.elapsed() > Duration::from_secs(30) {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        noticed.is_some(),
        "/healthz still says {source} is up 30 s after the server stopped"
    );
    server = tokio::task::spawn_blocking(move || {
        server.start();
        server
    })
    .await
    .unwrap();
    nats.wait_connected(PATIENCE).await;

    for n in 50..100 {
        broker.publish(n).await;
    }
    wait_all_consumed(broker, &s.inbox, 100).await;
    assert_one_event_per_message(db.url(), &s.inbox, 100).await;
    wait_source(&serve.base, &source, "up").await;
    let text = metrics(&serve.base).await;
    let _ = writeln!(
        std::io::stderr(),
        "{source}: the server went away and came back; noticed as {noticed:?}; {}",
        text.lines()
            .filter(|l| l.contains("kxp_ingest"))
            .collect::<Vec<_>>()
            .join("; ")
    );
    drop(serve);
    nats.delete().await;
    drop(server);
}

// ---------------------------------------------------------------------------------------------
// Backpressure
// ---------------------------------------------------------------------------------------------

/// With `--backlog-limit 5` and a receiver that holds every request, consumption pauses with
/// messages still in the broker and none rejected; released, all 100 become events.
async fn backpressure(broker: Broker<'_>, extra_query: &str) {
    const TOTAL: usize = 100;
    let db = SqliteFile::new("kxp.db");
    // Attempts wait on the held receiver instead of timing out (a failing endpoint's circuit
    // would open, and held deliveries do not count in the backlog).
    let s = setup(db.url(), 30_000).await;
    s.inbox.hold();
    let url = format!("{}{extra_query}", broker.ingest_url(&s.account));
    let mut args = ingest(&[url]);
    args.extend(["--backlog-limit".to_owned(), "5".to_owned()]);
    let serve = start(db.url(), &args, &s.logs).await;
    let source = broker.source();
    wait_source(&serve.base, &source, "up").await;
    for n in 0..TOTAL {
        broker.publish(n).await;
    }

    // Paused: the count of ingested messages stops growing while the broker still holds some.
    let start_at = Instant::now();
    let (mut last, mut steady) = (-1.0, 0);
    let (created, holding, text) = loop {
        let text = metrics(&serve.base).await;
        let created = metric(&text, "kxp_ingest_messages_total", &[("source", &source)]);
        let holding = broker.holding().await;
        steady = if created == last && created >= 5.0 && holding > 0 {
            steady + 1
        } else {
            0
        };
        if steady >= 3 {
            break (created, holding, text);
        }
        assert!(
            start_at.elapsed() < PATIENCE,
            "consumption did not pause at the backlog limit: {created} messages ingested, the \
             broker holds {holding}, the receiver holds {} requests",
            s.inbox.waiting.load(Ordering::SeqCst)
        );
        last = created;
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(
        created < TOTAL as f64,
        "{created} messages ingested: no backpressure"
    );
    assert!(holding > 0);
    assert_eq!(
        metric(&text, "kxp_ingest_rejected_total", &[("source", &source)]),
        0.0,
        "messages were rejected under backpressure: {}",
        text.lines()
            .filter(|l| l.contains("kxp_ingest"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    if let Broker::Rabbit(rabbit) = broker {
        assert!(rabbit.dead_letters().await.is_empty());
    }
    let _ = writeln!(
        std::io::stderr(),
        "{source}: paused at {created} ingested with {holding} in the broker and {} requests held",
        s.inbox.waiting.load(Ordering::SeqCst)
    );

    s.inbox.release();
    wait_all_consumed(broker, &s.inbox, TOTAL).await;
    assert_one_event_per_message(db.url(), &s.inbox, TOTAL).await;
    let text = metrics(&serve.base).await;
    assert_eq!(
        metric(&text, "kxp_ingest_rejected_total", &[("source", &source)]),
        0.0,
        "{}",
        text.lines()
            .filter(|l| l.contains("kxp_ingest"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    drop(serve);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_a_full_backlog_pauses_consumption_without_rejecting() {
    let Some(rabbit) = Rabbit::connect().await else {
        return;
    };
    backpressure(Broker::Rabbit(&rabbit), "&prefetch=10").await;
    rabbit.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_a_full_backlog_pauses_consumption_without_rejecting() {
    let Some(nats) = Nats::connect().await else {
        return;
    };
    backpressure(Broker::Nats(&nats), "&prefetch=10").await;
    let state = nats.consumer_state(DURABLE).await.unwrap();
    assert_eq!(state.max_ack_pending, 10, "{state:?}");
    nats.delete().await;
}

// ---------------------------------------------------------------------------------------------
// Configuration, and sources whose queue or stream does not exist yet
// ---------------------------------------------------------------------------------------------

/// Waits until both brokers hold nothing and the receiver has every `n` below `count`.
async fn wait_both_consumed(rabbit: &Rabbit, nats: &Nats, inbox: &Inbox, count: usize) {
    wait_for(
        PATIENCE,
        move || async move {
            inbox.distinct_n() >= count
                && Broker::Rabbit(rabbit).settled().await
                && Broker::Nats(nats).settled().await
        },
        || format!("{} of {count} messages arrived", inbox.distinct_n()),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sources_come_from_kxp_ingest_and_from_the_config_file() {
    let Some(rabbit) = Rabbit::connect().await else {
        return;
    };
    let Some(nats) = Nats::connect().await else {
        return;
    };
    let db = SqliteFile::new("kxp.db");
    let s = setup(db.url(), 1000).await;
    let urls = [
        rabbit.ingest_url(&s.account),
        nats.ingest_url(DURABLE, &s.account),
    ];
    let names = [rabbit.source_name(), nats.source_name(DURABLE)];

    // KXP_INGEST: several URLs separated by whitespace.
    let env = format!("{}\n  {}", urls[0], urls[1]);
    let serve = start_with_env(db.url(), &[], &[("KXP_INGEST", &env)], &s.logs).await;
    for name in &names {
        let health = wait_source(&serve.base, name, "up").await;
        assert!(
            health["lag"].is_u64() || health["lag"].is_null(),
            "{health}"
        );
        assert!(
            health["last_error"].is_null() || health["last_error"].is_string(),
            "{health}"
        );
    }
    for n in 0..10 {
        Broker::Rabbit(&rabbit).publish(n).await;
        Broker::Nats(&nats).publish(n + 10).await;
    }
    wait_both_consumed(&rabbit, &nats, &s.inbox, 20).await;
    kill(serve).await;

    // The file's `ingest = [..]`.
    let file = db.dir().join("kxp.toml");
    std::fs::write(&file, format!("ingest = [{:?}, {:?}]\n", urls[0], urls[1])).unwrap();
    let config = ["--config".to_owned(), file.display().to_string()];
    let serve = start(db.url(), &config, &s.logs).await;
    for name in &names {
        wait_source(&serve.base, name, "up").await;
    }
    for n in 20..30 {
        Broker::Rabbit(&rabbit).publish(n).await;
        Broker::Nats(&nats).publish(n + 10).await;
    }
    wait_both_consumed(&rabbit, &nats, &s.inbox, 40).await;
    assert_one_event_per_message(db.url(), &s.inbox, 40).await;
    let text = metrics(&serve.base).await;
    for name in &names {
        assert_eq!(
            metric(&text, "kxp_ingest_source_up", &[("source", name)]),
            1.0,
            "{name}: {}",
            text.lines()
                .filter(|l| l.contains("kxp_ingest"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    drop(serve);
    rabbit.delete().await;
    nats.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_queue_or_stream_is_down_until_it_exists_then_consumed() {
    let Some(rabbit) = Rabbit::connect_undeclared("kxp-test").await else {
        return;
    };
    if Nats::connect().await.map(drop).is_none() {
        return;
    }
    let nats = Nats::connect_undeclared(kxp_testkit::brokers::NATS_URL).await;
    let db = SqliteFile::new("kxp.db");
    let s = setup(db.url(), 1000).await;
    let urls = [
        rabbit.ingest_url(&s.account),
        nats.ingest_url(DURABLE, &s.account),
    ];
    let names = [rabbit.source_name(), nats.source_name(DURABLE)];
    // Neither exists: the sender still starts (the API serves), and says why each is down.
    let serve = start(db.url(), &ingest(&urls), &s.logs).await;
    for name in &names {
        let health = wait_source(&serve.base, name, "down").await;
        assert!(
            health["last_error"].as_str().is_some_and(|e| !e.is_empty()),
            "{health}"
        );
    }
    let text = metrics(&serve.base).await;
    for name in &names {
        assert_eq!(
            metric(&text, "kxp_ingest_source_up", &[("source", name)]),
            0.0,
            "{name}"
        );
    }

    // Once they exist, the sources come up by themselves (kxp never declares the queue).
    rabbit.declare().await;
    nats.declare().await;
    for name in &names {
        wait_source(&serve.base, name, "up").await;
    }
    for n in 0..5 {
        Broker::Rabbit(&rabbit).publish(n).await;
        Broker::Nats(&nats).publish(n + 5).await;
    }
    wait_both_consumed(&rabbit, &nats, &s.inbox, 10).await;
    assert_one_event_per_message(db.url(), &s.inbox, 10).await;
    drop(serve);
    rabbit.delete().await;
    nats.delete().await;
}

/// Creates an account on the sender's database with `kxp accounts create`; its id.
async fn create_account(database_url: &str, name: &str) -> String {
    let (code, out, err) = crate::accounts::kxp_async(
        &[
            "accounts",
            "create",
            "--database-url",
            database_url,
            "--name",
            name,
            "--json",
        ],
        None,
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let created: Value = serde_json::from_str(&out).unwrap();
    created["id"].as_str().unwrap().to_owned()
}

/// The `data.n` of the events of the sender's database, by account.
async fn events_by_account(database_url: &str) -> BTreeMap<String, BTreeSet<u64>> {
    let query = "SELECT account_id, payload FROM kxp_events";
    let pool = sqlx::SqlitePool::connect(database_url).await.unwrap();
    let rows: Vec<(String, String)> = sqlx::query_as(query).fetch_all(&pool).await.unwrap();
    pool.close().await;
    let mut by_account: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    for (account, payload) in rows {
        let envelope: Value = serde_json::from_str(&payload).unwrap();
        by_account
            .entry(account)
            .or_default()
            .insert(envelope["data"]["n"].as_u64().unwrap());
    }
    by_account
}

/// `account_header=allow:<acc>` on both brokers: a message that names an account of the list
/// or the URL's own (or none: the URL's) becomes that account's event; one that names another
/// account, existing or not, is rejected as `account_not_allowed`; a header that is not one
/// string (an AMQP integer, table or byte array, a NATS header given twice) is rejected as
/// `invalid_request`, never taken for the URL's account.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_allow_list_limits_what_the_header_may_name_on_both_brokers() {
    let Some(rabbit) = Rabbit::connect().await else {
        return;
    };
    let Some(nats) = Nats::connect().await else {
        return;
    };
    let db = SqliteFile::new("kxp.db");
    let s = setup(db.url(), 1000).await;
    let listed = create_account(db.url(), "Listed").await;
    let other = create_account(db.url(), "Other").await;
    let allow = format!("&account_header=allow:{listed}");
    let urls = [
        format!("{}{allow}", rabbit.ingest_url(&s.account)),
        format!("{}{allow}", nats.ingest_url(DURABLE, &s.account)),
    ];
    let mut rejected = nats.subscribe(&nats.rejected_subject()).await;
    let serve = start(db.url(), &ingest(&urls), &s.logs).await;
    let (amqp, js) = (rabbit.source_name(), nats.source_name(DURABLE));
    wait_source(&serve.base, &amqp, "up").await;
    wait_source(&serve.base, &js, "up").await;

    let rabbit_good: [(usize, Vec<(&str, AmqpHeader<'_>)>); 3] = [
        (0, vec![]),
        (1, vec![("x-kxp-account", AmqpHeader::Text(&s.account))]),
        (2, vec![("x-kxp-account", AmqpHeader::Text(&listed))]),
    ];
    for (n, headers) in &rabbit_good {
        rabbit
            .publish_with_typed_headers(&body(*n), None, headers)
            .await;
    }
    let rabbit_bad: [(usize, AmqpHeader<'_>, &str); 5] = [
        (10, AmqpHeader::Text(&other), "account_not_allowed"),
        (11, AmqpHeader::Text(UNKNOWN_ACCOUNT), "account_not_allowed"),
        (12, AmqpHeader::Integer(7), "invalid_request"),
        (13, AmqpHeader::Table(&[("id", "acc_x")]), "invalid_request"),
        (14, AmqpHeader::Bytes(b"acc_x"), "invalid_request"),
    ];
    for (n, header, _) in &rabbit_bad {
        rabbit
            .publish_with_typed_headers(&body(*n), None, &[("x-kxp-account", *header)])
            .await;
    }
    nats.publish_with_headers(&body(3), &[]).await;
    nats.publish_with_headers(&body(4), &[("X-Kxp-Account", &listed)])
        .await;
    let other_seq = nats
        .publish_with_headers(&body(20), &[("x-kxp-account", &other)])
        .await;
    let twice = [
        ("x-kxp-account", s.account.as_str()),
        ("x-kxp-account", &listed),
    ];
    let twice_seq = nats.publish_with_headers(&body(21), &twice).await;

    let start_at = Instant::now();
    let dead = loop {
        let dead = rabbit.dead_letters().await;
        if dead.len() >= rabbit_bad.len() {
            break dead;
        }
        assert!(
            start_at.elapsed() < PATIENCE,
            "the dead-letter queue got {} of {} messages",
            dead.len(),
            rabbit_bad.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let dead: BTreeSet<Vec<u8>> = dead.into_iter().map(|m| m.body).collect();
    let want: BTreeSet<Vec<u8>> = rabbit_bad.iter().map(|(n, _, _)| body(*n)).collect();
    assert_eq!(dead, want);
    let mut reasons = BTreeMap::new();
    for _ in 0..2 {
        let message = rejected
            .next_within(PATIENCE)
            .await
            .unwrap_or_else(|| panic!("no rejection on the rejected subject: {reasons:?}"));
        reasons.insert(
            message
                .header("Kxp-Source-Sequence")
                .unwrap_or("")
                .to_owned(),
            message.header("Kxp-Reject-Reason").unwrap_or("").to_owned(),
        );
    }
    assert_eq!(
        reasons,
        BTreeMap::from([
            (other_seq.to_string(), "account_not_allowed".to_owned()),
            (twice_seq.to_string(), "invalid_request".to_owned()),
        ])
    );

    wait_both_consumed(&rabbit, &nats, &s.inbox, 0).await;
    let text = metrics(&serve.base).await;
    for (source, reason, count) in [
        (&amqp, "account_not_allowed", 2.0),
        (&amqp, "invalid_request", 3.0),
        (&js, "account_not_allowed", 1.0),
        (&js, "invalid_request", 1.0),
    ] {
        assert_eq!(
            metric(
                &text,
                "kxp_ingest_rejected_total",
                &[("source", source), ("reason", reason)]
            ),
            count,
            "{source} {reason}: {}",
            text.lines()
                .filter(|l| l.contains("kxp_ingest_rejected"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    assert_eq!(
        events_by_account(db.url()).await,
        BTreeMap::from([
            (s.account.clone(), BTreeSet::from([0, 1, 3])),
            (listed.clone(), BTreeSet::from([2, 4])),
        ])
    );
    drop(serve);
    rabbit.delete().await;
    nats.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_without_an_account_or_against_the_schema_are_rejected_on_both_brokers() {
    let Some(rabbit) = Rabbit::connect().await else {
        return;
    };
    let Some(nats) = Nats::connect().await else {
        return;
    };
    let db = SqliteFile::new("kxp.db");
    let s = setup(db.url(), 1000).await;
    // No `account` in the URLs: each message must name its own.
    let rejected_subject = format!("{}.rejected", nats.subject());
    let mut rejected = nats.subscribe(&rejected_subject).await;
    let urls = [
        format!(
            "{}?queue={}&account_header=allow",
            kxp_testkit::brokers::RABBIT_URL,
            rabbit.queue()
        ),
        format!(
            "{}?stream={}&subject={}&durable={DURABLE}&account_header=allow&rejected_subject={rejected_subject}",
            nats.url(),
            nats.stream(),
            nats.subject()
        ),
    ];
    let serve = start(db.url(), &ingest(&urls), &s.logs).await;
    let (amqp, js) = (rabbit.source_name(), nats.source_name(DURABLE));
    wait_source(&serve.base, &amqp, "up").await;
    wait_source(&serve.base, &js, "up").await;
    let client = kxp_api::Client::new(&serve.base, KEY).unwrap();
    let version = client.account().await.unwrap().default_api_version;
    let schema = json!({
        "type": "object",
        "required": ["n"],
        "properties": {"n": {"type": "integer"}}
    });
    client
        .put_schema(EVENT_TYPE, &version, &schema)
        .await
        .unwrap();

    let own = [("x-kxp-account", s.account.as_str())];
    let nameless = body(900);
    let against = json!({"type": EVENT_TYPE, "data": {"n": "nine hundred"}})
        .to_string()
        .into_bytes();
    rabbit.publish_with_headers(&body(0), None, &own).await;
    rabbit.publish_with_headers(&nameless, None, &[]).await;
    rabbit.publish_with_headers(&against, None, &own).await;
    rabbit
        .publish_with_headers(&body(1), Some("msg-1"), &own)
        .await;
    nats.publish_with_headers(&body(2), &own).await;
    let nameless_seq = nats.publish_with_headers(&nameless, &[]).await;
    let against_seq = nats.publish_with_headers(&against, &own).await;
    nats.publish_with_headers(&body(3), &[own[0], ("Nats-Msg-Id", "msg-3")])
        .await;

    wait_both_consumed(&rabbit, &nats, &s.inbox, 4).await;
    let start_at = Instant::now();
    let dead = loop {
        let dead = rabbit.dead_letters().await;
        if dead.len() >= 2 {
            break dead;
        }
        assert!(
            start_at.elapsed() < PATIENCE,
            "the dead-letter queue got {} of 2 messages",
            dead.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let bodies: BTreeSet<&[u8]> = dead.iter().map(|m| m.body.as_slice()).collect();
    assert_eq!(
        bodies,
        BTreeSet::from([nameless.as_slice(), against.as_slice()])
    );
    let mut reasons = BTreeMap::new();
    for _ in 0..2 {
        let message = rejected
            .next_within(PATIENCE)
            .await
            .unwrap_or_else(|| panic!("no rejection on {rejected_subject}: {reasons:?}"));
        reasons.insert(
            message
                .header("Kxp-Source-Sequence")
                .unwrap_or("")
                .to_owned(),
            (
                message.header("Kxp-Reject-Reason").unwrap_or("").to_owned(),
                message.body,
            ),
        );
    }
    assert_eq!(
        reasons,
        BTreeMap::from([
            (
                nameless_seq.to_string(),
                ("account_required".to_owned(), nameless.clone())
            ),
            (
                against_seq.to_string(),
                ("schema_violation".to_owned(), against.clone())
            ),
        ])
    );

    let text = metrics(&serve.base).await;
    for source in [&amqp, &js] {
        for reason in ["account_required", "schema_violation"] {
            assert_eq!(
                metric(
                    &text,
                    "kxp_ingest_rejected_total",
                    &[("source", source), ("reason", reason)]
                ),
                1.0,
                "{source} {reason}: {}",
                text.lines()
                    .filter(|l| l.contains("kxp_ingest_rejected"))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
    }
    assert_one_event_per_message(db.url(), &s.inbox, 4).await;
    drop(serve);
    rabbit.delete().await;
    nats.delete().await;
}
