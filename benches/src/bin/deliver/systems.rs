//! The systems under test, as child processes: `kxp serve` on SQLite or PostgreSQL, and
//! Svix's `svix-server` (memory or Redis queue), each on a fresh database, set up through its
//! public API. [`Deployment::cleanup`] kills them and drops what was created.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sqlx::PgPool;
use tokio::process::{Child, Command};

use crate::Result;
use crate::citus::Cluster;
use crate::config::Routing;

/// The first account's API key of every kxp run (`KXP_API_KEY`).
pub const KXP_KEY: &str = "kxp_bench_0123456789abcdef0123456789abcdef";
/// Svix's JWT secret (`SVIX_JWT_SECRET`).
const SVIX_JWT_SECRET: &str = "kxp-bench-svix-jwt-secret-0123456789abcdef";
/// How long a server may take to answer its health check after being started.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Concurrent requests while creating accounts' endpoints.
const SETUP_CONCURRENCY: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum System {
    KxpSqlite,
    KxpPostgres,
    KxpCitus,
    SvixMemory,
    SvixRedis,
}

impl System {
    pub fn parse(name: &str) -> Result<System> {
        Ok(match name {
            "kxp-sqlite" => System::KxpSqlite,
            "kxp-postgres" => System::KxpPostgres,
            "kxp-citus" => System::KxpCitus,
            "svix-memory" => System::SvixMemory,
            "svix-redis" => System::SvixRedis,
            other => {
                return Err(format!(
                    "unknown system {other:?} (kxp-sqlite, kxp-postgres, kxp-citus, svix-memory, svix-redis)"
                ));
            }
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            System::KxpSqlite => "kxp-sqlite",
            System::KxpPostgres => "kxp-postgres",
            System::KxpCitus => "kxp-citus",
            System::SvixMemory => "svix-memory",
            System::SvixRedis => "svix-redis",
        }
    }

    pub fn is_kxp(self) -> bool {
        matches!(
            self,
            System::KxpSqlite | System::KxpPostgres | System::KxpCitus
        )
    }

    pub fn uses_postgres(self) -> bool {
        self != System::KxpSqlite
    }

    /// Whether several processes can share the work (one database, one queue).
    pub fn scales_out(self) -> bool {
        matches!(
            self,
            System::KxpPostgres | System::KxpCitus | System::SvixRedis
        )
    }
}

/// Where and how to emit the events of one endpoint.
pub struct Target {
    /// The path under a server's base URL.
    pub path: String,
    /// The `Authorization` header.
    pub auth: String,
    pub event_type: String,
}

pub struct Server {
    child: Child,
    pub pid: u32,
    pub base: String,
    log: PathBuf,
}

/// What one run started and created; [`Deployment::cleanup`] undoes it.
pub struct Deployment {
    pub tmp: PathBuf,
    pub servers: Vec<Server>,
    /// The PostgreSQL database created for this run.
    pub database: Option<String>,
    /// kxp-citus: the cluster holding it (on every node).
    pub citus: Option<Cluster>,
    pub targets: Vec<Target>,
}

/// Everything a deployment needs to know.
pub struct Setup<'a> {
    pub system: System,
    pub processes: usize,
    pub extra_args: &'a [String],
    /// How kxp's endpoints take their events.
    pub routing: Routing,
    pub kxp_bin: &'a Path,
    pub svix_bin: &'a Path,
    /// `postgres://user@host:port` (no database).
    pub pg_server: &'a str,
    pub admin: Option<&'a PgPool>,
    /// kxp-citus's cluster.
    pub citus: &'a Cluster,
    pub redis_url: &'a str,
    /// `http://127.0.0.1:port/r/<run>`: endpoint `j` is `<receiver>/<j>`.
    pub receiver: &'a str,
    pub endpoints: usize,
    pub accounts: usize,
    pub client: &'a reqwest::Client,
    /// Unique within this invocation: names the temporary directory and the database.
    pub run_id: u64,
}

impl Deployment {
    pub fn new(run_id: u64) -> Result<Deployment> {
        let tmp =
            std::env::temp_dir().join(format!("kxp-bench-deliver-{}-{run_id}", std::process::id()));
        std::fs::create_dir_all(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
        Ok(Deployment {
            tmp,
            servers: Vec::new(),
            database: None,
            citus: None,
            targets: Vec::new(),
        })
    }

    pub fn bases(&self) -> Vec<String> {
        self.servers.iter().map(|s| s.base.clone()).collect()
    }

    pub fn pids(&self) -> Vec<u32> {
        self.servers.iter().map(|s| s.pid).collect()
    }

    /// Starts the servers and creates the accounts and endpoints.
    pub async fn start(&mut self, setup: &Setup<'_>) -> Result<()> {
        if setup.system.uses_postgres() {
            let name = format!(
                "{}{}_{}",
                database_prefix(),
                setup.system.name().replace('-', "_"),
                setup.run_id
            );
            if setup.system == System::KxpCitus {
                self.citus = Some(setup.citus.clone());
                self.database = Some(name.clone());
                setup.citus.create_database(&name).await?;
            } else {
                let admin = setup.admin.ok_or("PostgreSQL is not reachable")?;
                sqlx::query(&format!("CREATE DATABASE \"{name}\""))
                    .execute(admin)
                    .await
                    .map_err(|e| format!("CREATE DATABASE {name}: {e}"))?;
                self.database = Some(name);
            }
        }
        if setup.system.is_kxp() {
            self.start_kxp(setup).await
        } else {
            self.start_svix(setup).await
        }
    }

    fn database_url(&self, setup: &Setup<'_>) -> String {
        match (&self.database, &self.citus) {
            (Some(db), Some(citus)) => citus.url(db),
            (Some(db), None) => format!("{}/{db}", setup.pg_server),
            (None, _) => format!("sqlite://{}", self.tmp.join("kxp.db").display()),
        }
    }

    async fn spawn(&mut self, mut command: Command, health: &str, setup: &Setup<'_>) -> Result<()> {
        let index = self.servers.len();
        let log = self.tmp.join(format!("server-{index}.log"));
        let file = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err = file.try_clone().map_err(|e| e.to_string())?;
        let addr = free_port()?;
        let mut child = command
            .env(
                if setup.system.is_kxp() {
                    "KXP_LISTEN"
                } else {
                    "SVIX_LISTEN_ADDRESS"
                },
                addr.to_string(),
            )
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start {command:?}: {e}"))?;
        let pid = child.id().ok_or("the server exited at once")?;
        let base = format!("http://{addr}");
        let url = format!("{base}{health}");
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!(
                    "the server exited with {status} before answering; its log:\n{}",
                    tail(&log)
                ));
            }
            if let Ok(r) = setup.client.get(&url).send().await
                && r.status().is_success()
            {
                break;
            }
            if started.elapsed() > START_TIMEOUT {
                self.servers.push(Server {
                    child,
                    pid,
                    base,
                    log: log.clone(),
                });
                return Err(format!(
                    "no answer from {url} within {START_TIMEOUT:?}; the log:\n{}",
                    tail(&log)
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.servers.push(Server {
            child,
            pid,
            base,
            log,
        });
        Ok(())
    }

    async fn start_kxp(&mut self, setup: &Setup<'_>) -> Result<()> {
        let url = self.database_url(setup);
        // A kxp that has `kxp migrate` refuses to serve a PostgreSQL database lacking its
        // migrations: apply them first, as an operator would. Earlier builds (the baseline of an
        // A/B) have no such command and migrate at start.
        let knows_migrate = Command::new(setup.kxp_bin)
            .args(["migrate", "--help"])
            .output()
            .await
            .is_ok_and(|out| out.status.success());
        if knows_migrate {
            let out = Command::new(setup.kxp_bin)
                .args(["migrate", "apply"])
                .env("KXP_DATABASE_URL", &url)
                .output()
                .await
                .map_err(|e| format!("kxp migrate apply: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "kxp migrate apply failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
        // One after the other: each process makes sure the first account exists on start.
        for _ in 0..setup.processes {
            let mut command = Command::new(setup.kxp_bin);
            command
                .arg("serve")
                .arg("--dev")
                .args(setup.extra_args)
                .env("KXP_DATABASE_URL", &url)
                .env("KXP_API_KEY", KXP_KEY);
            self.spawn(command, "/healthz", setup).await?;
        }
        let mut keys = vec![KXP_KEY.to_owned()];
        for a in 1..setup.accounts {
            let out = Command::new(setup.kxp_bin)
                .args(["accounts", "create", "--json", "--name"])
                .arg(format!("bench-{a}"))
                .env("KXP_DATABASE_URL", &url)
                .output()
                .await
                .map_err(|e| format!("kxp accounts create: {e}"))?;
            let line: Value = serde_json::from_slice(&out.stdout).map_err(|e| {
                format!(
                    "kxp accounts create printed no JSON ({e}): {}",
                    String::from_utf8_lossy(&out.stderr)
                )
            })?;
            keys.push(
                line["api_key"]
                    .as_str()
                    .ok_or("kxp accounts create: no api_key")?
                    .to_owned(),
            );
        }
        let base = self.servers[0].base.clone();
        let receiver = setup.receiver.to_owned();
        let client = setup.client.clone();
        let keys = Arc::new(keys);
        let routing = setup.routing;
        let created = concurrently(setup.endpoints, move |j| {
            let (base, receiver, client, keys) =
                (base.clone(), receiver.clone(), client.clone(), keys.clone());
            async move {
                let key = &keys[j % keys.len()];
                let url = format!("{receiver}/{j}");
                let body = match routing {
                    Routing::Type => json!({"url": url, "event_types": [event_type(j)]}),
                    // Two clauses, as a merchant's filter has: a type prefix and a value.
                    Routing::Content => json!({"url": url, "event_types": ["*"], "filter": {
                        "type": {"$prefix": "bench."}, "data.bench_route": j,
                    }}),
                };
                let r = client
                    .post(format!("{base}/v1/endpoints"))
                    .bearer_auth(key)
                    .header("content-type", "application/json")
                    .body(body.to_string())
                    .send()
                    .await
                    .map_err(|e| format!("POST /v1/endpoints: {e}"))?;
                let status = r.status();
                let text = r.text().await.unwrap_or_default();
                if status != reqwest::StatusCode::CREATED {
                    return Err(format!("POST /v1/endpoints answered {status}: {text}"));
                }
                Ok(Target {
                    path: "/v1/events".to_owned(),
                    auth: format!("Bearer {key}"),
                    event_type: event_type(j),
                })
            }
        })
        .await?;
        self.targets = created;
        Ok(())
    }

    async fn start_svix(&mut self, setup: &Setup<'_>) -> Result<()> {
        let url = self.database_url(setup);
        let queue = if setup.system == System::SvixRedis {
            "redis"
        } else {
            "memory"
        };
        if setup.system == System::SvixRedis {
            let out = Command::new("redis-cli")
                .args(["-u", setup.redis_url, "FLUSHDB"])
                .output()
                .await
                .map_err(|e| format!("redis-cli: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "redis-cli FLUSHDB: {}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
        let svix_env = |command: &mut Command| {
            command
                .env("SVIX_JWT_SECRET", SVIX_JWT_SECRET)
                .env("SVIX_DB_DSN", &url)
                .env("SVIX_QUEUE_TYPE", queue)
                .env("SVIX_REDIS_DSN", setup.redis_url)
                .env(
                    "SVIX_CACHE_TYPE",
                    if queue == "redis" { "redis" } else { "memory" },
                )
                .env("SVIX_WHITELIST_SUBNETS", "[127.0.0.1/32]")
                .env("SVIX_DB_POOL_MAX_SIZE", "16");
        };
        for p in 0..setup.processes {
            let mut command = Command::new(setup.svix_bin);
            svix_env(&mut command);
            if p == 0 {
                command.arg("--run-migrations");
            }
            self.spawn(command, "/api/v1/health/", setup).await?;
        }
        let mut command = Command::new(setup.svix_bin);
        svix_env(&mut command);
        let out = command
            .args(["jwt", "generate"])
            .output()
            .await
            .map_err(|e| format!("svix-server jwt generate: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let token = text
            .lines()
            .find_map(|l| l.strip_prefix("Token (Bearer):"))
            .map(|t| t.trim().to_owned())
            .ok_or_else(|| format!("svix-server jwt generate printed no token: {text}"))?;
        let auth = Arc::new(format!("Bearer {token}"));
        let base = self.servers[0].base.clone();
        let receiver = setup.receiver.to_owned();
        let client = setup.client.clone();
        // Svix has no accounts under one key: one application per endpoint.
        self.targets = concurrently(setup.endpoints, move |j| {
            let (base, receiver, client, auth) =
                (base.clone(), receiver.clone(), client.clone(), auth.clone());
            async move {
                let post = |path: String, body: Value| {
                    client
                        .post(format!("{base}{path}"))
                        .header("authorization", auth.as_str())
                        .header("content-type", "application/json")
                        .body(body.to_string())
                        .send()
                };
                let r = post("/api/v1/app/".into(), json!({"name": format!("bench-{j}")}))
                    .await
                    .map_err(|e| format!("POST /api/v1/app/: {e}"))?;
                let status = r.status();
                let app: Value =
                    serde_json::from_str(&r.text().await.unwrap_or_default()).unwrap_or_default();
                let app = app["id"]
                    .as_str()
                    .ok_or_else(|| format!("POST /api/v1/app/ answered {status}: {app}"))?
                    .to_owned();
                let r = post(
                    format!("/api/v1/app/{app}/endpoint/"),
                    json!({"url": format!("{receiver}/{j}")}),
                )
                .await
                .map_err(|e| format!("POST endpoint: {e}"))?;
                if !r.status().is_success() {
                    let status = r.status();
                    return Err(format!(
                        "POST /api/v1/app/{app}/endpoint/ answered {status}: {}",
                        r.text().await.unwrap_or_default()
                    ));
                }
                Ok(Target {
                    path: format!("/api/v1/app/{app}/msg/"),
                    auth: auth.to_string(),
                    event_type: event_type(j),
                })
            }
        })
        .await?;
        Ok(())
    }

    /// Kills the servers (SIGKILL: figures are taken already), drops the database and removes
    /// the temporary directory (kept, with the server logs, when `keep` is set).
    pub async fn cleanup(mut self, admin: Option<&PgPool>, keep: bool) {
        for server in &mut self.servers {
            let _ = server.child.start_kill();
            let _ = tokio::time::timeout(Duration::from_secs(10), server.child.wait()).await;
        }
        if let (Some(db), Some(citus)) = (&self.database, self.citus.take()) {
            citus.drop_database(db).await;
            self.database = None;
        }
        if let (Some(db), Some(admin)) = (self.database.take(), admin) {
            let dropped = sqlx::query(&format!("DROP DATABASE IF EXISTS \"{db}\" WITH (FORCE)"))
                .execute(admin)
                .await;
            if let Err(e) = dropped {
                eprintln!("warning: DROP DATABASE {db}: {e}");
            }
        }
        if keep {
            eprintln!("kept {} (server logs)", self.tmp.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.tmp);
        }
    }

    /// The end of each server's log, for error messages.
    pub fn logs(&self) -> String {
        self.servers
            .iter()
            .map(|s| format!("--- {} ---\n{}", s.log.display(), tail(&s.log)))
            .collect()
    }
}

/// Every database this process creates starts with this, so a final sweep finds them all.
pub fn database_prefix() -> String {
    format!("kxp_bench_{}_", std::process::id())
}

pub fn event_type(endpoint: usize) -> String {
    format!("bench.e{endpoint}")
}

/// Runs `f(0..count)` with [`SETUP_CONCURRENCY`] at a time; the results in order.
async fn concurrently<T, F, Fut>(count: usize, f: F) -> Result<Vec<T>>
where
    T: Send + 'static,
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<T>> + Send,
{
    let f = Arc::new(f);
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..SETUP_CONCURRENCY.min(count.max(1)) {
        let (f, next) = (f.clone(), next.clone());
        tasks.spawn(async move {
            let mut done = Vec::new();
            loop {
                let j = next.fetch_add(1, Ordering::Relaxed);
                if j >= count {
                    return Ok::<_, String>(done);
                }
                done.push((j, f(j).await?));
            }
        });
    }
    let mut all = Vec::with_capacity(count);
    while let Some(joined) = tasks.join_next().await {
        all.extend(joined.map_err(|e| e.to_string())??);
    }
    all.sort_by_key(|(j, _)| *j);
    Ok(all.into_iter().map(|(_, t)| t).collect())
}

/// A port free on 127.0.0.1 right now.
pub fn free_port() -> Result<SocketAddr> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    listener.local_addr().map_err(|e| e.to_string())
}

/// The last 30 lines of a file.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}
