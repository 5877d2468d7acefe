//! `console-speed`: the console's pages over a million deliveries (issue 12, section 4).
//!
//! For each backend: starts a real `kxp serve` on a fresh SQLite file or a fresh PostgreSQL
//! database (which migrates it and creates the account of `KXP_API_KEY`), stops it, seeds a
//! million deliveries straight into the database ([`seed`]), starts it again, signs in to the
//! console as a browser does (`POST /v1/portal-links`, the link's page, its form, the session
//! cookie), and times each page from a loopback client: the endpoints page, the dead-letter
//! queue (overall, narrowed to an endpoint, its next page), the search by tag, by event id and
//! by delivery id, an event's page, and the API's `GET /v1/events?tag=…`. Then it prints the
//! query plans of the statements behind those pages ([`plans`]: `EXPLAIN (ANALYZE, BUFFERS)` on
//! PostgreSQL, custom and generic, `EXPLAIN QUERY PLAN` on SQLite). Markdown on stdout,
//! progress on stderr.
//!
//! ```sh
//! cd /work/main && cargo build --release --bin kxp
//! cd benches && cargo run --release --bin console-speed -- --backend sqlite,postgres
//! ```
//!
//! The million rows exist only here: the server's own tests never seed them. The server and
//! the database it started are stopped and dropped at the end (`--keep` keeps them).

mod plans;
mod seed;

use std::path::PathBuf;
use std::process::Stdio;
use std::str::FromStr;
use std::time::{Duration, Instant};

use clap::Parser;
use sqlx::postgres::PgConnectOptions;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Connection};
use tokio::process::{Child, Command};

pub type Result<T> = std::result::Result<T, String>;

/// The account's API key of every run (`KXP_API_KEY`).
const KEY: &str = "kxp_bench_console_0123456789abcdef0123456789";

#[derive(Parser)]
#[command(about = "Times the console's pages over a million deliveries (issue 12, section 4)")]
struct Args {
    /// `sqlite`, `postgres`, or both, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "sqlite,postgres")]
    backend: Vec<String>,
    /// Deliveries to seed (two per event).
    #[arg(long, default_value_t = 1_000_000)]
    deliveries: u64,
    /// Endpoints of the account.
    #[arg(long, default_value_t = 20)]
    endpoints: usize,
    /// Distinct `customer:` tags (events per customer tag = events / customers).
    #[arg(long, default_value_t = 2000)]
    customers: u64,
    /// Days the events cover, ending now.
    #[arg(long, default_value_t = 7)]
    days: i64,
    /// Timed requests per page (after the warm-up ones).
    #[arg(long, default_value_t = 50)]
    reps: usize,
    /// Untimed requests per page first.
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// The `kxp` binary.
    #[arg(long, default_value = "../target/release/kxp")]
    kxp_bin: PathBuf,
    /// The PostgreSQL server (a database is created on it and dropped at the end).
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432")]
    pg_server: String,
    /// Keep the database and the server's log.
    #[arg(long)]
    keep: bool,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut failed = false;
    println!("## console-speed\n");
    for backend in &args.backend {
        match runtime.block_on(run(&args, backend)) {
            Ok(()) => {}
            Err(e) => {
                eprintln!("{backend}: {e}");
                failed = true;
            }
        }
    }
    if failed {
        std::process::ExitCode::FAILURE
    } else {
        std::process::ExitCode::SUCCESS
    }
}

/// A backend's database: where it is, and how to reach it for seeding and plans.
pub enum Database {
    Sqlite(PathBuf),
    Postgres { server: String, name: String },
}

impl Database {
    fn url(&self) -> String {
        match self {
            Database::Sqlite(path) => format!("sqlite://{}", path.display()),
            Database::Postgres { server, name } => format!("{server}/{name}"),
        }
    }
}

/// A running `kxp serve`.
struct Server {
    child: Child,
    base: String,
    log: PathBuf,
}

async fn start_server(
    args: &Args,
    db: &Database,
    dir: &std::path::Path,
    n: usize,
) -> Result<Server> {
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        l.local_addr().map_err(|e| e.to_string())?
    };
    let log = dir.join(format!("server-{n}.log"));
    let file = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let err = file.try_clone().map_err(|e| e.to_string())?;
    let mut child = Command::new(&args.kxp_bin)
        .args(["serve", "--dev", "--retention", "0"])
        .env("KXP_DATABASE_URL", db.url())
        .env("KXP_API_KEY", KEY)
        .env("KXP_LISTEN", addr.to_string())
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(err)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", args.kxp_bin.display()))?;
    let base = format!("http://{addr}");
    let client = reqwest::Client::new();
    let started = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            return Err(format!("kxp serve exited with {status}:\n{text}"));
        }
        if let Ok(r) = client.get(format!("{base}/healthz")).send().await
            && r.status().is_success()
        {
            break;
        }
        if started.elapsed() > Duration::from_secs(120) {
            return Err(format!(
                "kxp serve did not answer within 120 s; see {}",
                log.display()
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(Server { child, base, log })
}

async fn stop_server(mut server: Server) -> Result<()> {
    if let Some(pid) = server.child.id() {
        // SIGTERM: a clean stop (SQLite checkpoints its WAL).
        unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    }
    match tokio::time::timeout(Duration::from_secs(30), server.child.wait()).await {
        Ok(_) => Ok(()),
        Err(_) => {
            let _ = server.child.start_kill();
            let _ = server.child.wait().await;
            Err(format!(
                "kxp serve did not stop on SIGTERM; see {}",
                server.log.display()
            ))
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

async fn run(args: &Args, backend: &str) -> Result<()> {
    let dir = std::env::temp_dir().join(format!("console-speed-{}-{backend}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let db = match backend {
        "sqlite" => Database::Sqlite(dir.join("kxp.db")),
        "postgres" => {
            let name = format!("kxp_console_speed_{}", std::process::id());
            let mut admin = sqlx::PgConnection::connect(&format!("{}/postgres", args.pg_server))
                .await
                .map_err(|e| format!("PostgreSQL: {e}"))?;
            sqlx::raw_sql(&format!("CREATE DATABASE {name}"))
                .execute(&mut admin)
                .await
                .map_err(|e| format!("CREATE DATABASE: {e}"))?;
            Database::Postgres {
                server: args.pg_server.clone(),
                name,
            }
        }
        other => return Err(format!("unknown backend {other}")),
    };
    let result = measure(args, backend, &db, &dir).await;
    if !args.keep {
        if let Database::Postgres { server, name } = &db
            && let Ok(mut admin) = sqlx::PgConnection::connect(&format!("{server}/postgres")).await
        {
            let _ = sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .execute(&mut admin)
                .await;
        }
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        eprintln!("kept {} and {}", dir.display(), db.url());
    }
    result
}

/// A connection for seeding and plans, to either backend.
pub enum Conn {
    Sqlite(sqlx::SqliteConnection),
    Postgres(sqlx::PgConnection),
}

async fn connect(db: &Database) -> Result<Conn> {
    Ok(match db {
        Database::Sqlite(path) => Conn::Sqlite(
            SqliteConnectOptions::new()
                .filename(path)
                .connect()
                .await
                .map_err(|e| e.to_string())?,
        ),
        Database::Postgres { .. } => Conn::Postgres(
            PgConnectOptions::from_str(&db.url())
                .map_err(|e| e.to_string())?
                .connect()
                .await
                .map_err(|e| e.to_string())?,
        ),
    })
}

impl Conn {
    async fn exec(&mut self, sql: &str) -> Result<()> {
        match self {
            Conn::Sqlite(c) => sqlx::raw_sql(sql).execute(c).await.map(drop),
            Conn::Postgres(c) => sqlx::raw_sql(sql).execute(c).await.map(drop),
        }
        .map_err(|e| {
            let head: String = sql.chars().take(300).collect();
            format!("{e}: {head}…")
        })
    }
    async fn text(&mut self, sql: &str) -> Result<String> {
        match self {
            Conn::Sqlite(c) => sqlx::query_scalar::<_, String>(sql).fetch_one(c).await,
            Conn::Postgres(c) => sqlx::query_scalar::<_, String>(sql).fetch_one(c).await,
        }
        .map_err(|e| format!("{e}: {sql}"))
    }
    async fn int(&mut self, sql: &str) -> Result<i64> {
        match self {
            Conn::Sqlite(c) => sqlx::query_scalar::<_, i64>(sql).fetch_one(c).await,
            Conn::Postgres(c) => sqlx::query_scalar::<_, i64>(sql).fetch_one(c).await,
        }
        .map_err(|e| format!("{e}: {sql}"))
    }
}

async fn measure(args: &Args, backend: &str, db: &Database, dir: &std::path::Path) -> Result<()> {
    eprintln!("{backend}: migrating (first start of kxp serve)");
    let server = start_server(args, db, dir, 0).await?;
    stop_server(server).await?;

    let mut conn = connect(db).await?;
    let account = conn.text("SELECT id FROM kxp_accounts").await?;
    let api_version = conn
        .text("SELECT default_api_version FROM kxp_accounts")
        .await?;
    if let Conn::Sqlite(_) = conn {
        // This connection only (the server's keep their own settings): a bulk load.
        conn.exec("PRAGMA synchronous = OFF; PRAGMA cache_size = -262144")
            .await?;
    }
    let plan = seed::Plan {
        account: account.clone(),
        api_version,
        deliveries: args.deliveries,
        endpoints: args.endpoints,
        customers: args.customers,
        span_ms: args.days * 86_400_000,
        now: now_ms(),
    };
    eprintln!("{backend}: seeding {} deliveries", args.deliveries);
    let started = Instant::now();
    // Generated on a thread of its own while this one writes: a few thousand rows in flight.
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<String>>(4);
    let generator = {
        let plan = plan.clone();
        std::thread::spawn(move || seed::seed(&plan, tx))
    };
    let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
    conn.exec("BEGIN").await?;
    let mut in_tx = 0usize;
    let mut written = 0usize;
    loop {
        let rx = rx.clone();
        let next =
            tokio::task::spawn_blocking(move || rx.lock().expect("the receiver").recv().ok())
                .await
                .map_err(|e| e.to_string())?;
        let Some(statements) = next else { break };
        for sql in statements {
            conn.exec(&sql).await?;
            in_tx += 1;
            written += 1;
            if in_tx >= 200 {
                conn.exec("COMMIT").await?;
                conn.exec("BEGIN").await?;
                in_tx = 0;
            }
            if written.is_multiple_of(500) {
                eprint!(".");
            }
        }
    }
    let seeded = generator
        .join()
        .map_err(|_| "the generator panicked".to_owned())??;
    conn.exec("COMMIT").await?;
    eprintln!();
    let seed_secs = started.elapsed().as_secs_f64();
    let started = Instant::now();
    if let Conn::Postgres(_) = conn {
        // What autovacuum does by itself after a bulk insert; the plans need the statistics.
        conn.exec("VACUUM ANALYZE").await?;
    }
    let vacuum_secs = started.elapsed().as_secs_f64();
    let count = conn.int("SELECT COUNT(*) FROM kxp_deliveries").await?;
    let size = match db {
        Database::Postgres { name, .. } => {
            conn.int(&format!("SELECT pg_database_size('{name}')"))
                .await? as f64
        }
        Database::Sqlite(path) => std::fs::metadata(path)
            .map(|m| m.len() as f64)
            .unwrap_or(0.0),
    };
    drop(conn);
    println!("### {backend}\n");
    println!(
        "Seeded in {seed_secs:.0} s{}: {count} deliveries ({} dead, {} of them not replayed: {} of the failing endpoint, {} of a healthy one; {} pending), {} events, {} tags, {} attempts, {} endpoints; database {:.0} MiB.\n",
        if vacuum_secs > 0.5 {
            format!(" (+ VACUUM ANALYZE {vacuum_secs:.0} s)")
        } else {
            String::new()
        },
        seeded.dead,
        seeded.dead_unreplayed,
        seeded.dead_unreplayed_failing,
        seeded.dead_unreplayed_healthy,
        seeded.pending,
        seeded.events,
        seeded.tags,
        seeded.attempts,
        seeded.endpoints.len(),
        size / 1_048_576.0
    );

    eprintln!("{backend}: starting kxp serve on the seeded database");
    let server = start_server(args, db, dir, 1).await?;
    let result = pages(args, &server, &account, &seeded).await;
    let plans = match result {
        Ok(()) => {
            let mut conn = connect(db).await?;
            plans::print(&mut conn, &account, &seeded, plan.now).await
        }
        Err(e) => Err(e),
    };
    stop_server(server).await?;
    plans
}

/// Signs in as a browser does and returns the session cookie.
async fn sign_in(client: &reqwest::Client, base: &str) -> Result<String> {
    let r = client
        .post(format!("{base}/v1/portal-links"))
        .bearer_auth(KEY)
        .header("content-type", "application/json")
        .body(r#"{"scope":"manage","ttl_seconds":900}"#)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let bytes = r.bytes().await.map_err(|e| e.to_string())?;
    let body: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
        format!(
            "POST /v1/portal-links: {e}: {}",
            String::from_utf8_lossy(&bytes)
        )
    })?;
    let url = body["url"]
        .as_str()
        .ok_or(format!("no url in {body}"))?
        .to_owned();
    let r = client.get(&url).send().await.map_err(|e| e.to_string())?;
    let cookie = set_cookie(&r, "kxp_sign_in").ok_or("the link page set no sign-in cookie")?;
    let page = r.text().await.map_err(|e| e.to_string())?;
    let field = |name: &str| -> Result<String> {
        let marker = format!("name=\"{name}\" value=\"");
        let at = page
            .find(&marker)
            .ok_or(format!("no {name} in the link page"))?
            + marker.len();
        Ok(page[at..].split('"').next().unwrap_or_default().to_owned())
    };
    let form = format!(
        "csrf_token={}&token={}",
        field("csrf_token")?,
        field("token")?
    );
    let r = client
        .post(format!("{base}/console/sign-in"))
        .header("cookie", format!("kxp_sign_in={cookie}"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if r.status() != 303 {
        return Err(format!("sign-in answered {}", r.status()));
    }
    set_cookie(&r, "kxp_session").ok_or("the sign-in set no session cookie".to_owned())
}

fn set_cookie(r: &reqwest::Response, name: &str) -> Option<String> {
    r.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| {
            let (pair, _) = v.split_once(';').unwrap_or((v, ""));
            let (k, value) = pair.split_once('=')?;
            (k.trim() == name && !value.is_empty()).then(|| value.to_owned())
        })
}

/// One timed URL.
struct Page {
    name: String,
    path: String,
    api: bool,
    expect: u16,
}

async fn pages(args: &Args, server: &Server, account: &str, s: &seed::Seeded) -> Result<()> {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .pool_max_idle_per_host(4)
        .build()
        .map_err(|e| e.to_string())?;
    let base = &server.base;
    let session = sign_in(&client, base).await?;
    let a = format!("/console/a/{account}");
    let page = |name: &str, path: String, api: bool, expect: u16| Page {
        name: name.to_owned(),
        path,
        api,
        expect,
    };
    // The next page of the dead-letter queue: its link from the first page.
    let first = client
        .get(format!("{base}{a}/dead-letters"))
        .header("cookie", format!("kxp_session={session}"))
        .send()
        .await
        .map_err(|e| e.to_string())?
        .text()
        .await
        .map_err(|e| e.to_string())?;
    let after = first
        .find("after=dlv_")
        .map(|at| first[at + 6..at + 6 + 36].to_owned())
        .unwrap_or_default();
    let list = vec![
        page(
            "endpoints page (20 endpoints with health)",
            a.clone(),
            false,
            200,
        ),
        page(
            "dead-letter queue, all endpoints",
            format!("{a}/dead-letters"),
            false,
            200,
        ),
        page(
            "dead-letter queue, its 2nd page",
            format!("{a}/dead-letters?after={after}"),
            false,
            200,
        ),
        page(
            "dead-letter queue, the failing endpoint",
            format!("{a}/dead-letters?endpoint={}", s.failing),
            false,
            200,
        ),
        page(
            "dead-letter queue, a healthy endpoint",
            format!("{a}/dead-letters?endpoint={}", s.healthy),
            false,
            200,
        ),
        page(
            "search: unique tag",
            format!("{a}/events?q={}", s.mid_tag),
            false,
            200,
        ),
        page(
            "search: customer tag (250 events)",
            format!("{a}/events?q={}", s.customer_tag),
            false,
            200,
        ),
        page(
            "search: tag on 10 % of events",
            format!("{a}/events?q=plan:enterprise"),
            false,
            200,
        ),
        page(
            "search: tag that matches nothing",
            format!("{a}/events?q=order:none"),
            false,
            200,
        ),
        page(
            "search: event id (303 to its page)",
            format!("{a}/events?q={}", s.mid_event),
            false,
            303,
        ),
        page(
            "search: delivery id (303)",
            format!("{a}/events?q={}", s.mid_delivery),
            false,
            303,
        ),
        page(
            "search: status dead (deliveries)",
            format!("{a}/events?status=dead"),
            false,
            200,
        ),
        page(
            "search: endpoint filter (deliveries)",
            format!("{a}/events?endpoint={}", s.healthy),
            false,
            200,
        ),
        page(
            "event page (2 deliveries, 8 + 2 attempts)",
            format!("{a}/events/{}", s.dead_event),
            false,
            200,
        ),
        page(
            "event page (mid-range event)",
            format!("{a}/events/{}", s.mid_event),
            false,
            200,
        ),
        page(
            "API GET /v1/events?tag=<unique>",
            format!("/v1/events?tag={}", s.mid_tag),
            true,
            200,
        ),
        page(
            "API GET /v1/events?tag=<customer>",
            format!("/v1/events?tag={}", s.customer_tag),
            true,
            200,
        ),
    ];
    println!("| page | median ms | p95 ms | max ms | n | bytes |");
    println!("|---|---:|---:|---:|---:|---:|");
    for p in &list {
        let mut times = Vec::with_capacity(args.reps);
        let mut bytes = 0;
        let budget = Instant::now();
        for i in 0..args.warmup + args.reps {
            let mut req = client.get(format!("{base}{}", p.path));
            req = if p.api {
                req.bearer_auth(KEY)
            } else {
                req.header("cookie", format!("kxp_session={session}"))
            };
            let t = Instant::now();
            let r = req.send().await.map_err(|e| e.to_string())?;
            let status = r.status().as_u16();
            let body = r.bytes().await.map_err(|e| e.to_string())?;
            let ms = t.elapsed().as_secs_f64() * 1000.0;
            if status != p.expect {
                return Err(format!(
                    "{} answered {status}: {}",
                    p.path,
                    String::from_utf8_lossy(&body[..body.len().min(500)])
                ));
            }
            bytes = body.len();
            if i >= args.warmup {
                times.push(ms);
            }
            // A page that is slow gets fewer repetitions (at least 5).
            if budget.elapsed() > Duration::from_secs(30) && times.len() >= 5 {
                break;
            }
        }
        times.sort_by(f64::total_cmp);
        let q = |f: f64| times[((times.len() as f64 - 1.0) * f).round() as usize];
        println!(
            "| {} | {:.1} | {:.1} | {:.1} | {} | {} |",
            p.name,
            q(0.5),
            q(0.95),
            times[times.len() - 1],
            times.len(),
            bytes
        );
        eprintln!(
            "  {}: median {:.1} ms, p95 {:.1} ms",
            p.name,
            q(0.5),
            q(0.95)
        );
    }
    println!();
    Ok(())
}
