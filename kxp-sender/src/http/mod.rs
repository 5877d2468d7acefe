//! The HTTP API: JSON over `Authorization: Bearer <api key>`, every route scoped to the
//! caller's account (another account's ids answer 404, exactly like ids that do not exist),
//! except the operator routes ([`accounts`]), which take an operator key; an operator key acts
//! on the other routes for the account its request names (see [`auth`]).
//!
//! One file per resource ([`endpoints`], [`endpoint_actions`], [`events`], [`deliveries`],
//! [`schemas`], [`account`], [`accounts`], [`portal_links`], [`notifications`], [`health`]), each holding its handlers and the
//! request and view structs it reads and writes; [`errors`], [`auth`] and [`pagination`] are
//! what they share, and [`openapi`](mod@openapi) describes it all. Handlers parse the request, call the
//! service ([`crate::app`]: its use cases, its checks, its views of the store's rows) or, for
//! plain reads, the store, and shape the answer; [`errors`] turns the service's
//! [`Error`](crate::app::Error) into the API's status, code and body. No SQL and no policy
//! here.

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};

mod account;
mod accounts;
mod audit;
mod auth;
mod deliveries;
mod endpoint_actions;
mod endpoints;
mod erasures;
mod errors;
mod events;
mod feed;
mod health;
mod listen_tokens;
mod notifications;
mod openapi;
mod pagination;
mod portal_links;
mod schemas;
mod thin;

pub(crate) use auth::Authed;
pub(crate) use errors::ApiError;
use errors::{ApiBody, ApiQuery};
pub(crate) use health::drains;
pub use openapi::document as openapi;

use crate::app::checks::parse;
use crate::app::{AppState, REQUEST_OVERHEAD};

/// The router: `/v1/…`, the probes and `/metrics`.
pub(crate) fn app(state: AppState) -> Router {
    Router::new()
        .route("/livez", get(health::livez))
        .route("/readyz", get(health::readyz))
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
        .route(
            "/v1/endpoints/{id}/test-filter",
            post(endpoint_actions::test_filter),
        )
        .route("/v1/endpoints/{id}/health", get(health::endpoint_health))
        // Authenticated with the endpoint's own credential, not an API key: the merchant's
        // receiver reads it.
        .route("/v1/endpoints/{id}/feed", get(feed::feed))
        .route(
            "/v1/endpoints/{id}/events/{event_id}",
            get(thin::fetch_event),
        )
        .route(
            "/v1/endpoints/{id}/cursor",
            get(feed::cursor).put(feed::commit_cursor),
        )
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
        .route(
            "/v1/listen-tokens",
            post(listen_tokens::create_listen_token),
        )
        .route("/v1/erasures", post(erasures::create_erasure))
        .route("/v1/erasures/{id}", get(erasures::get_erasure))
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
