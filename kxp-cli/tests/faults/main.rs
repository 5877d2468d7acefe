//! The fault suite: `kxp serve` and a dedup receiver (the axum example, kxp-dedup in-transaction
//! mode) run as real processes while a merchant emits events and the suite breaks things, one
//! fault at a time, in a seeded order:
//!
//! - the sender's disk full, then freed; the receiver's disk full, then freed (SQLite on a
//!   tmpfs of each process's own);
//! - PostgreSQL crashed (`pg_ctl stop -m immediate`) and started again, on an instance the suite
//!   makes with `initdb` on a port of its own, never the shared server;
//! - 1,000 idle and 100 slowloris connections to each process, whose file limit the suite
//!   lowers to 1,024;
//! - another account's 50 endpoints that accept and never answer;
//! - SIGKILL of either process, at a seeded moment, and a restart.
//!
//! After each fault, the suite waits for an event acknowledged after it to be processed (how
//! long that takes is the recovery time it prints). At the end, every event the sender
//! acknowledged must have been processed exactly once: the receiver's `payments` table, which
//! has no unique constraint, holds one row for each. And while the other account's endpoints
//! hang, the healthy account's events are all processed before the first hanging attempt times
//! out.
//!
//! It prints its seed first; `KXP_FAULT_SEED=<seed>` replays the same order, pauses and kill
//! moments. Where a part cannot run here (no root for the tmpfs, no PostgreSQL server programs)
//! it says so loudly and runs the rest; `KXP_REQUIRE_FAULTS=1` (set by `.ci/run`) makes that a
//! failure. Every wait is bounded, so the suite ends in a few minutes either way.

// In a test, a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod ledger;
mod processes;
mod traffic;

use std::collections::HashMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use kxp_testkit::confine::Tmpfs;

use ledger::{Ledger, Processed};

/// The suite started in a tmpfs's namespace to read a ledger there (see [`ledger::READ_LEDGER`]).
fn print_ledger(path: &str) -> ExitCode {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    match runtime.block_on(Ledger::Sqlite(path.into()).print()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
use processes::{KEY, Postgres, Receiver, Sender, free_port};
use traffic::{Acked, Emitter, Flood, Hanging, now_ms};

/// The name `cargo test` filters match against.
const TEST_NAME: &str = "fault_suite";
/// The healthy endpoint's delivery timeout.
const HEALTHY_TIMEOUT_MS: u64 = 2_000;
/// The hanging endpoints' delivery timeout: the moment the healthy account's events must beat.
const HANGING_TIMEOUT_MS: u64 = 8_000;
/// How long the connection flood is held: past both processes' 10 s header-read timeout.
const FLOOD_HOLD: Duration = Duration::from_secs(12);
/// The longest a disk is kept full waiting for a write to fail.
const FULL_BOUND: Duration = Duration::from_secs(20);
/// The longest a process may take to come back from a fault.
const RECOVERY_BOUND: Duration = Duration::from_secs(60);
/// The longest the last acknowledged events may take to be processed.
const DRAIN_BOUND: Duration = Duration::from_secs(120);

/// SplitMix64: the suite's only source of chance, so a seed replays a run.
pub struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn between_ms(&mut self, low: u64, high: u64) -> Duration {
        Duration::from_millis(low + self.below(high - low + 1))
    }

    /// An independent stream for a task of its own.
    pub fn fork(&mut self) -> Rng {
        Rng(self.next())
    }

    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = usize::try_from(self.below(i as u64 + 1)).unwrap();
            items.swap(i, j);
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    SenderDiskFull,
    ReceiverDiskFull,
    KillSender,
    KillReceiver,
    PostgresCrash,
    ConnectionFlood,
    HangingTenant,
}

/// What a run found, for the summary.
struct Summary {
    name: &'static str,
    acked: usize,
    faults: usize,
    lost: usize,
    duplicates: usize,
    p50_ms: i64,
    p99_ms: i64,
    max_recovery_ms: u128,
}

/// One pipeline: a sender, a receiver, their stores, and the faults to go through.
struct Run {
    name: &'static str,
    rng: Rng,
    sender: Sender,
    receiver: Receiver,
    sender_disk: Option<Tmpfs>,
    receiver_disk: Option<Tmpfs>,
    postgres: Option<Postgres>,
    ledger: Ledger,
    noisy_key: String,
    emitter: Option<Emitter>,
    /// Kept open to the end, so the other account's attempts keep hanging through later faults.
    hanging: Option<Hanging>,
    recoveries: Vec<u128>,
}

/// Keeps a disk full for `seeded`, and longer while `bitten` (whether it made anything fail yet)
/// says no, up to [`FULL_BOUND`]; how long that was. SQLite writes into the space its WAL
/// already has, so a full disk bites only once the WAL or the database must grow.
async fn hold_full<F, Fut>(seeded: Duration, bitten: F) -> Duration
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    tokio::time::sleep(seeded).await;
    while !bitten().await && started.elapsed() < FULL_BOUND {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    started.elapsed()
}

fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

impl Run {
    /// Starts the sender, the account whose endpoints will hang, the healthy endpoint and the
    /// receiver it points at.
    async fn start(
        name: &'static str,
        mut rng: Rng,
        mut sender: Sender,
        receiver_database: String,
        disks: Option<(Tmpfs, Tmpfs)>,
        postgres: Option<Postgres>,
        ledger: Ledger,
    ) -> Run {
        let (sender_disk, receiver_disk) = match disks {
            Some((s, r)) => (Some(s), Some(r)),
            None => (None, None),
        };
        blocking(|| sender.start(sender_disk.as_ref()));
        let noisy_key = blocking(|| sender.create_account("hanging tenant", sender_disk.as_ref()));
        let receiver_port = free_port();
        let mut endpoint =
            kxp_api::NewEndpoint::new(format!("http://127.0.0.1:{receiver_port}/webhooks"));
        endpoint.timeout_ms = Some(HEALTHY_TIMEOUT_MS);
        endpoint.skip_challenge = true;
        let created = kxp_api::Client::new(&sender.base(), KEY)
            .unwrap()
            .create_endpoint(&endpoint)
            .await
            .unwrap();
        let mut receiver = Receiver::new(
            receiver_port,
            receiver_database,
            created.secret.as_ref().unwrap().expose().to_owned(),
        );
        blocking(|| receiver.start(receiver_disk.as_ref()));
        let emitter = Some(Emitter::start(&sender.base(), KEY, 2, &mut rng));
        Run {
            name,
            rng,
            sender,
            receiver,
            sender_disk,
            receiver_disk,
            postgres,
            ledger,
            noisy_key,
            emitter,
            hanging: None,
            recoveries: Vec::new(),
        }
    }

    fn emitter(&self) -> &Emitter {
        self.emitter.as_ref().unwrap()
    }

    /// Waits for an event acknowledged at or after `since_ms` to be processed: the pipeline
    /// works again. How long after `since_ms` that was.
    async fn recovered(&self, since_ms: i64, after: &str) -> i64 {
        let started = Instant::now();
        loop {
            if let Ok(processed) = self.ledger.read(self.receiver_disk.as_ref()).await {
                let first = self
                    .emitter()
                    .acked()
                    .iter()
                    .filter(|a| a.at_ms >= since_ms)
                    .filter_map(|a| processed.get(&a.id))
                    .map(|p| p.first_ms)
                    .min();
                if let Some(first) = first {
                    return (first - since_ms).max(0);
                }
            }
            assert!(
                started.elapsed() < RECOVERY_BOUND,
                "{}: nothing acknowledged after {after} was processed within {RECOVERY_BOUND:?}",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The sender's count of attempts answered 5xx (its `/metrics`, since it last started).
    async fn answered_5xx(&self) -> u64 {
        let metrics = kxp_api::Client::new(&self.sender.base(), KEY)
            .unwrap()
            .metrics()
            .await
            .unwrap();
        metrics
            .lines()
            .find_map(|l| l.strip_prefix("kxp_attempts_total{outcome=\"http_5xx\"} "))
            .and_then(|n| n.trim().parse().ok())
            .expect("kxp_attempts_total{outcome=\"http_5xx\"} in /metrics")
    }

    /// Causes `fault`, ends it, and says what happened.
    async fn inject(&mut self, fault: Fault) -> String {
        match fault {
            Fault::SenderDiskFull => {
                let before = self.emitter().refused();
                let disk = self.sender_disk.as_ref().unwrap();
                blocking(|| disk.fill());
                let seeded = self.rng.between_ms(1_000, 3_000);
                let held = hold_full(seeded, || async { self.emitter().refused() > before }).await;
                let refused = self.emitter().refused() - before;
                blocking(|| disk.free());
                assert!(
                    refused > 0,
                    "{}: nothing was refused while the sender's disk was full: it was not filled",
                    self.name
                );
                format!("full for {held:?}: {refused} requests refused (503), then freed")
            }
            Fault::ReceiverDiskFull => {
                let before = self.answered_5xx().await;
                let disk = self.receiver_disk.as_ref().unwrap();
                blocking(|| disk.fill());
                let seeded = self.rng.between_ms(1_000, 3_000);
                let held = hold_full(seeded, || async { self.answered_5xx().await > before }).await;
                let refused = self.answered_5xx().await - before;
                blocking(|| disk.free());
                assert!(
                    refused > 0,
                    "{}: no delivery got a 5xx while the receiver's disk was full: it was not filled",
                    self.name
                );
                format!("full for {held:?}: {refused} deliveries answered 5xx, then freed")
            }
            Fault::KillSender | Fault::KillReceiver => {
                let after = self.rng.between_ms(100, 1_500);
                tokio::time::sleep(after).await;
                let down = Instant::now();
                blocking(|| {
                    if fault == Fault::KillSender {
                        self.sender.kill();
                        self.sender.start(self.sender_disk.as_ref());
                    } else {
                        self.receiver.kill();
                        self.receiver.start(self.receiver_disk.as_ref());
                    }
                });
                format!(
                    "SIGKILL after {after:?}, listening again in {:?}",
                    down.elapsed()
                )
            }
            Fault::PostgresCrash => {
                let postgres = self.postgres.as_ref().unwrap();
                blocking(|| postgres.crash());
                let down = self.rng.between_ms(1_000, 3_000);
                tokio::time::sleep(down).await;
                blocking(|| postgres.up());
                format!("every backend killed, down for {down:?}, then recovered from its WAL")
            }
            Fault::ConnectionFlood => self.flood().await,
            Fault::HangingTenant => self.hanging_tenant().await,
        }
    }

    /// 1,000 idle and 100 slowloris connections to each process, held past their header-read
    /// timeout: both keep running, and deliveries go on meanwhile.
    async fn flood(&mut self) -> String {
        let to_sender = Flood::open(self.sender.port, 1_000, 100).await;
        let to_receiver = Flood::open(self.receiver.port, 1_000, 100).await;
        let started = now_ms();
        tokio::time::sleep(FLOOD_HOLD).await;
        let ended = now_ms();
        let during: Vec<Acked> = self
            .emitter()
            .acked()
            .into_iter()
            .filter(|a| a.at_ms >= started)
            .collect();
        let processed = self
            .ledger
            .read(self.receiver_disk.as_ref())
            .await
            .unwrap_or_default();
        let processed_during = during
            .iter()
            .filter(|a| processed.get(&a.id).is_some_and(|p| p.first_ms <= ended))
            .count();
        let (sender_closed, receiver_closed) =
            (to_sender.closed_by_server(), to_receiver.closed_by_server());
        let detail = format!(
            "sender: {} opened, {sender_closed} closed by it; receiver: {} opened, \
             {receiver_closed} closed by it; meanwhile {} events acknowledged, {processed_during} \
             of them processed",
            to_sender.opened,
            to_receiver.opened,
            during.len()
        );
        to_sender.release();
        to_receiver.release();
        assert!(
            self.sender.alive() && self.receiver.alive(),
            "{}: a process died under the connection flood",
            self.name
        );
        assert!(
            processed_during > 0,
            "{}: nothing was delivered during the connection flood ({detail})",
            self.name
        );
        detail
    }

    /// Another account's 50 endpoints hang; the healthy account's events emitted meanwhile are
    /// all processed before the first hanging attempt times out.
    async fn hanging_tenant(&mut self) -> String {
        let hanging = Hanging::start().await;
        let noisy = kxp_api::Client::new(&self.sender.base(), &self.noisy_key).unwrap();
        for n in 0..50 {
            let mut endpoint = kxp_api::NewEndpoint::new(hanging.url(n));
            endpoint.timeout_ms = Some(HANGING_TIMEOUT_MS);
            endpoint.skip_challenge = true;
            noisy.create_endpoint(&endpoint).await.unwrap();
        }
        // Four events, each to all fifty endpoints: 200 deliveries that can only time out.
        for n in 0..4 {
            let event =
                kxp_api::NewEvent::new("payment.succeeded", &serde_json::json!({"amount": n}))
                    .unwrap();
            noisy.create_event(&event, None).await.unwrap();
        }
        let burst_ms = now_ms();
        let started = Instant::now();
        let first_close = loop {
            if let Some(at) = hanging.first_close_ms() {
                break at;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "{}: no hanging attempt timed out within 60 s",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let hung = hanging.accepted();
        // The healthy events of the first two seconds after the burst, while the hanging
        // attempts held their workers: none of them may wait for a timeout.
        let healthy: Vec<Acked> = self
            .emitter()
            .acked()
            .into_iter()
            .filter(|a| a.at_ms >= burst_ms && a.at_ms < burst_ms + 2_000)
            .collect();
        let (processed, missing) = self.wait_processed(&healthy).await;
        assert!(
            missing.is_empty(),
            "{}: healthy events never processed: {missing:?}",
            self.name
        );
        let last = healthy
            .iter()
            .map(|a| processed[&a.id].first_ms)
            .max()
            .unwrap_or(burst_ms);
        assert!(
            hung >= 32,
            "{}: only {hung} hanging attempts started: the test did not load the workers",
            self.name
        );
        assert!(
            !healthy.is_empty() && last < first_close,
            "{}: {} healthy events; the last processed {} ms after the burst, the first hanging \
             attempt timed out {} ms after it",
            self.name,
            healthy.len(),
            last - burst_ms,
            first_close - burst_ms
        );
        self.hanging = Some(hanging);
        format!(
            "{hung} attempts hanging; {} healthy events processed by {} ms after the burst, \
             the first hanging attempt timed out at {} ms",
            healthy.len(),
            last - burst_ms,
            first_close - burst_ms
        )
    }

    /// Waits until each of `events` is processed, for up to [`DRAIN_BOUND`]: what was
    /// processed, and the ids of those that were not (lost).
    async fn wait_processed(&self, events: &[Acked]) -> (HashMap<String, Processed>, Vec<String>) {
        let started = Instant::now();
        let mut processed = HashMap::new();
        loop {
            if let Ok(now) = self.ledger.read(self.receiver_disk.as_ref()).await {
                processed = now;
            }
            let missing: Vec<String> = events
                .iter()
                .filter(|a| !processed.contains_key(&a.id))
                .map(|a| a.id.clone())
                .collect();
            if missing.is_empty() || started.elapsed() >= DRAIN_BOUND {
                return (processed, missing);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Goes through `plan`, then checks every acknowledged event was processed exactly once.
    async fn go(mut self, mut plan: Vec<Fault>) -> Summary {
        self.rng.shuffle(&mut plan);
        println!("{}: faults in this order: {plan:?}", self.name);
        let start = now_ms();
        let first = self.recovered(start, "the start").await;
        println!(
            "{}: first event processed {first} ms after the start",
            self.name
        );
        for fault in &plan {
            let began = Instant::now();
            let detail = self.inject(*fault).await;
            let ended = now_ms();
            let recovery = self.recovered(ended, &format!("{fault:?}")).await;
            self.recoveries.push(u128::try_from(recovery).unwrap());
            println!(
                "{}: {fault:?} ({:.1} s): {detail}; processing again {recovery} ms after",
                self.name,
                began.elapsed().as_secs_f64()
            );
        }
        let acked = self.emitter.take().unwrap().stop().await;
        let (processed, lost) = self.wait_processed(&acked).await;
        if !lost.is_empty() {
            eprintln!(
                "{}: lost, such as {:?}",
                self.name,
                &lost[..lost.len().min(5)]
            );
        }
        let twice: Vec<(&String, &Processed)> =
            processed.iter().filter(|(_, p)| p.times > 1).collect();
        if !twice.is_empty() {
            eprintln!(
                "{}: processed more than once, such as {:?}",
                self.name,
                &twice[..twice.len().min(5)]
            );
        }
        let mut latencies: Vec<i64> = acked
            .iter()
            .filter_map(|a| Some((processed.get(&a.id)?.first_ms - a.at_ms).max(0)))
            .collect();
        latencies.sort_unstable();
        let quantile = |q: f64| {
            let last = latencies.len().saturating_sub(1);
            latencies
                .get(((last as f64) * q).round() as usize)
                .copied()
                .unwrap_or(0)
        };
        Summary {
            name: self.name,
            acked: acked.len(),
            faults: plan.len(),
            lost: lost.len(),
            duplicates: twice.len(),
            p50_ms: quantile(0.50),
            p99_ms: quantile(0.99),
            max_recovery_ms: self.recoveries.iter().copied().max().unwrap_or(0),
        }
    }
}

/// The SQLite pipeline: each process on a tmpfs of its own when mount namespaces are permitted.
async fn sqlite(rng: Rng, skipped: &mut Vec<&'static str>) -> Summary {
    let sender_dir = tempfile::tempdir().unwrap();
    let receiver_dir = tempfile::tempdir().unwrap();
    let sender_db = sender_dir.path().join("kxp.db");
    let receiver_db = receiver_dir.path().join("receiver.db");
    let confined = Tmpfs::permitted("the fault suite's full disks");
    let disks = confined.then(|| {
        (
            Tmpfs::mount(sender_dir.path(), "32m"),
            Tmpfs::mount(receiver_dir.path(), "16m"),
        )
    });
    let ledger = Ledger::Sqlite(receiver_db.clone());
    let mut plan = vec![
        Fault::KillSender,
        Fault::KillSender,
        Fault::KillReceiver,
        Fault::KillReceiver,
        Fault::ConnectionFlood,
        Fault::HangingTenant,
    ];
    if confined {
        plan.extend([Fault::SenderDiskFull, Fault::ReceiverDiskFull]);
    } else {
        skipped.push("full disks");
    }
    let sender = Sender::new(format!("sqlite://{}", sender_db.display()));
    let run = Run::start(
        "sqlite",
        rng,
        sender,
        format!("sqlite://{}", receiver_db.display()),
        disks,
        None,
        ledger,
    )
    .await;
    run.go(plan).await
}

/// The PostgreSQL pipeline, on an instance of the suite's own: `None` where it cannot be made.
async fn postgres(rng: Rng, skipped: &mut Vec<&'static str>) -> Option<Summary> {
    let Some(postgres) = blocking(Postgres::start) else {
        skipped.push("the PostgreSQL pipeline");
        return None;
    };
    {
        use sqlx::Connection;
        let mut admin = sqlx::PgConnection::connect(&postgres.url("postgres"))
            .await
            .unwrap();
        for database in ["sender", "receiver"] {
            sqlx::query(&format!("CREATE DATABASE {database}"))
                .execute(&mut admin)
                .await
                .unwrap();
        }
        admin.close().await.unwrap();
    }
    let sender = Sender::new(postgres.url("sender"));
    let receiver_database = postgres.url("receiver");
    let ledger = Ledger::Postgres(receiver_database.clone());
    let plan = vec![
        Fault::PostgresCrash,
        Fault::PostgresCrash,
        Fault::KillSender,
        Fault::KillReceiver,
        Fault::HangingTenant,
    ];
    let run = Run::start(
        "postgres",
        rng,
        sender,
        receiver_database,
        None,
        Some(postgres),
        ledger,
    )
    .await;
    Some(run.go(plan).await)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if let [_, flag, path] = args.as_slice()
        && flag == ledger::READ_LEDGER
    {
        return print_ledger(path);
    }
    // Like a libtest binary: `cargo test --workspace -- NAME` runs it only when NAME is part of
    // its one test's name, and `-- --list` lists it.
    if args.iter().any(|a| a == "--list") {
        println!("{TEST_NAME}: test");
        return ExitCode::SUCCESS;
    }
    let filters: Vec<&String> = args
        .iter()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    if !filters.is_empty() && !filters.iter().any(|f| TEST_NAME.contains(f.as_str())) {
        println!("{TEST_NAME}: filtered out");
        return ExitCode::SUCCESS;
    }
    let seed = match std::env::var("KXP_FAULT_SEED") {
        Ok(seed) => seed.parse().expect("KXP_FAULT_SEED is a number"),
        Err(_) => u64::try_from(now_ms()).unwrap(),
    };
    println!("fault suite: seed {seed} (KXP_FAULT_SEED={seed} replays it)");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let began = Instant::now();
    let mut rng = Rng(seed);
    let mut skipped = Vec::new();
    let summaries: Vec<Summary> = runtime.block_on(async {
        let mut summaries = vec![sqlite(rng.fork(), &mut skipped).await];
        summaries.extend(postgres(rng.fork(), &mut skipped).await);
        summaries
    });
    println!(
        "\n| store | events acknowledged | faults | lost | processed twice | p50 | p99 | slowest recovery |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for s in &summaries {
        println!(
            "| {} | {} | {} | {} | {} | {} ms | {} ms | {} ms |",
            s.name, s.acked, s.faults, s.lost, s.duplicates, s.p50_ms, s.p99_ms, s.max_recovery_ms
        );
    }
    let broken = summaries.iter().any(|s| s.lost > 0 || s.duplicates > 0);
    println!(
        "fault suite: {} in {:.0} s (seed {seed})",
        if broken { "FAILED" } else { "passed" },
        began.elapsed().as_secs_f64()
    );
    if broken {
        eprintln!("fault suite: an acknowledged event was lost or processed twice (seed {seed})");
        return ExitCode::FAILURE;
    }
    if skipped.is_empty() {
        return ExitCode::SUCCESS;
    }
    eprintln!("SKIPPED (loudly): {}", skipped.join(", "));
    if std::env::var("KXP_REQUIRE_FAULTS").as_deref() == Ok("1") {
        eprintln!("KXP_REQUIRE_FAULTS=1: every part of the fault suite must run");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
