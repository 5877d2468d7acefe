//! What a merchant does to an endpoint beyond editing it: pause, resume, rotate its secret,
//! replay its deliveries in bulk.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::checks::parse_overlap;
use super::deliveries::filter;
use super::endpoints::EndpointView;
use super::{ApiError, AppState, Authed, DEFAULT_OVERLAP, parse};
use crate::model::{ms, rfc3339};

pub(super) async fn pause_endpoint(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<String>,
) -> Result<Json<EndpointView>, ApiError> {
    let (endpoint, held) = state.db.pause_endpoint(&account.id, &id).await?;
    tracing::info!(target: "kxp_sender", endpoint_id = %id, held, "endpoint paused");
    Ok(Json(EndpointView::of(endpoint, None)))
}

pub(super) async fn resume_endpoint(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<String>,
) -> Result<Json<EndpointView>, ApiError> {
    let (endpoint, due) = state
        .db
        .resume_endpoint(&account.id, &id, &state.shared.config.protection)
        .await?;
    tracing::info!(target: "kxp_sender", endpoint_id = %id, due, "endpoint resumed");
    if due > 0 {
        state.shared.wake.notify_waiters();
    }
    Ok(Json(EndpointView::of(endpoint, None)))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct Rotation {
    overlap: Option<Value>,
}

pub(super) async fn rotate_secret(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let request: Rotation = if body.is_empty() {
        Rotation::default()
    } else {
        parse(&body)?
    };
    let overlap = match &request.overlap {
        None => DEFAULT_OVERLAP,
        Some(Value::String(text)) => parse_overlap(text)?,
        Some(_) => {
            return Err(ApiError::invalid(
                "overlap must be a duration string such as \"30m\", \"24h\" or \"0s\"",
            ));
        }
    };
    let rotated = state
        .db
        .rotate_secret(&account.id, &id, ms(overlap))
        .await?;
    tracing::info!(
        target: "kxp_sender", endpoint_id = %id, overlap_ms = ms(overlap),
        "endpoint secret rotated"
    );
    Ok(Json(json!({
        "secret": rotated.secret,
        "previous_expires_at": rfc3339(rotated.previous_expires_at),
    })))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct BulkReplay {
    status: Option<String>,
    since: Option<String>,
    until: Option<String>,
}

pub(super) async fn replay_endpoint(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let request: BulkReplay = if body.is_empty() {
        BulkReplay::default()
    } else {
        parse(&body)?
    };
    if matches!(request.status.as_deref(), Some("pending" | "delivering")) {
        return Err(ApiError::invalid(
            "only dead or delivered deliveries can be replayed",
        ));
    }
    let filter = filter(
        request.status,
        None,
        request.since.as_deref(),
        request.until.as_deref(),
    )?;
    let queued = state.db.replay_endpoint(&account.id, &id, &filter).await?;
    if queued > 0 {
        state.shared.wake.notify_waiters();
    }
    Ok((StatusCode::ACCEPTED, Json(json!({"queued": queued}))).into_response())
}
