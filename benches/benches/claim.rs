//! What the sender's claim costs: `Db::claim` (per-endpoint caps, the endpoint and circuit
//! check, `ROW_NUMBER` over a window of candidates) against a bare claim (the due index in
//! order, nothing else), on SQLite, and how it scales with a backlog it must pass over.
//!
//! Run: `cd benches && cargo bench --bench claim` (see ../../BENCHMARKS.md for the numbers).
//!
//! A fresh SQLite file in the system temporary directory, opened with `Db::connect` (WAL,
//! `synchronous = NORMAL`, as `kxp serve` runs). Deliveries are inserted directly (one event,
//! many deliveries), due in the past, interleaved across endpoints. Each measurement claims
//! batches of 100 until it has taken the planned number of rows, timing each claim; between
//! repetitions every delivery is put back to `pending`. The two claims take turns, repetition
//! by repetition, so load from other processes falls on both alike.
//!
//! - `even`: 10,000 due deliveries over 100 endpoints; claim them all. The floor is a bare
//!   `UPDATE … WHERE id IN (SELECT id … ORDER BY next_attempt_at LIMIT 100)`: what any claim
//!   of due rows in order pays.
//! - `backlog N`: one endpoint has N due deliveries older than everything else and may take
//!   none now (out of rate tokens: cap 0), beside 20 endpoints with 20 due each; claim those
//!   400. The bare claim cannot skip the backlog, so only `Db::claim` is timed: the cost of
//!   passing over a rate-limited endpoint's backlog, per claim.

use std::error::Error;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kxp_dedup::sqlx;
use kxp_sender::{Db, EndpointId};

type BoxError = Box<dyn Error + Send + Sync>;

const BATCH: i64 = 100;
const REPETITIONS: usize = 15;
/// The default cap per endpoint and claim: `kxp serve`'s per-endpoint concurrency.
const PER_ENDPOINT: usize = 8;

const BARE_CLAIM: &str = "UPDATE kxp_deliveries SET status = 'delivering', lease_owner = $1, \
     lease_until = $2 WHERE id IN (SELECT id FROM kxp_deliveries WHERE status = 'pending' \
     AND next_attempt_at <= $2 ORDER BY next_attempt_at LIMIT $3) RETURNING id";

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let dir = std::env::temp_dir().join(format!(
        "kxp-bench-claim-{}-{}",
        std::process::id(),
        SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos()
    ));
    std::fs::create_dir_all(&dir)?;
    let result = run(&dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn run(dir: &std::path::Path) -> Result<(), BoxError> {
    println!("claim cost on SQLite, batches of {BATCH}, median of {REPETITIONS} repetitions");
    println!(
        "{:<28} {:>14} {:>14} {:>8}",
        "scenario", "Db::claim", "bare claim", "ratio"
    );

    // `even`: 100 endpoints × 100 due deliveries.
    let db = setup(dir, "even", &[100; 100], 0).await?;
    let (ours, bare) = compare(&db, 10_000).await?;
    println!(
        "{:<28} {:>11.0} µs {:>11.0} µs {:>7.2}x",
        "even (10,000 over 100 eps)",
        per_claim(&ours),
        per_claim(&bare),
        per_claim(&ours) / per_claim(&bare)
    );
    db.close().await;

    for backlog in [0usize, 10_000, 100_000] {
        let db = setup(dir, &format!("backlog-{backlog}"), &[20; 20], backlog).await?;
        let mut samples = Vec::new();
        for _ in 0..REPETITIONS {
            reset(&db).await?;
            samples.push(claim_ours(&db, 400, Some("ep_backlog")).await?);
        }
        println!(
            "{:<28} {:>11.0} µs {:>14} {:>8}",
            format!("backlog {backlog} (cap 0)"),
            per_claim(&median(&mut samples)),
            "-",
            "-"
        );
        db.close().await;
    }
    Ok(())
}

/// Median per-claim durations of `Db::claim` and of the bare claim, taking turns.
async fn compare(db: &Db, rows: usize) -> Result<(Vec<Duration>, Vec<Duration>), BoxError> {
    let (mut ours, mut bare) = (Vec::new(), Vec::new());
    for round in 0..REPETITIONS {
        let mut pair = [None, None];
        for which in if round % 2 == 0 { [0, 1] } else { [1, 0] } {
            reset(db).await?;
            pair[which] = Some(if which == 0 {
                claim_ours(db, rows, None).await?
            } else {
                claim_bare(db, rows).await?
            });
        }
        let [Some(a), Some(b)] = pair else {
            unreachable!()
        };
        ours.push(a);
        bare.push(b);
    }
    Ok((median(&mut ours), median(&mut bare)))
}

/// The repetition whose total is the median.
fn median(samples: &mut [Vec<Duration>]) -> Vec<Duration> {
    samples.sort_by_key(|s| s.iter().sum::<Duration>());
    samples[samples.len() / 2].clone()
}

fn per_claim(claims: &[Duration]) -> f64 {
    claims.iter().sum::<Duration>().as_secs_f64() * 1e6 / claims.len().max(1) as f64
}

/// Claims with `Db::claim` until `rows` are taken; `capped` may take none.
async fn claim_ours(db: &Db, rows: usize, capped: Option<&str>) -> Result<Vec<Duration>, BoxError> {
    let caps: Vec<(EndpointId, usize)> = capped
        .map(|id| (EndpointId::from(id), 0))
        .into_iter()
        .collect();
    let mut taken = 0;
    let mut times = Vec::new();
    while taken < rows {
        let start = Instant::now();
        let jobs = db
            .claim("bench", 60_000, BATCH, &caps, PER_ENDPOINT)
            .await?;
        times.push(start.elapsed());
        if jobs.is_empty() {
            return Err(format!("Db::claim found nothing after {taken} of {rows}").into());
        }
        if capped.is_some() && jobs.iter().any(|id| id.as_str().starts_with("dlv_backlog")) {
            return Err("Db::claim took a capped endpoint's delivery".into());
        }
        taken += jobs.len();
    }
    Ok(times)
}

/// Claims with the bare statement until `rows` are taken.
async fn claim_bare(db: &Db, rows: usize) -> Result<Vec<Duration>, BoxError> {
    let Db::Sqlite(pool) = db else {
        return Err("SQLite only".into());
    };
    let mut taken = 0;
    let mut times = Vec::new();
    while taken < rows {
        let start = Instant::now();
        let ids: Vec<String> = sqlx::query_scalar(BARE_CLAIM)
            .bind("bench")
            .bind(now_ms())
            .bind(BATCH)
            .fetch_all(pool)
            .await?;
        times.push(start.elapsed());
        if ids.is_empty() {
            return Err(format!("the bare claim found nothing after {taken} of {rows}").into());
        }
        taken += ids.len();
    }
    Ok(times)
}

async fn reset(db: &Db) -> Result<(), BoxError> {
    let Db::Sqlite(pool) = db else {
        return Err("SQLite only".into());
    };
    sqlx::query(
        "UPDATE kxp_deliveries SET status = 'pending', lease_owner = NULL, lease_until = NULL \
         WHERE status = 'delivering'",
    )
    .execute(pool)
    .await?;
    Ok(())
}

fn now_ms() -> i64 {
    kxp_sender::now_ms()
}

/// A database with one endpoint per entry of `per_endpoint` holding that many due deliveries
/// (interleaved in due order), and an endpoint `ep_backlog` with `backlog` due deliveries
/// older than all of them.
async fn setup(
    dir: &std::path::Path,
    name: &str,
    per_endpoint: &[usize],
    backlog: usize,
) -> Result<Db, BoxError> {
    let url = format!("sqlite://{}", dir.join(format!("{name}.db")).display());
    let db = Db::connect(&url).await?;
    let Db::Sqlite(pool) = &db else {
        return Err("SQLite only".into());
    };
    let (account, _) = db.create_account("bench", None).await?;
    let now = now_ms();
    sqlx::query(
        "INSERT INTO kxp_events (id, account_id, event_type, api_version, payload, created_at) \
         VALUES ('evt', $1, 't', 'v', '{}', $2)",
    )
    .bind(&account.id)
    .bind(now)
    .execute(pool)
    .await?;
    let endpoint = "INSERT INTO kxp_endpoints (id, account_id, url, event_types, timeout_ms, created_at, updated_at) \
                    VALUES ($1, $2, 'https://bench.example/', '[\"*\"]', 5000, $3, $3)";
    let deliveries = "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < $1) \
         INSERT INTO kxp_deliveries (id, account_id, event_id, endpoint_id, status, attempts, next_attempt_at, created_at, updated_at) \
         SELECT printf('dlv_%s_%09d', $2, i), $3, 'evt', $4, 'pending', 0, $5 + i * $6, $5, $5 FROM n";
    let mut tx = pool.begin().await?;
    if backlog > 0 {
        sqlx::query(endpoint)
            .bind("ep_backlog")
            .bind(&account.id)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        sqlx::query(deliveries)
            .bind(i64::try_from(backlog)?)
            .bind("backlog")
            .bind(&account.id)
            .bind("ep_backlog")
            .bind(now - 3_600_000)
            .bind(0)
            .execute(&mut *tx)
            .await?;
    }
    let endpoints = per_endpoint.len() as i64;
    for (k, n) in per_endpoint.iter().enumerate() {
        let id = format!("ep_{k:04}");
        sqlx::query(endpoint)
            .bind(&id)
            .bind(&account.id)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        // Endpoint k's i-th delivery is due at base + i × endpoints + k: round robin.
        sqlx::query(deliveries)
            .bind(i64::try_from(*n)?)
            .bind(&id)
            .bind(&account.id)
            .bind(&id)
            .bind(now - 1_800_000 + k as i64)
            .bind(endpoints)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    sqlx::query("ANALYZE").execute(pool).await?;
    Ok(db)
}
