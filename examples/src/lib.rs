//! What the two example receivers share, so each binary shows only its framework's wiring:
//!
//! - [`Config::from_env`]: `KXP_WEBHOOK_SECRET`, `KXP_LISTEN`, `DATABASE_URL` (and the testing
//!   aids `KXP_EXAMPLE_SLOW_MS`, `KXP_EXAMPLE_NOW`, `KXP_EXAMPLE_TOLERANCE_S`,
//!   `KXP_EXAMPLE_BODY_LIMIT`);
//! - [`init_logging`]: one JSON object per line on stdout, fields at the top level, so the
//!   per-request line of the receiver middleware reads
//!   `{"event_id":"…","verification":"ok","outcome":"processed","status":200,"duration_ms":3,…}`;
//! - [`open_database`]: the dedup store (its migrations included) and this app's `payments`
//!   table, in the same database;
//! - [`record_payment`]: the handler's work, run inside the dedup transaction.
//!
//! The binaries are `src/bin/axum-receiver.rs` and `src/bin/actix-receiver.rs`; the README
//! shows how to run them and point `kxp send` at them.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use kxp_dedup::{Store, StoreError, Tx, sqlx};
use kxp_receiver::{FromEnvError, Receiver};
use kxp_verify::Event;
use serde::Deserialize;

/// The webhook secret, or several comma-separated (`new,old`) while rotating. Required.
pub const SECRET_VAR: &str = "KXP_WEBHOOK_SECRET";
/// The address to listen on, such as `127.0.0.1:3000` or `0.0.0.0:8080`.
pub const LISTEN_VAR: &str = "KXP_LISTEN";
/// Where the dedup records and the payments live: `sqlite://path` (created if missing) or
/// `postgres://user:password@host/database`.
pub const DATABASE_VAR: &str = "DATABASE_URL";
/// Testing aid: milliseconds the handler sleeps inside its transaction before recording the
/// payment, so that a test can kill the process while a request is being processed.
pub const SLOW_VAR: &str = "KXP_EXAMPLE_SLOW_MS";
/// Testing aid: a pinned clock, in Unix seconds, so that the shared test vectors (signed at a
/// fixed time) can be sent to the binary. Never set it in production: a pinned clock accepts a
/// captured request for ever.
pub const NOW_VAR: &str = "KXP_EXAMPLE_NOW";
/// Testing aid: the timestamp tolerance in seconds, instead of five minutes.
pub const TOLERANCE_VAR: &str = "KXP_EXAMPLE_TOLERANCE_S";
/// Testing aid: the body limit in bytes, instead of 1 MiB.
pub const BODY_LIMIT_VAR: &str = "KXP_EXAMPLE_BODY_LIMIT";

/// [`LISTEN_VAR`] when unset: loopback only, so a dev receiver is not exposed by accident.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:3000";
/// [`DATABASE_VAR`] when unset: a SQLite file in the working directory. Nothing to install.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://kxp-receiver.db";

/// The receiver's settings, read from the environment.
///
/// No `Debug`: the database URL may hold a password.
pub struct Config {
    /// The secrets (a [`Receiver`] prints them as `[redacted]`), with the default body limit
    /// and five-minute timestamp tolerance.
    pub receiver: Receiver,
    /// Where to listen.
    pub listen: SocketAddr,
    /// The database URL.
    pub database_url: String,
    /// [`SLOW_VAR`], if set: how long [`record_payment`] sleeps first.
    pub slow: Option<Duration>,
}

impl Config {
    /// Reads [`SECRET_VAR`], [`LISTEN_VAR`], [`DATABASE_VAR`] and [`SLOW_VAR`]; an empty
    /// optional variable counts as unset.
    pub fn from_env() -> Result<Config, ConfigError> {
        let mut receiver = Receiver::from_env(SECRET_VAR).map_err(ConfigError::Secret)?;
        if let Some(now) = number_var(NOW_VAR)? {
            receiver = receiver.clock(move || now);
        }
        if let Some(seconds) = number_var(TOLERANCE_VAR)? {
            receiver = receiver.tolerance(Duration::from_secs(seconds));
        }
        if let Some(bytes) = number_var(BODY_LIMIT_VAR)? {
            let bytes = usize::try_from(bytes)
                .map_err(|_| ConfigError::Number(BODY_LIMIT_VAR, bytes.to_string()))?;
            receiver = receiver.body_limit(bytes);
        }
        let listen = optional_var(LISTEN_VAR).unwrap_or_else(|| DEFAULT_LISTEN.to_owned());
        let listen = listen.parse().map_err(|_| ConfigError::Listen(listen))?;
        let database_url =
            optional_var(DATABASE_VAR).unwrap_or_else(|| DEFAULT_DATABASE_URL.to_owned());
        let slow = optional_var(SLOW_VAR)
            .map(|ms| {
                ms.parse()
                    .map(Duration::from_millis)
                    .map_err(|_| ConfigError::Slow(ms))
            })
            .transpose()?;
        Ok(Config {
            receiver,
            listen,
            database_url,
            slow,
        })
    }
}

fn optional_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

/// An optional variable holding a whole number.
fn number_var(name: &'static str) -> Result<Option<u64>, ConfigError> {
    optional_var(name)
        .map(|value| value.parse().map_err(|_| ConfigError::Number(name, value)))
        .transpose()
}

/// A setting in the environment is missing or unusable. The message names the variable and
/// never shows a secret.
#[derive(Debug)]
#[non_exhaustive]
pub enum ConfigError {
    /// [`SECRET_VAR`] is not set, or is not a list of secrets.
    Secret(FromEnvError),
    /// [`LISTEN_VAR`] is not an address with a port.
    Listen(String),
    /// [`SLOW_VAR`] is not a number of milliseconds.
    Slow(String),
    /// A testing aid ([`NOW_VAR`], [`TOLERANCE_VAR`], [`BODY_LIMIT_VAR`]) is not a whole number.
    Number(&'static str, String),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Secret(error) => error.fmt(f),
            ConfigError::Listen(value) => write!(
                f,
                "{LISTEN_VAR}={value:?} is not an address with a port, such as {DEFAULT_LISTEN}"
            ),
            ConfigError::Slow(value) => {
                write!(f, "{SLOW_VAR}={value:?} is not a number of milliseconds")
            }
            ConfigError::Number(var, value) => write!(f, "{var}={value:?} is not a whole number"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Sends the `tracing` events to stdout, one JSON object per line with the event's fields at
/// the top level (`flatten_event`), at `info` and above unless `RUST_LOG` says otherwise.
///
/// Call it once, at start-up.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_env_filter(filter)
        .with_writer(std::io::stdout)
        .init();
}

/// Logs the start-up line: `listening on http://<addr>/webhooks` (tests wait for it). The
/// database is named by its kind only, since its URL may hold a password.
pub fn log_listening(addr: SocketAddr, store: &Store) {
    tracing::info!(
        address = %addr,
        database = store.backend().as_str(),
        "listening on http://{addr}/webhooks"
    );
}

/// This app's own table. Deliberately **no unique constraint on `event_id`**: a second
/// delivery that got through would show as a second row, so a single row per event is the
/// dedup's doing, not the schema's. (A real app keeps this in its migrations.)
const CREATE_PAYMENTS_SQLITE: &str = "
CREATE TABLE IF NOT EXISTS payments (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id    TEXT NOT NULL,
    amount      INTEGER,
    currency    TEXT,
    recorded_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
)";

/// [`CREATE_PAYMENTS_SQLITE`], for PostgreSQL.
const CREATE_PAYMENTS_POSTGRES: &str = "
CREATE TABLE IF NOT EXISTS payments (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id    TEXT NOT NULL,
    amount      BIGINT,
    currency    TEXT,
    recorded_at TIMESTAMPTZ NOT NULL DEFAULT now()
)";

/// Connects to `url` (running kxp-dedup's migrations) and creates the `payments` table if it
/// does not exist: the dedup records and the payments share one database, which is what lets
/// [`record_payment`] commit both together.
pub async fn open_database(url: &str) -> Result<Store, StoreError> {
    let store = Store::connect(url).await?;
    match (store.sqlite_pool(), store.postgres_pool()) {
        (Some(pool), _) => {
            sqlx::query(CREATE_PAYMENTS_SQLITE).execute(pool).await?;
        }
        (None, Some(pool)) => {
            sqlx::query(CREATE_PAYMENTS_POSTGRES).execute(pool).await?;
        }
        (None, None) => {}
    }
    Ok(store)
}

/// The `data` of a `payment.succeeded` event, as far as this app cares. Both fields may be
/// missing (`kxp send` sends `{}` unless told otherwise), and unknown fields are ignored:
/// versions evolve by adding fields.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Payment {
    /// The amount in minor units (cents).
    pub amount: Option<i64>,
    /// The ISO 4217 currency code, such as `eur`.
    pub currency: Option<String>,
}

/// The handler's work, on the dedup transaction `tx`: inserts one `payments` row for a
/// `payment.succeeded` event (other types are acknowledged and recorded as processed, with no
/// row), then hands `tx` back for the commit. The row and the "processed" mark commit together,
/// or neither does: exactly once.
///
/// With `slow` (see [`SLOW_VAR`]) it first sleeps that long, inside the transaction.
pub async fn record_payment(
    mut tx: Tx,
    event: &Event<Payment>,
    slow: Option<Duration>,
) -> Result<Tx, sqlx::Error> {
    if let Some(slow) = slow {
        tokio::time::sleep(slow).await;
    }
    if event.event_type() != "payment.succeeded" {
        return Ok(tx);
    }
    let payment = event.data();
    // The statements run on the transaction's own connection, never on the pool: a pooled
    // connection would commit on its own, outside the transaction.
    if let Some(conn) = tx.sqlite() {
        sqlx::query("INSERT INTO payments (event_id, amount, currency) VALUES (?1, ?2, ?3)")
            .bind(event.id())
            .bind(payment.amount)
            .bind(&payment.currency)
            .execute(conn)
            .await?;
    } else if let Some(conn) = tx.postgres() {
        sqlx::query("INSERT INTO payments (event_id, amount, currency) VALUES ($1, $2, $3)")
            .bind(event.id())
            .bind(payment.amount)
            .bind(&payment.currency)
            .execute(conn)
            .await?;
    }
    Ok(tx)
}

/// Completes on the first SIGTERM or SIGINT (Ctrl-C). Without a SIGTERM handler the process
/// would die at once on the orchestrator's stop, cutting off the requests in flight.
pub async fn stop_requested() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            // No signal handler could be installed: stop only when killed, as before.
            _ => std::future::pending().await,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
