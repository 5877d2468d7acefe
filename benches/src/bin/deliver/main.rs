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
//!
//! This file is the map: the modules, `main`, the schedule of runs and limit measurements, and
//! the final clean-up. [`config`]: the command line; [`citus`]: kxp-citus's cluster; [`run`]: one run, measured; [`report`]:
//! the Markdown; [`systems`]: starting the systems under test; [`receiver`]: the loopback
//! receiver; [`limits`]: the receiver-alone and bare-commit limits; [`procfs`]: CPU and memory.

mod citus;
mod config;
mod limits;
mod procfs;
mod receiver;
mod report;
mod run;
mod systems;

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use sqlx::PgPool;

use config::{Args, Config, configs, loopback};
use receiver::Receiver;
use report::{print_report, summary};
use run::{Measured, event_data, run_one};

pub type Result<T> = std::result::Result<T, String>;

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
    let body = event_data(0, 0, args.payload_bytes);
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
