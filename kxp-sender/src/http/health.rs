//! `GET /healthz`, `GET /metrics` and `GET /v1/endpoints/{id}/health`.

use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::{ApiError, AppState, Authed};
use crate::model::EndpointHealth;

pub(super) async fn healthz(State(state): State<AppState>) -> Response {
    match state.db.account_count().await {
        Ok(_) => Json(json!({"status": "ok", "database": state.db.backend()})).into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// `GET /metrics`: Prometheus text format, no key (it names no account's objects; see
/// [`crate::metrics`]).
pub(super) async fn metrics(State(state): State<AppState>) -> Response {
    match state.db.gauges().await {
        Ok(gauges) => (
            [(
                axum::http::header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            state.shared.metrics.render(&gauges),
        )
            .into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

pub(super) async fn endpoint_health(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<String>,
) -> Result<Json<EndpointHealth>, ApiError> {
    Ok(Json(state.db.endpoint_health(&account.id, &id).await?))
}
