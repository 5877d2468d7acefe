//! What the two example receivers share, so each binary shows only its framework's wiring:
//!
//! - [`Config::from_env`]: `KXP_WEBHOOK_SECRET`, `KXP_LISTEN`, `DATABASE_URL`, ordered mode
//!   (`KXP_ORDERED`, `KXP_SENDER_URL`, `KXP_ENDPOINT_ID`; the axum receiver's), and the testing
//!   aids `KXP_EXAMPLE_SLOW_MS`, `KXP_EXAMPLE_NOW`, `KXP_EXAMPLE_TOLERANCE_S`,
//!   `KXP_EXAMPLE_BODY_LIMIT`, `KXP_EXAMPLE_REFUSE`;
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
/// Testing aid: an event type the handler refuses (answers 500 and records nothing), as a
/// handler with a bug would: to watch retries, dead letters and ordered mode's stops.
pub const REFUSE_VAR: &str = "KXP_EXAMPLE_REFUSE";
/// `1` turns on ordered mode (the axum receiver): each payment's events reach the handler in
/// the order the platform produced them, read from the sender's feed.
pub const ORDERED_VAR: &str = "KXP_ORDERED";
/// Ordered mode: the sender's base URL, where its feed is (`https://webhooks.platform.example`).
pub const SENDER_URL_VAR: &str = "KXP_SENDER_URL";
/// Ordered mode: the id of the endpoint this receiver is (`ep_…`), whose feed it reads.
pub const ENDPOINT_ID_VAR: &str = "KXP_ENDPOINT_ID";

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
    /// [`REFUSE_VAR`], if set: the event type the handler refuses.
    pub refuse: Option<String>,
    /// Ordered mode, when [`ORDERED_VAR`] is `1`.
    pub ordered: Option<Ordered>,
}

/// Where the sender's feed is and which endpoint's it is: for ordered mode, and for the pull
/// receiver. The feed is read with the webhook secret's feed key (the newest secret's, while
/// rotating), never an API key.
pub struct Ordered {
    /// [`SENDER_URL_VAR`].
    pub sender_url: String,
    /// [`ENDPOINT_ID_VAR`].
    pub endpoint_id: String,
    /// The first secret of [`SECRET_VAR`].
    pub secret: kxp_verify::Secret,
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
        let ordered = match optional_var(ORDERED_VAR).as_deref() {
            None | Some("0") => None,
            Some("1") => Some(Ordered::from_env(&format!("{ORDERED_VAR}=1"))?),
            Some(other) => {
                return Err(ConfigError::Ordered(format!(
                    "{ORDERED_VAR}={other:?} is not 1 or 0"
                )));
            }
        };
        Ok(Config {
            receiver,
            listen,
            database_url,
            slow,
            refuse: optional_var(REFUSE_VAR),
            ordered,
        })
    }
}

impl Ordered {
    /// Reads [`SENDER_URL_VAR`], [`ENDPOINT_ID_VAR`] and the first secret of [`SECRET_VAR`],
    /// all required by `who` (named in the error: `KXP_ORDERED=1`, `pull-receiver`).
    pub fn from_env(who: &str) -> Result<Ordered, ConfigError> {
        let required = |name: &str| {
            optional_var(name)
                .ok_or_else(|| ConfigError::Ordered(format!("{who} needs {name} to be set")))
        };
        let sender_url = required(SENDER_URL_VAR)?;
        let endpoint_id = required(ENDPOINT_ID_VAR)?;
        // The list was read (and checked) into the receiver already; the first is the newest.
        let secrets = required(SECRET_VAR)?;
        let first = secrets.split(',').next().unwrap_or_default().trim();
        let secret = kxp_verify::Secret::new(first).map_err(|_| {
            ConfigError::Ordered(format!(
                "the first secret of {SECRET_VAR} cannot read the feed"
            ))
        })?;
        Ok(Ordered {
            sender_url,
            endpoint_id,
            secret,
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
    /// The feed's settings (ordered mode's, the pull receiver's) are incomplete or unusable
    /// (the message says which).
    Ordered(String),
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
            ConfigError::Ordered(message) => f.write_str(message),
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

/// Why [`record_payment`] did not record.
#[derive(Debug)]
#[non_exhaustive]
pub enum RecordError {
    /// The database refused or failed.
    Database(sqlx::Error),
    /// The testing aid [`REFUSE_VAR`] names this event's type.
    Refused(String),
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordError::Database(error) => error.fmt(f),
            RecordError::Refused(event_type) => {
                write!(f, "{REFUSE_VAR} refuses events of type {event_type}")
            }
        }
    }
}

impl std::error::Error for RecordError {}

impl From<sqlx::Error> for RecordError {
    fn from(error: sqlx::Error) -> RecordError {
        RecordError::Database(error)
    }
}

/// The handler's work, on the dedup transaction `tx`: inserts one `payments` row for a
/// `payment.succeeded` event (other types are acknowledged and recorded as processed, with no
/// row), then hands `tx` back for the commit. The row and the "processed" mark commit together,
/// or neither does: exactly once.
///
/// With `slow` (see [`SLOW_VAR`]) it first sleeps that long, inside the transaction; an event
/// of the type `refuse` names (see [`REFUSE_VAR`]) fails, so the answer is 500.
pub async fn record_payment(
    mut tx: Tx,
    event: &Event<Payment>,
    slow: Option<Duration>,
    refuse: Option<&str>,
) -> Result<Tx, RecordError> {
    if let Some(slow) = slow {
        tokio::time::sleep(slow).await;
    }
    if refuse == Some(event.event_type()) {
        return Err(RecordError::Refused(event.event_type().to_owned()));
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
