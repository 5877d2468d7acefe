//! The example binaries as receivers under test: each start is a real process (a temporary
//! working directory, a free port on 127.0.0.1), spoken to over HTTP only; its log is its
//! stdout, its effects are the `payments` rows of its database.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kxp_dedup::sqlx::{self, Connection, PgConnection, SqliteConnection};
use kxp_testkit::conformance::request_lines;
use kxp_testkit::conformance::{
    Config, Effect, Framework, Mode, ReceiverUnderTest, RunningReceiver, Signal,
};
use kxp_testkit::db::SqliteFile;

/// How long a receiver may take to say it listens, or to log a request (a loaded CI machine is
/// slow).
const PATIENCE: Duration = Duration::from_secs(30);

/// Which example receiver.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Bin {
    Axum,
    Actix,
}

impl Bin {
    pub(crate) fn path(self) -> &'static str {
        match self {
            Bin::Axum => env!("CARGO_BIN_EXE_axum-receiver"),
            Bin::Actix => env!("CARGO_BIN_EXE_actix-receiver"),
        }
    }
}

impl ReceiverUnderTest for Bin {
    type Running = Running;

    fn name(&self) -> String {
        format!("{self:?} example binary")
    }

    fn mode(&self) -> Mode {
        Mode::InTransaction
    }

    fn framework(&self) -> Framework {
        match self {
            Bin::Axum => Framework::Axum,
            Bin::Actix => Framework::Actix,
        }
    }

    /// Passes the configuration the way a merchant would: in the environment.
    async fn start(&self, config: Config) -> Running {
        let dir = TempDir::new();
        let mut env = vec![
            ("KXP_WEBHOOK_SECRET", config.secrets.join(",")),
            ("DATABASE_URL", config.database_url.clone()),
            ("KXP_EXAMPLE_BODY_LIMIT", config.body_limit.to_string()),
        ];
        if let Some(now) = config.now {
            env.push(("KXP_EXAMPLE_NOW", now.to_string()));
        }
        if let Some(tolerance) = config.tolerance {
            env.push(("KXP_EXAMPLE_TOLERANCE_S", tolerance.as_secs().to_string()));
        }
        if let Some(slow) = config.slow {
            env.push(("KXP_EXAMPLE_SLOW_MS", slow.as_millis().to_string()));
        }
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let mut running = Running::start(*self, dir.path(), &env).await;
        running.database_url = Some(config.database_url);
        running.dir = Some(dir);
        running
    }
}

/// A fresh directory under the system's temporary directory, removed on drop: a receiver's
/// working directory.
pub(crate) struct TempDir(SqliteFile);

impl TempDir {
    pub(crate) fn new() -> TempDir {
        TempDir(SqliteFile::new("kxp-receiver.db"))
    }

    pub(crate) fn path(&self) -> &Path {
        self.0.dir()
    }

    /// The database the receivers use by default: `kxp-receiver.db` in their working directory.
    pub(crate) fn default_database(&self) -> String {
        self.0.url().to_owned()
    }
}

/// A port nobody listens on right now: bound, read, released. Another process could take it
/// in between, which the start-up timeout would report.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// What a child process wrote, collected by a thread per stream.
#[derive(Clone, Default)]
struct Output(Arc<Mutex<Vec<String>>>);

impl Output {
    fn collect(self, stream: impl Read + Send + 'static) {
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { break };
                self.0.lock().unwrap().push(line);
            }
        });
    }

    fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// A receiver process. Dropping it kills it (SIGKILL) and reaps it, so no test, passing or
/// failing, leaves one behind.
pub(crate) struct Running {
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    stdout: Output,
    stderr: Output,
    /// The database given in `DATABASE_URL`, if any.
    database_url: Option<String>,
    /// The working directory, when this value owns it.
    dir: Option<TempDir>,
}

impl Running {
    /// Starts `bin` in `dir` on a free port, with only `env` (plus `KXP_LISTEN`) in its
    /// environment, and waits for its start-up line.
    pub(crate) async fn start(bin: Bin, dir: &Path, env: &[(&str, &str)]) -> Running {
        let listen = format!("127.0.0.1:{}", free_port());
        let mut command = Command::new(bin.path());
        command
            .current_dir(dir)
            // Nothing from the test's own environment (a DATABASE_URL, a RUST_LOG) leaks in.
            .env_clear()
            .env("KXP_LISTEN", &listen)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().unwrap();
        let stdout = Output::default();
        let stderr = Output::default();
        stdout.clone().collect(child.stdout.take().unwrap());
        stderr.clone().collect(child.stderr.take().unwrap());
        let mut running = Running {
            child,
            base: format!("http://{listen}"),
            stdout,
            stderr,
            database_url: None,
            dir: None,
        };
        let expected = format!("listening on http://{listen}/webhooks");
        let started = Instant::now();
        loop {
            if running.stdout().iter().any(|l| l.contains(&expected)) {
                return running;
            }
            if let Some(status) = running.child.try_wait().unwrap() {
                panic!(
                    "{bin:?} exited with {status} before listening; stderr:\n{}",
                    running.stderr.lines().join("\n")
                );
            }
            assert!(
                started.elapsed() < PATIENCE,
                "{bin:?} did not say {expected:?} within {PATIENCE:?}; stdout:\n{}",
                running.stdout().join("\n")
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The lines written to stdout so far.
    pub(crate) fn stdout(&self) -> Vec<String> {
        self.stdout.lines()
    }

    /// The database, as the test connects to it.
    fn database(&self) -> Database {
        match self.database_url.as_deref() {
            Some(url) if url.starts_with("postgres") => Database::Postgres(url.to_owned()),
            Some(url) => Database::Sqlite(url.to_owned()),
            None => {
                let dir = self
                    .dir
                    .as_ref()
                    .expect("a receiver without a database URL");
                Database::Sqlite(dir.default_database())
            }
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl RunningReceiver for Running {
    fn url(&self) -> String {
        format!("{}/webhooks", self.base)
    }

    async fn log_lines(&self, request_count: usize) -> Vec<String> {
        let started = Instant::now();
        loop {
            let lines = self.stdout();
            if request_lines(&lines).len() >= request_count || started.elapsed() > PATIENCE {
                return lines;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn effects(&self) -> Vec<Effect> {
        let rows = self.database().payments().await;
        if let (Database::Postgres(_), Some(dir)) = (self.database(), &self.dir) {
            // `DATABASE_URL=postgres://…` works like the SQLite default: no stray file.
            assert!(!dir.path().join("kxp-receiver.db").exists());
        }
        rows.into_iter()
            .map(|(event_id, amount, currency)| Effect {
                event_id,
                amount,
                currency,
            })
            .collect()
    }

    /// Makes the `payments` insert fail in the database itself: the binary is not changed.
    async fn fail_handler(&self, failing: bool) {
        let sql = match (self.database(), failing) {
            (Database::Sqlite(_), true) => {
                "CREATE TRIGGER kxp_refuse BEFORE INSERT ON payments \
                 BEGIN SELECT RAISE(ABORT, 'the ledger refused'); END"
            }
            (Database::Sqlite(_), false) => "DROP TRIGGER kxp_refuse",
            (Database::Postgres(_), true) => {
                "ALTER TABLE payments ADD CONSTRAINT kxp_refuse CHECK (false) NOT VALID"
            }
            (Database::Postgres(_), false) => "ALTER TABLE payments DROP CONSTRAINT kxp_refuse",
        };
        self.database().execute(sql).await;
    }

    /// `kill -TERM` or `kill -INT` (the signal an orchestrator or a terminal sends), then waits
    /// for the process to exit on its own: successfully, or the test fails.
    async fn stop(&mut self, signal: Signal) {
        let name = match signal {
            Signal::Term => "-TERM",
            Signal::Int => "-INT",
        };
        let sent = Command::new("kill")
            .arg(name)
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(sent.success(), "kill {name} failed: {sent}");
        let started = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                started.elapsed() < PATIENCE,
                "still running {PATIENCE:?} after {name}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(
            status.success(),
            "exited with {status} after {name}; stderr:\n{}",
            self.stderr.lines().join("\n")
        );
    }

    /// SIGKILL, like the OOM killer or a pulled plug: no shutdown code runs.
    async fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A receiver's database, from the test's side.
enum Database {
    Sqlite(String),
    Postgres(String),
}

/// A payment row as the receiver stored it: event id, amount, currency.
pub(crate) type PaymentRow = (String, Option<i64>, Option<String>);

const PAYMENTS: &str = "SELECT event_id, amount, currency FROM payments ORDER BY id";

impl Database {
    /// The `payments` rows, read with a connection of the test's own.
    async fn payments(&self) -> Vec<PaymentRow> {
        match self {
            Database::Sqlite(url) => {
                let mut conn = SqliteConnection::connect(url).await.unwrap();
                let rows = sqlx::query_as(PAYMENTS).fetch_all(&mut conn).await.unwrap();
                conn.close().await.unwrap();
                rows
            }
            Database::Postgres(url) => {
                let mut conn = PgConnection::connect(url).await.unwrap();
                let rows = sqlx::query_as(PAYMENTS).fetch_all(&mut conn).await.unwrap();
                conn.close().await.unwrap();
                rows
            }
        }
    }

    async fn execute(&self, sql: &str) {
        match self {
            Database::Sqlite(url) => {
                let mut conn = SqliteConnection::connect(url).await.unwrap();
                sqlx::query(sql).execute(&mut conn).await.unwrap();
                conn.close().await.unwrap();
            }
            Database::Postgres(url) => {
                let mut conn = PgConnection::connect(url).await.unwrap();
                sqlx::query(sql).execute(&mut conn).await.unwrap();
                conn.close().await.unwrap();
            }
        }
    }
}

/// The `payments` rows of the SQLite database at `url`.
pub(crate) async fn sqlite_payments(url: &str) -> Vec<PaymentRow> {
    Database::Sqlite(url.to_owned()).payments().await
}

/// Runs `bin` in `dir` with only `env`, to its end (at most 30 s): its exit status and stderr.
pub(crate) fn run_to_exit(bin: Bin, dir: &Path, env: &[(&str, &str)]) -> (ExitStatus, String) {
    let mut child = Command::new(bin.path())
        .current_dir(dir)
        .env_clear()
        .env("KXP_LISTEN", format!("127.0.0.1:{}", free_port()))
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > PATIENCE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{bin:?} is still running after {PATIENCE:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (status, stderr)
}

/// A real sender in the test's process, on a SQLite file in `dir`, in development mode (plain
/// HTTP to loopback endpoints), delivering at once: the server, its base URL and a client with
/// its API key.
pub(crate) async fn sender(dir: &TempDir) -> (kxp_sender::Server, String, kxp_api::Client) {
    let config = kxp_sender::Config {
        database_url: format!("sqlite://{}", dir.path().join("sender.db").display()),
        listen: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        dev: true,
        schedule: "0s"
            .parse::<kxp_sender::Schedule>()
            .unwrap()
            .with_jitter(0.0)
            .unwrap(),
        poll_interval: Duration::from_millis(20),
        api_key: Some("kxp_test_key".to_owned()),
        ..kxp_sender::Config::default()
    };
    let sender = kxp_sender::start(config).await.unwrap();
    let base = format!("http://{}", sender.addr());
    let client = kxp_api::Client::new(&base, "kxp_test_key").unwrap();
    (sender, base, client)
}
