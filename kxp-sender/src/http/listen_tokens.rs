//! `POST /v1/listen-tokens`: a token for `kxp listen --token` that can only create, read and
//! delete the account's temporary pull endpoints (see [`auth`](super::auth)).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use kxp_api::{ListenToken, NewListenToken};

use super::auth::Authed;
use super::{ApiBody, ApiError, AppState, parse};
use crate::app;

/// Creates a listen token. The body may be empty or `{}`: a token for 8 hours.
#[utoipa::path(post, path = "/v1/listen-tokens", tag = "endpoints",
    request_body = NewListenToken,
    responses(
        (status = 201, description = "Created; the token is shown only here", body = ListenToken),
        (status = 400, description = "`invalid_ttl`: `ttl_seconds` is not 1 to 86400", body = kxp_api::ErrorBody),
    ))]
pub(super) async fn create_listen_token(
    State(state): State<AppState>,
    Authed(account): Authed,
    ApiBody(body): ApiBody,
) -> Result<Response, ApiError> {
    let new: NewListenToken = match body.trim_ascii().is_empty() {
        true => NewListenToken::default(),
        false => parse(&body)?,
    };
    let token = app::create_listen_token(&state, &account, new.ttl_seconds).await?;
    Ok((StatusCode::CREATED, Json(token)).into_response())
}
