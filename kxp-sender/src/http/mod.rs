//! The HTTP API: JSON over `Authorization: Bearer <api key>`, every route scoped to the
//! caller's account (another account's ids answer 404, exactly like ids that do not exist),
//! except the operator routes ([`accounts`]), which take an operator key; an operator key acts
//! on the other routes for the account its request names (see [`auth`]).
//!
//! One file per resource ([`endpoints`], [`endpoint_actions`], [`events`], [`deliveries`],
//! [`schemas`], [`account`], [`accounts`], [`portal_links`], [`notifications`], [`health`]), each holding its handlers and the
//! request and view structs it reads and writes; [`errors`], [`auth`], [`pagination`] and
//! [`checks`] are what they share; [`views`] turns the store's rows into [`kxp_api`]'s
//! types, and [`openapi`] describes it all. Handlers parse and check, call the store, and shape the
//! answer: no SQL and no policy here.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};

mod account;
mod accounts;
mod audit;
mod auth;
mod checks;
mod deliveries;
mod endpoint_actions;
mod endpoints;
mod errors;
mod events;
mod feed;
mod health;
mod notifications;
mod openapi;
mod pagination;
mod portal_links;
mod schemas;
mod views;

pub(crate) use auth::Authed;
pub(crate) use endpoints::{change, register};
pub use errors::ApiError;
use errors::{ApiBody, ApiQuery, parse};
pub(crate) use events::{accept, is_idempotency_key};
pub use feed::FEED_RATE_LIMIT;
pub use openapi::document as openapi;
pub use portal_links::{DEFAULT_LINK_TTL, MAX_LINK_TTL, MAX_UNUSED_PORTAL_LINKS};
pub(crate) use views::endpoint_details;

use crate::engine::config::Shared;
use crate::engine::schemas::SchemaCache;
use crate::store::Db;

/// What the handlers share.
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
pub const MIN_TIMEOUT: Duration = Duration::from_millis(100);

/// The longest overlap of a secret rotation: a week to deploy the new secret everywhere. A
/// secret that stays valid longer is not rotated, only shared.
pub const MAX_OVERLAP: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// The overlap of a rotation that names none.
pub const DEFAULT_OVERLAP: Duration = Duration::from_secs(24 * 60 * 60);

/// The highest `rate_limit_per_second` an endpoint can be given.
pub const MAX_RATE_LIMIT: i64 = 10_000;

/// The longest endpoint URL, in bytes: browsers' practical limit, and far above any webhook
/// route.
pub const MAX_URL: usize = 2048;

/// The longest endpoint description, in bytes.
pub const MAX_DESCRIPTION: usize = 512;

/// The most event type patterns an endpoint subscribes with.
pub const MAX_EVENT_TYPES: usize = 64;

/// The most endpoints an account can have (deleted ones do not count).
pub const MAX_ENDPOINTS: u64 = 500;

/// The default largest `data` of an event ([`Config::max_event_data`]), in bytes of JSON: with
/// the envelope around it (a few hundred bytes) and room for later encodings (base64 of an
/// encrypted body is 4/3 of it), the body delivered stays under the 1 MiB that receivers accept
/// by default.
///
/// [`Config::max_event_data`]: crate::Config::max_event_data
pub const MAX_EVENT_DATA: usize = 512 * 1024;

/// What a request body may hold beyond the event's `data` (its type and version; a JSON
/// Schema): the body limit is the event limit plus this. Larger bodies are answered 413 unread.
pub const REQUEST_OVERHEAD: usize = 64 * 1024;

/// The router: `/v1/…`, and `/healthz`.
pub fn app(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/metrics", get(health::metrics))
        .route("/v1/openapi.json", get(openapi::openapi_json))
        .route(
            "/v1/endpoints",
            post(endpoints::create_endpoint).get(endpoints::list_endpoints),
        )
        .route(
            "/v1/endpoints/{id}",
            get(endpoints::get_endpoint)
                .patch(endpoints::patch_endpoint)
                .delete(endpoints::delete_endpoint),
        )
        .route(
            "/v1/endpoints/{id}/pause",
            post(endpoint_actions::pause_endpoint),
        )
        .route(
            "/v1/endpoints/{id}/resume",
            post(endpoint_actions::resume_endpoint),
        )
        .route(
            "/v1/endpoints/{id}/rotate-secret",
            post(endpoint_actions::rotate_secret),
        )
        .route(
            "/v1/endpoints/{id}/replay",
            post(endpoint_actions::replay_endpoint),
        )
        .route("/v1/endpoints/{id}/health", get(health::endpoint_health))
        // Authenticated with the endpoint's own credential, not an API key: the merchant's
        // receiver reads it.
        .route("/v1/endpoints/{id}/feed", get(feed::feed))
        .route(
            "/v1/endpoints/{id}/feed-token",
            post(feed::create_feed_token),
        )
        .route(
            "/v1/endpoints/{id}/public-key",
            get(endpoint_actions::public_key),
        )
        // Without authentication: merchants hold no platform API key, and public keys are
        // public.
        .route("/jwks/{id}", get(endpoint_actions::jwks))
        .route(
            "/v1/events",
            post(events::create_event).get(events::list_events),
        )
        .route("/v1/events/{id}", get(events::get_event))
        .route(
            "/v1/events/{id}/deliveries",
            get(deliveries::event_deliveries),
        )
        .route("/v1/deliveries", get(deliveries::list_deliveries))
        .route(
            "/v1/deliveries/{id}/attempts",
            get(deliveries::delivery_attempts),
        )
        .route(
            "/v1/deliveries/{id}/replay",
            post(deliveries::replay_delivery),
        )
        .route(
            "/v1/account",
            get(account::get_account).patch(account::patch_account),
        )
        .route(
            "/v1/accounts",
            post(accounts::create_account).get(accounts::list_accounts),
        )
        .route("/v1/portal-links", post(portal_links::create_portal_link))
        .route("/v1/notifications", get(notifications::list_notifications))
        .route("/v1/schemas", get(schemas::list_schemas))
        .route(
            "/v1/schemas/{type}/{api_version}",
            get(schemas::get_schema)
                .put(schemas::put_schema)
                .delete(schemas::delete_schema),
        )
        // Changes made with an operator key, in the audit log (matched routes only).
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            audit::record,
        ))
        // axum's own refusals in the API's form: a known path with another method, or none.
        .method_not_allowed_fallback(errors::method_not_allowed)
        .fallback(errors::no_route)
        .layer(DefaultBodyLimit::max(
            state.shared.config.max_event_data + REQUEST_OVERHEAD,
        ))
        .with_state(state)
}
