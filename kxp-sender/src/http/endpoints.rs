//! `/v1/endpoints`: create (with the endpoint challenge), list, read, change, delete.

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use kxp_api::{
    Endpoint, EndpointCreated, EndpointDeleted, EndpointDetails, EndpointPatch, EndpointStatus,
    EndpointUpdated, ErrorCode, NewEndpoint, Page, Secret,
};

use super::checks::{
    check_choices, check_description, check_encryption_jwk, check_event_types, check_name,
    check_rate_limit, check_timeout, check_url,
};
use super::pagination::{PageParams, page};
use super::{
    ApiBody, ApiError, ApiQuery, AppState, Authed, DEFAULT_OVERLAP, MAX_ENDPOINTS, parse, views,
};
use crate::engine::config::Shared;
use crate::engine::dispatch;
use crate::model::{Account, EndpointChanges, NewEndpoint as StoredEndpoint, Rotated, ms};

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
    ApiBody(body): ApiBody,
) -> Result<Response, ApiError> {
    let new: NewEndpoint = parse(&body)?;
    let created = register(&state, &account, new).await?;
    Ok((StatusCode::CREATED, Json(created)).into_response())
}

/// Registers an endpoint for `account` with every check of `POST /v1/endpoints`, the
/// challenge last (the only one that connects): the API and the console's form both come
/// through here. The answer holds the signing secret, to be shown once.
pub(crate) async fn register(
    state: &AppState,
    account: &Account,
    new: NewEndpoint,
) -> Result<EndpointCreated, ApiError> {
    if state.db.endpoint_count(account.id.as_str()).await? >= MAX_ENDPOINTS {
        return Err(ApiError::new(
            ErrorCode::TooManyEndpoints,
            format!("an account has at most {MAX_ENDPOINTS} endpoints; delete one first"),
        ));
    }
    let rate_limit = new.rate_limit_per_second.map(i64::from);
    let url = check_url(&new.url, &state.shared)?;
    let event_types = new.event_types.unwrap_or_else(|| vec!["*".to_owned()]);
    check_event_types(&event_types)?;
    let description = new.description.unwrap_or_default();
    check_description(&description)?;
    let timeout = match new.timeout_ms {
        None => state.shared.config.delivery_timeout,
        Some(ms) => check_timeout(ms)?,
    };
    if let Some(version) = &new.api_version {
        check_name("api_version", version, 64)?;
    }
    if let Some(limit) = rate_limit {
        check_rate_limit(limit)?;
    }
    check_choices(new.signing.as_ref(), new.format.as_ref())?;
    let encryption_jwk = new
        .encryption_jwk
        .as_ref()
        .map(check_encryption_jwk)
        .transpose()?;
    if !new.skip_challenge {
        challenge(&state.shared, &url, timeout).await?;
    }
    let created = state
        .db
        .create_endpoint_with(
            account,
            &StoredEndpoint {
                url: url.as_str(),
                event_types: &event_types,
                description: &description,
                timeout_ms: ms(timeout),
                api_version: new.api_version.as_deref(),
                rate_limit_per_second: rate_limit,
                signing: new.signing.clone().unwrap_or_default(),
                format: new.format.clone().unwrap_or_default(),
                encryption_jwk,
            },
            state.shared.config.secrets_key.as_ref(),
        )
        .await?;
    Ok(EndpointCreated {
        endpoint: Endpoint::from(created.endpoint),
        secret: created.secret.map(Secret::from),
        public_key: created.public_key.as_ref().map(views::public_key),
    })
}

/// Runs the endpoint challenge ([`dispatch::challenge`]) against `url`; a failure is 422
/// `challenge_failed` saying what came back.
pub(super) async fn challenge(
    shared: &Shared,
    url: &reqwest::Url,
    timeout: Duration,
) -> Result<(), ApiError> {
    dispatch::challenge(&shared.client, url.as_str(), timeout)
        .await
        .map_err(|why| {
            ApiError::new(
                ErrorCode::ChallengeFailed,
                format!(
                    "the endpoint challenge of {url} failed: {why}. The endpoint must answer \
                     `GET <url>?challenge=<token>` with a 2xx and the token as the whole body, \
                     as kxp receivers (kxp-axum, kxp-actix) do; send \"skip_challenge\": true \
                     to register it without the check"
                ),
            )
        })
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
        .endpoints(account.id.as_str(), params.cursor.as_deref(), limit)
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
    Path(id): Path<String>,
) -> Result<Json<EndpointDetails>, ApiError> {
    let endpoint = state.db.endpoint(account.id.as_str(), &id).await?;
    let ring = state.shared.config.secrets_key.as_ref();
    let secrets = state
        .db
        .live_secret_states(endpoint.id.as_str(), ring)
        .await?;
    Ok(Json(views::endpoint_details(endpoint, &secrets)))
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
    Path(id): Path<String>,
    ApiBody(body): ApiBody,
) -> Result<Json<EndpointUpdated>, ApiError> {
    let patch: EndpointPatch = parse(&body)?;
    let (endpoint, rotated) = change(&state, &account, &id, patch).await?;
    Ok(Json(EndpointUpdated {
        endpoint: Endpoint::from(endpoint),
        rotated: rotated.map(Into::into),
    }))
}

/// Changes one of `account`'s endpoints with every check of `PATCH /v1/endpoints/{id}` (a new
/// URL is challenged, last, unless `skip_challenge`): the API and the console's edit form both
/// come through here. A new `format` is a rotation into it, with the default overlap; its
/// result comes back beside the endpoint.
pub(crate) async fn change(
    state: &AppState,
    account: &Account,
    id: &str,
    patch: EndpointPatch,
) -> Result<(crate::model::Endpoint, Option<Rotated>), ApiError> {
    let rate_limit = patch
        .rate_limit_per_second
        .into_option()
        .map(|r| r.map(i64::from));
    let api_version = patch.api_version.into_option();
    let url = patch
        .url
        .as_deref()
        .map(|url| check_url(url, &state.shared))
        .transpose()?;
    if let Some(types) = &patch.event_types {
        check_event_types(types)?;
    }
    if let Some(description) = &patch.description {
        check_description(description)?;
    }
    let timeout = patch.timeout_ms.map(check_timeout).transpose()?;
    if let Some(Some(version)) = &api_version {
        check_name("api_version", version, 64)?;
    }
    if let Some(Some(limit)) = rate_limit {
        check_rate_limit(limit)?;
    }
    check_choices(patch.signing.as_ref(), patch.format.as_ref())?;
    let encryption_jwk = patch
        .encryption_jwk
        .clone()
        .into_option()
        .map(|jwk| jwk.as_ref().map(check_encryption_jwk).transpose())
        .transpose()?;
    let current = state.db.endpoint(account.id.as_str(), id).await?;
    if let Some(url) = &url
        && url.as_str() != current.url
        && !patch.skip_challenge
    {
        let timeout = timeout.unwrap_or_else(|| {
            Duration::from_millis(u64::try_from(current.timeout_ms).unwrap_or(5000))
        });
        challenge(&state.shared, url, timeout).await?;
    }
    let new_format = patch
        .format
        .as_ref()
        .filter(|format| format.as_str() != current.format);
    if new_format.is_some() && patch.signing.is_some() {
        // Each is its own transaction: together, a refused rotation would leave the signing
        // change made.
        return Err(ApiError::invalid(
            "change signing and format in two requests: a change of format is a rotation",
        ));
    }
    let ring = state.shared.config.secrets_key.as_ref();
    if let Some(signing) = &patch.signing {
        state
            .db
            .change_signing(account.id.as_str(), id, signing, ring)
            .await?;
    }
    let rotated = match new_format {
        Some(format) => {
            let overlap = ms(DEFAULT_OVERLAP);
            let rotated = state
                .db
                .rotate_secret(account.id.as_str(), id, overlap, None, ring, Some(format))
                .await?;
            tracing::info!(
                target: "kxp_sender", endpoint_id = %id, format = %format, overlap_ms = overlap,
                "endpoint format changed: both formats sign until the overlap ends"
            );
            Some(rotated)
        }
        None => None,
    };
    let changes = EndpointChanges {
        url: url.map(String::from),
        event_types: patch.event_types,
        description: patch.description,
        timeout_ms: timeout.map(ms),
        api_version,
        rate_limit_per_second: rate_limit,
        encryption_jwk,
    };
    let endpoint = state
        .db
        .update_endpoint(account.id.as_str(), id, &changes)
        .await?;
    Ok((endpoint, rotated))
}

/// Deletes an endpoint. Its unfinished deliveries become dead with `endpoint_deleted` (they
/// stay in the dead-letter queue, visible, but cannot be replayed to it).
#[utoipa::path(delete, path = "/v1/endpoints/{id}", tag = "endpoints",
    params(("id" = kxp_api::EndpointId, Path, description = "The endpoint")),
    responses((status = 200, description = "Deleted", body = EndpointDeleted)))]
pub(super) async fn delete_endpoint(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<String>,
) -> Result<Json<EndpointDeleted>, ApiError> {
    let ended = state.db.delete_endpoint(account.id.as_str(), &id).await?;
    tracing::info!(
        target: "kxp_sender", endpoint_id = %id, dead_deliveries = ended,
        "endpoint deleted; its pending deliveries are dead with endpoint_deleted"
    );
    Ok(Json(EndpointDeleted {
        id: id.into(),
        status: EndpointStatus::Deleted,
        dead_deliveries: ended,
    }))
}
