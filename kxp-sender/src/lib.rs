//! The kxp sender: a durable webhook delivery service, as a library and as `kxp serve`.
//!
//! Events come in through the HTTP API ([`api::app`]), are stored with one delivery per
//! subscribed endpoint in a single transaction ([`Db::ingest`](db::Db)), and are sent by
//! workers ([`worker::run`]) that claim due deliveries under a lease, sign each attempt with
//! every live secret of the endpoint, and record every try. A failed delivery is retried on a
//! jittered [`schedule`], then lands in the dead-letter queue, where it stays until replayed.
//! A process killed at any instant loses nothing: a delivery is marked delivered only after
//! the 2xx, and a lease that runs out makes its delivery claimable again. Every connection
//! passes the [address guard](guard) first: merchants' URLs never reach private networks.
//! Each endpoint is protected by a concurrency limit, a rate limit and a [circuit breaker](circuit)
//! that holds its deliveries while it is down and disables it after a long outage; the
//! merchant is [notified](notify) by an operational webhook and by e-mail.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let config = kxp_sender::Config { database_url: "sqlite://kxp.db".into(), ..Default::default() };
//! let server = kxp_sender::start(config).await?;
//! println!("listening on {}", server.addr());
//! server.shutdown().await;
//! # Ok(()) }
//! ```

// Files moved into their layers; the module paths stay as they were until the reshaping.
#[path = "http/mod.rs"]
pub mod api;
#[path = "policy/circuit.rs"]
pub mod circuit;
#[path = "store/db.rs"]
pub mod db;
#[path = "engine/dispatch.rs"]
pub mod dispatch;
#[path = "engine/guard.rs"]
pub mod guard;
#[path = "store/health.rs"]
pub mod health;
#[path = "engine/mail.rs"]
pub mod mail;
#[path = "engine/metrics.rs"]
pub mod metrics;
#[path = "engine/notify.rs"]
pub mod notify;
#[path = "engine/retention.rs"]
pub mod retention;
#[path = "policy/schedule.rs"]
pub mod schedule;
#[path = "store/schemas.rs"]
pub mod schemas;
#[path = "store/mod.rs"]
pub mod store;
#[path = "engine/worker.rs"]
pub mod worker;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

pub use db::Db;
pub use schedule::Schedule;

/// Everything `kxp serve` can be told.
#[derive(Debug, Clone)]
pub struct Config {
    /// `sqlite://path` (created if missing) or `postgres://…`.
    pub database_url: String,
    /// Where the API listens.
    pub listen: SocketAddr,
    /// Development mode: `http://` endpoint URLs are allowed, and so are loopback addresses
    /// (`127.0.0.0/8`, `::1`) — loopback only: other private ranges still need
    /// [`allow_addresses`](Config::allow_addresses).
    pub dev: bool,
    /// Blocks the address guard lets through although they are private, loopback, link-local…
    /// (`kxp serve --allow-address CIDR`). See [`guard`].
    pub allow_addresses: Vec<guard::Cidr>,
    /// When failed deliveries are tried again.
    pub schedule: Schedule,
    /// The timeout of endpoints created without one.
    pub delivery_timeout: Duration,
    /// Attempts in flight at once in this process.
    pub workers: usize,
    /// Attempts in flight at once to one endpoint, from this process.
    pub per_endpoint_concurrency: usize,
    /// How long a lease outlives its endpoint's timeout.
    pub lease_extra: Duration,
    /// How often idle workers look for due deliveries.
    pub poll_interval: Duration,
    /// The bootstrap account's API key; generated on first start (and printed once) if absent.
    pub api_key: Option<String>,
    /// Whether to run workers in this process (an API-only process sets false).
    pub run_workers: bool,
    /// Circuit breaker, auto-disable and the default rate limit.
    pub protection: circuit::Protection,
    /// The SMTP server e-mail notifications go through (`smtp://`, `smtps://`, with
    /// credentials if needed); without one, notifications are sent by webhook only.
    pub smtp_url: Option<String>,
    /// The sender of e-mail notifications, e.g. `kxp <ops@example.com>`.
    pub smtp_from: String,
    /// How long finished deliveries, their events and notifications are kept ([`retention`]);
    /// `None`: forever.
    pub retention: Option<Duration>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            database_url: "sqlite://kxp.db".to_owned(),
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            dev: false,
            allow_addresses: Vec::new(),
            schedule: Schedule::default(),
            delivery_timeout: Duration::from_secs(5),
            workers: 64,
            per_endpoint_concurrency: 8,
            lease_extra: Duration::from_secs(10),
            poll_interval: Duration::from_millis(250),
            api_key: None,
            run_workers: true,
            protection: circuit::Protection::default(),
            smtp_url: None,
            smtp_from: "kxp-webhooks <kxp@localhost>".to_owned(),
            retention: Some(Duration::from_secs(30 * 24 * 60 * 60)),
        }
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The database could not be opened or migrated.
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    /// A query failed while bootstrapping.
    #[error("{0}")]
    Store(#[from] store::StoreError),
    /// The HTTP client (the endpoint challenge's) could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Client(#[from] reqwest::Error),
    /// The SMTP settings are unusable.
    #[error("e-mail notifications: {0}")]
    Mail(#[from] mail::MailError),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// A running sender.
pub struct Server {
    addr: SocketAddr,
    db: Db,
    new_api_key: Option<String>,
    stop: watch::Sender<bool>,
    http: JoinHandle<()>,
    workers: Option<JoinHandle<()>>,
}

impl Server {
    /// Where the API listens (useful with port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The database.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// The API key generated at this start for a new bootstrap account, if one was.
    pub fn new_api_key(&self) -> Option<&str> {
        self.new_api_key.as_deref()
    }

    /// Stops taking requests and claims, lets in-flight attempts finish (or puts them back),
    /// and returns when everything has stopped.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        if let Some(workers) = self.workers {
            let _ = workers.await;
        }
        let _ = self.http.await;
        self.db.close().await;
    }

    /// Waits until the server stops by itself (it does not, short of a panic).
    pub async fn wait(&mut self) {
        let _ = (&mut self.http).await;
    }
}

/// Opens the database, bootstraps the first account, and starts the API and the workers.
pub async fn start(config: Config) -> Result<Server, StartError> {
    // Checked before anything else: a bad SMTP URL should stop the start, not the first notice.
    let mailer = match &config.smtp_url {
        Some(url) => Some(mail::Mailer::new(url, &config.smtp_from)?),
        None => None,
    };
    let db = Db::connect(&config.database_url).await?;
    let new_api_key = bootstrap(&db, config.api_key.as_deref()).await?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| StartError::Listen {
            addr: config.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| StartError::Listen {
        addr: config.listen,
        source,
    })?;

    let guard = guard::AddressGuard::new(config.dev, config.allow_addresses.clone());
    // Never an unguarded client: the challenge connects to merchants' URLs like deliveries do.
    let client = dispatch::client(guard.clone())?;
    let wake = Arc::new(Notify::new());
    let (stop, stopped) = watch::channel(false);
    let metrics = Arc::new(metrics::Metrics::default());
    let state = api::AppState {
        metrics: metrics.clone(),
        db: db.clone(),
        wake: wake.clone(),
        schemas: Arc::default(),
        settings: Arc::new(api::ApiSettings {
            dev: config.dev,
            guard: guard.clone(),
            client: client.clone(),
            default_timeout: config.delivery_timeout,
            protection: config.protection.clone(),
        }),
    };
    let mut http_stopped = stopped.clone();
    let http = tokio::spawn(async move {
        let shutdown = async move {
            let _ = http_stopped.wait_for(|stop| *stop).await;
        };
        if let Err(e) = axum::serve(listener, api::app(state))
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::error!(target: "kxp_sender", error = %e, "the API server stopped");
        }
    });
    let workers = config.run_workers.then(|| {
        let notices = Arc::new(Notify::new());
        let notifier = notify::Notifier {
            client,
            mailer,
            schedule: config.schedule.clone(),
            timeout: config.delivery_timeout,
            dev: config.dev,
            poll_interval: config.poll_interval,
            metrics: metrics.clone(),
        };
        let notifier = tokio::spawn(notify::run(
            db.clone(),
            notifier,
            notices.clone(),
            stopped.clone(),
        ));
        let purger = tokio::spawn(retention::run(
            db.clone(),
            config.retention,
            stopped.clone(),
        ));
        let worker_config = worker::WorkerConfig {
            schedule: config.schedule.clone(),
            workers: config.workers,
            per_endpoint: config.per_endpoint_concurrency.max(1),
            lease_extra: config.lease_extra,
            poll_interval: config.poll_interval,
            dev: config.dev,
            guard,
            protection: config.protection.clone(),
            notifier: notices,
            metrics,
        };
        // In-flight attempts end by their own timeouts; wait that long before putting back.
        let grace = api::MAX_TIMEOUT + Duration::from_secs(1);
        let workers = worker::run(db.clone(), worker_config, wake, stopped, grace);
        tokio::spawn(async move {
            workers.await;
            let _ = notifier.await;
            let _ = purger.await;
        })
    });
    Ok(Server {
        addr,
        db,
        new_api_key,
        stop,
        http,
        workers,
    })
}

/// Makes sure an account exists: with `api_key` when given (the same key on every start), or
/// with a generated key on the very first start, which is returned to be shown once.
async fn bootstrap(db: &Db, api_key: Option<&str>) -> Result<Option<String>, StartError> {
    match api_key {
        Some(key) => {
            if db.account_by_key(key).await?.is_none() {
                db.create_account("default", Some(key)).await?;
            }
            Ok(None)
        }
        None if db.account_count().await? == 0 => {
            let (_, key) = db.create_account("default", None).await?;
            Ok(Some(key))
        }
        None => Ok(None),
    }
}
