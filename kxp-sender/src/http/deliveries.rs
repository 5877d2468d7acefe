//! `/v1/deliveries` and `/v1/events/{id}/deliveries`: listing (the dead-letter queue
//! included), attempts, and replaying one delivery.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use kxp_api::{Attempt, Delivery, Page};
use serde::Deserialize;
use utoipa::IntoParams;

use super::pagination::{PageParams, page, whole};
use super::{ApiError, ApiQuery, AppState, Authed};
use crate::app::{self, checks::parse_time};
use crate::model::{DeliveryFilter, DeliveryId, EndpointId, EventId};

/// Which deliveries to list.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct DeliveryParams {
    /// `pending`, `delivering`, `delivered` or `dead` (the dead-letter queue).
    status: Option<String>,
    /// Only this endpoint's deliveries.
    endpoint_id: Option<String>,
    /// Only deliveries created at or after this RFC 3339 time.
    since: Option<String>,
    /// Only deliveries created before this RFC 3339 time.
    until: Option<String>,
    /// The `next_cursor` of the previous page.
    cursor: Option<String>,
    /// Items per page, 1 to 500 (default 50).
    #[param(minimum = 1, maximum = 500)]
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
        endpoint_id: endpoint_id.map(EndpointId::from),
        since: since.map(parse_time).transpose()?,
        until: until.map(parse_time).transpose()?,
        ..DeliveryFilter::default()
    })
}

/// The account's deliveries, newest first; `?status=dead` is the dead-letter queue.
#[utoipa::path(get, path = "/v1/deliveries", tag = "deliveries",
    params(DeliveryParams),
    responses((status = 200, description = "A page of deliveries", body = Page<Delivery>)))]
pub(super) async fn list_deliveries(
    State(state): State<AppState>,
    Authed(account): Authed,
    ApiQuery(q): ApiQuery<DeliveryParams>,
) -> Result<Json<Page<Delivery>>, ApiError> {
    let params = PageParams {
        cursor: q.cursor,
        limit: q.limit,
    };
    let limit = params.limit()?;
    let filter = filter(
        q.status,
        q.endpoint_id,
        q.since.as_deref(),
        q.until.as_deref(),
    )?;
    let items = state
        .db
        .deliveries(&account.id, &filter, params.cursor.as_deref(), limit)
        .await?;
    let views = items.into_iter().map(Delivery::from).collect();
    Ok(Json(page(views, limit, |d| d.id.to_string())))
}

/// Every delivery of one event: one per endpoint it was routed to, and one per replay.
#[utoipa::path(get, path = "/v1/events/{id}/deliveries", tag = "deliveries",
    params(("id" = kxp_api::EventId, Path, description = "The event")),
    responses((status = 200, description = "All of them (never more than one page)", body = Page<Delivery>)))]
pub(super) async fn event_deliveries(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<EventId>,
) -> Result<Json<Page<Delivery>>, ApiError> {
    let items = state.db.event_deliveries(&account.id, &id).await?;
    Ok(Json(whole(items.into_iter().map(Delivery::from).collect())))
}

/// Every attempt of one delivery, first to last, with what the endpoint answered.
#[utoipa::path(get, path = "/v1/deliveries/{id}/attempts", tag = "deliveries",
    params(("id" = kxp_api::DeliveryId, Path, description = "The delivery")),
    responses((status = 200, description = "All of them (never more than one page)", body = Page<Attempt>)))]
pub(super) async fn delivery_attempts(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<DeliveryId>,
) -> Result<Json<Page<Attempt>>, ApiError> {
    let items = state.db.attempts(&account.id, &id).await?;
    Ok(Json(whole(items.into_iter().map(Attempt::from).collect())))
}

/// Replays one delivery: a new delivery of the same event (same id, same bytes) to the same
/// endpoint, due now; the old one records it in `replayed_by`.
#[utoipa::path(post, path = "/v1/deliveries/{id}/replay", tag = "deliveries",
    params(("id" = kxp_api::DeliveryId, Path, description = "The delivery to replay")),
    responses(
        (status = 202, description = "The new delivery", body = Delivery),
        (status = 409, description = "`endpoint_deleted`: nothing can be delivered to it", body = kxp_api::ErrorBody),
    ))]
pub(super) async fn replay_delivery(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<DeliveryId>,
) -> Result<Response, ApiError> {
    let delivery = app::replay(&state, &account, &id).await?;
    Ok((StatusCode::ACCEPTED, Json(Delivery::from(delivery))).into_response())
}
