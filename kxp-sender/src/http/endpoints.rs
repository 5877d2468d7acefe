//! `/v1/endpoints`: create, change and delete (through the service's [`register`], [`change`]
//! and [`delete`](app::delete)), list, read.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use kxp_api::{
    Endpoint, EndpointCreated, EndpointDeleted, EndpointDetails, EndpointMode, EndpointPatch,
    EndpointStatus, EndpointUpdated, ErrorCode, NewEndpoint, Page,
};

use super::auth::ListenOnly;
use super::pagination::{PageParams, page};
use super::{ApiBody, ApiError, ApiQuery, AppState, Authed, parse};
use crate::app::views::endpoint_details;
use crate::app::{self, change, register};
use crate::model::{EndpointId, EndpointKey};
use crate::store::StoreError;

/// Registers an endpoint. Unless `skip_challenge` is set, the endpoint must first answer the
/// challenge (`GET <url>?challenge=<token>` echoing the token): a URL is registered only when
/// something there speaks the receiver contract. The signing secret is in this answer only.
#[utoipa::path(post, path = "/v1/endpoints", tag = "endpoints",
    request_body = NewEndpoint,
    responses(
        (status = 201, description = "Registered; `secret` is shown this once", body = EndpointCreated),
        (status = 422, description = "`invalid_request`, `blocked_address` or `challenge_failed`", body = kxp_api::ErrorBody),
    ))]
pub(super) async fn create_endpoint(
    State(state): State<AppState>,
    Authed(account): Authed,
    ListenOnly(listen_only): ListenOnly,
    ApiBody(body): ApiBody,
) -> Result<Response, ApiError> {
    let new: NewEndpoint = parse(&body)?;
    if listen_only && !(new.mode == Some(EndpointMode::Pull) && new.temporary) {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            "a listen token makes only temporary pull endpoints (\"mode\": \"pull\", \"temporary\": true)",
        ));
    }
    let created = register(&state, &account, new).await?;
    Ok((StatusCode::CREATED, Json(created)).into_response())
}

/// The account's endpoints, oldest first, a page at a time.
#[utoipa::path(get, path = "/v1/endpoints", tag = "endpoints",
    params(PageParams),
    responses((status = 200, description = "A page of endpoints", body = Page<Endpoint>)))]
pub(super) async fn list_endpoints(
    State(state): State<AppState>,
    Authed(account): Authed,
    ApiQuery(params): ApiQuery<PageParams>,
) -> Result<Json<Page<Endpoint>>, ApiError> {
    let limit = params.limit()?;
    let endpoints = state
        .db
        .endpoints(&account.id, params.cursor.as_deref(), limit)
        .await?;
    let views = endpoints.into_iter().map(Endpoint::from).collect();
    Ok(Json(page(views, limit, |e| e.id.to_string())))
}

/// One endpoint, with its live secrets by fingerprint (when a receiver last verified a
/// delivery with each) and the rotation waiting for the receiver's confirmation, if any.
#[utoipa::path(get, path = "/v1/endpoints/{id}", tag = "endpoints",
    params(("id" = kxp_api::EndpointId, Path, description = "The endpoint")),
    responses((status = 200, description = "The endpoint, its live secrets (by fingerprint) and the rotation waiting for the receiver's confirmation", body = EndpointDetails)))]
pub(super) async fn get_endpoint(
    State(state): State<AppState>,
    Authed(account): Authed,
    ListenOnly(listen_only): ListenOnly,
    Path(id): Path<EndpointId>,
) -> Result<Json<EndpointDetails>, ApiError> {
    let endpoint = state.db.endpoint(&account.id, &id).await?;
    if listen_only && !(endpoint.is_pull() && endpoint.temporary) {
        return Err(StoreError::NotFound.into());
    }
    let ring = state.shared.config.secrets_key.as_ref();
    let key = EndpointKey::new(&account.id, &endpoint.id);
    let secrets = state.db.live_secret_states(&key, ring).await?;
    Ok(Json(endpoint_details(endpoint, &secrets)))
}

/// Changes an endpoint: a field left out stays as it is; `null` clears `api_version` and
/// `rate_limit_per_second` and is refused for the others. A new URL is challenged first.
#[utoipa::path(patch, path = "/v1/endpoints/{id}", tag = "endpoints",
    params(("id" = kxp_api::EndpointId, Path, description = "The endpoint")),
    request_body = EndpointPatch,
    responses(
        (status = 200, description = "The endpoint as changed, and the new secret of a change of format", body = EndpointUpdated),
        (status = 422, description = "`invalid_request`, `blocked_address` or `challenge_failed`", body = kxp_api::ErrorBody),
    ))]
pub(super) async fn patch_endpoint(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<EndpointId>,
    ApiBody(body): ApiBody,
) -> Result<Json<EndpointUpdated>, ApiError> {
    let patch: EndpointPatch = parse(&body)?;
    let (endpoint, rotated) = change(&state, &account, &id, patch).await?;
    Ok(Json(EndpointUpdated {
        endpoint: Endpoint::from(endpoint),
        rotated: rotated.map(Into::into),
    }))
}

/// Deletes an endpoint. Its unfinished deliveries become dead with `endpoint_deleted` (they
/// stay in the dead-letter queue, visible, but cannot be replayed to it).
#[utoipa::path(delete, path = "/v1/endpoints/{id}", tag = "endpoints",
    params(("id" = kxp_api::EndpointId, Path, description = "The endpoint")),
    responses((status = 200, description = "Deleted", body = EndpointDeleted)))]
pub(super) async fn delete_endpoint(
    State(state): State<AppState>,
    Authed(account): Authed,
    ListenOnly(listen_only): ListenOnly,
    Path(id): Path<EndpointId>,
) -> Result<Json<EndpointDeleted>, ApiError> {
    // A listen token deletes only what it could have made: another endpoint is not its to see.
    if listen_only {
        let endpoint = state.db.endpoint(&account.id, &id).await?;
        if !(endpoint.is_pull() && endpoint.temporary) {
            return Err(StoreError::NotFound.into());
        }
    }
    let ended = app::delete(&state, &account, &id).await?;
    tracing::info!(
        target: "kxp_sender", endpoint_id = %id, dead_deliveries = ended,
        "endpoint deleted; its pending deliveries are dead with endpoint_deleted"
    );
    Ok(Json(EndpointDeleted {
        id,
        status: EndpointStatus::Deleted,
        dead_deliveries: ended,
    }))
}
