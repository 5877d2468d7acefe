//! The kxp sender: a durable webhook delivery service, as a library and as `kxp serve`.
//!
//! Events come in through the HTTP API or from a broker (a RabbitMQ queue, a NATS JetStream
//! stream), are stored with one delivery per subscribed endpoint in a single transaction, and are
//! sent by workers that claim due deliveries under a lease, sign each attempt with every live
//! secret of the endpoint, and record every try. A failed delivery is retried on a jittered
//! [`Schedule`], then lands in the dead-letter queue, where it stays until replayed. A process
//! killed at any instant loses nothing: a delivery is marked delivered only after the 2xx, and a
//! lease that runs out makes its delivery claimable again. Every connection passes the address
//! guard first: merchants' URLs never reach private networks. Each endpoint gets as
//! many attempts at once as it keeps up with (an adaptive limit), an optional rate limit, and a
//! circuit breaker ([`Protection`]) that holds its deliveries while it is down and disables it
//! after a long outage; the merchant is notified by an operational webhook and by e-mail. Writes
//! that come with every event are group-committed: the attempts that finish while a commit is on
//! its way to disk are recorded together in the next one, and so are ingested events.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let config = kxp_sender::Config { database_url: "sqlite://kxp.db".into(), ..Default::default() };
//! let server = kxp_sender::start(config).await?;
//! println!("listening on {}", server.addr());
//! server.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! # Layers
//!
//! The crate is seven layers, and **imports point one way**, from the later to the earlier:
//! `model` ← `policy` ← `store` ← `engine` ← `app` ← `http`, `console`, `ingest` ← this root.
//! A layer never imports one after it, and the three front ends never import each other: a
//! change to the API cannot reach the SQL, the console and the broker sources never depend on
//! HTTP's codes, and the breaker's rules can be read (and tested) without a database.
//!
//! - **model** — plain data: the rows the store returns (endpoints, [`Delivery`], …), typed
//!   ids ([`EndpointId`], [`DeliveryId`], …), the states rows move through
//!   ([`DeliveryStatus`], an endpoint's and its circuit's, a breaker transition) and why an
//!   attempt failed. No SQL, no I/O; the one place a clock is read (`model/time.rs`).
//! - **policy** — the decisions, as pure functions of the model, the settings and a time passed
//!   in: the retry [`Schedule`], the circuit breaker and auto-disable ([`Protection`]), the
//!   adaptive per-endpoint concurrency, the rate limit's token buckets, the health maths
//!   ([`bucket_of`], an endpoint's running statistics) and what a notice says. No SQL, no clock.
//! - **store** — every SQL statement, one file per table or aggregate, behind `Db` (SQLite or
//!   PostgreSQL), each multi-statement transaction written once as a generic function over a
//!   sealed `Backend` trait whose one method per statement is generated for both databases. Transactions that need a decision (recording an attempt: statistics, breaker,
//!   notifications) call the policy inside the transaction and write down what it returns. No
//!   other layer holds SQL.
//! - **engine** — what runs: the delivery loop and its workers, the group commits (recording
//!   attempts; ingestion on SQLite) and SQLite's write gate, the announcements of new work
//!   between processes (PostgreSQL), the notifier, the purger, this process's metrics, the
//!   schema validator cache, and the pieces they send with: the address guard, the one guarded
//!   HTTP client, SMTP. The broker sources too (`engine::sources`): one module per broker,
//!   each behind its Cargo feature (`amqp`, `nats`), owning its URL grammar, its sessions and
//!   the settlement of its messages through one trait, and handing each message to an intake
//!   the ingest layer provides. Everything they share is built once at [`start`] from the
//!   [`Config`].
//! - **app** — the service: the use cases every front end shares (taking an event in,
//!   registering and changing an endpoint) with every check they make, the state they share,
//!   the domain limits ([`MAX_TIMEOUT`], …), the views of the store's rows as
//!   [`kxp_api`]'s types, and one error enum in the service's own words, which each front end
//!   turns into its own answer. No HTTP, no SQL.
//! - **http** — the API, one file per resource (endpoints, events, deliveries, schemas, account,
//!   notifications, health and metrics) plus the errors, authentication and pagination they
//!   share. Handlers parse the request, call the service (or the store, for plain reads), and
//!   shape the answer; the service's errors become the API's status, code and body here.
//! - **ingest** — the broker sources of `kxp serve --ingest` ([`IngestSource`]) at work: one
//!   task per source runs its broker's sessions, reconnecting with backoff, and each message
//!   is taken in through the service's acceptance of an event (the one `POST /v1/events` uses)
//!   and acknowledged only once stored; whether a refused message is held, retried or rejected
//!   follows the service's error. The broker's message id is the idempotency key, so a
//!   redelivery answers the first event. What the consumers report (state, lag, counters)
//!   lives in `engine`, for `/healthz` and `/metrics`.
//! - **console** — the HTML pages for people under `/console` (and `/`, which redirects
//!   there): sign-in by a one-time portal link (`POST /v1/portal-links`) or an operator key,
//!   server-side sessions in a cookie, CSRF tokens on every form, strict security headers. It
//!   shares the service's state and use cases; its refusals are pages, never the API's JSON
//!   errors.
//!
//! `kxp-sender/clippy.toml` and a test keep it so: a clock read outside `model/time.rs` or an
//! `sqlx::query*` outside `store/` fails clippy, and `tests/it/layers.rs` fails on a `crate::`
//! path that names a later layer or a sibling. The offline commands of `kxp` reach the database
//! through [`Admin`], never the store itself.
//!
//! The modules are private: the items below are the whole public interface.

mod app;
mod console;
mod engine;
mod http;
mod ingest;
mod model;
mod policy;
mod server;
// The one layer that builds SQL (clippy.toml forbids sqlx::query* elsewhere).
#[expect(
    clippy::disallowed_methods,
    reason = "the store is where SQL is written"
)]
mod store;

// The public interface: what `kxp` (kxp-cli) and an application embedding the sender use, the
// types their signatures name, and the few constants and rows the integration tests check
// against. Everything else is the crate's own.

// Running a sender.
pub use engine::config::{Config, MAX_EVENT_DATA};
pub use engine::egress::{EgressProxy, EgressProxyError};
pub use engine::guard::{Cidr, CidrError};
pub use engine::sources::{IngestSource, IngestUrlError};
pub use engine::traces::TracesError;
/// The API server's bounds ([`Config::api_limits`]): the receivers' server, from kxp-axum.
pub use kxp_axum::ServeLimits;
pub use policy::circuit::Protection;
pub use policy::schedule::{
    MAX_RETRY_AFTER, Schedule, ScheduleError, format_duration, parse_duration,
};
pub use server::{Server, StartError, start};
pub use store::seal::{KeyRing, KeyRingError, OpenError, SECRETS_KEY_ENV, generate_key_line};

// The offline commands, and what they read and write.
pub use app::Admin;
pub use model::{
    Account, AccountId, Delivery, DeliveryFilter, DeliveryId, DeliveryStatus, EndpointId, EventId,
    Operator, OperatorId,
};
pub use store::{
    AppliedMigration, DistributeError, Distribution, LOCK_TIMEOUT, Migrations, PendingMigration,
    Placement, SchemaError, SchemaStatus, StoreConflict, StoreError, TablePlacement,
    redact_passwords,
};

// The API's limits and its description.
pub use app::{MAX_TIMEOUT, MAX_UNUSED_PORTAL_LINKS, REQUEST_OVERHEAD};
pub use http::openapi;

// Time, ids and digests as the sender writes them.
pub use model::{new_id, now_ms, parse_rfc3339, random_hex_32, rfc3339, sha256_hex};

// The recording of attempts and the health maths, which the integration tests drive directly.
pub use model::{AttemptError, AttemptRecord, FinishAttempt, Finished, NextState, NoticeNext};
pub use policy::health::{LATENCY_BOUNDS_MS, bucket_of};
pub use store::{Purged, Retention};

/// The database itself (feature `test-util`): the integration tests and the claim benchmark
/// read and write rows directly.
#[cfg(feature = "test-util")]
pub use store::Db;
