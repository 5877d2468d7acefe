//! Authentication: the caller's account from `Authorization: Bearer <api key>`.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use kxp_api::ErrorCode;

use super::{ApiError, AppState};
use crate::model::Account;

/// The caller's account, from `Authorization: Bearer <key>`.
pub struct Authed(pub Account);

impl FromRequestParts<AppState> for Authed {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let unauthorized = || {
            ApiError::new(
                ErrorCode::Unauthorized,
                "a valid `Authorization: Bearer <api key>` header is required",
            )
        };
        let key = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .ok_or_else(unauthorized)?;
        state
            .db
            .account_by_key(key)
            .await?
            .map(Authed)
            .ok_or_else(unauthorized)
    }
}
