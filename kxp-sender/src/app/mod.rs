//! The service: what the sender does for whoever asks, the API, the console's forms and the
//! broker sources alike. Each use case takes the [`AppState`] and the caller's account, runs
//! every check ([`checks`]), calls the store and the engine, and answers with a value or an
//! [`Error`] in the service's own words: no HTTP here (no status, no API error code, no
//! header), and no SQL. The domain limits an endpoint or an event is held to live here too, for
//! the API's handlers and its OpenAPI document to quote.
//!
//! [`events`] takes an event in; [`endpoints`] registers, changes, pauses, resumes and deletes
//! endpoints and rotates their secrets; [`deliveries`] replays; [`portal_links`] makes the
//! console's sign-in links; [`Admin`] is the offline commands' short list. [`checks`] are the field checks they share with the API's other
//! handlers, and [`views`] turns the store's rows into [`kxp_api`]'s types, which the use cases
//! answer with.

use std::sync::Arc;
use std::time::Duration;

mod admin;
pub(crate) mod checks;
pub(crate) mod credentials;
mod deliveries;
mod endpoints;
mod erasures;
mod error;
mod events;
mod filters;
mod portal_links;
pub(crate) mod views;

pub use admin::Admin;
pub(crate) use deliveries::{replay, replay_endpoint};
pub(crate) use endpoints::{change, delete, pause, register, resume, rotate_secret};
pub(crate) use erasures::{erase, erasure};
pub(crate) use error::Error;
pub(crate) use events::{TAG_RULE, accept, is_idempotency_key};
pub(crate) use filters::test_filter;
pub(crate) use portal_links::{create_listen_token, create_portal_link};

use crate::engine::config::Shared;
use crate::engine::schemas::SchemaCache;
use crate::store::Db;

/// What every use case shares: the API's handlers, the console and the broker sources hold
/// one each.
#[derive(Clone)]
pub(crate) struct AppState {
    /// The database.
    pub db: Db,
    /// The configuration, the guarded client, the counters and the wake-ups, built once.
    pub shared: Arc<Shared>,
    /// Compiled event schemas.
    pub schemas: Arc<SchemaCache>,
}

/// The longest per-endpoint timeout: long enough for a receiver on another continent.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(30);

/// The shortest per-endpoint timeout.
pub(crate) const MIN_TIMEOUT: Duration = Duration::from_millis(100);

/// The longest overlap of a secret rotation: a week to deploy the new secret everywhere. A
/// secret that stays valid longer is not rotated, only shared.
pub(crate) const MAX_OVERLAP: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// The overlap of a rotation that names none.
pub(crate) const DEFAULT_OVERLAP: Duration = Duration::from_secs(24 * 60 * 60);

/// The highest `rate_limit_per_second` an endpoint can be given.
pub(crate) const MAX_RATE_LIMIT: i64 = 10_000;

/// The longest endpoint URL, in bytes: browsers' practical limit, and far above any webhook
/// route.
pub(crate) const MAX_URL: usize = 2048;

/// The longest endpoint description, in bytes.
pub(crate) const MAX_DESCRIPTION: usize = 512;

/// The most event type patterns an endpoint subscribes with.
pub(crate) const MAX_EVENT_TYPES: usize = 64;

/// The most endpoints an account can have (deleted ones do not count).
pub(crate) const MAX_ENDPOINTS: u64 = 500;

/// What a request body may hold beyond the event's `data` (its type and version; a JSON
/// Schema): the body limit is the event limit plus this. Larger bodies are answered 413 unread.
pub const REQUEST_OVERHEAD: usize = 64 * 1024;

/// How long a portal link works when the request does not say.
pub(crate) const DEFAULT_LINK_TTL: Duration = Duration::from_secs(15 * 60);

/// The longest a portal link may work: a link is a credential until used, so it should not sit
/// in an inbox for days.
pub(crate) const MAX_LINK_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// The most portal links an account may have that are neither used nor expired: far more than
/// people sign in within a day, and a bound on what one key can store.
pub const MAX_UNUSED_PORTAL_LINKS: i64 = 1_000;
