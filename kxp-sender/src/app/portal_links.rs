//! Portal links: one-time console sign-in URLs for an account, which the platform's backend
//! hands to the merchant; and listen tokens, for `kxp listen`. Tokens are stored only as a
//! hash, and neither logged nor shown again.

use std::time::Duration;

use kxp_api::{ListenToken, NewPortalLink, PortalLink, Timestamp};

use super::{AppState, DEFAULT_LINK_TTL, Error, MAX_LINK_TTL, MAX_UNUSED_PORTAL_LINKS};
use crate::model::{Account, now_ms};
use crate::store::NewLink;

/// Creates a portal link for `account`: a `ttl_seconds` of 1 s to [`MAX_LINK_TTL`]
/// ([`DEFAULT_LINK_TTL`] when not given) and a known scope, at most
/// [`MAX_UNUSED_PORTAL_LINKS`] unused ones at a time.
pub(crate) async fn create_portal_link(
    state: &AppState,
    account: &Account,
    new: NewPortalLink,
) -> Result<PortalLink, Error> {
    let ttl = new
        .ttl_seconds
        .map_or(DEFAULT_LINK_TTL, |s| Duration::from_secs(s.into()));
    if ttl.is_zero() || ttl > MAX_LINK_TTL {
        return Err(Error::InvalidTtl);
    }
    if !new.scope.is_known() {
        return Err(Error::invalid("`scope` must be `manage` or `read`"));
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
            return Err(Error::TooManyPortalLinks {
                retry_after: wait_ms.div_ceil(1000).max(1),
            });
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
    Ok(PortalLink {
        url: format!("{origin}/console/sign-in/{token}"),
        expires_at: Timestamp::from_unix_ms(expires_at),
        scope: new.scope,
    })
}

/// How long a listen token works when the request does not say: a working day.
pub(crate) const DEFAULT_LISTEN_TTL: Duration = Duration::from_secs(8 * 60 * 60);

/// Creates a listen token for `account`, working for `ttl_seconds` (1 s to [`MAX_LINK_TTL`],
/// [`DEFAULT_LISTEN_TTL`] when not given): the API's `POST /v1/listen-tokens` and the console's
/// "Listen locally" both come through here.
pub(crate) async fn create_listen_token(
    state: &AppState,
    account: &Account,
    ttl_seconds: Option<u32>,
) -> Result<ListenToken, Error> {
    let ttl = ttl_seconds.map_or(DEFAULT_LISTEN_TTL, |s| Duration::from_secs(s.into()));
    if ttl.is_zero() || ttl > MAX_LINK_TTL {
        return Err(Error::InvalidTtl);
    }
    let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
    let (token, expires_at) = state.db.create_listen_token(&account.id, ttl_ms).await?;
    // Never the token.
    tracing::info!(
        target: "kxp_sender", account_id = %account.id, expires_at, "a listen token was created"
    );
    Ok(ListenToken {
        token,
        expires_at: Timestamp::from_unix_ms(expires_at),
    })
}

#[cfg(test)]
mod tests {
    use kxp_api::{NewPortalLink, PortalScope};

    use super::{DEFAULT_LINK_TTL, MAX_LINK_TTL};

    #[test]
    fn the_default_link_is_a_manage_link_for_15_minutes() {
        assert_eq!(NewPortalLink::default().scope, PortalScope::Manage);
        assert_eq!(DEFAULT_LINK_TTL.as_secs(), 900);
        assert_eq!(MAX_LINK_TTL.as_secs(), 86_400);
    }
}
