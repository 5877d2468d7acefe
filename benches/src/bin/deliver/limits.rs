//! The limits measured in the same run: the receiver alone, and bare single-row commits on
//! PostgreSQL and SQLite. Each is a closed loop for a fixed time.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use sqlx::{Connection, PgPool, SqliteConnection};

use crate::Result;
use crate::receiver::Receiver;

/// Requests/s the receiver answers to `clients` loopback clients posting `body` to `/floor`.
pub async fn receiver_alone(
    receiver: &Receiver,
    base: &str,
    client: &reqwest::Client,
    clients: usize,
    body: &str,
    secs: f64,
) -> Result<f64> {
    let before = receiver.floor_hits();
    let url = format!("{base}/floor");
    let started = Instant::now();
    let until = started + Duration::from_secs_f64(secs);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..clients {
        let (client, url, body) = (client.clone(), url.clone(), body.to_owned());
        tasks.spawn(async move {
            // Bounded by time, and by a count far above what loopback can do.
            for _ in 0..10_000_000u64 {
                if Instant::now() >= until {
                    break;
                }
                let r = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body.clone())
                    .send()
                    .await
                    .map_err(|e| e.to_string())?;
                let _ = r.bytes().await;
            }
            Ok::<(), String>(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.map_err(|e| e.to_string())??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    Ok((receiver.floor_hits() - before) as f64 / elapsed)
}

/// Single-row `INSERT` commits/s (autocommit) on a fresh PostgreSQL database, from `clients`
/// connections at once.
pub async fn postgres_commits(
    admin: &PgPool,
    pg_server: &str,
    clients: usize,
    secs: f64,
) -> Result<f64> {
    let db = format!("{}floor", crate::systems::database_prefix());
    sqlx::query(&format!("DROP DATABASE IF EXISTS \"{db}\" WITH (FORCE)"))
        .execute(admin)
        .await
        .map_err(|e| e.to_string())?;
    sqlx::query(&format!("CREATE DATABASE \"{db}\""))
        .execute(admin)
        .await
        .map_err(|e| e.to_string())?;
    let measured = async {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(clients as u32)
            .min_connections(clients as u32)
            .connect(&format!("{pg_server}/{db}"))
            .await
            .map_err(|e| e.to_string())?;
        sqlx::query(
            "CREATE TABLE floor (id bigint PRIMARY KEY, body text NOT NULL, at timestamptz NOT NULL DEFAULT now())",
        )
        .execute(&pool)
        .await
        .map_err(|e| e.to_string())?;
        let closing = pool.clone();
        let rate = commits_loop(clients, secs, move |id| {
            let pool = pool.clone();
            async move {
                sqlx::query("INSERT INTO floor (id, body) VALUES ($1, 'x')")
                    .bind(id as i64)
                    .execute(&pool)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            }
        })
        .await;
        closing.close().await;
        rate
    }
    .await;
    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS \"{db}\" WITH (FORCE)"))
        .execute(admin)
        .await;
    measured
}

/// Single-row `INSERT` commits/s on one connection to a fresh SQLite file in WAL mode.
pub async fn sqlite_commits(dir: &std::path::Path, full: bool, secs: f64) -> Result<f64> {
    let path = dir.join(format!(
        "kxp-bench-floor-{}-{}.db",
        std::process::id(),
        if full { "full" } else { "normal" }
    ));
    let options = SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))
        .map_err(|e| e.to_string())?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(if full {
            SqliteSynchronous::Full
        } else {
            SqliteSynchronous::Normal
        });
    let measured = async {
        let mut conn = SqliteConnection::connect_with(&options)
            .await
            .map_err(|e| e.to_string())?;
        sqlx::query("CREATE TABLE floor (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
            .execute(&mut conn)
            .await
            .map_err(|e| e.to_string())?;
        let started = Instant::now();
        let until = started + Duration::from_secs_f64(secs);
        let mut done = 0u64;
        while done < 10_000_000 && Instant::now() < until {
            sqlx::query("INSERT INTO floor (id, body) VALUES (?1, 'x')")
                .bind(done as i64)
                .execute(&mut conn)
                .await
                .map_err(|e| e.to_string())?;
            done += 1;
        }
        let rate = done as f64 / started.elapsed().as_secs_f64();
        let _ = conn.close().await;
        Ok(rate)
    }
    .await;
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    measured
}

/// Runs `insert(id)` from `clients` tasks with fresh ids for `secs`: successes per second.
async fn commits_loop<F, Fut>(clients: usize, secs: f64, insert: F) -> Result<f64>
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<()>> + Send,
{
    let insert = Arc::new(insert);
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let until = started + Duration::from_secs_f64(secs);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..clients {
        let (insert, next) = (insert.clone(), next.clone());
        tasks.spawn(async move {
            let mut done = 0u64;
            while done < 10_000_000 && Instant::now() < until {
                insert(next.fetch_add(1, Ordering::Relaxed)).await?;
                done += 1;
            }
            Ok::<u64, String>(done)
        });
    }
    let mut total = 0;
    while let Some(done) = tasks.join_next().await {
        total += done.map_err(|e| e.to_string())??;
    }
    Ok(total as f64 / started.elapsed().as_secs_f64())
}
