//! Erasure by tag under load (issue 37): how long erasing a tag on `--events` events takes,
//! and what it does to ingestion meanwhile. A `kxp serve` (release build, `--kxp-bin`) on
//! SQLite or PostgreSQL, one paused endpoint (every event gets a held delivery row, which the
//! erasure ends, and no HTTP attempt muddies the figures), `--events` events tagged `customer:big` seeded,
//! then `--concurrency` producers ingest without pause: `--seconds` without an erasure, then
//! through the erasure of `customer:big` until it is done (and at least `--seconds`). The
//! report: ingestion's rate and latency percentiles in both phases, and the erasure's time.
//!
//! ```text
//! cargo build --release -p kxp-cli          # in the workspace
//! cd benches && cargo build --release --bin erasure
//! ./target/release/erasure --kxp-bin ../target/release/kxp --database sqlite
//! ./target/release/erasure --kxp-bin ../target/release/kxp --database postgres \
//!     --pg-url postgres://postgres@127.0.0.1:5432/postgres
//! ```

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::{Value, json};
use sqlx::Connection;
use tokio::process::Command;

const KEY: &str = "kxp_bench_erasure_key";

#[derive(Parser)]
struct Args {
    /// The `kxp` binary (a release build).
    #[arg(long)]
    kxp_bin: PathBuf,
    /// `sqlite` or `postgres`.
    #[arg(long, default_value = "sqlite")]
    database: String,
    /// A PostgreSQL database to create the benchmark's own database from.
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    pg_url: String,
    /// Events carrying the erased tag.
    #[arg(long, default_value_t = 100_000)]
    events: usize,
    /// Producers ingesting at once.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Seconds of each phase, at least.
    #[arg(long, default_value_t = 15)]
    seconds: u64,
}

type Result<T> = std::result::Result<T, String>;

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let dir = std::env::temp_dir().join(format!("kxp-erasure-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let (url, drop_pg) = match args.database.as_str() {
        "sqlite" => (format!("sqlite://{}", dir.join("kxp.db").display()), None),
        "postgres" => {
            let name = format!("kxp_bench_erasure_{}", std::process::id());
            let mut admin = sqlx::PgConnection::connect(&args.pg_url)
                .await
                .map_err(|e| format!("{}: {e}", args.pg_url))?;
            sqlx::query(&format!("CREATE DATABASE {name}"))
                .execute(&mut admin)
                .await
                .map_err(|e| e.to_string())?;
            let base = args
                .pg_url
                .rsplit_once('/')
                .map_or(&*args.pg_url, |(b, _)| b);
            (format!("{base}/{name}"), Some((admin, name)))
        }
        other => return Err(format!("--database sqlite or postgres, not {other}")),
    };
    let outcome = run(&args, &url, &dir).await;
    if let Some((mut admin, name)) = drop_pg {
        let _ = sqlx::query(&format!("DROP DATABASE {name} WITH (FORCE)"))
            .execute(&mut admin)
            .await;
    }
    let _ = std::fs::remove_dir_all(&dir);
    outcome
}

async fn run(args: &Args, url: &str, dir: &std::path::Path) -> Result<()> {
    if url.starts_with("postgres") {
        let out = Command::new(&args.kxp_bin)
            .args(["migrate", "apply"])
            .env("KXP_DATABASE_URL", url)
            .output()
            .await
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
    }
    let addr = free_port()?;
    let log = std::fs::File::create(dir.join("serve.log")).map_err(|e| e.to_string())?;
    let _server = Command::new(&args.kxp_bin)
        .args(["serve", "--dev"])
        .env("KXP_DATABASE_URL", url)
        .env("KXP_API_KEY", KEY)
        .env("KXP_LISTEN", addr.to_string())
        .env("KXP_BACKLOG_LIMIT", "0")
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| e.to_string())?;
    let base = format!("http://{addr}");
    let client = reqwest::Client::new();
    let started = Instant::now();
    while client.get(format!("{base}/healthz")).send().await.is_err() {
        if started.elapsed() > Duration::from_secs(30) {
            return Err("kxp serve did not answer in 30 s".to_owned());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Paused: every event gets a held delivery, as an endpoint that is down has, which the
    // erasure ends; nothing is attempted.
    let endpoint = call(
        &client,
        &base,
        "POST",
        "/v1/endpoints",
        json!({"url": "http://127.0.0.1:9/hook", "skip_challenge": true}),
    )
    .await?;
    let id = endpoint["id"].as_str().ok_or("no endpoint id")?;
    call(
        &client,
        &base,
        "POST",
        &format!("/v1/endpoints/{id}/pause"),
        Value::Null,
    )
    .await?;

    let seeding = Instant::now();
    emit_n(
        &client,
        &base,
        args.events,
        args.concurrency * 2,
        "customer:big",
    )
    .await?;
    println!(
        "seeded {} events tagged customer:big in {:.1} s",
        args.events,
        seeding.elapsed().as_secs_f64()
    );

    let phase = Duration::from_secs(args.seconds);
    let quiet = load(&client, &base, args.concurrency, async {
        tokio::time::sleep(phase).await;
    })
    .await;
    let erasing = Instant::now();
    let erasure = call(
        &client,
        &base,
        "POST",
        "/v1/erasures",
        json!({"tag": "customer:big"}),
    )
    .await?;
    let id = erasure["id"].as_str().ok_or("no erasure id")?.to_owned();
    let done = Arc::new(std::sync::Mutex::new(None::<(Duration, u64)>));
    let during = {
        let (client, base, done) = (client.clone(), base.clone(), done.clone());
        load(
            &client.clone(),
            &base.clone(),
            args.concurrency,
            async move {
                loop {
                    let erasure = call(
                        &client,
                        &base,
                        "GET",
                        &format!("/v1/erasures/{id}"),
                        Value::Null,
                    )
                    .await
                    .unwrap_or(Value::Null);
                    if erasure["status"] == "done" && done.lock().unwrap().is_none() {
                        *done.lock().unwrap() =
                            Some((erasing.elapsed(), erasure["events"].as_u64().unwrap_or(0)));
                    }
                    if done.lock().unwrap().is_some() && erasing.elapsed() >= phase {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        )
        .await
    };
    let (took, events) = done.lock().unwrap().ok_or("the erasure did not finish")?;
    println!(
        "erasure of customer:big: {events} events in {:.2} s ({:.0} events/s; its floor is the 5 s settling time)",
        took.as_secs_f64(),
        events as f64 / took.as_secs_f64()
    );
    println!("ingestion, {} producers:", args.concurrency);
    println!("  without an erasure: {quiet}");
    println!("  during the erasure: {during}");
    println!(
        "  ratio during/without: rate {:.2}x, p50 {:.2}x, p99 {:.2}x",
        during.rate / quiet.rate,
        during.p50 / quiet.p50,
        during.p99 / quiet.p99
    );
    Ok(())
}

/// Ingestion's figures over one phase.
struct Figures {
    rate: f64,
    p50: f64,
    p99: f64,
    max: f64,
}

impl std::fmt::Display for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.0} events/s, latency p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            self.rate, self.p50, self.p99, self.max
        )
    }
}

/// `concurrency` producers ingesting events tagged `customer:other` until `until` ends.
async fn load(
    client: &reqwest::Client,
    base: &str,
    concurrency: usize,
    until: impl std::future::Future<Output = ()>,
) -> Figures {
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let producers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (client, base, stop) = (client.clone(), base.to_owned(), stop.clone());
            tokio::spawn(async move {
                let mut took = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let at = Instant::now();
                    if emit(&client, &base, "customer:other").await.is_ok() {
                        took.push(at.elapsed().as_secs_f64() * 1000.0);
                    }
                }
                took
            })
        })
        .collect();
    until.await;
    stop.store(true, Ordering::Relaxed);
    let mut took = Vec::new();
    for producer in producers {
        took.extend(producer.await.unwrap_or_default());
    }
    let elapsed = started.elapsed().as_secs_f64();
    took.sort_by(f64::total_cmp);
    let at = |q: f64| {
        took.get(((took.len() as f64 - 1.0) * q) as usize)
            .copied()
            .unwrap_or(0.0)
    };
    Figures {
        rate: took.len() as f64 / elapsed,
        p50: at(0.5),
        p99: at(0.99),
        max: took.last().copied().unwrap_or(0.0),
    }
}

/// `n` events tagged `tag`, `concurrency` at a time.
async fn emit_n(
    client: &reqwest::Client,
    base: &str,
    n: usize,
    concurrency: usize,
    tag: &str,
) -> Result<()> {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (client, base, tag, next) = (
                client.clone(),
                base.to_owned(),
                tag.to_owned(),
                next.clone(),
            );
            tokio::spawn(async move {
                while next.fetch_add(1, Ordering::Relaxed) < n {
                    emit(&client, &base, &tag).await?;
                }
                Ok::<(), String>(())
            })
        })
        .collect();
    for worker in workers {
        worker.await.map_err(|e| e.to_string())??;
    }
    Ok(())
}

/// One event tagged `tag`, with a payload of a customer's kind.
async fn emit(client: &reqwest::Client, base: &str, tag: &str) -> Result<()> {
    let body = json!({
        "type": "customer.updated",
        "data": {"name": "Ada Lovelace", "email": "ada@example.com", "country": "GB"},
        "tags": [tag],
    });
    call(client, base, "POST", "/v1/events", body)
        .await
        .map(drop)
}

async fn call(
    client: &reqwest::Client,
    base: &str,
    method: &str,
    path: &str,
    body: Value,
) -> Result<Value> {
    let method = reqwest::Method::from_bytes(method.as_bytes()).map_err(|e| e.to_string())?;
    let mut request = client
        .request(method, format!("{base}{path}"))
        .bearer_auth(KEY);
    if !body.is_null() {
        request = request
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    let response = request.send().await.map_err(|e| e.to_string())?;
    let status = response.status();
    let text = response.text().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!("{path}: {status}: {text}"));
    }
    serde_json::from_str(&text).map_err(|e| format!("{path}: {e}"))
}

fn free_port() -> Result<SocketAddr> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())
}
