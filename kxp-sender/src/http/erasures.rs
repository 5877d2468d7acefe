//! `POST /v1/erasures` and `GET /v1/erasures/{id}`: erasure by tag.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use kxp_api::{Erasure, ErasureId, NewErasure};

use super::auth::{ActingAs, Authed};
use super::{ApiBody, ApiError, AppState, parse};
use crate::app;

/// Erases the payloads of the account's events carrying `tag`, accepted until now: from the
/// answer on, none of their deliveries is attempted (an attempt already under way may finish)
/// nor replayed, and the erasure runs to `done` in the background, batch by batch. Each event
/// keeps its id, type and times, loses the erased tag (its other tags stay), and the payload
/// goes from the event and every response snippet of its attempts. Running it again for the
/// same tag finds no event: harmless. The erasure is kept as the record of who erased which
/// tag when.
#[utoipa::path(post, path = "/v1/erasures", tag = "events",
    request_body = NewErasure,
    responses(
        (status = 202, description = "Accepted: `running`", body = Erasure),
        (status = 422, description = "`invalid_request`: `tag` is not a tag", body = kxp_api::ErrorBody),
    ))]
pub(super) async fn create_erasure(
    State(state): State<AppState>,
    Authed(account): Authed,
    acting: ActingAs,
    ApiBody(body): ApiBody,
) -> Result<(StatusCode, Json<Erasure>), ApiError> {
    let new: NewErasure = parse(&body)?;
    let actor = acting.actor(&account);
    let erasure = app::erase(&state, &account, &new.tag, &actor, "api").await?;
    Ok((StatusCode::ACCEPTED, Json(erasure)))
}

/// One of the account's erasures: `running` until every event of its tag is erased, then
/// `done` with how many were.
#[utoipa::path(get, path = "/v1/erasures/{id}", tag = "events",
    params(("id" = kxp_api::ErasureId, Path, description = "The erasure")),
    responses(
        (status = 200, description = "The erasure", body = Erasure),
        (status = 404, description = "No such erasure in this account", body = kxp_api::ErrorBody),
    ))]
pub(super) async fn get_erasure(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<ErasureId>,
) -> Result<Json<Erasure>, ApiError> {
    Ok(Json(app::erasure(&state, &account, &id).await?))
}
