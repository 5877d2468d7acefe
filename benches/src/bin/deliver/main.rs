//! `deliver`: the end-to-end sender benchmark (issue 10).
//!
//! Starts a loopback receiver in this process, starts the system under test as child processes
//! (`kxp serve` on SQLite or PostgreSQL, 1 or 2 processes; or Svix's `svix-server`), sets up
//! endpoints through its public API, emits N events of about 1 KiB with C concurrent clients
//! through its public API, waits until every event arrived, and reports delivered/s, ingest/s,
//! latency percentiles (emit → arrival), CPU per event of the server and of PostgreSQL, peak RSS
//! and duplicates, beside the limits measured in the same run: the receiver alone and bare
//! single-row commits. Markdown on stdout, progress on stderr.
//!
//! ```sh
//! cd /work/main && cargo build --release -p kxp-cli
//! cd benches && cargo run --release --bin deliver -- \
//!     --system kxp-sqlite,kxp-postgres --kxp-args '' --kxp-args '--rate-limit 0 --per-endpoint-concurrency 64' \
//!     --events 5000 --clients 32 --repeat 3 --alternate
//! ```
//!
//! Loopback only. Every loop is bounded by a count and a time limit; the servers it started
//! are killed and the databases it created dropped at the end, also on error or Ctrl-C.

mod limits;
mod procfs;
mod receiver;
mod systems;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use sqlx::PgPool;

use receiver::{Health, Receiver, Run};
use systems::{Deployment, Setup, System};

pub type Result<T> = std::result::Result<T, String>;

#[derive(Parser, Debug)]
#[command(
    name = "deliver",
    about = "End-to-end webhook delivery benchmark: kxp serve (SQLite, PostgreSQL) and Svix, \
             against a loopback receiver, beside the receiver-alone and bare-commit limits."
)]
struct Args {
    /// Systems under test, comma-separated: kxp-sqlite, kxp-postgres, svix-memory, svix-redis.
    #[arg(long, default_value = "kxp-sqlite", value_delimiter = ',')]
    system: Vec<String>,
    /// Server processes, comma-separated (2 only where they share the work: kxp-postgres,
    /// svix-redis).
    #[arg(long, default_value = "1", value_delimiter = ',')]
    processes: Vec<usize>,
    /// Extra flags for `kxp serve`, split on spaces; repeat for variants (`''`: the defaults).
    #[arg(long = "kxp-args", allow_hyphen_values = true)]
    kxp_args: Vec<String>,
    /// The `kxp` binary (`cargo build --release -p kxp-cli` in the main workspace).
    #[arg(long, default_value = "../target/release/kxp")]
    kxp_bin: PathBuf,
    /// The `svix-server` binary.
    #[arg(long, default_value = "/tmp/svix-target/release/svix-server")]
    svix_bin: PathBuf,
    /// Events per run.
    #[arg(long, default_value_t = 5000)]
    events: usize,
    /// Concurrent emitting clients.
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// Events per second in all (0: as fast as the clients go).
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// Size of each event's `data`, in bytes (about).
    #[arg(long, default_value_t = 1024)]
    payload_bytes: usize,
    /// Endpoints; event i goes to endpoint i mod endpoints (each endpoint subscribes to its own
    /// event type, so every event has one delivery).
    #[arg(long, default_value_t = 1)]
    endpoints: usize,
    /// kxp accounts the endpoints are spread over (endpoint j belongs to account j mod accounts).
    #[arg(long, default_value_t = 1)]
    accounts: usize,
    /// Fraction of endpoints that are unhealthy, alternately slow (200 after 10 s) and failing
    /// (500); rate and latency are then those of the healthy endpoints.
    #[arg(long, default_value_t = 0.0)]
    unhealthy: f64,
    /// Runs of each configuration.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Take the configurations in turn (forwards, then backwards) in each of the rounds,
    /// instead of each configuration's runs back to back.
    #[arg(long)]
    alternate: bool,
    /// Longest wait, per run, for every event to arrive (seconds).
    #[arg(long, default_value_t = 300)]
    timeout: u64,
    /// PostgreSQL server (loopback), without a database.
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432")]
    pg_server: String,
    /// Redis for svix-redis (loopback; the database is flushed).
    #[arg(long, default_value = "redis://127.0.0.1:6379/13")]
    redis_url: String,
    /// Seconds for each limit measurement.
    #[arg(long, default_value_t = 3.0)]
    limit_secs: f64,
    /// Skip the limit measurements.
    #[arg(long)]
    no_limits: bool,
    /// Sample pg_stat_activity's wait events every this many ms during PostgreSQL runs (0: off).
    #[arg(long, default_value_t = 100)]
    sample_ms: u64,
    /// Keep each run's temporary directory (server logs, SQLite file).
    #[arg(long)]
    keep_logs: bool,
}

struct Config {
    system: System,
    processes: usize,
    kxp_args: Vec<String>,
}

impl Config {
    fn flags(&self) -> String {
        if self.kxp_args.is_empty() {
            if self.system.is_kxp() {
                "defaults"
            } else {
                "—"
            }
            .to_owned()
        } else {
            format!("`{}`", self.kxp_args.join(" "))
        }
    }
}

#[derive(Default, Clone)]
struct Measured {
    emitted: usize,
    emit_errors: usize,
    first_emit_error: Option<String>,
    expected: usize,
    arrived: usize,
    duplicates: u64,
    unparsed: u64,
    unhealthy_hits: u64,
    ingest_per_s: f64,
    delivered_per_s: f64,
    p50: f64,
    p90: f64,
    p99: f64,
    max: f64,
    server_cpu: f64,
    pg_own_cpu: f64,
    pg_all_cpu: f64,
    bench_cpu: f64,
    peak_rss_mib: f64,
    commits: Option<i64>,
    waits: Vec<(String, f64)>,
    load: (f64, f64),
}

impl Measured {
    fn per_event_us(&self, cpu: f64) -> f64 {
        cpu * 1e6 / self.arrived.max(1) as f64
    }
}

#[derive(Default, Clone)]
struct Limits {
    receiver: Vec<f64>,
    pg1: Vec<f64>,
    pg8: Vec<f64>,
    sqlite_full: Vec<f64>,
    sqlite_normal: Vec<f64>,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let code = runtime.block_on(async {
        match run(args).await {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                std::process::ExitCode::FAILURE
            }
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(2));
    code
}

fn loopback(url: &str) -> bool {
    let host = url
        .split("://")
        .nth(1)
        .unwrap_or("")
        .rsplit('@')
        .next()
        .unwrap_or("");
    host.starts_with("127.0.0.1") || host.starts_with("localhost") || host.starts_with("[::1]")
}

async fn run(args: Args) -> Result<()> {
    if !loopback(&args.pg_server) || !loopback(&args.redis_url) {
        return Err("--pg-server and --redis-url must be on loopback".into());
    }
    if args.events == 0 || args.clients == 0 || args.endpoints == 0 || args.accounts == 0 {
        return Err("--events, --clients, --endpoints and --accounts must be at least 1".into());
    }
    if !(0.0..1.0).contains(&args.unhealthy) {
        return Err("--unhealthy is a fraction below 1".into());
    }
    let configs = configs(&args)?;
    let needs_pg = configs.iter().any(|c| c.system.uses_postgres()) || !args.no_limits;
    let admin = if needs_pg {
        match sqlx::postgres::PgPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(10))
            .connect(&format!("{}/postgres", args.pg_server))
            .await
        {
            Ok(pool) => Some(pool),
            Err(e) if configs.iter().any(|c| c.system.uses_postgres()) => {
                return Err(format!("PostgreSQL at {}: {e}", args.pg_server));
            }
            Err(e) => {
                eprintln!("PostgreSQL unreachable ({e}): its limits are skipped");
                None
            }
        }
    } else {
        None
    };
    let outcome = tokio::select! {
        outcome = schedule(&args, &configs, admin.as_ref()) => outcome,
        _ = tokio::signal::ctrl_c() => Err("interrupted".to_owned()),
    };
    // Whatever happened above: no database or directory of this process stays behind.
    sweep(admin.as_ref(), args.keep_logs).await;
    let (results, limits, notes) = outcome?;
    print_report(&args, &configs, &results, &limits, &notes, admin.as_ref()).await;
    Ok(())
}

fn configs(args: &Args) -> Result<Vec<Config>> {
    let variants: Vec<Vec<String>> = if args.kxp_args.is_empty() {
        vec![Vec::new()]
    } else {
        args.kxp_args
            .iter()
            .map(|v| v.split_whitespace().map(str::to_owned).collect())
            .collect()
    };
    let mut configs = Vec::new();
    for name in &args.system {
        let system = System::parse(name.trim())?;
        for &processes in &args.processes {
            if processes == 0 || processes > 8 {
                return Err("--processes: 1 to 8".into());
            }
            if processes > 1 && !system.scales_out() {
                eprintln!(
                    "note: {} runs as one process only; skipping {processes}",
                    system.name()
                );
                continue;
            }
            if system.is_kxp() {
                for v in &variants {
                    configs.push(Config {
                        system,
                        processes,
                        kxp_args: v.clone(),
                    });
                }
            } else {
                configs.push(Config {
                    system,
                    processes,
                    kxp_args: Vec::new(),
                });
            }
        }
    }
    if configs.is_empty() {
        return Err("nothing to run".into());
    }
    Ok(configs)
}

type Outcome = (Vec<(usize, Measured)>, Limits, Vec<String>);

async fn schedule(args: &Args, configs: &[Config], admin: Option<&PgPool>) -> Result<Outcome> {
    let receiver = Arc::new(Receiver::default());
    let addr = receiver::start(receiver.clone())
        .await
        .map_err(|e| format!("receiver: {e}"))?;
    let base = format!("http://{addr}");
    eprintln!("receiver on {base}");
    let client = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(args.clients * 2 + 16)
        .timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| e.to_string())?;
    let mut order = Vec::new();
    let rounds = if args.alternate { args.repeat } else { 1 };
    for round in 0..rounds {
        let mut this: Vec<usize> = Vec::new();
        for c in 0..configs.len() {
            let times = if args.alternate { 1 } else { args.repeat };
            this.extend(std::iter::repeat_n(c, times));
        }
        if round % 2 == 1 {
            this.reverse();
        }
        order.push(this);
    }
    let mut limits = Limits::default();
    let mut results = Vec::new();
    let mut notes = Vec::new();
    let mut run_id = 0u64;
    for (round, runs) in order.iter().enumerate() {
        if !args.no_limits {
            measure_limits(args, &receiver, &base, &client, admin, &mut limits).await?;
        }
        for &c in runs {
            run_id += 1;
            let config = &configs[c];
            eprintln!(
                "round {}/{}: {} ×{} {} …",
                round + 1,
                order.len(),
                config.system.name(),
                config.processes,
                config.flags()
            );
            let measured = run_one(
                args, config, &receiver, &base, &client, admin, run_id, &mut notes,
            )
            .await?;
            eprintln!("  {}", summary(&measured));
            results.push((c, measured));
        }
    }
    if !args.no_limits {
        measure_limits(args, &receiver, &base, &client, admin, &mut limits).await?;
    }
    if receiver.stale_hits() > 0 {
        notes.push(format!(
            "{} deliveries arrived for runs already over (late retries)",
            receiver.stale_hits()
        ));
    }
    Ok((results, limits, notes))
}

async fn measure_limits(
    args: &Args,
    receiver: &Receiver,
    base: &str,
    client: &reqwest::Client,
    admin: Option<&PgPool>,
    limits: &mut Limits,
) -> Result<()> {
    let secs = args.limit_secs;
    let body = event_data(0, args.payload_bytes);
    let r = limits::receiver_alone(receiver, base, client, args.clients, &body, secs).await?;
    limits.receiver.push(r);
    let mut line = format!("limits: receiver alone {r:.0}/s");
    if let Some(admin) = admin {
        let pg1 = limits::postgres_commits(admin, &args.pg_server, 1, secs).await?;
        let pg8 = limits::postgres_commits(admin, &args.pg_server, 8, secs).await?;
        limits.pg1.push(pg1);
        limits.pg8.push(pg8);
        line += &format!(", PostgreSQL commits {pg1:.0}/s (1 client) {pg8:.0}/s (8)");
    }
    let dir = std::env::temp_dir();
    let full = limits::sqlite_commits(&dir, true, secs).await?;
    let normal = limits::sqlite_commits(&dir, false, secs).await?;
    limits.sqlite_full.push(full);
    limits.sqlite_normal.push(normal);
    eprintln!("{line}, SQLite commits {full:.0}/s (FULL) {normal:.0}/s (NORMAL)");
    Ok(())
}

/// The `data` of event `seq`: its index first (the receiver looks for it), then padding up to
/// about `bytes`.
fn event_data(seq: usize, bytes: usize) -> String {
    let head = format!("{{\"bench_seq\":{seq},\"pad\":\"");
    let pad = bytes.saturating_sub(head.len() + 2);
    format!("{head}{}\"}}", "x".repeat(pad))
}

/// Which endpoints are unhealthy: `fraction` of them, spread evenly, alternately slow and
/// failing.
fn health(endpoints: usize, fraction: f64) -> Vec<Health> {
    let mut unhealthy = 0usize;
    (0..endpoints)
        .map(|j| {
            let before = (j as f64 * fraction).floor();
            let after = ((j + 1) as f64 * fraction).floor();
            if after > before {
                unhealthy += 1;
                if unhealthy % 2 == 1 {
                    Health::Slow
                } else {
                    Health::Failing
                }
            } else {
                Health::Healthy
            }
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
async fn run_one(
    args: &Args,
    config: &Config,
    receiver: &Arc<Receiver>,
    base: &str,
    client: &reqwest::Client,
    admin: Option<&PgPool>,
    run_id: u64,
    notes: &mut Vec<String>,
) -> Result<Measured> {
    let mut deployment = Deployment::new(run_id)?;
    let run = Arc::new(Run::new(
        run_id,
        args.events,
        health(args.endpoints, args.unhealthy),
    ));
    receiver.install(Some(run.clone()));
    let outcome = measure(args, config, &run, &mut deployment, base, client, admin).await;
    receiver.install(None);
    let commits = match (&outcome, &deployment.database, admin) {
        (Ok(_), Some(db), Some(admin)) => {
            // Backends report their statistics at most once a second.
            tokio::time::sleep(Duration::from_millis(1200)).await;
            commits(admin, db).await
        }
        _ => None,
    };
    let failed = outcome.is_err();
    if failed {
        eprintln!("{}", deployment.logs());
    }
    deployment.cleanup(admin, args.keep_logs).await;
    let mut measured = outcome?;
    if let (Some(after), Some(before)) = (commits, measured.commits) {
        measured.commits = Some(after - before);
    } else {
        measured.commits = None;
    }
    if measured.arrived < measured.expected {
        notes.push(format!(
            "run {run_id} ({} ×{} {}): {} of {} events never arrived within {} s",
            config.system.name(),
            config.processes,
            config.flags(),
            measured.expected - measured.arrived,
            measured.expected,
            args.timeout
        ));
    }
    if let Some(e) = &measured.first_emit_error {
        notes.push(format!(
            "run {run_id}: {} emits failed, the first: {e}",
            measured.emit_errors
        ));
    }
    Ok(measured)
}

async fn commits(admin: &PgPool, db: &str) -> Option<i64> {
    sqlx::query_scalar::<_, i64>("SELECT xact_commit FROM pg_stat_database WHERE datname = $1")
        .bind(db)
        .fetch_one(admin)
        .await
        .ok()
}

/// CPU seconds of each backend connected to `db`, by pid.
async fn backends(admin: &PgPool, db: &str) -> HashMap<u32, f64> {
    let pids: Vec<i32> = sqlx::query_scalar("SELECT pid FROM pg_stat_activity WHERE datname = $1")
        .bind(db)
        .fetch_all(admin)
        .await
        .unwrap_or_default();
    pids.into_iter()
        .filter_map(|p| u32::try_from(p).ok())
        .map(|p| (p, procfs::cpu_seconds(p)))
        .collect()
}

async fn measure(
    args: &Args,
    config: &Config,
    run: &Arc<Run>,
    deployment: &mut Deployment,
    base: &str,
    client: &reqwest::Client,
    admin: Option<&PgPool>,
) -> Result<Measured> {
    let receiver_url = format!("{base}/r/{}", run.id);
    deployment
        .start(&Setup {
            system: config.system,
            processes: config.processes,
            extra_args: &config.kxp_args,
            kxp_bin: &args.kxp_bin,
            svix_bin: &args.svix_bin,
            pg_server: &args.pg_server,
            admin,
            redis_url: &args.redis_url,
            receiver: &receiver_url,
            endpoints: args.endpoints,
            accounts: args.accounts,
            client,
            run_id: run.id,
        })
        .await?;
    let pids = deployment.pids();
    let db = deployment.database.clone();
    let mut m = Measured {
        load: (procfs::load_average(), 0.0),
        ..Measured::default()
    };
    let commits_before = match (&db, admin) {
        (Some(db), Some(admin)) => commits(admin, db).await,
        _ => None,
    };
    let server_before: f64 = pids.iter().map(|&p| procfs::cpu_seconds(p)).sum();
    let pg_all_before = procfs::all_postgres_cpu_seconds();
    let bench_before = procfs::self_cpu_seconds();
    let own_before = match (&db, admin) {
        (Some(db), Some(admin)) => backends(admin, db).await,
        _ => HashMap::new(),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = match (&db, admin) {
        (Some(db), Some(admin)) if args.sample_ms > 0 => Some(tokio::spawn(sample_waits(
            admin.clone(),
            db.clone(),
            Duration::from_millis(args.sample_ms),
            stop.clone(),
            Duration::from_secs(args.timeout + 60),
        ))),
        _ => None,
    };
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    let emitted = emit(args, config, run, deployment, client, deadline).await;
    // Wait for every healthy event that was accepted.
    let accepted: Vec<usize> = (0..args.events)
        .filter(|&i| run.accepted[i].load(Ordering::Relaxed) != 0)
        .collect();
    let expected: Vec<usize> = accepted
        .iter()
        .copied()
        .filter(|&i| run.health[run.endpoint_of(i)] == Health::Healthy)
        .collect();
    while run.healthy_arrived.load(Ordering::Acquire) < expected.len() && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let server_after: f64 = pids.iter().map(|&p| procfs::cpu_seconds(p)).sum();
    let pg_all_after = procfs::all_postgres_cpu_seconds();
    let bench_after = procfs::self_cpu_seconds();
    let own_after = match (&db, admin) {
        (Some(db), Some(admin)) => backends(admin, db).await,
        _ => HashMap::new(),
    };
    stop.store(true, Ordering::Relaxed);
    if let Some(sampler) = sampler {
        m.waits = sampler.await.unwrap_or_default();
    }
    m.load.1 = procfs::load_average();
    m.server_cpu = server_after - server_before;
    m.pg_all_cpu = pg_all_after - pg_all_before;
    m.bench_cpu = bench_after - bench_before;
    m.pg_own_cpu = own_after
        .iter()
        .map(|(pid, after)| after - own_before.get(pid).copied().unwrap_or(0.0))
        .sum();
    m.peak_rss_mib = pids
        .iter()
        .filter_map(|&p| procfs::peak_rss_kib(p))
        .max()
        .unwrap_or(0) as f64
        / 1024.0;
    m.commits = commits_before;
    m.emitted = accepted.len();
    m.emit_errors = emitted.errors;
    m.first_emit_error = emitted.first_error;
    m.expected = expected.len();
    m.unparsed = run.unparsed.load(Ordering::Relaxed);
    m.unhealthy_hits = run.unhealthy_hits.load(Ordering::Relaxed);
    let first_emit = (0..args.events)
        .map(|i| run.emitted[i].load(Ordering::Relaxed))
        .filter(|&t| t != 0)
        .min()
        .unwrap_or(1);
    let last_accept = accepted
        .iter()
        .map(|&i| run.accepted[i].load(Ordering::Relaxed))
        .max()
        .unwrap_or(first_emit);
    let mut latencies = Vec::with_capacity(expected.len());
    let mut last_arrival = first_emit;
    for &i in &expected {
        let arrived = run.arrived[i].load(Ordering::Relaxed);
        if arrived == 0 {
            continue;
        }
        let hits = run.hits[i].load(Ordering::Relaxed);
        m.duplicates += u64::from(hits.saturating_sub(1));
        last_arrival = last_arrival.max(arrived);
        let emitted = run.emitted[i].load(Ordering::Relaxed);
        latencies.push(arrived.saturating_sub(emitted) as f64 / 1e6);
    }
    m.arrived = latencies.len();
    latencies.sort_by(f64::total_cmp);
    let pct = |q: f64| {
        if latencies.is_empty() {
            f64::NAN
        } else {
            latencies[((latencies.len() - 1) as f64 * q).round() as usize]
        }
    };
    (m.p50, m.p90, m.p99, m.max) = (pct(0.5), pct(0.9), pct(0.99), pct(1.0));
    let secs = |from: u64, to: u64| (to.saturating_sub(from)) as f64 / 1e9;
    m.ingest_per_s = m.emitted as f64 / secs(first_emit, last_accept).max(1e-9);
    m.delivered_per_s = m.arrived as f64 / secs(first_emit, last_arrival).max(1e-9);
    Ok(m)
}

struct Emitted {
    errors: usize,
    first_error: Option<String>,
}

/// `--events` events from `--clients` tasks, each taking the next index; paced at `--rate`.
async fn emit(
    args: &Args,
    config: &Config,
    run: &Arc<Run>,
    deployment: &Deployment,
    client: &reqwest::Client,
    deadline: Instant,
) -> Emitted {
    let next = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let first_error = Arc::new(std::sync::Mutex::new(None::<String>));
    let targets: Arc<Vec<(String, String, String)>> = Arc::new(
        deployment
            .targets
            .iter()
            .map(|t| (t.path.clone(), t.auth.clone(), t.event_type.clone()))
            .collect(),
    );
    let bases = Arc::new(deployment.bases());
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let kxp = config.system.is_kxp();
    for _ in 0..args.clients {
        let (next, errors, first_error, targets, bases, run, client) = (
            next.clone(),
            errors.clone(),
            first_error.clone(),
            targets.clone(),
            bases.clone(),
            run.clone(),
            client.clone(),
        );
        let (events, rate, bytes) = (args.events, args.rate, args.payload_bytes);
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= events || Instant::now() >= deadline {
                    break;
                }
                if rate > 0.0 {
                    let at = started + Duration::from_secs_f64(i as f64 / rate);
                    tokio::time::sleep_until(at.into()).await;
                }
                let (path, auth, event_type) = &targets[run.endpoint_of(i)];
                let data = event_data(i, bytes);
                let body = if kxp {
                    format!("{{\"type\":\"{event_type}\",\"data\":{data}}}")
                } else {
                    format!("{{\"eventType\":\"{event_type}\",\"payload\":{data}}}")
                };
                let url = format!("{}{path}", bases[i % bases.len()]);
                run.emitted[i].store(run.now(), Ordering::Relaxed);
                let outcome = client
                    .post(url)
                    .header("authorization", auth)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await;
                let failure = match outcome {
                    Ok(r) if r.status().is_success() => {
                        let _ = r.bytes().await;
                        run.accepted[i].store(run.now(), Ordering::Relaxed);
                        None
                    }
                    Ok(r) => {
                        let status = r.status();
                        let text = r.text().await.unwrap_or_default();
                        Some(format!(
                            "{status}: {}",
                            text.chars().take(300).collect::<String>()
                        ))
                    }
                    Err(e) => Some(e.to_string()),
                };
                if let Some(failure) = failure {
                    errors.fetch_add(1, Ordering::Relaxed);
                    let mut first = first_error.lock().unwrap_or_else(|e| e.into_inner());
                    first.get_or_insert(failure);
                }
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    let first_error = first_error.lock().unwrap_or_else(|e| e.into_inner()).take();
    Emitted {
        errors: errors.load(Ordering::Relaxed) as usize,
        first_error,
    }
}

/// Samples what the database's non-idle backends are doing: `(state/wait, average backends)`,
/// most frequent first.
async fn sample_waits(
    admin: PgPool,
    db: String,
    period: Duration,
    stop: Arc<AtomicBool>,
    limit: Duration,
) -> Vec<(String, f64)> {
    let started = Instant::now();
    let mut counts: HashMap<String, i64> = HashMap::new();
    let mut samples = 0u64;
    while !stop.load(Ordering::Relaxed) && started.elapsed() < limit {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT state || ' ' || coalesce(wait_event_type || ':' || wait_event, 'CPU'), count(*) \
             FROM pg_stat_activity WHERE datname = $1 AND state <> 'idle' GROUP BY 1",
        )
        .bind(&db)
        .fetch_all(&admin)
        .await
        .unwrap_or_default();
        samples += 1;
        for (what, n) in rows {
            *counts.entry(what).or_default() += n;
        }
        tokio::time::sleep(period).await;
    }
    let mut waits: Vec<(String, f64)> = counts
        .into_iter()
        .map(|(k, n)| (k, n as f64 / samples.max(1) as f64))
        .collect();
    waits.sort_by(|a, b| b.1.total_cmp(&a.1));
    waits
}

fn summary(m: &Measured) -> String {
    let postgres = if m.pg_own_cpu > 0.0 {
        format!(", postgres {:.0} µs/event", m.per_event_us(m.pg_own_cpu))
    } else {
        String::new()
    };
    format!(
        "delivered {:.0}/s, ingest {:.0}/s, p50 {:.1} ms, p99 {:.1} ms, server {:.0} µs/event{}, \
         {}/{} arrived, {} duplicates, load {:.1}–{:.1}",
        m.delivered_per_s,
        m.ingest_per_s,
        m.p50,
        m.p99,
        m.per_event_us(m.server_cpu),
        postgres,
        m.arrived,
        m.expected,
        m.duplicates,
        m.load.0,
        m.load.1
    )
}

fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| !x.is_nan());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// `1234567.8` → `1,234,568`.
fn thousands(x: f64) -> String {
    if !x.is_finite() {
        return "–".into();
    }
    let digits = format!("{:.0}", x.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if x < 0.0 { format!("-{out}") } else { out }
}

fn ratio(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.3}")
    } else {
        "–".into()
    }
}

fn ms(x: f64) -> String {
    if !x.is_finite() {
        "–".into()
    } else if x < 10.0 {
        format!("{x:.1}")
    } else {
        thousands(x)
    }
}

fn shell_quote(arg: &str) -> String {
    if !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@".contains(c))
    {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

async fn version_of(bin: &std::path::Path, arg: &str) -> String {
    match tokio::process::Command::new(bin).arg(arg).output().await {
        Ok(out) => String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        Err(e) => format!("({}: {e})", bin.display()),
    }
}

async fn print_report(
    args: &Args,
    configs: &[Config],
    results: &[(usize, Measured)],
    limits: &Limits,
    notes: &[String],
    admin: Option<&PgPool>,
) {
    let command: Vec<String> = std::env::args().skip(1).map(|a| shell_quote(&a)).collect();
    println!(
        "```sh\ncd benches && cargo run --release --bin deliver -- {}\n```\n",
        command.join(" ")
    );
    let pg_version = match admin {
        Some(admin) => sqlx::query_scalar::<_, String>("SHOW server_version")
            .fetch_one(admin)
            .await
            .unwrap_or_default(),
        None => "unreachable".into(),
    };
    println!(
        "- Machine: {}; PostgreSQL {pg_version} on 127.0.0.1.",
        procfs::machine()
    );
    if configs.iter().any(|c| c.system.is_kxp()) {
        println!(
            "- kxp: `{}` ({})",
            args.kxp_bin.display(),
            version_of(&args.kxp_bin, "--version").await
        );
    }
    if configs.iter().any(|c| !c.system.is_kxp()) {
        println!(
            "- Svix: `{}` ({})",
            args.svix_bin.display(),
            version_of(&args.svix_bin, "--version").await
        );
    }
    let loads: Vec<f64> = results
        .iter()
        .flat_map(|(_, m)| [m.load.0, m.load.1])
        .collect();
    let lo = loads.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = loads.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    println!(
        "- Load: {} events of {} B `data` per run, {} clients{}, {} endpoint(s) in {} account(s){}; \
         1-minute load average {lo:.1}–{hi:.1} during the runs.",
        thousands(args.events as f64),
        args.payload_bytes,
        args.clients,
        if args.rate > 0.0 {
            format!(" paced at {}/s", args.rate)
        } else {
            String::new()
        },
        args.endpoints,
        args.accounts,
        if args.unhealthy > 0.0 {
            format!(
                ", {:.0} % of endpoints slow (10 s) or failing (500): figures are the healthy endpoints'",
                args.unhealthy * 100.0
            )
        } else {
            String::new()
        }
    );
    let runs = args.repeat;
    println!(
        "- {} run(s) of each configuration{}; {}.\n",
        runs,
        if args.alternate {
            ", configurations in turn (forwards, then backwards)"
        } else {
            ""
        },
        if runs > 1 {
            "medians of the runs"
        } else {
            "one run"
        }
    );
    let receiver = median(limits.receiver.clone());
    let pg8 = median(limits.pg8.clone());
    // kxp's SQLite store commits with synchronous=FULL (kxp-sender/src/store/mod.rs).
    let sqlite_full = median(limits.sqlite_full.clone());
    println!(
        "| system | procs | kxp flags | delivered/s | ingest/s | p50 ms | p90 ms | p99 ms | max ms \
         | server CPU µs/event | PostgreSQL CPU µs/event (own backends; all) | commits/event | bench CPU µs/event \
         | peak RSS MiB | dup | missing | ÷ receiver | ÷ bare commits |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (c, config) in configs.iter().enumerate() {
        let mine: Vec<&Measured> = results
            .iter()
            .filter(|(i, _)| *i == c)
            .map(|(_, m)| m)
            .collect();
        if mine.is_empty() {
            continue;
        }
        let med = |f: &dyn Fn(&Measured) -> f64| median(mine.iter().map(|m| f(m)).collect());
        let delivered = med(&|m| m.delivered_per_s);
        let floor = if config.system == System::KxpSqlite {
            sqlite_full
        } else {
            pg8
        };
        let pg = if config.system.uses_postgres() {
            format!(
                "{} ; {}",
                thousands(med(&|m| m.per_event_us(m.pg_own_cpu))),
                thousands(med(&|m| m.per_event_us(m.pg_all_cpu)))
            )
        } else {
            "– (in-process)".into()
        };
        let commits = med(&|m| {
            m.commits
                .map_or(f64::NAN, |n| n as f64 / m.arrived.max(1) as f64)
        });
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.0} | {} | {} | {} | {} |",
            config.system.name(),
            config.processes,
            config.flags(),
            thousands(delivered),
            thousands(med(&|m| m.ingest_per_s)),
            ms(med(&|m| m.p50)),
            ms(med(&|m| m.p90)),
            ms(med(&|m| m.p99)),
            ms(med(&|m| m.max)),
            thousands(med(&|m| m.per_event_us(m.server_cpu))),
            pg,
            if commits.is_finite() {
                format!("≈{commits:.1}")
            } else {
                "–".into()
            },
            thousands(med(&|m| m.per_event_us(m.bench_cpu))),
            med(&|m| m.peak_rss_mib),
            thousands(mine.iter().map(|m| m.duplicates).sum::<u64>() as f64),
            thousands(
                mine.iter()
                    .map(|m| (m.expected - m.arrived) as f64)
                    .sum::<f64>()
            ),
            ratio(delivered / receiver),
            ratio(delivered / floor),
        );
    }
    println!(
        "\n`÷ receiver`: delivered/s over the receiver alone; `÷ bare commits`: over bare \
         single-row commits/s (SQLite WAL FULL, kxp's setting, for kxp-sqlite; PostgreSQL \
         with 8 clients otherwise). CPU per delivered event, from /proc, between the first emit \
         and the last arrival; `own backends` are the PostgreSQL backends connected to the run's \
         database, `all` every postgres process on the machine (other users' included). \
         `commits/event`: pg_stat_database.xact_commit of the run's database (approximate: \
         backends report once a second). `bench CPU`: this process (emitter and receiver), \
         which shares the cores.\n"
    );
    if !limits.receiver.is_empty() {
        let list = |v: &[f64]| {
            v.iter()
                .map(|x| thousands(*x))
                .collect::<Vec<_>>()
                .join(", ")
        };
        println!("| limit (same run) | median /s | each measurement /s |\n|---|---|---|");
        let rows = [
            (
                format!("receiver alone, {} loopback clients", args.clients),
                &limits.receiver,
            ),
            (
                "PostgreSQL single-row commits, 1 client".to_owned(),
                &limits.pg1,
            ),
            (
                "PostgreSQL single-row commits, 8 clients".to_owned(),
                &limits.pg8,
            ),
            (
                "SQLite single-row commits, WAL, synchronous FULL".to_owned(),
                &limits.sqlite_full,
            ),
            (
                "SQLite single-row commits, WAL, synchronous NORMAL".to_owned(),
                &limits.sqlite_normal,
            ),
        ];
        for (label, v) in rows {
            if !v.is_empty() {
                println!(
                    "| {label} | {} | {} |",
                    thousands(median(v.clone())),
                    list(v)
                );
            }
        }
        println!();
    }
    println!("Each run:\n");
    for (i, (c, m)) in results.iter().enumerate() {
        let config = &configs[*c];
        println!(
            "- run {}: {} ×{} {}: {}{}",
            i + 1,
            config.system.name(),
            config.processes,
            config.flags(),
            summary(m),
            if m.unhealthy_hits > 0 || m.unparsed > 0 {
                format!(
                    ", {} requests to unhealthy endpoints, {} unparsed",
                    m.unhealthy_hits, m.unparsed
                )
            } else {
                String::new()
            }
        );
        if !m.waits.is_empty() {
            let top: Vec<String> = m
                .waits
                .iter()
                .take(8)
                .map(|(w, n)| format!("{w} {n:.2}"))
                .collect();
            println!(
                "  - pg_stat_activity (average non-idle backends): {}",
                top.join(", ")
            );
        }
    }
    for note in notes {
        println!("- note: {note}");
    }
}

/// Drops every database and removes every temporary directory this process created (also
/// after an error or an interrupt, when a run's own clean-up was skipped).
async fn sweep(admin: Option<&PgPool>, keep_logs: bool) {
    if let Some(admin) = admin {
        let prefix = systems::database_prefix();
        let names: Vec<String> = sqlx::query_scalar("SELECT datname FROM pg_database")
            .fetch_all(admin)
            .await
            .unwrap_or_default();
        for name in names.into_iter().filter(|n| n.starts_with(&prefix)) {
            eprintln!("dropping leftover database {name}");
            let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
                .execute(admin)
                .await;
        }
    }
    let prefix = format!("kxp-bench-deliver-{}-", std::process::id());
    if let Ok(dir) = std::fs::read_dir(std::env::temp_dir()) {
        for entry in dir.flatten().take(100_000) {
            if !keep_logs && entry.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
}
