//! Starting a receiver binary, talking to it, and reading what it wrote and stored.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kxp_dedup::sqlx::{self, Connection, SqliteConnection};
use kxp_testkit::db::SqliteFile;
use kxp_verify::Signer;

/// The secret every test receiver is started with.
pub const SECRET: &str = "7c3f0b5e9a1d4c2b8e6f0a3d5c7b9e1f2a4c6e8b0d2f4a6c8e0b2d4f6a8c0e2b";

/// How long a receiver may take to say it listens (a loaded CI machine is slow).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// Which example receiver.
#[derive(Debug, Clone, Copy)]
pub enum Bin {
    Axum,
    Actix,
}

impl Bin {
    fn path(self) -> &'static str {
        match self {
            Bin::Axum => env!("CARGO_BIN_EXE_axum-receiver"),
            Bin::Actix => env!("CARGO_BIN_EXE_actix-receiver"),
        }
    }
}

/// A fresh directory under the system's temporary directory, removed on drop: a receiver's
/// working directory.
pub struct TempDir(SqliteFile);

impl TempDir {
    pub fn new() -> TempDir {
        TempDir(SqliteFile::new("kxp-receiver.db"))
    }

    pub fn path(&self) -> &Path {
        self.0.dir()
    }

    /// The database the receivers use by default: `kxp-receiver.db` in their working directory.
    pub fn default_database(&self) -> String {
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
pub struct Running {
    child: Child,
    pub url: String,
    stdout: Output,
    stderr: Output,
}

impl Running {
    /// Starts `bin` in `dir` on a free port, with only `env` (plus `KXP_LISTEN`) in its
    /// environment, and waits for its start-up line.
    pub async fn start(bin: Bin, dir: &Path, env: &[(&str, &str)]) -> Running {
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
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
            url: format!("http://{listen}"),
            stdout,
            stderr,
        };
        let expected = format!("listening on http://{listen}/webhooks");
        let started = Instant::now();
        loop {
            if running
                .json_lines()
                .iter()
                .any(|l| l["message"] == expected)
            {
                return running;
            }
            if let Some(status) = running.child.try_wait().unwrap() {
                panic!(
                    "{bin:?} exited with {status} before listening; stderr:\n{}",
                    running.stderr().join("\n")
                );
            }
            assert!(
                started.elapsed() < STARTUP_TIMEOUT,
                "{bin:?} did not say {expected:?} within {STARTUP_TIMEOUT:?}; stdout:\n{}",
                running.stdout().join("\n")
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The lines written to stdout so far.
    pub fn stdout(&self) -> Vec<String> {
        self.stdout.lines()
    }

    /// The lines written to stderr so far.
    pub fn stderr(&self) -> Vec<String> {
        self.stderr.lines()
    }

    /// Every stdout line, parsed: each must be one JSON object.
    pub fn json_lines(&self) -> Vec<serde_json::Value> {
        self.stdout()
            .iter()
            .map(|line| {
                let value: serde_json::Value = serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}"));
                assert!(value.is_object(), "{line}");
                value
            })
            .collect()
    }

    /// The per-request log lines (target `kxp_webhooks`), once there are `count` of them: a line
    /// is written before its response, but read from the pipe by another thread.
    pub async fn request_lines(&self, count: usize) -> Vec<serde_json::Value> {
        let started = Instant::now();
        loop {
            let lines: Vec<_> = self
                .json_lines()
                .into_iter()
                .filter(|l| l["target"] == "kxp_webhooks")
                .collect();
            if lines.len() >= count || started.elapsed() > Duration::from_secs(10) {
                return lines;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGKILL, like the OOM killer or a pulled plug: no shutdown code runs.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs `bin` in `dir` with only `env`, to its end (at most 30 s): its exit status and stderr.
pub fn run_to_exit(bin: Bin, dir: &Path, env: &[(&str, &str)]) -> (ExitStatus, String) {
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
        if started.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{bin:?} is still running after 30 s");
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

/// A `payment.succeeded` event with a fresh id, serialized as a sender would: its id and body.
pub fn payment_event(amount: i64, currency: &str) -> (String, String) {
    let id = uuid::Uuid::new_v4().to_string();
    let body = serde_json::json!({
        "id": id,
        "type": "payment.succeeded",
        "api_version": "2026-11-01",
        "created_at": "2026-11-30T01:02:03Z",
        "data": {"amount": amount, "currency": currency},
    })
    .to_string();
    (id, body)
}

/// POSTs `body` to `<url>/webhooks`, signed now with `secret`: the status and the body.
pub async fn deliver(url: &str, secret: &str, body: &str) -> (u16, String) {
    let header = Signer::from_secret_list(secret)
        .unwrap()
        .sign_now(body.as_bytes())
        .to_string();
    let response = reqwest::Client::new()
        .post(format!("{url}/webhooks"))
        .header("X-Kxp-Signature", header)
        .header("Content-Type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// A payment row as the receiver stored it: event id, amount, currency.
pub type PaymentRow = (String, Option<i64>, Option<String>);

/// The `payments` rows of a SQLite database, read with a connection of the test's own.
pub async fn sqlite_payments(url: &str) -> Vec<PaymentRow> {
    let mut conn = SqliteConnection::connect(url).await.unwrap();
    let rows = sqlx::query_as(PAYMENTS).fetch_all(&mut conn).await.unwrap();
    conn.close().await.unwrap();
    rows
}

/// The query [`sqlite_payments`] runs, on either backend.
pub const PAYMENTS: &str = "SELECT event_id, amount, currency FROM payments ORDER BY id";
