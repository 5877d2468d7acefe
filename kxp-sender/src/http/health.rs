//! `GET /healthz`, `GET /metrics` and `GET /v1/endpoints/{id}/health`.

use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use kxp_api::{EndpointHealth, ServiceHealth};

use super::{ApiError, AppState, Authed};
use crate::model::EndpointId;

/// Whether the process can reach its database, and how its broker sources are. No key.
#[utoipa::path(get, path = "/healthz", tag = "operations", security(()),
    responses(
        (status = 200, description = "Up", body = ServiceHealth),
        (status = 503, description = "`store_unavailable`", body = kxp_api::ErrorBody),
    ))]
pub(super) async fn healthz(State(state): State<AppState>) -> Response {
    match state.db.account_count().await {
        Ok(_) => Json(ServiceHealth {
            status: "ok".to_owned(),
            database: state.db.backend().to_owned(),
            sources: state.shared.sources.0.iter().map(|s| s.health()).collect(),
        })
        .into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// This process's counters and the database's gauges, in Prometheus text format 0.0.4. No
/// key: it names no account's objects.
#[utoipa::path(get, path = "/metrics", tag = "operations", security(()),
    responses(
        (status = 200, description = "Prometheus text format", content_type = "text/plain; version=0.0.4", body = String),
        (status = 503, description = "`store_unavailable`", body = kxp_api::ErrorBody),
    ))]
pub(super) async fn metrics(State(state): State<AppState>) -> Response {
    match state.db.gauges().await {
        Ok(gauges) => (
            [(
                axum::http::header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            {
                let mut text = state.shared.metrics.render(&gauges);
                state.shared.sources.render(&mut text);
                text
            },
        )
            .into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// An endpoint's health: attempts, success rate and latency over the last hour and day, the
/// failure streak, the backlog, and the circuit breaker's state.
#[utoipa::path(get, path = "/v1/endpoints/{id}/health", tag = "endpoints",
    params(("id" = kxp_api::EndpointId, Path, description = "The endpoint")),
    responses((status = 200, description = "The endpoint's health", body = EndpointHealth)))]
pub(super) async fn endpoint_health(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<EndpointId>,
) -> Result<Json<EndpointHealth>, ApiError> {
    let health = state.db.endpoint_health(&account.id, &id).await?;
    Ok(Json(EndpointHealth::from(health)))
}
