//! `POST /v1/portal-links`: a one-time console sign-in URL for the account the request acts
//! for, which the platform's backend hands to the merchant. The token in the URL is stored
//! only as a hash, and neither logged nor shown again.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use kxp_api::{ErrorCode, NewPortalLink, PortalLink, Timestamp};

use super::auth::Authed;
use super::{ApiBody, ApiError, AppState, parse};
use crate::model::now_ms;
use crate::store::NewLink;

/// How long a link works when the request does not say.
pub const DEFAULT_LINK_TTL: Duration = Duration::from_secs(15 * 60);

/// The longest a link may work: a link is a credential until used, so it should not sit in an
/// inbox for days.
pub const MAX_LINK_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// The most links an account may have that are neither used nor expired: far more than
/// people sign in within a day, and a bound on what one key can store.
pub const MAX_UNUSED_PORTAL_LINKS: i64 = 1_000;

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
    let ttl = new
        .ttl_seconds
        .map_or(DEFAULT_LINK_TTL, |s| Duration::from_secs(s.into()));
    if ttl.is_zero() || ttl > MAX_LINK_TTL {
        return Err(ApiError::new(
            ErrorCode::InvalidTtl,
            "`ttl_seconds` must be 1 to 86400 (24 hours)",
        ));
    }
    if !new.scope.is_known() {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "`scope` must be `manage` or `read`",
        ));
    }
    let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
    let created = state
        .db
        .create_portal_link(&account.id, &new.scope, ttl_ms, MAX_UNUSED_PORTAL_LINKS)
        .await?;
    let (token, expires_at) = match created {
        NewLink::Created { token, expires_at } => (token, expires_at),
        NewLink::TooMany { first_expiry } => {
            let wait_ms = u64::try_from(first_expiry.saturating_sub(now_ms())).unwrap_or(0);
            let seconds = wait_ms.div_ceil(1000).max(1);
            return Err(ApiError::new(
                ErrorCode::TooManyPortalLinks,
                format!(
                    "this account has {MAX_UNUSED_PORTAL_LINKS} unused portal links that have not \
                     expired; use one, or retry when the first expires"
                ),
            )
            .retry_after(seconds));
        }
    };
    // Never the token, nor the URL that holds it.
    tracing::info!(
        target: "kxp_sender", account_id = %account.id, scope = %new.scope, expires_at,
        "a portal link was created"
    );
    let origin = state
        .shared
        .config
        .public_url
        .as_deref()
        .unwrap_or_default();
    let link = PortalLink {
        url: format!("{origin}/console/sign-in/{token}"),
        expires_at: Timestamp::from_unix_ms(expires_at),
        scope: new.scope,
    };
    Ok((StatusCode::CREATED, Json(link)).into_response())
}

#[cfg(test)]
mod tests {
    use kxp_api::PortalScope;

    use super::*;

    #[test]
    fn the_default_link_is_a_manage_link_for_15_minutes() {
        assert_eq!(NewPortalLink::default().scope, PortalScope::Manage);
        assert_eq!(DEFAULT_LINK_TTL.as_secs(), 900);
        assert_eq!(MAX_LINK_TTL.as_secs(), 86_400);
    }
}
