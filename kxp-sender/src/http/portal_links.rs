//! `POST /v1/portal-links`: a one-time console sign-in URL for the account the request acts
//! for (the service's [`create_portal_link`](app::create_portal_link)).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use kxp_api::{NewPortalLink, PortalLink};

use super::auth::Authed;
use super::{ApiBody, ApiError, AppState, parse};
use crate::app;

/// Creates a portal link. The body may be empty or `{}`: a `manage` link for 15 minutes.
#[utoipa::path(post, path = "/v1/portal-links", tag = "portal",
    request_body = NewPortalLink,
    responses(
        (status = 201, description = "Created; the `url` works once, until `expires_at`", body = PortalLink),
        (status = 400, description = "`invalid_ttl`: `ttl_seconds` is not 1 to 86400", body = kxp_api::ErrorBody),
        (status = 429, description = "`too_many_portal_links`: the account has 1,000 unused links that have not expired; `Retry-After` says when the first expires", body = kxp_api::ErrorBody),
    ))]
pub(super) async fn create_portal_link(
    State(state): State<AppState>,
    Authed(account): Authed,
    ApiBody(body): ApiBody,
) -> Result<Response, ApiError> {
    let new: NewPortalLink = match body.trim_ascii().is_empty() {
        true => NewPortalLink::default(),
        false => parse(&body)?,
    };
    let link = app::create_portal_link(&state, &account, new).await?;
    Ok((StatusCode::CREATED, Json(link)).into_response())
}
