//! `/v1/endpoints`: create (with the endpoint challenge), list, read, change, delete.

use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::checks::{
    check_description, check_event_types, check_name, check_rate_limit, check_timeout, check_url,
};
use super::pagination::{Page, list, nullable, present};
use super::{ApiError, AppState, Authed, parse};
use crate::engine::config::Shared;
use crate::engine::dispatch;
use crate::model::{
    CircuitState, Endpoint, EndpointChanges, EndpointId, EndpointStatus,
    NewEndpoint as StoredEndpoint, ms, rfc3339,
};

// ---- endpoints ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NewEndpoint {
    url: String,
    event_types: Option<Vec<String>>,
    description: Option<String>,
    timeout_ms: Option<u64>,
    api_version: Option<String>,
    rate_limit_per_second: Option<i64>,
    #[serde(default)]
    skip_challenge: bool,
}

/// `PATCH /v1/endpoints/{id}`: a field left out stays as it is. `null` clears the two nullable
/// settings and is refused for the others.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EndpointPatch {
    #[serde(default, deserialize_with = "present")]
    url: Option<String>,
    #[serde(default, deserialize_with = "present")]
    event_types: Option<Vec<String>>,
    #[serde(default, deserialize_with = "present")]
    description: Option<String>,
    #[serde(default, deserialize_with = "present")]
    timeout_ms: Option<u64>,
    #[serde(default, deserialize_with = "nullable")]
    api_version: Option<Option<String>>,
    #[serde(default, deserialize_with = "nullable")]
    rate_limit_per_second: Option<Option<i64>>,
    #[serde(default)]
    skip_challenge: bool,
}

#[derive(Serialize)]
pub(super) struct EndpointView {
    id: EndpointId,
    url: String,
    description: String,
    event_types: Vec<String>,
    timeout_ms: i64,
    status: EndpointStatus,
    api_version: Option<String>,
    rate_limit_per_second: Option<i64>,
    circuit_state: CircuitState,
    created_at: String,
    updated_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    secret: Option<String>,
}

impl EndpointView {
    pub(super) fn of(endpoint: Endpoint, secret: Option<String>) -> EndpointView {
        EndpointView {
            event_types: endpoint.types(),
            id: endpoint.id,
            url: endpoint.url,
            description: endpoint.description,
            timeout_ms: endpoint.timeout_ms,
            status: endpoint.status,
            api_version: endpoint.api_version,
            rate_limit_per_second: endpoint.rate_limit_per_second,
            circuit_state: endpoint.circuit_state,
            created_at: rfc3339(endpoint.created_at),
            updated_at: rfc3339(endpoint.updated_at),
            secret,
        }
    }
}

pub(super) async fn create_endpoint(
    State(state): State<AppState>,
    Authed(account): Authed,
    body: Bytes,
) -> Result<Response, ApiError> {
    let new: NewEndpoint = parse(&body)?;
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
    if let Some(limit) = new.rate_limit_per_second {
        check_rate_limit(limit)?;
    }
    // Last, once everything else is known to be acceptable: the only check that connects.
    if !new.skip_challenge {
        challenge(&state.shared, &url, timeout).await?;
    }
    let (endpoint, secret) = state
        .db
        .create_endpoint_with(
            &account,
            &StoredEndpoint {
                url: url.as_str(),
                event_types: &event_types,
                description: &description,
                timeout_ms: ms(timeout),
                api_version: new.api_version.as_deref(),
                rate_limit_per_second: new.rate_limit_per_second,
            },
        )
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(EndpointView::of(endpoint, Some(secret))),
    )
        .into_response())
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
                StatusCode::UNPROCESSABLE_ENTITY,
                "challenge_failed",
                format!(
                    "the endpoint challenge of {url} failed: {why}. The endpoint must answer \
                     `GET <url>?challenge=<token>` with a 2xx and the token as the whole body, \
                     as kxp receivers (kxp-axum, kxp-actix) do; send \"skip_challenge\": true \
                     to register it without the check"
                ),
            )
        })
}

pub(super) async fn list_endpoints(
    State(state): State<AppState>,
    Authed(account): Authed,
    Query(page): Query<Page>,
) -> Result<Json<Value>, ApiError> {
    let limit = page.limit()?;
    let endpoints = state
        .db
        .endpoints(&account.id, page.cursor.as_deref(), limit)
        .await?;
    let views: Vec<EndpointView> = endpoints
        .into_iter()
        .map(|e| EndpointView::of(e, None))
        .collect();
    Ok(list(views, limit, |e| e.id.to_string()))
}

pub(super) async fn get_endpoint(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<String>,
) -> Result<Json<EndpointView>, ApiError> {
    Ok(Json(EndpointView::of(
        state.db.endpoint(&account.id, &id).await?,
        None,
    )))
}

pub(super) async fn patch_endpoint(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<EndpointView>, ApiError> {
    let patch: EndpointPatch = parse(&body)?;
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
    if let Some(Some(version)) = &patch.api_version {
        check_name("api_version", version, 64)?;
    }
    if let Some(Some(limit)) = patch.rate_limit_per_second {
        check_rate_limit(limit)?;
    }
    let current = state.db.endpoint(&account.id, &id).await?;
    if let Some(url) = &url
        && url.as_str() != current.url
        && !patch.skip_challenge
    {
        let timeout = timeout.unwrap_or_else(|| {
            Duration::from_millis(u64::try_from(current.timeout_ms).unwrap_or(5000))
        });
        challenge(&state.shared, url, timeout).await?;
    }
    let changes = EndpointChanges {
        url: url.map(String::from),
        event_types: patch.event_types,
        description: patch.description,
        timeout_ms: timeout.map(ms),
        api_version: patch.api_version,
        rate_limit_per_second: patch.rate_limit_per_second,
    };
    let endpoint = state.db.update_endpoint(&account.id, &id, &changes).await?;
    Ok(Json(EndpointView::of(endpoint, None)))
}

pub(super) async fn delete_endpoint(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let ended = state.db.delete_endpoint(&account.id, &id).await?;
    tracing::info!(
        target: "kxp_sender", endpoint_id = %id, dead_deliveries = ended,
        "endpoint deleted; its pending deliveries are dead with endpoint_deleted"
    );
    Ok(Json(
        json!({"id": id, "status": "deleted", "dead_deliveries": ended}),
    ))
}
