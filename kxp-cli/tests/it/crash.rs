//! Crash safety with real processes: `kxp serve` is SIGKILLed again and again while events are
//! emitted and delivered, then restarted; every acknowledged event must reach the receiver.
//! On SQLite with one process, on PostgreSQL with two sharing one database (which, without
//! kills, send each delivery once).

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use kxp_testkit::db::{Backend, PgDatabase, TestDatabase};
use serde_json::json;

pub(crate) const KEY: &str = "kxp_crash_test_key";

/// A small deterministic generator (splitmix64): the schedules of kills, from a seed.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub(crate) fn millis(&mut self, low: u64, high: u64) -> Duration {
        Duration::from_millis(low + self.next() % (high - low))
    }
}

/// A `kxp serve` process, killed when dropped.
pub(crate) struct Serve {
    child: Child,
    pub(crate) base: String,
}

impl Serve {
    /// This version's `kxp serve`, migrating the database at start.
    pub(crate) fn start(database_url: &str) -> Serve {
        Serve::start_with(env!("CARGO_BIN_EXE_kxp"), database_url, &["--migrate"])
    }

    /// `kxp serve` of the binary at `kxp` (another release's, for the upgrade test), with
    /// `extra` flags.
    pub(crate) fn start_with(kxp: &str, database_url: &str, extra: &[&str]) -> Serve {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Serve::start_at(kxp, database_url, extra, port)
    }

    /// [`Serve::start_with`] on `port` (a restarted sender keeps its address).
    pub(crate) fn start_at(kxp: &str, database_url: &str, extra: &[&str], port: u16) -> Serve {
        let mut child = Command::new(kxp)
            .args(["serve", "--dev", "--listen", &format!("127.0.0.1:{port}")])
            .args(extra)
            .args(["--database-url", database_url])
            .args([
                "--retry-schedule",
                "0s,100ms,200ms,400ms,800ms,1s,1s,2s,5s",
                "--jitter",
                "0.1",
            ])
            .args(["--delivery-timeout", "1s", "--lease-extra", "500ms"])
            .env("KXP_API_KEY", KEY)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let ready = lines
            .by_ref()
            .map_while(Result::ok)
            .any(|line| line.contains("listening on"));
        assert!(ready, "kxp serve did not start");
        // Keep draining stdout so the process never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Serve {
            child,
            base: format!("http://127.0.0.1:{port}"),
        }
    }

    pub(crate) fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Sends SIGTERM, as a process manager stopping it does; [`Serve::wait`] for its exit.
    pub(crate) fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -TERM failed");
    }

    /// Waits for the process to exit (after [`Serve::terminate`]).
    pub(crate) fn wait(&mut self) -> std::process::ExitStatus {
        self.child.wait().unwrap()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the receiver saw: per event, how many times; per delivery, whether one is in flight.
#[derive(Clone, Default)]
pub(crate) struct Seen {
    events: Arc<Mutex<HashMap<String, usize>>>,
    in_flight: Arc<Mutex<HashSet<String>>>,
    overlaps: Arc<Mutex<Vec<String>>>,
}

impl Seen {
    /// How many events arrived more than once.
    pub(crate) fn repeated(&self) -> usize {
        self.events
            .lock()
            .unwrap()
            .values()
            .filter(|n| **n > 1)
            .count()
    }
}

async fn receive(State(seen): State<Seen>, headers: HeaderMap, body: Bytes) -> &'static str {
    let delivery = headers["x-kxp-delivery-id"].to_str().unwrap().to_owned();
    if !seen.in_flight.lock().unwrap().insert(delivery.clone()) {
        seen.overlaps.lock().unwrap().push(delivery.clone());
    }
    // Hold each request a little, so two workers holding one delivery would overlap here.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let event: serde_json::Value = serde_json::from_slice(&body).unwrap();
    *seen
        .events
        .lock()
        .unwrap()
        .entry(event["id"].as_str().unwrap().to_owned())
        .or_default() += 1;
    seen.in_flight.lock().unwrap().remove(&delivery);
    "ok"
}

pub(crate) async fn receiver() -> (String, Seen) {
    let seen = Seen::default();
    let app = Router::new().fallback(receive).with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, seen)
}

pub(crate) async fn create_endpoint(base: &str, url: &str) {
    let mut endpoint = kxp_api::NewEndpoint::new(url);
    endpoint.timeout_ms = Some(1000);
    endpoint.skip_challenge = true;
    kxp_api::Client::new(base, KEY)
        .unwrap()
        .create_endpoint(&endpoint)
        .await
        .unwrap();
}

/// Emits `count` events to whichever server answers; returns the ids the sender acknowledged
/// (202, read by the typed client). A request cut off by a kill is not acknowledged, and the sender owes nothing for it.
async fn emit(
    bases: &[String],
    count: usize,
    tag: &str,
    progress: Arc<AtomicUsize>,
) -> Vec<String> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let clients: Vec<kxp_api::Client> = bases
        .iter()
        .map(|base| {
            kxp_api::Client::new(base, KEY)
                .unwrap()
                .with_http(http.clone())
        })
        .collect();
    let mut acknowledged = Vec::new();
    for n in 0..count {
        let client = &clients[n % clients.len()];
        let event = kxp_api::NewEvent::new("payment.succeeded", &json!({"n": n})).unwrap();
        let key = format!("{tag}-{n}");
        if let Ok(event) = client.create_event(&event, Some(&key)).await {
            acknowledged.push(event.id.into_string());
            progress.fetch_add(1, Ordering::SeqCst);
        }
    }
    acknowledged
}

pub(crate) async fn wait_until_all_arrive(seen: &Seen, ids: &[String], within: Duration) {
    let start = Instant::now();
    loop {
        let missing: Vec<String> = {
            let events = seen.events.lock().unwrap();
            ids.iter()
                .filter(|id| !events.contains_key(*id))
                .cloned()
                .collect()
        };
        if missing.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < within,
            "{} of {} events never arrived: {:?}",
            missing.len(),
            ids.len(),
            &missing[..missing.len().min(5)]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Emits in rounds, killing the sender at a different moment of each, restarting it after.
async fn kill_loop(
    database_url: &str,
    processes: usize,
    seen: &Seen,
    rounds: usize,
) -> Vec<String> {
    let mut acknowledged = Vec::new();
    for round in 0..rounds {
        let servers: Vec<Serve> = (0..processes).map(|_| Serve::start(database_url)).collect();
        let bases: Vec<String> = servers.iter().map(|s| s.base.clone()).collect();
        let progress = Arc::new(AtomicUsize::new(0));
        let emitting = tokio::spawn({
            let (bases, progress) = (bases.clone(), progress.clone());
            async move { emit(&bases, 30, &format!("round{round}"), progress).await }
        });
        // Kill mid-flight, at a different point of each round: once this round has had a few
        // events acknowledged (so the test means something however slow the machine is), and
        // while the rest are still being emitted and delivered.
        let target = 4 + 5 * round;
        let started = Instant::now();
        while progress.load(Ordering::SeqCst) < target
            && started.elapsed() < Duration::from_secs(20)
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        for server in servers {
            tokio::task::spawn_blocking(move || server.kill())
                .await
                .unwrap();
        }
        acknowledged.extend(emitting.await.unwrap());
    }
    // A last start finishes the work: leases of killed workers expire and are reclaimed.
    let survivors: Vec<Serve> = (0..processes).map(|_| Serve::start(database_url)).collect();
    wait_until_all_arrive(seen, &acknowledged, Duration::from_secs(60)).await;
    drop(survivors);
    acknowledged
}

/// Each named scenario, once per backend ([`kxp_testkit::each_backend!`] with [`run`]):
/// `scenario::sqlite` and `scenario::postgres`. A scenario is `async fn(Backend, String)`, the
/// backend and its database's URL.
macro_rules! each_backend {
    ($($scenario:ident),+ $(,)?) => {
        kxp_testkit::each_backend!(super::run => $($scenario),+);
    };
}

/// How many `kxp serve` processes share one database of `backend`: SQLite suits one process
/// (one writer at a time), PostgreSQL several.
fn processes(backend: Backend) -> usize {
    match backend {
        Backend::Sqlite => 1,
        Backend::Postgres => 2,
    }
}

/// Runs `scenario` on a fresh database of `backend`, then deletes it; on PostgreSQL without
/// `KXP_TEST_DATABASE_URL`, returns after the SKIPPED line instead.
async fn run<F, Fut>(backend: Backend, _name: &str, scenario: F)
where
    F: FnOnce(Backend, String) -> Fut,
    Fut: Future<Output = ()>,
{
    let Some(database) = TestDatabase::create(backend, "kxp_sender_crash").await else {
        return;
    };
    scenario(backend, database.url().to_owned()).await;
    database.drop().await;
}

each_backend!(sigkill_at_any_moment_loses_no_event);

async fn sigkill_at_any_moment_loses_no_event(backend: Backend, database_url: String) {
    let (url, seen) = receiver().await;
    {
        let first = Serve::start(&database_url);
        create_endpoint(&first.base, &url).await;
        first.kill();
    }
    let acknowledged = kill_loop(&database_url, processes(backend), &seen, 5).await;
    assert!(
        acknowledged.len() >= 50,
        "too few events got through to test anything: {}",
        acknowledged.len()
    );
    eprintln!(
        "{backend:?}: {} acknowledged events, all delivered after 5 kills",
        acknowledged.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_on_postgresql_share_the_work_and_send_each_delivery_once() {
    let Some(database) = PgDatabase::create("kxp_sender_crash").await else {
        return;
    };
    let (url, seen) = receiver().await;

    // Two processes, no kills: every delivery is sent exactly once, never by both at once.
    let a = Serve::start(database.url());
    let b = Serve::start(database.url());
    create_endpoint(&a.base, &url).await;
    let ids = emit(
        &[a.base.clone(), b.base.clone()],
        100,
        "calm",
        Arc::default(),
    )
    .await;
    assert_eq!(ids.len(), 100);
    wait_until_all_arrive(&seen, &ids, Duration::from_secs(60)).await;
    {
        let events = seen.events.lock().unwrap();
        let twice: Vec<_> = ids.iter().filter(|id| events[*id] != 1).collect();
        assert!(
            twice.is_empty(),
            "delivered more than once without any crash: {twice:?}"
        );
    }
    assert!(
        seen.overlaps.lock().unwrap().is_empty(),
        "two workers held one delivery at once"
    );
    drop((a, b));
    database.drop().await;
}
