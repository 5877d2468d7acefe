//! The processes under test and the database they may run on: `kxp serve`, the axum example
//! receiver (kxp-dedup in-transaction mode), and a PostgreSQL instance of the suite's own.
//!
//! Both processes run with a file limit of [`FILE_LIMIT`] (the machine's is higher), each on a
//! fixed port so a restart after SIGKILL is the same endpoint, and optionally on a tmpfs of their
//! own ([`Tmpfs`]) so the suite can fill their disk.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kxp_testkit::confine::{Confined, Tmpfs};

/// The file limit of both processes: what a service on a default systemd unit gets.
pub(crate) const FILE_LIMIT: u32 = 1024;
/// The sender's API key of the healthy account.
pub(crate) const KEY: &str = "kxp_fault_suite_key";
/// How long a process may take to start on a loaded 2-core machine.
const PATIENCE: Duration = Duration::from_secs(30);

/// A free port on 127.0.0.1: bound, read, released.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `command` run by a shell that lowers its own file limit first, then becomes it.
fn limited(command: &Command) -> Command {
    let mut shell = Command::new("/bin/sh");
    shell
        .arg("-c")
        .arg(format!(r#"ulimit -n {FILE_LIMIT} && exec "$@""#))
        .arg("sh")
        .arg(command.get_program())
        .args(command.get_args());
    for (key, value) in command.get_envs() {
        if let Some(value) = value {
            shell.env(key, value);
        }
    }
    shell
}

/// Starts `command` with the file limit, in `disk` when given; stderr is discarded.
fn spawn(command: &Command, disk: Option<&Tmpfs>, stdout: Stdio) -> Confined {
    let mut command = limited(command);
    match disk {
        Some(disk) => disk.spawn(&command, stdout),
        None => Confined::new(
            command
                .stdout(stdout)
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        ),
    }
}

/// The current run of a process that the suite kills and starts again.
#[derive(Default)]
struct Restartable(Option<Confined>);

impl Restartable {
    /// SIGKILL, and waits for the process to be gone.
    fn kill(&mut self) {
        drop(self.0.take());
    }

    /// Whether the process is still running (it has not exited on its own).
    fn alive(&mut self) -> bool {
        self.0
            .as_mut()
            .is_some_and(|p| p.child().try_wait().is_ok_and(|s| s.is_none()))
    }
}

fn wait_for_port(port: u16, what: &str) {
    let started = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(started.elapsed() < PATIENCE, "{what} did not start");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// `kxp serve`, restartable on the same port and database.
pub(crate) struct Sender {
    pub port: u16,
    pub database_url: String,
    process: Restartable,
}

impl Sender {
    pub(crate) fn new(database_url: String) -> Sender {
        Sender {
            port: free_port(),
            database_url,
            process: Restartable::default(),
        }
    }

    pub(crate) fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn command(&self) -> Command {
        let mut serve = Command::new(env!("CARGO_BIN_EXE_kxp"));
        serve
            .args(["serve", "--dev", "--migrate"])
            .args(["--listen", &format!("127.0.0.1:{}", self.port)])
            .args(["--database-url", &self.database_url])
            // Long enough (32 s in all) to outlast every outage the suite causes, so an
            // acknowledged event ends up processed rather than dead.
            .args([
                "--retry-schedule",
                "0s,100ms,250ms,500ms,1s,2s,3s,5s,5s,5s,5s,5s",
            ])
            .args(["--lease-extra", "500ms"])
            .env("KXP_API_KEY", KEY)
            .env("RUST_LOG", "warn");
        serve
    }

    /// Starts it and waits until it listens.
    pub(crate) fn start(&mut self, disk: Option<&Tmpfs>) {
        let mut process = spawn(&self.command(), disk, Stdio::piped());
        let stdout = process.child().stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let ready = lines
            .by_ref()
            .map_while(Result::ok)
            .any(|line| line.contains("listening on"));
        assert!(ready, "kxp serve did not start");
        // Keep draining stdout so the process never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        self.process = Restartable(Some(process));
    }

    /// SIGKILL, and waits for the process to be gone.
    pub(crate) fn kill(&mut self) {
        self.process.kill();
    }

    /// Whether the process is still running (it has not exited on its own).
    pub(crate) fn alive(&mut self) -> bool {
        self.process.alive()
    }

    /// `kxp accounts create` on its database (in `disk` when given): the new account's key.
    pub(crate) fn create_account(&self, name: &str, disk: Option<&Tmpfs>) -> String {
        let mut create = Command::new(env!("CARGO_BIN_EXE_kxp"));
        create
            .args(["accounts", "create", "--json", "--name", name])
            .args(["--database-url", &self.database_url])
            .env_remove("KXP_DATABASE_URL");
        let mut command = match disk {
            Some(disk) => disk.command(&create),
            None => create,
        };
        let out = command.stderr(Stdio::null()).output().unwrap();
        assert!(out.status.success(), "kxp accounts create failed");
        let line: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        line["api_key"].as_str().unwrap().to_owned()
    }
}

/// The axum example receiver: verifies, and records each payment once through kxp-dedup in
/// the transaction of its `payments` row.
pub(crate) struct Receiver {
    pub port: u16,
    pub database_url: String,
    secret: String,
    process: Restartable,
}

impl Receiver {
    pub(crate) fn new(port: u16, database_url: String, secret: String) -> Receiver {
        Receiver {
            port,
            database_url,
            secret,
            process: Restartable::default(),
        }
    }

    /// Starts it and waits until it listens.
    pub(crate) fn start(&mut self, disk: Option<&Tmpfs>) {
        let mut receiver = Command::new(receiver_binary());
        receiver
            .env("KXP_LISTEN", format!("127.0.0.1:{}", self.port))
            .env("KXP_WEBHOOK_SECRET", &self.secret)
            .env("DATABASE_URL", &self.database_url)
            .env("RUST_LOG", "warn");
        self.process = Restartable(Some(spawn(&receiver, disk, Stdio::null())));
        wait_for_port(self.port, "the receiver");
    }

    /// SIGKILL, and waits for the process to be gone.
    pub(crate) fn kill(&mut self) {
        self.process.kill();
    }

    /// Whether the process is still running.
    pub(crate) fn alive(&mut self) -> bool {
        self.process.alive()
    }
}

/// The example receiver, built by `cargo test --workspace` beside `kxp`.
fn receiver_binary() -> PathBuf {
    let kxp = Path::new(env!("CARGO_BIN_EXE_kxp"));
    let path = kxp.with_file_name("axum-receiver");
    assert!(
        path.exists(),
        "{} is missing: the fault suite runs the example receiver, which \
         `cargo test --workspace` builds (or `cargo build -p kxp-examples --bin axum-receiver`)",
        path.display()
    );
    path
}

/// A PostgreSQL instance of the suite's own: `initdb` into a temporary directory, on a port of
/// its own, so restarting it disturbs no other test. Stopped when dropped.
pub(crate) struct Postgres {
    bin: PathBuf,
    data: PathBuf,
    _dir: tempfile::TempDir,
    pub port: u16,
    /// Whether the server processes must run as the `postgres` user (the suite runs as root,
    /// which PostgreSQL refuses to run as).
    as_postgres: bool,
}

impl Postgres {
    /// A new instance, started; `None` (after saying why on stderr) where PostgreSQL's server
    /// programs are not installed.
    pub(crate) fn start() -> Option<Postgres> {
        let Some(bin) = server_bindir() else {
            eprintln!(
                "SKIPPED (PostgreSQL restart): no initdb under /usr/lib/postgresql/*/bin \
                 (set KXP_PG_BINDIR)"
            );
            return None;
        };
        let as_postgres = running_as_root();
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        if as_postgres {
            let owned = Command::new("chown")
                .args(["postgres:"])
                .arg(dir.path())
                .status()
                .is_ok_and(|s| s.success());
            assert!(
                owned,
                "cannot hand the instance's directory to the postgres user"
            );
        }
        let postgres = Postgres {
            bin,
            data,
            _dir: dir,
            port: free_port(),
            as_postgres,
        };
        let initdb = postgres
            .program("initdb")
            .arg("-D")
            .arg(&postgres.data)
            .args(["-A", "trust", "-U", "postgres", "--no-sync"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(initdb.success(), "initdb failed");
        postgres.up();
        Some(postgres)
    }

    pub(crate) fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// `pg_ctl start`, waiting until it accepts connections.
    pub(crate) fn up(&self) {
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c max_connections=200",
            self.port
        );
        let started = self
            .program("pg_ctl")
            .arg("-D")
            .arg(&self.data)
            .args(["-w", "-t", "30", "-l"])
            .arg(self.data.join("server.log"))
            .args(["-o", &options, "start"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(started.success(), "the suite's PostgreSQL did not start");
    }

    /// `pg_ctl stop -m immediate`: every backend killed at once, as in a crash; recovery
    /// replays the WAL at the next start.
    pub(crate) fn crash(&self) {
        let stopped = self
            .program("pg_ctl")
            .arg("-D")
            .arg(&self.data)
            .args(["-w", "-m", "immediate", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(stopped.success(), "the suite's PostgreSQL did not stop");
    }

    fn program(&self, name: &str) -> Command {
        let path = self.bin.join(name);
        if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(path);
            command
        } else {
            Command::new(path)
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = self
            .program("pg_ctl")
            .arg("-D")
            .arg(&self.data)
            .args(["-m", "immediate", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

fn server_bindir() -> Option<PathBuf> {
    if let Ok(dir) = std::env::var("KXP_PG_BINDIR") {
        return Some(PathBuf::from(dir));
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| Some(entry.ok()?.path().join("bin")))
        .filter(|bin| bin.join("initdb").exists())
        .collect();
    found.sort();
    found.pop()
}

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find(|l| l.starts_with("Uid:"))
            .and_then(|l| l.split_whitespace().nth(1))
            == Some("0")
    })
}
