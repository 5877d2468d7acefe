//! One run of one configuration: start the system under test ([`Deployment`]), set up its
//! endpoints, emit the events, wait until every healthy one arrived, and measure it into
//! [`Measured`] (rates, latencies, CPU, RSS, commits, wait events). Scheduling the runs and the
//! limits is `main`'s; printing them is [`crate::report`]'s.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use sqlx::PgPool;

use crate::Result;
use crate::citus::{Cluster, NodeCost};
use crate::config::{Args, Config};
use crate::procfs;
use crate::receiver::{Health, Receiver, Run};
use crate::systems::{Deployment, Setup};

#[derive(Default, Clone)]
pub(crate) struct Measured {
    pub(crate) emitted: usize,
    pub(crate) emit_errors: usize,
    pub(crate) first_emit_error: Option<String>,
    pub(crate) expected: usize,
    pub(crate) arrived: usize,
    pub(crate) duplicates: u64,
    pub(crate) unparsed: u64,
    pub(crate) unhealthy_hits: u64,
    pub(crate) ingest_per_s: f64,
    pub(crate) delivered_per_s: f64,
    pub(crate) p50: f64,
    pub(crate) p90: f64,
    pub(crate) p99: f64,
    pub(crate) max: f64,
    pub(crate) server_cpu: f64,
    pub(crate) pg_own_cpu: f64,
    pub(crate) pg_all_cpu: f64,
    pub(crate) bench_cpu: f64,
    pub(crate) peak_rss_mib: f64,
    pub(crate) commits: Option<i64>,
    pub(crate) waits: Vec<(String, f64)>,
    pub(crate) load: (f64, f64),
    /// kxp-citus: what each node of the cluster did.
    pub(crate) nodes: Vec<NodeCost>,
}

impl Measured {
    pub(crate) fn per_event_us(&self, cpu: f64) -> f64 {
        cpu * 1e6 / self.arrived.max(1) as f64
    }
}

/// The `data` of event `seq`: its index first (the receiver looks for it), then padding up to
/// about `bytes`.
pub(crate) fn event_data(seq: usize, route: usize, bytes: usize) -> String {
    let head = format!("{{\"bench_seq\":{seq},\"bench_route\":{route},\"pad\":\"");
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
pub(crate) async fn run_one(
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
    let cluster = Cluster::new(&args.citus_dir, args.citus_port, args.citus_workers);
    deployment
        .start(&Setup {
            system: config.system,
            processes: config.processes,
            extra_args: &config.kxp_args,
            routing: config.routing,
            kxp_bin: &config.kxp_bin,
            svix_bin: &args.svix_bin,
            pg_server: &args.pg_server,
            admin,
            citus: &cluster,
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
    let nodes_before = match (&db, &deployment.citus) {
        (Some(db), Some(citus)) => Some(citus.snapshot(db).await),
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
    if let (Some(db), Some(citus), Some(before)) = (&db, &deployment.citus, &nodes_before) {
        // Backends report their statistics at most once a second.
        tokio::time::sleep(Duration::from_millis(1200)).await;
        m.nodes = citus.costs(before, &citus.snapshot(db).await);
    }
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
                let endpoint = run.endpoint_of(i);
                let (path, auth, event_type) = &targets[endpoint];
                let data = event_data(i, endpoint, bytes);
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
