//! The configuration, and what every task of a running sender shares: built once at start
//! from the [`Config`], never copied field by field into each task's own settings.

use std::collections::HashSet;
use std::fmt;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kxp_axum::ServeLimits;
use tokio::sync::Notify;

use crate::engine::announcements::Announcements;
use crate::engine::auth::Tokens;
use crate::engine::backlog::Backlog;
use crate::engine::dispatch::GuardedClient;
use crate::engine::egress::EgressProxy;
use crate::engine::gate::WriteGate;
use crate::engine::guard::{AddressGuard, Cidr};
use crate::engine::ingester::Ingester;
use crate::engine::mail::Mailer;
use crate::engine::metrics::Metrics;
use crate::engine::sources::{IngestSource, Sources};
use crate::engine::tls::{Clients, Watched};
use crate::engine::traces::Traces;
use crate::model::EndpointKey;
use crate::policy::circuit::Protection;
use crate::policy::rate::RateLimiter;
use crate::policy::schedule::Schedule;
use crate::policy::sign_in::SignInLimiter;
use crate::store::seal::KeyRing;
use crate::store::{Migrations, redact_passwords};

/// Everything `kxp serve` can be told. Its `Debug` hides the API key and the passwords in the
/// database and SMTP URLs.
#[derive(Clone)]
pub struct Config {
    /// `sqlite://path` (created if missing) or `postgres://…`.
    pub database_url: String,
    /// What to do at start with this version's migrations that a PostgreSQL database lacks:
    /// refuse to start (the default: `kxp migrate apply` first, as docs/upgrading.md plans it)
    /// or apply them (`kxp serve --migrate`). SQLite always applies its own.
    pub migrations: Migrations,
    /// Where the API listens.
    pub listen: SocketAddr,
    /// The origin people reach this server at (`https://kxp.example.com`), which portal links
    /// are built on. `None`: `http://<listen address>`, allowed only when listening on
    /// loopback ([`start`](crate::start) refuses otherwise: a link to an address nobody outside
    /// can reach, or over plain HTTP, is worse than no link).
    pub public_url: Option<String>,
    /// Development mode: `http://` endpoint URLs are allowed, and so are loopback addresses
    /// (`127.0.0.0/8`, `::1`) — loopback only: other private ranges still need
    /// [`allow_addresses`](Config::allow_addresses).
    pub dev: bool,
    /// Blocks the address guard lets through although they are private, loopback, link-local…
    /// (`kxp serve --allow-address CIDR`).
    pub allow_addresses: Vec<Cidr>,
    /// The forward proxy every delivery, endpoint challenge and OAuth2 token request leaves
    /// through (`kxp serve --egress-proxy http://host:port`), for a static source address:
    /// tunnels to addresses the address guard vetted, never names for the proxy to resolve.
    /// `None`: straight out.
    pub egress_proxy: Option<EgressProxy>,
    /// The reverse proxies in front of this server (`kxp serve --trusted-proxy CIDR`): a
    /// connection from one of these blocks names its client in `X-Forwarded-For`, which the
    /// console's failed sign-in limit counts by. Default: loopback only (a proxy on this host).
    /// A client connecting from any other address is counted as itself, whatever it sends.
    pub trusted_proxies: Vec<Cidr>,
    /// When failed deliveries are tried again.
    pub schedule: Schedule,
    /// The timeout of endpoints created without one.
    pub delivery_timeout: Duration,
    /// Attempts in flight at once in this process.
    pub workers: usize,
    /// The most attempts in flight at once to one endpoint, from this process: the ceiling of
    /// the endpoint's adaptive limit, which starts at 4 and grows while the endpoint keeps up.
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
    pub protection: Protection,
    /// The SMTP server e-mail notifications go through (`smtp://`, `smtps://`, with
    /// credentials if needed); without one, notifications are sent by webhook only.
    pub smtp_url: Option<String>,
    /// The sender of e-mail notifications, e.g. `kxp <ops@example.com>`.
    pub smtp_from: String,
    /// How long finished deliveries, their events and notifications are kept (retention);
    /// `None`: forever.
    pub retention: Option<Duration>,
    /// How long a dead delivery never replayed is kept after it died (the dead-letter queue's
    /// retention); `None`: until it is replayed. The account is notified a day before
    /// (`endpoint.dead_letters_expiring`), and none goes earlier than a day after that notice.
    pub dead_letter_retention: Option<Duration>,
    /// How long a temporary pull endpoint (`kxp listen`'s) stays with no one reading its feed
    /// before the server deletes it: its session ended without deleting it (a crash, a closed
    /// laptop).
    pub temporary_idle: Duration,
    /// How long a pull endpoint's reader may leave an event unread without committing before
    /// the platform is notified (`endpoint.reader_stalled`), once per stall.
    pub reader_stall_notice: Duration,
    /// How many due deliveries an account may have waiting before its ingestion answers 503
    /// `backlog_full`: pending deliveries whose time has come, held ones (paused, disabled or
    /// open-circuit endpoints) and scheduled retries left out. 0: no limit.
    pub backlog_limit: u64,
    /// The API server's bounds: header-read and idle timeout, connection cap (lowered to fit
    /// the file limit beside the workers' and the database's own sockets), and how long the
    /// requests still running when it closes may take.
    pub api_limits: ServeLimits,
    /// How long a shutdown lets the attempts in flight finish: what is still running after it
    /// is stopped and released at once for another process (its lease ended), never lost.
    pub shutdown_grace: Duration,
    /// API requests one account's key may make per second in this process (bursts of one
    /// second's worth); beyond it, 429 `rate_limited` with `Retry-After`. 0: no limit.
    pub api_rate_limit: u32,
    /// The largest event `data` accepted, in bytes of JSON (413 beyond it). The default,
    /// [`MAX_EVENT_DATA`], keeps the delivered body under the 1 MiB
    /// receivers accept by default; raise it only with receivers configured for more.
    pub max_event_data: usize,
    /// Broker sources to consume events from (`--ingest`), besides the API: each message is
    /// taken in as a `POST /v1/events` would be, and acknowledged only once stored.
    pub ingest: Vec<IngestSource>,
    /// The key ring endpoint secrets are sealed under at rest (`KXP_SECRETS_KEY`); `None`
    /// stores them as they are. Its `Debug` names key ids only.
    pub secrets_key: Option<KeyRing>,
    /// Where spans are exported, over OTLP/HTTP with protobuf: the collector's base URL
    /// (`http://127.0.0.1:4318`), spans POSTed to `<it>/v1/traces`. `None`: no spans are made
    /// (the producer's `traceparent` is still stored and passed on). Needs the `otel` feature;
    /// the exporter's other settings (service name, resource, sampler, headers, timeout) come
    /// from the standard `OTEL_*` variables.
    pub otlp_endpoint: Option<String>,
    /// The longest a statement may run on PostgreSQL (and Citus) before the database cancels
    /// it: the request that waited answers 503 `store_unavailable` with `Retry-After`, so a
    /// Citus worker down or a lock held too long costs a request this long, never a hang. On
    /// Citus it also bounds connecting to a worker (`citus.node_connection_timeout`). Zero: no
    /// limit. Migrations run without it.
    pub statement_timeout: Duration,
    /// Whether the statements that touch several accounts at once on PostgreSQL are issued
    /// once per account instead, as they are on Citus (where kxp chooses them at connect,
    /// whatever this says): for the tests and comparisons of both forms on one PostgreSQL.
    /// Nothing changes on SQLite.
    pub per_account_statements: bool,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("database_url", &redact_passwords(&self.database_url))
            .field("migrations", &self.migrations)
            .field("listen", &self.listen)
            .field("public_url", &self.public_url)
            .field("dev", &self.dev)
            .field("allow_addresses", &self.allow_addresses)
            .field("egress_proxy", &self.egress_proxy)
            .field("trusted_proxies", &self.trusted_proxies)
            .field("schedule", &self.schedule)
            .field("delivery_timeout", &self.delivery_timeout)
            .field("workers", &self.workers)
            .field("per_endpoint_concurrency", &self.per_endpoint_concurrency)
            .field("lease_extra", &self.lease_extra)
            .field("poll_interval", &self.poll_interval)
            .field("api_key", &self.api_key.as_ref().map(|_| "[redacted]"))
            .field("run_workers", &self.run_workers)
            .field("protection", &self.protection)
            .field("smtp_url", &self.smtp_url.as_deref().map(redact_passwords))
            .field("smtp_from", &self.smtp_from)
            .field("retention", &self.retention)
            .field("dead_letter_retention", &self.dead_letter_retention)
            .field("backlog_limit", &self.backlog_limit)
            .field("api_limits", &self.api_limits)
            .field("shutdown_grace", &self.shutdown_grace)
            .field("api_rate_limit", &self.api_rate_limit)
            .field("max_event_data", &self.max_event_data)
            .field("ingest", &self.ingest)
            .field("secrets_key", &self.secrets_key)
            .field("otlp_endpoint", &self.otlp_endpoint)
            .field("statement_timeout", &self.statement_timeout)
            .field("per_account_statements", &self.per_account_statements)
            .finish()
    }
}

impl Default for Config {
    fn default() -> Config {
        Config {
            database_url: "sqlite://kxp.db".to_owned(),
            migrations: Migrations::Require,
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            public_url: None,
            dev: false,
            allow_addresses: Vec::new(),
            egress_proxy: None,
            trusted_proxies: loopback(),
            schedule: Schedule::default(),
            delivery_timeout: Duration::from_secs(5),
            workers: 256,
            per_endpoint_concurrency: 64,
            lease_extra: Duration::from_secs(10),
            poll_interval: Duration::from_millis(250),
            api_key: None,
            run_workers: true,
            protection: Protection::default(),
            smtp_url: None,
            smtp_from: "kxp-webhooks <kxp@localhost>".to_owned(),
            retention: Some(Duration::from_secs(30 * 24 * 60 * 60)),
            dead_letter_retention: Some(Duration::from_secs(30 * 24 * 60 * 60)),
            temporary_idle: Duration::from_secs(10 * 60),
            reader_stall_notice: Duration::from_secs(60 * 60),
            backlog_limit: 10_000,
            api_limits: ServeLimits::default(),
            shutdown_grace: Duration::from_secs(30),
            api_rate_limit: 5_000,
            max_event_data: MAX_EVENT_DATA,
            ingest: Vec::new(),
            secrets_key: None,
            otlp_endpoint: None,
            statement_timeout: STATEMENT_TIMEOUT,
            per_account_statements: false,
        }
    }
}

/// The default [`Config::statement_timeout`]: well above what any statement of the sender
/// takes on a healthy database (milliseconds), well below what a client waits for an answer.
pub(crate) const STATEMENT_TIMEOUT: Duration = Duration::from_secs(5);

/// The default largest `data` of an event ([`Config::max_event_data`]), in bytes of JSON: with
/// the envelope around it (a few hundred bytes) and room for later encodings (base64 of an
/// encrypted body is 4/3 of it), the body delivered stays under the 1 MiB that receivers accept
/// by default.
///
/// [`Config::max_event_data`]: Config::max_event_data
pub const MAX_EVENT_DATA: usize = 512 * 1024;

/// What the API, the workers, the notifier and the purger share: the configuration, the one
/// guarded HTTP client (deliveries, operational webhooks and the endpoint challenge all go
/// through it), the mailer, this process's counters, and the wake-ups between tasks.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The configuration the server started with.
    pub config: Config,
    /// The HTTP client, with the address guard it enforces. Never an unguarded one.
    pub client: GuardedClient,
    /// E-mail, when an SMTP server is configured.
    pub mailer: Option<Mailer>,
    /// This process's counters, for `/metrics`.
    pub metrics: Metrics,
    /// Poked after ingestion, replays and resumes, so idle workers start at once: through
    /// [`Shared::wake_for`] and [`Shared::wake_workers`] only.
    pub wake: Notify,
    /// Endpoints with new due work since the delivery loop last looked ([`Shared::wake_for`]),
    /// numbered: the sequencer puts them here after its pass.
    pub ready: Mutex<HashSet<EndpointKey>>,
    /// Whether the sequencer is a task of its own, beside the delivery loop (PostgreSQL): the
    /// loop then never waits for a pass. On SQLite a pass takes the one write lock, so the loop
    /// runs it just before the claim it serves, and passes are as few as claims.
    pub sequencer: bool,
    /// Endpoints with new deliveries for the sequencer task to number before the loop claims
    /// them ([`Shared::wake_for`]); it is woken by `number`.
    pub unnumbered: Mutex<HashSet<EndpointKey>>,
    /// Wakes the sequencer task.
    pub number: Notify,
    /// Set when there is new due work the loop cannot tell by endpoint (a replay, a resume):
    /// the loop then scans for due work at once instead of at its next poll.
    pub rescan: AtomicBool,
    /// Poked when a state change queued a notification.
    pub notices: Notify,
    /// Poked when this process accepted an erasure: the erasure loop starts on it at once.
    pub erasures: Notify,
    /// The per-account backpressure gate of ingestion.
    pub backlog: Backlog,
    /// How ingestion writes to the store (group commit on SQLite).
    pub ingester: Ingester,
    /// The turns of the hot writers at SQLite's write lock.
    pub gate: WriteGate,
    /// Whether this process announces new work to the others (PostgreSQL, and no workers
    /// of its own to wake), and what it announces next.
    pub announce: bool,
    /// What is announced next ([`announce`](crate::engine::announce)).
    pub announcements: Announcements,
    /// Each key's API requests against [`Config::api_rate_limit`], keyed by its owner's id
    /// (an account's or an operator's).
    pub api_requests: Mutex<RateLimiter<String>>,
    /// What the broker sources report, for `/healthz` and `/metrics`.
    pub sources: Sources,
    /// Failed console sign-ins per client address, against the sign-in limit.
    pub sign_in_failures: Mutex<SignInLimiter>,
    /// Set when the shutdown begins: `/readyz` answers 503 from then on, and the API takes no
    /// new work while the attempts in flight finish.
    pub draining: AtomicBool,
    /// The long polls waiting on pull endpoints' feeds.
    pub feed_waiters: crate::engine::waiters::Waiters,
    /// The spans of ingestion and attempts, and their exporter (off without an OTLP endpoint).
    pub traces: Traces,
    /// Endpoints' OAuth2 access tokens, cached for this process's attempts.
    pub tokens: Tokens,
    /// The HTTP clients of endpoints with `tls` (their certificates, their roots).
    pub tls_clients: Clients,
    /// The endpoints' own certificates as this process last recorded them.
    pub certificates: Watched,
}

impl Shared {
    /// Tells the delivery loop there is new due work, without saying where: it scans for due
    /// deliveries at once. `notify_one` keeps a permit when the loop is not waiting (it is in
    /// the middle of a claim that may have read the table before the new rows committed), so
    /// the loop's next wait returns at once and claims again: a wake-up is never lost, and new
    /// work never waits for the next poll. (`notify_waiters` would wake only a loop already
    /// waiting.)
    pub(crate) fn wake_workers(&self) {
        self.rescan.store(true, Ordering::SeqCst);
        self.wake.notify_one();
    }

    /// Tells the delivery loop that these endpoints have new due deliveries (committed before
    /// this is called): once they are numbered, the loop claims for them at once, from each
    /// endpoint's own queue, if they have room. The wake-up is never lost, as with
    /// [`Shared::wake_workers`]; an endpoint already at its limit is claimed for when one of its
    /// attempts finishes (or by the next scan). A
    /// process without workers announces the endpoints to the processes that have them
    /// instead ([`announce`](crate::engine::announce)).
    pub(crate) fn wake_for(&self, endpoints: impl IntoIterator<Item = EndpointKey>) {
        let mut endpoints = endpoints.into_iter().peekable();
        if endpoints.peek().is_none() {
            return;
        }
        if self.announce {
            self.announcements.add(endpoints);
            return;
        }
        if self.sequencer {
            self.unnumbered
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .extend(endpoints);
            self.number.notify_one();
            return;
        }
        self.ready
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend(endpoints);
        self.wake.notify_one();
    }

    /// Whether new work was announced since the loop last looked ([`Shared::wake_for`],
    /// [`Shared::wake_workers`]).
    pub(crate) fn has_news(&self) -> bool {
        self.rescan.load(Ordering::SeqCst)
            || !self
                .ready
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .is_empty()
    }

    /// Takes the endpoints [`Shared::wake_for`] named since the last call.
    pub(crate) fn take_ready(&self) -> HashSet<EndpointKey> {
        std::mem::take(
            &mut *self
                .ready
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// The address guard every connection passes.
    pub(crate) fn guard(&self) -> &AddressGuard {
        self.client.guard()
    }
}

/// The loopback blocks (`127.0.0.0/8`, `::1/128`): the default
/// [`trusted_proxies`](Config::trusted_proxies).
fn loopback() -> Vec<Cidr> {
    [
        Cidr::new(std::net::IpAddr::from([127, 0, 0, 0]), 8),
        Cidr::new(std::net::IpAddr::from(std::net::Ipv6Addr::LOCALHOST), 128),
    ]
    .into_iter()
    .flatten()
    .collect()
}
