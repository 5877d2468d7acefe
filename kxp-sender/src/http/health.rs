//! The probes (`GET /livez`, `GET /readyz`, `GET /healthz`), `GET /metrics`,
//! `GET /v1/endpoints/{id}/health`, and what the API answers while the process drains.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Json;
use axum::extract::{Path, Request, State};
use axum::http::header::CONNECTION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use kxp_api::{EndpointHealth, ErrorCode, Probe, ServiceHealth};

use super::{ApiError, AppState, Authed};
use crate::engine::config::Shared;
use crate::model::EndpointId;

/// The routes a draining process still serves: the probes and the counters.
const SERVED_WHILE_DRAINING: [&str; 4] = ["/livez", "/readyz", "/healthz", "/metrics"];

/// `Retry-After` of the requests refused while draining: another process takes them at once.
const DRAINING_RETRY_AFTER: u64 = 1;

/// The process runs: for a liveness probe, which restarts a process that stops answering.
/// Reads nothing (a database outage is not cured by a restart). No key.
#[utoipa::path(get, path = "/livez", tag = "operations", security(()),
    responses((status = 200, description = "The process runs", body = Probe)))]
pub(super) async fn livez() -> Json<Probe> {
    Json(Probe {
        status: "ok".to_owned(),
    })
}

/// Whether to send this process traffic: the database answers, has every migration of this
/// version, and the process is not shutting down. No key.
#[utoipa::path(get, path = "/readyz", tag = "operations", security(()),
    responses(
        (status = 200, description = "Ready", body = Probe),
        (status = 503, description = "`shutting_down`, `migrations_pending` or `store_unavailable`", body = kxp_api::ErrorBody),
    ))]
pub(super) async fn readyz(State(state): State<AppState>) -> Response {
    if state.shared.draining.load(Ordering::SeqCst) {
        return shutting_down().into_response();
    }
    match state.db.schema_status().await {
        Ok(status) => match status.refusal() {
            None => Json(Probe {
                status: "ready".to_owned(),
            })
            .into_response(),
            Some(refusal) => {
                ApiError::new(ErrorCode::MigrationsPending, refusal.to_string()).into_response()
            }
        },
        Err(e) => ApiError::from(crate::store::StoreError::from(e)).into_response(),
    }
}

fn shutting_down() -> ApiError {
    ApiError::new(
        ErrorCode::ShuttingDown,
        "this process is shutting down: it finishes what it started and takes nothing new; \
         retry on another",
    )
    .retry_after(DRAINING_RETRY_AFTER)
}

/// Wraps the whole router (API and console): while the process drains, every request but the
/// probes and `/metrics` is answered 503 `shutting_down` with `Retry-After` and the connection
/// closed, so no new work starts here; requests already running finish.
pub(crate) fn drains(app: axum::Router, shared: Arc<Shared>) -> axum::Router {
    app.layer(axum::middleware::from_fn_with_state(
        shared,
        refuse_while_draining,
    ))
}

async fn refuse_while_draining(
    State(shared): State<Arc<Shared>>,
    request: Request,
    next: Next,
) -> Response {
    if !shared.draining.load(Ordering::SeqCst)
        || SERVED_WHILE_DRAINING.contains(&request.uri().path())
    {
        return next.run(request).await;
    }
    let mut response = shutting_down().into_response();
    response
        .headers_mut()
        .insert(CONNECTION, axum::http::HeaderValue::from_static("close"));
    response
}

/// Whether the process can reach its database, and how its broker sources and its egress proxy
/// are. No key.
///
/// On Citus, `degraded` while some shards do not answer (their accounts' requests are 503s);
/// `degraded` too while the egress proxy fails (deliveries wait for it).
#[utoipa::path(get, path = "/healthz", tag = "operations", security(()),
    responses(
        (status = 200, description = "Up", body = ServiceHealth),
        (status = 503, description = "`store_unavailable`", body = kxp_api::ErrorBody),
    ))]
pub(super) async fn healthz(State(state): State<AppState>) -> Response {
    match state.db.reachable().await {
        Ok(unanswered) => {
            let egress_proxy = state
                .shared
                .client
                .egress()
                .map(|egress| egress.health.view(egress.proxy.to_string()));
            let proxy_failing = egress_proxy.as_ref().is_some_and(|p| p.state != "up");
            Json(ServiceHealth {
                status: if unanswered.unwrap_or(0) > 0 || proxy_failing {
                    "degraded"
                } else {
                    "ok"
                }
                .to_owned(),
                database: state.db.backend().to_owned(),
                unanswered_shards: unanswered.map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
                sources: state.shared.sources.0.iter().map(|s| s.health()).collect(),
                egress_proxy,
            })
        }
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
                state.shared.feed_waiters.render(&mut text);
                if let Some(egress) = state.shared.client.egress() {
                    egress.health.render(&mut text);
                }
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
