//! The running sender: [`start`] builds what every task shares once, then runs the API and,
//! unless told otherwise, the workers, the notifier and the purger.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use crate::app::AppState;
use crate::console::{self, SignInKey};
use crate::engine::auth::Tokens;
use crate::engine::backlog::Backlog;
use crate::engine::config::{Config, Shared};
use crate::engine::dispatch;
use crate::engine::egress::{self, Egress};
use crate::engine::gate::WriteGate;
use crate::engine::guard::AddressGuard;
use crate::engine::ingester::Ingester;
use crate::engine::mail::{self, MailError};
use crate::engine::metrics::Metrics;
use crate::engine::sources::{SourceStatus, Sources};
use crate::engine::traces::{Traces, TracesError};
use crate::engine::{announce, erasure, notifier, retention, worker};
use crate::http;
use crate::ingest;
use crate::model::{KeyKind, set_database_offset};
use crate::store::{Db, SchemaError, StoreError};

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The database could not be opened.
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    /// The schema is not this version's, and could not be brought there (or was not to be:
    /// [`Config::migrations`]).
    #[error("database: {0}")]
    Schema(#[from] SchemaError),
    /// A query failed while bootstrapping.
    #[error("{0}")]
    Store(#[from] StoreError),
    /// The HTTP client (the endpoint challenge's) could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Client(#[from] reqwest::Error),
    /// The TLS settings of the egress proxy's tunnels could not be made (the platform's
    /// certificate verifier did not load).
    #[error("egress proxy: TLS: {0}")]
    EgressTls(String),
    /// The SMTP settings are unusable.
    #[error("e-mail notifications: {0}")]
    Mail(#[from] MailError),
    /// The configured account key ([`Config::api_key`]) has the operator keys' prefix
    /// (`kxp_op_`) or the listen tokens' (`kxp_lt_`): it would be looked up as one of those,
    /// and never authenticate.
    #[error(
        "the API key must not start with `kxp_op_` or `kxp_lt_`, the prefixes of operator keys \
         and listen tokens: pick another"
    )]
    OperatorPrefix,
    /// The server listens on an address other than loopback and no
    /// [`Config::public_url`] says where people reach it, so portal links could not be made.
    #[error(
        "listening on {0}, which is not a loopback address: set --public-url (KXP_PUBLIC_URL) to \
         the origin people reach this server at, e.g. https://kxp.example.com"
    )]
    PublicUrlRequired(SocketAddr),
    /// [`Config::public_url`] is not an `http://` or `https://` origin.
    #[error(
        "--public-url must be an origin such as https://kxp.example.com (a scheme, http or \
         https, and a host; no path, query or fragment), not {0:?}"
    )]
    InvalidPublicUrl(String),
    /// Traces could not be exported as configured ([`Config::otlp_endpoint`]).
    #[error("traces: {0}")]
    Traces(#[from] TracesError),
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
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    stop_http: watch::Sender<bool>,
    http: JoinHandle<()>,
    workers: Option<JoinHandle<()>>,
    sources: Vec<JoinHandle<()>>,
}

impl Server {
    /// Where the API listens (useful with port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Which database this server runs on: `sqlite` or `postgres`.
    pub fn backend(&self) -> &'static str {
        self.db.backend()
    }

    /// The database (feature `test-util`: the integration tests read and write rows directly).
    #[cfg(feature = "test-util")]
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// The API key generated at this start for a new bootstrap account, if one was.
    pub fn new_api_key(&self) -> Option<&str> {
        self.new_api_key.as_deref()
    }

    /// Drains, then stops: `/readyz` answers 503 at once and the API refuses new work
    /// (`shutting_down`) while the broker messages in flight are settled and the attempts in
    /// flight finish, for up to [`Config::shutdown_grace`]; what is still running then is
    /// stopped and released for another process. Then the API closes (the requests still
    /// running finish first), the spans still buffered are exported, and this returns.
    pub async fn shutdown(self) {
        // First, so that a load balancer stops sending here while the rest drains.
        self.shared.draining.store(true, Ordering::SeqCst);
        self.shared.feed_waiters.stop();
        let _ = self.stop.send(true);
        for source in self.sources {
            let _ = source.await;
        }
        if let Some(workers) = self.workers {
            let _ = workers.await;
        }
        let _ = self.stop_http.send(true);
        let _ = self.http.await;
        self.db.close().await;
        self.shared.traces.shutdown().await;
    }

    /// Waits until the server stops by itself (it does not, short of a panic).
    pub async fn wait(&mut self) {
        let _ = (&mut self.http).await;
    }
}

/// Opens the database, bootstraps the first account, and starts the API and the workers.
pub async fn start(mut config: Config) -> Result<Server, StartError> {
    // Checked before anything is opened, like the SMTP settings below.
    let public_url = public_url(&config)?;
    // Checked before anything else: a bad SMTP URL should stop the start, not the first notice.
    let mailer = match &config.smtp_url {
        Some(url) => Some(mail::Mailer::new(url, &config.smtp_from)?),
        None => None,
    };
    let traces = Traces::start(config.otlp_endpoint.as_deref())?;
    let db = Db::connect_with(
        &config.database_url,
        config.migrations,
        config.statement_timeout,
    )
    .await?;
    let db = if config.per_account_statements {
        db.per_account()
    } else {
        db
    };
    // A newer version's migrations are tolerated (a rolling upgrade), and said once.
    if let Ok(status) = db.schema_status().await {
        let newer: Vec<i64> = status
            .applied
            .iter()
            .filter(|m| !m.known)
            .map(|m| m.version)
            .collect();
        if !newer.is_empty() {
            tracing::warn!(target: "kxp_sender", migrations = ?newer, "the database has migrations of a newer kxp: this version runs beside it until it is upgraded too (docs/upgrading.md)");
        }
    }
    // On PostgreSQL every stored time follows the database's clock, measured before anything is
    // written and every minute after (see `follow_database_clock`).
    if let Some(offset) = db.clock_offset().await {
        set_database_offset(offset);
    }
    // A stored secret this server cannot open is found now, by the key id it needs.
    let clear = db.check_sealed(config.secrets_key.as_ref()).await?;
    if clear > 0 {
        tracing::warn!(
            target: "kxp_sender", endpoints = clear,
            "endpoints' credentials (custom headers, auth) are stored in the clear: set \
             KXP_SECRETS_KEY and run `kxp secrets-key reseal` (docs/security.md)"
        );
    }
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

    config.public_url = Some(public_url.unwrap_or_else(|| format!("http://{addr}")));

    let guard = AddressGuard::new(config.dev, config.allow_addresses.clone());
    // One client for deliveries, operational webhooks and the endpoint challenge, built once:
    // never an unguarded one, since all three connect to merchants' URLs.
    let mut client = dispatch::client(guard)?;
    let egress = config.egress_proxy.clone().map(Egress::new);
    if let Some(egress) = &egress {
        let tls = egress::tls_config(None, None).map_err(StartError::EgressTls)?;
        client = client.through(egress.clone(), tls);
    }
    let (stop, stopped) = watch::channel(false);
    let gate = WriteGate::for_db(&db);
    let ingester = Ingester::start(&db, gate.clone());
    let announce = !config.run_workers && matches!(db, Db::Postgres(_) | Db::Citus(_));
    let config_sources = config.ingest.clone();
    let sign_in_key = SignInKey::new(config.secrets_key.as_ref());
    let shared = Arc::new(Shared {
        ingester,
        gate,
        announce,
        announcements: Default::default(),
        backlog: Backlog::new(config.backlog_limit),
        config,
        client,
        mailer,
        metrics: Metrics::default(),
        wake: Notify::new(),
        sequencer: matches!(db, Db::Postgres(_) | Db::Citus(_)),
        unnumbered: Default::default(),
        number: Notify::new(),
        ready: Default::default(),
        rescan: Default::default(),
        notices: Notify::new(),
        erasures: Notify::new(),
        api_requests: Default::default(),
        sources: Sources(
            config_sources
                .iter()
                .map(|source| Arc::new(SourceStatus::new(source.name())))
                .collect(),
        ),
        sign_in_failures: Default::default(),
        draining: AtomicBool::new(false),
        feed_waiters: Default::default(),
        traces,
        tokens: Tokens::default(),
        tls_clients: Default::default(),
        certificates: Default::default(),
    });
    let state = AppState {
        db: db.clone(),
        shared: shared.clone(),
        schemas: Arc::default(),
    };
    // Clients' connections never take the descriptors the workers' deliveries, the database
    // pool and the files need: the cap leaves room for all of them under the file limit.
    let reserved = shared.config.workers + crate::store::POOL_MAX as usize + 64;
    let api_limits = shared.config.api_limits.within_file_limit(reserved);
    shared
        .feed_waiters
        .fit_connections(api_limits.connections());
    let sources = ingest::start(&state, &stopped);
    let app = http::drains(
        http::app(state.clone()).merge(console::app(state, sign_in_key)),
        shared.clone(),
    );
    // The API outlives the workers: it answers the probes, and refuses new work, while they drain.
    let (stop_http, mut http_stopped) = watch::channel(false);
    let http = tokio::spawn(async move {
        let shutdown = async move {
            let _ = http_stopped.wait_for(|stop| *stop).await;
        };
        if let Err(e) = kxp_axum::serve(listener, app, api_limits, shutdown).await {
            tracing::error!(target: "kxp_sender", error = %e, "the API server stopped");
        }
    });
    if matches!(db, Db::Postgres(_) | Db::Citus(_)) {
        tokio::spawn(follow_database_clock(db.clone(), stopped.clone()));
    }
    if let Some(egress) = egress {
        tokio::spawn(egress::watch(egress, stopped.clone()));
    }
    if let (true, Db::Postgres(pool) | Db::Citus(pool)) = (announce, &db) {
        tokio::spawn(announce::send(
            pool.clone(),
            shared.clone(),
            stopped.clone(),
        ));
    }
    let workers = shared.config.run_workers.then(|| {
        if let Db::Postgres(pool) | Db::Citus(pool) = &db {
            tokio::spawn(announce::listen(
                pool.clone(),
                shared.clone(),
                stopped.clone(),
            ));
        }
        let notifier = tokio::spawn(notifier::run(db.clone(), shared.clone(), stopped.clone()));
        let purger = tokio::spawn(retention::run(
            db.clone(),
            shared.config.retention,
            shared.config.dead_letter_retention,
            stopped.clone(),
        ));
        tokio::spawn(erasure::run(db.clone(), shared.clone(), stopped.clone()));
        tokio::spawn(retention::watch_pull_readers(
            db.clone(),
            shared.config.temporary_idle,
            shared.config.reader_stall_notice,
            stopped.clone(),
        ));
        let grace = shared.config.shutdown_grace;
        let workers = worker::run(db.clone(), shared.clone(), stopped, grace);
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
        shared,
        stop,
        stop_http,
        http,
        workers,
        sources,
    })
}

/// The public origin the configuration gives, without a trailing `/`; `None` when it gives
/// none and the server listens on loopback (the bound address is the origin then).
fn public_url(config: &Config) -> Result<Option<String>, StartError> {
    let Some(url) = config.public_url.as_deref() else {
        return match config.listen.ip().is_loopback() {
            true => Ok(None),
            false => Err(StartError::PublicUrlRequired(config.listen)),
        };
    };
    let origin = url.trim_end_matches('/');
    let host = origin
        .strip_prefix("https://")
        .or_else(|| origin.strip_prefix("http://"));
    match host {
        Some(host) if !host.is_empty() && !host.contains(['/', '?', '#', ' ', '@']) => {
            Ok(Some(origin.to_owned()))
        }
        _ => Err(StartError::InvalidPublicUrl(url.to_owned())),
    }
}

/// Keeps [`now_ms`](crate::model::now_ms) on the database's clock: leases, schedules and probes
/// written by several processes sharing one PostgreSQL are compared with each other, so they
/// must come from one clock, not from each machine's. Re-measured every minute (clocks drift,
/// and NTP steps them); a failed or slow reading keeps the last offset.
async fn follow_database_clock(db: Db, mut stopped: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = stopped.wait_for(|stop| *stop) => return,
            () = tokio::time::sleep(CLOCK_CHECK) => {}
        }
        if let Some(offset) = db.clock_offset().await {
            set_database_offset(offset);
        }
    }
}

/// How often the database's clock is read again.
const CLOCK_CHECK: Duration = Duration::from_secs(60);

/// Makes sure an account exists: with `api_key` when given (the same key on every start), or
/// with a generated key on the very first start, which is returned to be shown once.
async fn bootstrap(db: &Db, api_key: Option<&str>) -> Result<Option<String>, StartError> {
    match api_key {
        Some(key) if KeyKind::of(key) != KeyKind::Account => Err(StartError::OperatorPrefix),
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
