//! What a merchant does to an endpoint beyond editing it: pause, resume, rotate its secret,
//! replay its deliveries in bulk, try a content filter.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use kxp_api::{
    BulkReplay, DEFAULT_CONFIRMATIONS, DeliveryStatus, Endpoint, ErrorCode, ExpireOld,
    FilterTested, MAX_CONFIRMATIONS, PublicKeys, ReplayQueued, RotateSecret, SecretRotated,
    TestFilter,
};

use super::deliveries::filter;
use super::{ApiBody, ApiError, AppState, Authed, parse};
use crate::app::checks::parse_overlap;
use crate::app::{self, DEFAULT_OVERLAP, views};
use crate::model::{EndpointId, EndpointKey, ms};

/// Pauses an endpoint: its deliveries are held (still pending, no attempt spent) until it is
/// resumed.
#[utoipa::path(post, path = "/v1/endpoints/{id}/pause", tag = "endpoints",
    params(("id" = kxp_api::EndpointId, Path, description = "The endpoint")),
    responses((status = 200, description = "The endpoint, paused", body = Endpoint)))]
pub(super) async fn pause_endpoint(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<EndpointId>,
) -> Result<Json<Endpoint>, ApiError> {
    let (endpoint, held) = app::pause(&state, &account, &id).await?;
    tracing::info!(target: "kxp_sender", endpoint_id = %id, held, "endpoint paused");
    Ok(Json(Endpoint::from(endpoint)))
}

/// Resumes a paused or disabled endpoint: its circuit closes and its backlog drains at the
/// endpoint's rate.
#[utoipa::path(post, path = "/v1/endpoints/{id}/resume", tag = "endpoints",
    params(("id" = kxp_api::EndpointId, Path, description = "The endpoint")),
    responses((status = 200, description = "The endpoint, active", body = Endpoint)))]
pub(super) async fn resume_endpoint(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<EndpointId>,
) -> Result<Json<Endpoint>, ApiError> {
    let (endpoint, due) = app::resume(&state, &account, &id).await?;
    tracing::info!(target: "kxp_sender", endpoint_id = %id, due, "endpoint resumed");
    Ok(Json(Endpoint::from(endpoint)))
}

/// Makes a new signing secret. During the overlap (default 24 h, at most 7 d; `"0s"` ends the
/// old secrets now) every delivery carries one `v1` per live secret, so the merchant can
/// deploy the new one without a moment of failed verification. With `"expire_old":
/// "when_confirmed"` the overlap ends as soon as the receiver has verified `confirmations`
/// (default 20) consecutive deliveries with the new secret, by its `X-Kxp-Verified-Key`.
/// The body may be empty.
#[utoipa::path(post, path = "/v1/endpoints/{id}/rotate-secret", tag = "endpoints",
    params(("id" = kxp_api::EndpointId, Path, description = "The endpoint")),
    request_body(content = Option<RotateSecret>, description = "Optional: the overlap"),
    responses(
        (status = 200, description = "The new secret, shown this once", body = SecretRotated),
        (status = 409, description = "`too_many_secrets`: wait for the oldest to expire, or rotate with `\"overlap\": \"0s\"`", body = kxp_api::ErrorBody),
    ))]
pub(super) async fn rotate_secret(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<EndpointId>,
    ApiBody(body): ApiBody,
) -> Result<Json<SecretRotated>, ApiError> {
    let request: RotateSecret = if body.is_empty() {
        RotateSecret::default()
    } else {
        parse(&body)?
    };
    let overlap = match &request.overlap {
        None => DEFAULT_OVERLAP,
        Some(text) => parse_overlap(text)?,
    };
    let confirmations = confirmations(&request)?;
    let rotated = app::rotate_secret(&state, &account, &id, overlap, confirmations).await?;
    tracing::info!(
        target: "kxp_sender", endpoint_id = %id, overlap_ms = ms(overlap),
        confirmations, "endpoint secret rotated"
    );
    Ok(Json(SecretRotated::from(rotated)))
}

/// How many confirmations end the rotation early: `None` for one that ends with its overlap.
fn confirmations(request: &RotateSecret) -> Result<Option<u32>, ApiError> {
    match (&request.expire_old, request.confirmations) {
        (None | Some(ExpireOld::AfterOverlap), None) => Ok(None),
        (None | Some(ExpireOld::AfterOverlap), Some(_)) => Err(ApiError::invalid(
            "confirmations is for \"expire_old\": \"when_confirmed\" only",
        )),
        (Some(ExpireOld::WhenConfirmed), n) => match n.unwrap_or(DEFAULT_CONFIRMATIONS) {
            n @ 1..=MAX_CONFIRMATIONS => Ok(Some(n)),
            _ => Err(ApiError::invalid(format!(
                "confirmations must be 1 to {MAX_CONFIRMATIONS}"
            ))),
        },
        (Some(other), _) => Err(ApiError::invalid(format!(
            "expire_old is \"after_overlap\" or \"when_confirmed\", not {:?}",
            other.as_str()
        ))),
    }
}

/// Replays an endpoint's deliveries in bulk (dead ones by default; `delivered` to send again
/// what was already received), optionally within a time range.
#[utoipa::path(post, path = "/v1/endpoints/{id}/replay", tag = "endpoints",
    params(("id" = kxp_api::EndpointId, Path, description = "The endpoint")),
    request_body(content = Option<BulkReplay>, description = "Optional: which deliveries"),
    responses(
        (status = 202, description = "How many deliveries were queued again", body = ReplayQueued),
        (status = 409, description = "`endpoint_deleted`", body = kxp_api::ErrorBody),
    ))]
pub(super) async fn replay_endpoint(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<EndpointId>,
    ApiBody(body): ApiBody,
) -> Result<Response, ApiError> {
    let request: BulkReplay = if body.is_empty() {
        BulkReplay::default()
    } else {
        parse(&body)?
    };
    let status = match request.status {
        None => None,
        Some(status @ (DeliveryStatus::Dead | DeliveryStatus::Delivered)) => {
            Some(status.as_str().to_owned())
        }
        Some(_) => {
            return Err(ApiError::invalid(
                "only dead or delivered deliveries can be replayed",
            ));
        }
    };
    let filter = filter(
        status,
        None,
        request.since.as_ref().map(|t| t.as_str()),
        request.until.as_ref().map(|t| t.as_str()),
    )?;
    let queued = app::replay_endpoint(&state, &account, &id, &filter).await?;
    Ok((StatusCode::ACCEPTED, Json(ReplayQueued { queued })).into_response())
}

/// A dry run of a content filter: which of the account's newest events (100 unless `limit`,
/// at most 1000) it takes, the filter given or else the endpoint's own. The filter alone runs
/// (not the endpoint's `event_types`), and nothing changes. The body may be empty.
#[utoipa::path(post, path = "/v1/endpoints/{id}/test-filter", tag = "endpoints",
    params(("id" = kxp_api::EndpointId, Path, description = "The endpoint")),
    request_body(content = Option<TestFilter>, description = "Optional: the filter to try, and how many events"),
    responses(
        (status = 200, description = "How many events it ran on, and which it takes", body = FilterTested),
        (status = 422, description = "`invalid_request`: a filter's fault, named by its place (`filter at /data.amount/$gt: …`), or a limit out of range", body = kxp_api::ErrorBody),
    ))]
pub(super) async fn test_filter(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<EndpointId>,
    ApiBody(body): ApiBody,
) -> Result<Json<FilterTested>, ApiError> {
    let request: TestFilter = if body.is_empty() {
        TestFilter::default()
    } else {
        parse(&body)?
    };
    Ok(Json(
        app::test_filter(&state, &account, &id, &request).await?,
    ))
}

/// The public keys of an endpoint that signs with Ed25519 (`ed25519` or `both`): the newest,
/// and during a rotation's overlap the one it replaces, each as raw base64, JWK, PEM and
/// `whpk_`. The same keys are served without authentication at `/jwks/{id}`.
#[utoipa::path(get, path = "/v1/endpoints/{id}/public-key", tag = "endpoints",
    params(("id" = kxp_api::EndpointId, Path, description = "The endpoint")),
    responses(
        (status = 200, description = "The endpoint's public keys", body = PublicKeys),
        (status = 404, description = "`not_found`: no such endpoint, or it signs with HMAC only", body = kxp_api::ErrorBody),
    ))]
pub(super) async fn public_key(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<EndpointId>,
) -> Result<Json<PublicKeys>, ApiError> {
    state.db.endpoint(&account.id, &id).await?;
    let keys = live_public_keys(&state, &EndpointKey::new(&account.id, &id)).await?;
    let Some(newest) = keys.first() else {
        return Err(ApiError::new(
            ErrorCode::NotFound,
            format!("endpoint {id} signs with HMAC only: it has no public key"),
        ));
    };
    Ok(Json(PublicKeys {
        newest: views::public_key(newest),
        previous: keys.get(1).map(views::public_key),
    }))
}

/// `GET /jwks/{id}`: the endpoint's live Ed25519 public keys as a JSON Web Key Set (RFC 7517),
/// newest first, each with its fingerprint as `kid`. Unauthenticated and cacheable for five
/// minutes: a receiver can fetch it at start and again when a `v1a` does not verify. An
/// endpoint that does not exist, is deleted or signs with HMAC only answers 404.
#[utoipa::path(get, path = "/jwks/{id}", tag = "endpoints", security(()),
    params(("id" = kxp_api::EndpointId, Path, description = "The endpoint")),
    responses(
        (status = 200, description = "`{\"keys\": [JWK, …]}`, newest first; `Cache-Control: public, max-age=300`", body = Object),
        (status = 404, description = "`not_found`", body = kxp_api::ErrorBody),
    ))]
pub(super) async fn jwks(
    State(state): State<AppState>,
    Path(id): Path<EndpointId>,
) -> Result<Response, ApiError> {
    // The request names the endpoint only: its account, through the endpoint directory.
    let keys = match state.db.endpoint_account(&id).await? {
        Some(account_id) => live_public_keys(&state, &EndpointKey::new(&account_id, &id)).await?,
        None => Vec::new(),
    };
    if keys.is_empty() {
        return Err(ApiError::new(ErrorCode::NotFound, "no such key set"));
    }
    let set = serde_json::json!({"keys": keys.iter().map(views::jwk).collect::<Vec<_>>()});
    Ok((
        [(axum::http::header::CACHE_CONTROL, "public, max-age=300")],
        Json(set),
    )
        .into_response())
}

/// The endpoint's live Ed25519 public keys, newest first.
async fn live_public_keys(
    state: &AppState,
    endpoint: &EndpointKey,
) -> Result<Vec<kxp_verify::PublicKey>, ApiError> {
    let ring = state.shared.config.secrets_key.as_ref();
    let secrets = state.db.live_secret_states(endpoint, ring).await?;
    Ok(secrets.iter().filter_map(|s| s.public_key()).collect())
}
