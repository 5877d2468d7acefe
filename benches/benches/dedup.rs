//! Dedup cost per event: kxp-dedup's claim/complete and in-transaction modes against a bare
//! single `INSERT … ON CONFLICT (event_id) DO NOTHING`, on SQLite and PostgreSQL, with 1 and 16
//! concurrent workers.
//!
//! Run: `cd benches && cargo bench --bench dedup` (see ../../BENCHMARKS.md for the numbers).
//!
//! - SQLite: a fresh file in the system temporary directory, opened with `Store::connect` (WAL,
//!   `synchronous = FULL`, sqlx's default pool of 10 connections), deleted afterwards. The
//!   directory must be on a real disk: on a tmpfs every fsync is free.
//! - PostgreSQL: a fresh database created on the server of `KXP_BENCH_DATABASE_URL`, else
//!   `KXP_TEST_DATABASE_URL`, else `postgres://postgres@127.0.0.1:5432/test`, and dropped
//!   afterwards. Skipped, with a `SKIPPED (PostgreSQL)` line, when the server is unreachable.
//!
//! Every worker is a tokio task (on the default multi-threaded runtime: one thread per core)
//! sharing one `Store`, so one pool; each takes the next event id until all are done. Per
//! concurrency, every operation is warmed up (a tenth of its events), then the operations take
//! turns in short rounds (40 of 50 events at 1 worker, 20 of 400 at 16), forwards and backwards
//! in turn, so load from other processes falls on all of them alike (see `bench_store`). Each answer is checked:
//! an unexpected answer or a store error fails the run instead of being timed.
//!
//! Operations, per event id:
//!
//! - `bare INSERT`: one `INSERT INTO bench_baseline … ON CONFLICT (event_id) DO NOTHING` of a
//!   fresh id into a table with the columns of `kxp_processed_events` and only the primary key
//!   (no `updated_at` index), on the store's pool: the floor any durable dedup pays (one write,
//!   one commit, one round trip). The conflict clause is there because every dedup write has
//!   one: the baseline is "an `INSERT … ON CONFLICT` per event", not a plain `INSERT`.
//! - `claim + complete`: `Store::claim` (answers `Claimed`) then `Store::complete`, fresh id.
//! - `process()`: `kxp_dedup::process` with a handler that returns `Ok(())` at once, fresh id.
//! - `process_in_transaction()`: the in-transaction mode with a handler that does nothing (the
//!   mark and the commit only), fresh id.
//! - `BEGIN; INSERT; COMMIT` (PostgreSQL only): the bare INSERT inside `Pool::begin` … `commit`,
//!   three round trips and one commit: the floor of an in-transaction mode that sends `BEGIN`
//!   on its own, as sqlx's `begin` does.
//! - `BEGIN + INSERT; COMMIT` (PostgreSQL only): `Pool::begin_with("BEGIN; INSERT …")` (one
//!   simple query, the id as a literal) then `commit`: two round trips and one commit, the
//!   fewest an in-transaction mode can make with sqlx 0.8, which cannot pipeline (the mark has
//!   to be answered before the handler runs, the commit comes after it). A simple query has no
//!   prepared plan: the INSERT is parsed and planned at every event, which costs about what the
//!   round trip saves. Not checked row by row (`begin_with` discards the INSERT's result); its
//!   ids are fresh.
//! - `duplicate claim`: `Store::claim` of an id that `claim + complete` completed (answers
//!   `AlreadyDone`): the cost of absorbing a redelivery.
//! - `bare SELECT`: `SELECT status FROM bench_baseline WHERE event_id = …` of an existing id:
//!   the floor of a read-only lookup, for the duplicate row.

use std::convert::Infallible;
use std::error::Error;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kxp_dedup::sqlx::{self, Connection, PgConnection};
use kxp_dedup::{Claim, Outcome, Store, Tx, process, process_in_transaction};

type BoxError = Box<dyn Error + Send + Sync>;

/// Workers, events per operation and rounds (see `bench_store`): about 1 minute for the whole
/// run on 2 cores, under 2 under load. Short rounds: load from other processes comes in bursts of a fraction
/// of a second, and the finer the operations take turns, the more evenly it falls on them.
/// At 16 workers a round has 400 events, 25 per worker, so the ramp-up and the last stragglers
/// of a round stay a small part of it.
const CELLS: [(usize, usize, usize); 2] = [(1, 2000, 40), (16, 8000, 20)];

/// The lease of every claim: far longer than the run, so no claim expires.
const LEASE: Duration = Duration::from_secs(600);

const DEFAULT_PG_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

const SQLITE_BASELINE_TABLE: &str = "
CREATE TABLE bench_baseline (
    event_id      TEXT    NOT NULL PRIMARY KEY,
    status        TEXT    NOT NULL,
    attempts      INTEGER NOT NULL DEFAULT 1,
    locked_until  INTEGER,
    first_seen_at INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    last_error    TEXT
)";

const PG_BASELINE_TABLE: &str = "
CREATE TABLE bench_baseline (
    event_id      text        PRIMARY KEY,
    status        text        NOT NULL,
    attempts      integer     NOT NULL DEFAULT 1,
    locked_until  timestamptz,
    first_seen_at timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    last_error    text
)";

const SQLITE_INSERT: &str = "
INSERT INTO bench_baseline (event_id, status, attempts, first_seen_at, updated_at)
VALUES (?1, 'done', 1, 0, 0)
ON CONFLICT (event_id) DO NOTHING";

const PG_INSERT: &str = "
INSERT INTO bench_baseline (event_id, status, attempts, first_seen_at, updated_at)
VALUES ($1, 'done', 1, now(), now())
ON CONFLICT (event_id) DO NOTHING";

const SQLITE_SELECT: &str = "SELECT status FROM bench_baseline WHERE event_id = ?1";
const PG_SELECT: &str = "SELECT status FROM bench_baseline WHERE event_id = $1";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    BareInsert,
    ClaimComplete,
    Process,
    ProcessInTransaction,
    BareTransaction,
    BareBeginInsert,
    DuplicateClaim,
    BareSelect,
}

impl Op {
    fn label(self) -> &'static str {
        match self {
            Op::BareInsert => "bare INSERT",
            Op::ClaimComplete => "claim + complete",
            Op::Process => "process()",
            Op::ProcessInTransaction => "process_in_transaction()",
            Op::BareTransaction => "BEGIN; INSERT; COMMIT",
            Op::BareBeginInsert => "BEGIN + INSERT; COMMIT",
            Op::DuplicateClaim => "duplicate claim",
            Op::BareSelect => "bare SELECT",
        }
    }
}

/// One measured cell: an operation at one concurrency, over all rounds.
struct Cell {
    op: Op,
    workers: usize,
    events: usize,
    wall: Duration,
    latencies: Vec<Duration>,
    /// The wall time of each round, in round order.
    rounds: Vec<Duration>,
}

impl Cell {
    fn per_event(&self) -> Duration {
        self.wall / u32::try_from(self.events).unwrap_or(u32::MAX)
    }

    fn per_second(&self) -> f64 {
        self.events as f64 / self.wall.as_secs_f64()
    }

    /// A quantile of the per-operation latencies (sorted).
    fn latency(&self, q: f64) -> Duration {
        let last = self.latencies.len().saturating_sub(1);
        self.latencies
            .get((last as f64 * q).round() as usize)
            .copied()
            .unwrap_or_default()
    }
}

/// Runs `op` once for `id`, checking the answer.
async fn run_op(store: &Store, op: Op, id: &str) -> Result<(), BoxError> {
    match op {
        Op::BareInsert => {
            let inserted = if let Some(pool) = store.sqlite_pool() {
                sqlx::query(SQLITE_INSERT)
                    .bind(id)
                    .execute(pool)
                    .await?
                    .rows_affected()
            } else if let Some(pool) = store.postgres_pool() {
                sqlx::query(PG_INSERT)
                    .bind(id)
                    .execute(pool)
                    .await?
                    .rows_affected()
            } else {
                return Err("a store of an unknown backend".into());
            };
            if inserted != 1 {
                return Err(format!("bare INSERT of {id}: {inserted} rows").into());
            }
        }
        Op::ClaimComplete => {
            let claim = store.claim(id, LEASE).await?;
            if claim != Claim::Claimed {
                return Err(format!("claim of the fresh id {id}: {claim:?}").into());
            }
            store.complete(id).await?;
        }
        Op::Process => {
            let outcome = process(store, id, LEASE, || async { Ok::<(), Infallible>(()) }).await;
            if outcome != Outcome::Processed {
                return Err(format!("process of the fresh id {id}: {outcome:?}").into());
            }
        }
        Op::ProcessInTransaction => {
            let outcome =
                process_in_transaction(store, id, |tx: Tx| async { Ok::<Tx, Infallible>(tx) })
                    .await;
            if outcome != Outcome::Processed {
                return Err(format!("process_in_transaction of {id}: {outcome:?}").into());
            }
        }
        Op::BareTransaction => {
            let pool = store.postgres_pool().ok_or("a PostgreSQL-only operation")?;
            let mut tx = pool.begin().await?;
            let inserted = sqlx::query(PG_INSERT)
                .bind(id)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            tx.commit().await?;
            if inserted != 1 {
                return Err(format!("BEGIN; INSERT; COMMIT of {id}: {inserted} rows").into());
            }
        }
        Op::BareBeginInsert => {
            let pool = store.postgres_pool().ok_or("a PostgreSQL-only operation")?;
            // The ids are this file's own (`evt_…`, letters, digits and `_`): safe as a literal.
            if !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err(format!("{id:?} is not a plain id").into());
            }
            let begin = format!(
                "BEGIN; INSERT INTO bench_baseline \
                 (event_id, status, attempts, first_seen_at, updated_at) \
                 VALUES ('{id}', 'done', 1, now(), now()) ON CONFLICT (event_id) DO NOTHING"
            );
            pool.begin_with(begin).await?.commit().await?;
        }
        Op::DuplicateClaim => {
            let claim = store.claim(id, LEASE).await?;
            if claim != Claim::AlreadyDone {
                return Err(format!("claim of the completed id {id}: {claim:?}").into());
            }
        }
        Op::BareSelect => {
            let status: Option<String> = if let Some(pool) = store.sqlite_pool() {
                sqlx::query_scalar(SQLITE_SELECT)
                    .bind(id)
                    .fetch_optional(pool)
                    .await?
            } else if let Some(pool) = store.postgres_pool() {
                sqlx::query_scalar(PG_SELECT)
                    .bind(id)
                    .fetch_optional(pool)
                    .await?
            } else {
                return Err("a store of an unknown backend".into());
            };
            if status.as_deref() != Some("done") {
                return Err(format!("bare SELECT of {id}: {status:?}").into());
            }
        }
    }
    Ok(())
}

/// Runs `op` for every id with `workers` tasks sharing `store`: the wall time and the latency
/// of each operation.
async fn run(
    store: &Store,
    op: Op,
    workers: usize,
    ids: Arc<Vec<String>>,
) -> Result<(Duration, Vec<Duration>), BoxError> {
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(workers);
    for _ in 0..workers {
        let (store, ids, next) = (store.clone(), Arc::clone(&ids), Arc::clone(&next));
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(ids.len() / workers + 1);
            while let Some(id) = ids.get(next.fetch_add(1, Ordering::Relaxed)) {
                let began = Instant::now();
                run_op(&store, op, id).await?;
                latencies.push(began.elapsed());
            }
            Ok::<_, BoxError>(latencies)
        }));
    }
    let mut latencies = Vec::with_capacity(ids.len());
    for task in tasks {
        latencies.extend(task.await??);
    }
    Ok((start.elapsed(), latencies))
}

fn ids(prefix: &str, count: usize) -> Arc<Vec<String>> {
    Arc::new((0..count).map(|i| format!("evt_{prefix}_{i:06}")).collect())
}

/// The measured operations on SQLite, in the order of even rounds (odd rounds run it
/// backwards).
const SQLITE_OPS: &[Op] = &[
    Op::BareInsert,
    Op::ClaimComplete,
    Op::Process,
    Op::ProcessInTransaction,
    Op::DuplicateClaim,
    Op::BareSelect,
];

/// On PostgreSQL, also the two floors of in-transaction mode (three and two round trips).
const PG_OPS: &[Op] = &[
    Op::BareInsert,
    Op::ClaimComplete,
    Op::Process,
    Op::ProcessInTransaction,
    Op::BareTransaction,
    Op::BareBeginInsert,
    Op::DuplicateClaim,
    Op::BareSelect,
];

/// All the cells of one backend. Per concurrency: a warm-up of every operation (a tenth of the
/// events), then rounds of every operation over an equal share of the events (see [`CELLS`]),
/// in the order of `ops` and backwards in turn (ABBA), so a steady drift cancels out.
///
/// Fresh ids for the writes; a duplicate claim takes the ids of the latest `claim + complete`
/// round (all done), a bare SELECT those of the latest bare INSERT round.
async fn bench_store(store: &Store, tag: &str, ops: &[Op]) -> Result<Vec<Cell>, BoxError> {
    let mut all = Vec::new();
    for (workers, events, rounds) in CELLS {
        let per_round = events / rounds;
        let mut cells: Vec<Cell> = ops
            .iter()
            .map(|&op| Cell {
                op,
                workers,
                events: 0,
                wall: Duration::ZERO,
                latencies: Vec::with_capacity(events),
                rounds: Vec::with_capacity(rounds),
            })
            .collect();
        let mut completed = Arc::new(Vec::new());
        let mut inserted = Arc::new(Vec::new());
        let mut serial = 0;
        let mut fresh = |count: usize| {
            serial += 1;
            ids(&format!("{tag}{workers}_{serial}"), count)
        };
        // Round `None` is the warm-up, not recorded.
        for round in std::iter::once(None).chain((0..rounds).map(Some)) {
            let count = if round.is_some() {
                per_round
            } else {
                events / 10
            };
            let mut order = ops.to_vec();
            if round.is_some_and(|r| r % 2 == 1) {
                order.reverse();
            }
            for &op in &order {
                let ids = match op {
                    Op::DuplicateClaim => Arc::clone(&completed),
                    Op::BareSelect => Arc::clone(&inserted),
                    _ => fresh(count),
                };
                let (wall, latencies) = run(store, op, workers, Arc::clone(&ids)).await?;
                match op {
                    Op::ClaimComplete => completed = ids,
                    Op::BareInsert => inserted = ids,
                    _ => {}
                }
                if round.is_none() {
                    continue;
                }
                let cell = cells
                    .iter_mut()
                    .find(|c| c.op == op)
                    .ok_or("an operation without a cell")?;
                cell.events += latencies.len();
                cell.wall += wall;
                cell.latencies.extend(latencies);
                cell.rounds.push(wall);
            }
        }
        for cell in &mut cells {
            cell.latencies.sort_unstable();
        }
        eprintln!("  {workers} workers: done");
        all.extend(cells);
    }
    Ok(all)
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// `x` rounded to a whole number, with thousands separators: `12,367`.
fn grouped(x: f64) -> String {
    let digits = format!("{:.0}", x.max(0.0));
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// The Markdown table of one backend. Ratios are to the bare INSERT at the same concurrency:
/// the time per event over all rounds; the median and the quartiles of the per-round ratios
/// (each round against the same round's INSERT), which a burst of load in one round moves
/// less; and the ratio of the median latencies.
fn table(cells: &[Cell]) -> String {
    let mut out = String::from(
        "| operation | workers | events/s | µs/event | p50 latency | p99 latency \
         | vs bare INSERT | per round: median (quartiles) | p50 vs INSERT p50 |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for cell in cells {
        let Some(baseline) = cells
            .iter()
            .find(|c| c.workers == cell.workers && c.op == Op::BareInsert)
        else {
            continue;
        };
        let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
        let mut per_round: Vec<f64> = cell
            .rounds
            .iter()
            .zip(&baseline.rounds)
            .map(|(&c, &b)| ratio(c, b))
            .collect();
        per_round.sort_by(f64::total_cmp);
        let quantile = |q: f64| {
            let last = per_round.len().saturating_sub(1);
            per_round
                .get((last as f64 * q).round() as usize)
                .copied()
                .unwrap_or_default()
        };
        let (low, median, high) = (quantile(0.25), quantile(0.5), quantile(0.75));
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} µs | {} µs | {:.2}x | {median:.2}x ({low:.2}–{high:.2}) | {:.2}x |",
            if cell.op == Op::ClaimComplete {
                format!("**{}**", cell.op.label())
            } else {
                cell.op.label().to_owned()
            },
            cell.workers,
            grouped(cell.per_second()),
            grouped(micros(cell.per_event())),
            grouped(micros(cell.latency(0.50))),
            grouped(micros(cell.latency(0.99))),
            ratio(cell.per_event(), baseline.per_event()),
            ratio(cell.latency(0.50), baseline.latency(0.50)),
        );
    }
    out
}

/// The 1-minute load average (Linux), `None` elsewhere.
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn unique_suffix() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{}_{nanos}", std::process::id())
}

async fn bench_sqlite() -> Result<Vec<Cell>, BoxError> {
    let dir: PathBuf = std::env::temp_dir().join(format!("kxp-dedup-bench-{}", unique_suffix()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("dedup.db");
    eprintln!("SQLite: {} (WAL, synchronous = FULL)", path.display());
    let result = async {
        let store = Store::connect(&format!("sqlite://{}", path.display())).await?;
        let pool = store.sqlite_pool().ok_or("not a SQLite store")?;
        let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
            .fetch_one(pool)
            .await?;
        if mode != "wal" {
            return Err(format!("journal_mode is {mode}, not wal").into());
        }
        sqlx::query(SQLITE_BASELINE_TABLE).execute(pool).await?;
        let cells = bench_store(&store, "s", SQLITE_OPS).await;
        store.close().await;
        cells
    }
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// `url` with its database name replaced by `name`.
fn with_database(url: &str, name: &str) -> Result<String, BoxError> {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let authority = base.find("://").ok_or("not a postgres:// URL")? + 3;
    let path = base[authority..]
        .find('/')
        .map_or(base.len(), |i| authority + i);
    let mut out = format!("{}/{name}", &base[..path]);
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    Ok(out)
}

/// `url` without its password, for messages.
fn redacted(url: &str) -> String {
    let Some(authority) = url.find("://").map(|i| i + 3) else {
        return "<not a URL>".to_owned();
    };
    let end = url[authority..]
        .find(['/', '?'])
        .map_or(url.len(), |i| authority + i);
    match url[authority..end].rfind('@') {
        Some(at) => match url[authority..authority + at].find(':') {
            Some(colon) => format!(
                "{}***{}",
                &url[..authority + colon + 1],
                &url[authority + at..]
            ),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// `None` when the server is unreachable (after the `SKIPPED` line).
async fn bench_postgres() -> Result<Option<Vec<Cell>>, BoxError> {
    let admin_url = ["KXP_BENCH_DATABASE_URL", "KXP_TEST_DATABASE_URL"]
        .iter()
        .find_map(|var| std::env::var(var).ok().filter(|v| !v.is_empty()))
        .unwrap_or_else(|| DEFAULT_PG_URL.to_owned());
    let connected =
        tokio::time::timeout(Duration::from_secs(5), PgConnection::connect(&admin_url)).await;
    let mut admin = match connected {
        Ok(Ok(conn)) => conn,
        Ok(Err(e)) => {
            eprintln!(
                "SKIPPED (PostgreSQL): cannot connect to {}: {e} \
                 (set KXP_BENCH_DATABASE_URL to a server where CREATE DATABASE is allowed)",
                redacted(&admin_url)
            );
            return Ok(None);
        }
        Err(_) => {
            eprintln!(
                "SKIPPED (PostgreSQL): no answer from {} within 5 s",
                redacted(&admin_url)
            );
            return Ok(None);
        }
    };
    let version: String = sqlx::query_scalar("SHOW server_version")
        .fetch_one(&mut admin)
        .await?;
    let sync: String = sqlx::query_scalar("SHOW synchronous_commit")
        .fetch_one(&mut admin)
        .await?;
    let name = format!("kxp_bench_dedup_{}", unique_suffix());
    sqlx::query(&format!("CREATE DATABASE \"{name}\""))
        .execute(&mut admin)
        .await?;
    let url = with_database(&admin_url, &name)?;
    eprintln!(
        "PostgreSQL {version}: database {name} on {} (synchronous_commit = {sync})",
        redacted(&admin_url)
    );
    let result = async {
        let store = Store::connect(&url).await?;
        let pool = store.postgres_pool().ok_or("not a PostgreSQL store")?;
        sqlx::query(PG_BASELINE_TABLE).execute(pool).await?;
        let cells = bench_store(&store, "p", PG_OPS).await;
        store.close().await;
        cells
    }
    .await;
    let dropped = sqlx::query(&format!("DROP DATABASE \"{name}\" WITH (FORCE)"))
        .execute(&mut admin)
        .await;
    let _ = admin.close().await;
    let cells = result?;
    if let Err(e) = dropped {
        eprintln!("could not drop the benchmark database {name}: {e}");
    }
    Ok(Some(cells))
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    // `cargo bench` passes `--bench` (and any filter); there is nothing to select here.
    let started = Instant::now();
    eprintln!(
        "dedup benchmark: {} tokio worker threads",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    // The 1-minute load average, sampled every 2 s for the whole run.
    let loads = Arc::new(Mutex::new(Vec::new()));
    let sampler = tokio::spawn({
        let loads = Arc::clone(&loads);
        async move {
            loop {
                if let (Some(load), Ok(mut loads)) = (load_average(), loads.lock()) {
                    loads.push(load);
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    });
    let sqlite = bench_sqlite().await?;
    let postgres = bench_postgres().await?;
    sampler.abort();

    println!("\n### SQLite\n\n{}", table(&sqlite));
    match postgres {
        Some(cells) => println!("### PostgreSQL\n\n{}", table(&cells)),
        None => println!("### PostgreSQL\n\nSkipped: the server is unreachable (see stderr).\n"),
    }
    let loads = loads.lock().map(|l| l.clone()).unwrap_or_default();
    let (low, high) = loads.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &l| {
        (lo.min(l), hi.max(l))
    });
    println!(
        "Whole run: {:.0} s; 1-minute load average {low:.2}–{high:.2} ({} samples, every 2 s).",
        started.elapsed().as_secs_f64(),
        loads.len()
    );
    Ok(())
}
