//! `/v1/events`: ingestion (schema check, `Idempotency-Key`) and reading an event back.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use serde_json::value::RawValue;

use super::checks::check_name;
use super::{ApiError, AppState, Authed, parse};
use crate::model::{Account, Ingested, sha256_hex};

// ---- events ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NewEvent<'a> {
    #[serde(rename = "type")]
    event_type: String,
    #[serde(borrow)]
    data: &'a RawValue,
    api_version: Option<String>,
}

pub(super) async fn create_event(
    State(state): State<AppState>,
    Authed(account): Authed,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let new: NewEvent<'_> = parse(&body)?;
    check_name("type", &new.event_type, 128)?;
    let api_version = new
        .api_version
        .unwrap_or_else(|| account.default_api_version.clone());
    check_name("api_version", &api_version, 64)?;
    if let Some(violation) =
        check_schema(&state, &account, &new.event_type, &api_version, new.data).await?
    {
        return Ok(violation);
    }
    let key = match headers.get("idempotency-key") {
        None => None,
        Some(value) => {
            let key = value.to_str().ok().filter(|k| {
                (1..=255).contains(&k.len()) && k.bytes().all(|b| b.is_ascii_graphic())
            });
            Some(key.ok_or_else(|| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_idempotency_key",
                    "Idempotency-Key must be 1 to 255 printable ASCII characters",
                )
            })?)
        }
    };
    let hash = sha256_hex(&body);
    let ingested = state
        .db
        .ingest(
            &account,
            &new.event_type,
            &api_version,
            new.data,
            key.map(|k| (k, hash.as_str())),
        )
        .await?;
    let event = match ingested {
        Ingested::Created(event, queued) => {
            state.shared.metrics.event_ingested();
            if queued > 0 {
                state.shared.wake.notify_waiters();
            }
            event
        }
        Ingested::Replayed(event) => event,
        Ingested::KeyReused => {
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency_key_reused",
                "this Idempotency-Key was used with a different request",
            ));
        }
    };
    Ok((StatusCode::ACCEPTED, raw_json(event.payload)).into_response())
}

/// Checks `data` against the schema registered for its type and version, if any: the 400
/// `schema_violation` response when it does not fit.
pub(super) async fn check_schema(
    state: &AppState,
    account: &Account,
    event_type: &str,
    api_version: &str,
    data: &RawValue,
) -> Result<Option<Response>, ApiError> {
    let violation = state
        .schemas
        .check(&state.db, &account.id, event_type, api_version, data)
        .await?;
    Ok(violation.map(|v| {
        let message = format!(
            "data{} does not match the schema of {event_type} {api_version}: {}",
            v.path, v.message
        );
        (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "schema_violation", "message": message, "path": v.path})),
        )
            .into_response()
    }))
}

/// The stored envelope, sent as it is: the API shows exactly what receivers get.
pub(super) fn raw_json(payload: String) -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        payload,
    )
        .into_response()
}

pub(super) async fn get_event(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(raw_json(state.db.event(&account.id, &id).await?.payload))
}
