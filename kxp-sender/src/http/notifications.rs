//! `GET /v1/notifications`: the operational notices sent to the account, and how they went.

use axum::Json;
use axum::extract::{Query, State};
use serde::Serialize;
use serde_json::Value;

use super::pagination::{Page, list};
use super::{ApiError, AppState, Authed};
use crate::model::{Notification, rfc3339};

#[derive(Serialize)]
struct NotificationView {
    #[serde(flatten)]
    notification: Notification,
    created_at: String,
}

pub(super) async fn list_notifications(
    State(state): State<AppState>,
    Authed(account): Authed,
    Query(page): Query<Page>,
) -> Result<Json<Value>, ApiError> {
    let limit = page.limit()?;
    let items = state
        .db
        .notifications(&account.id, page.cursor.as_deref(), limit)
        .await?;
    let views: Vec<NotificationView> = items
        .into_iter()
        .map(|notification| NotificationView {
            created_at: rfc3339(notification.created_at),
            notification,
        })
        .collect();
    Ok(list(views, limit, |n| n.notification.id.to_string()))
}
