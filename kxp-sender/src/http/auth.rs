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
            .and_then(bearer_token)
            .filter(|k| !k.is_empty())
            .ok_or_else(unauthorized)?;
        let account = state
            .db
            .account_by_key(key)
            .await?
            .ok_or_else(unauthorized)?;
        let rate = state.shared.config.api_rate_limit;
        if rate > 0 {
            let granted = state
                .shared
                .api_requests
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .try_take(account.id.as_str(), Some(rate), tokio::time::Instant::now());
            if !granted {
                return Err(ApiError::new(
                    ErrorCode::RateLimited,
                    format!("this key made more than {rate} requests in the last second"),
                )
                .retry_after(1));
            }
        }
        Ok(Authed(account))
    }
}

/// The token of a `Bearer` credential. The scheme is case-insensitive (RFC 9110, section 11.1),
/// so `bearer` and `BEARER` clients are not turned away.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim_start().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

#[cfg(test)]
mod tests {
    use super::bearer_token;

    #[test]
    fn the_scheme_is_case_insensitive_and_the_token_is_not() {
        assert_eq!(bearer_token("Bearer kxp_Ab1"), Some("kxp_Ab1"));
        assert_eq!(bearer_token("bearer kxp_Ab1"), Some("kxp_Ab1"));
        assert_eq!(bearer_token("BEARER  kxp_Ab1 "), Some("kxp_Ab1"));
        assert_eq!(bearer_token("Basic a2V5Og=="), None);
        assert_eq!(bearer_token("Bearer"), None);
        assert_eq!(bearer_token("Bearerkxp_Ab1"), None);
    }
}
