//! `GET /v1/notifications`: the operational notices sent to the account, and how they went.

use axum::Json;
use axum::extract::State;
use kxp_api::{Notification, Page};

use super::pagination::{PageParams, page};
use super::{ApiError, ApiQuery, AppState, Authed};

/// The notices sent (or being sent) to the account's ops URL and contact address, newest
/// first.
#[utoipa::path(get, path = "/v1/notifications", tag = "account",
    params(PageParams),
    responses((status = 200, description = "A page of notifications", body = Page<Notification>)))]
pub(super) async fn list_notifications(
    State(state): State<AppState>,
    Authed(account): Authed,
    ApiQuery(params): ApiQuery<PageParams>,
) -> Result<Json<Page<Notification>>, ApiError> {
    let limit = params.limit()?;
    let items = state
        .db
        .notifications(&account.id, params.cursor.as_deref(), limit)
        .await?;
    let views = items.into_iter().map(Notification::from).collect();
    Ok(Json(page(views, limit, |n| n.id.to_string())))
}
