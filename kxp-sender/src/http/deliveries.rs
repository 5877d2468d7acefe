//! `/v1/deliveries` and `/v1/events/{id}/deliveries`: listing (the dead-letter queue
//! included), attempts, and replaying one delivery.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::checks::parse_time;
use super::pagination::{Page, list};
use super::{ApiError, AppState, Authed};
use crate::model::{
    Attempt, Delivery, DeliveryFilter, DeliveryId, DeliveryStatus, EndpointId, EventId, HELD,
    rfc3339,
};

// ---- deliveries ----

#[derive(Serialize)]
pub(super) struct DeliveryView {
    id: DeliveryId,
    event_id: EventId,
    endpoint_id: EndpointId,
    status: DeliveryStatus,
    attempts: i64,
    next_attempt_at: Option<String>,
    last_status: Option<i64>,
    last_error: Option<String>,
    replayed_by: Option<DeliveryId>,
    created_at: String,
    updated_at: String,
}

impl From<Delivery> for DeliveryView {
    fn from(d: Delivery) -> DeliveryView {
        DeliveryView {
            // Held for a paused endpoint: no time until it is resumed.
            next_attempt_at: (d.status == DeliveryStatus::Pending && d.next_attempt_at != HELD)
                .then(|| rfc3339(d.next_attempt_at)),
            id: d.id,
            event_id: d.event_id,
            endpoint_id: d.endpoint_id,
            status: d.status,
            attempts: d.attempts,
            last_status: d.last_status,
            last_error: d.last_error,
            replayed_by: d.replayed_by,
            created_at: rfc3339(d.created_at),
            updated_at: rfc3339(d.updated_at),
        }
    }
}

#[derive(Serialize)]
pub(super) struct AttemptView {
    attempt: i64,
    started_at: String,
    duration_ms: i64,
    status_code: Option<i64>,
    error: Option<String>,
    response_snippet: Option<String>,
}

impl From<Attempt> for AttemptView {
    fn from(a: Attempt) -> AttemptView {
        AttemptView {
            attempt: a.attempt,
            started_at: rfc3339(a.started_at),
            duration_ms: a.duration_ms,
            status_code: a.status_code,
            error: a.error,
            response_snippet: a.response_snippet,
        }
    }
}

#[derive(Deserialize)]
pub(super) struct DeliveryQuery {
    status: Option<String>,
    endpoint_id: Option<String>,
    since: Option<String>,
    until: Option<String>,
    cursor: Option<String>,
    limit: Option<i64>,
}

pub(super) const STATUSES: [&str; 4] = ["pending", "delivering", "delivered", "dead"];

pub(super) fn filter(
    status: Option<String>,
    endpoint_id: Option<String>,
    since: Option<&str>,
    until: Option<&str>,
) -> Result<DeliveryFilter, ApiError> {
    if let Some(status) = &status
        && !STATUSES.contains(&status.as_str())
    {
        return Err(ApiError::invalid(format!(
            "status must be one of {}",
            STATUSES.join(", ")
        )));
    }
    Ok(DeliveryFilter {
        status,
        endpoint_id,
        since: since.map(parse_time).transpose()?,
        until: until.map(parse_time).transpose()?,
    })
}

pub(super) async fn list_deliveries(
    State(state): State<AppState>,
    Authed(account): Authed,
    Query(q): Query<DeliveryQuery>,
) -> Result<Json<Value>, ApiError> {
    let page = Page {
        cursor: q.cursor,
        limit: q.limit,
    };
    let limit = page.limit()?;
    let filter = filter(
        q.status,
        q.endpoint_id,
        q.since.as_deref(),
        q.until.as_deref(),
    )?;
    let items = state
        .db
        .deliveries(&account.id, &filter, page.cursor.as_deref(), limit)
        .await?;
    let views: Vec<DeliveryView> = items.into_iter().map(DeliveryView::from).collect();
    Ok(list(views, limit, |d| d.id.to_string()))
}

pub(super) async fn event_deliveries(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let items = state.db.event_deliveries(&account.id, &id).await?;
    let views: Vec<DeliveryView> = items.into_iter().map(DeliveryView::from).collect();
    Ok(Json(json!({"data": views, "next_cursor": null})))
}

pub(super) async fn delivery_attempts(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let items = state.db.attempts(&account.id, &id).await?;
    let views: Vec<AttemptView> = items.into_iter().map(AttemptView::from).collect();
    Ok(Json(json!({"data": views, "next_cursor": null})))
}

pub(super) async fn replay_delivery(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let delivery = state.db.replay(&account.id, &id).await?;
    state.shared.wake.notify_waiters();
    Ok((StatusCode::ACCEPTED, Json(DeliveryView::from(delivery))).into_response())
}
