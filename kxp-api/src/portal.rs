//! `/v1/portal-links`: one-time sign-in links to the console, which a platform's backend asks
//! for and hands to a merchant (the merchant never sees an API key).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::timestamp::Timestamp;

string_enum! {
    /// What a console session signed in by a portal link may do.
    #[derive(Default)]
    pub enum PortalScope {
        /// Read and change the account's endpoints, events and dead letters (the default).
        #[default]
        Manage = "manage",
        /// Read only: every form that changes something answers 403 (signing out excepted).
        Read = "read",
    }
}

/// `POST /v1/portal-links`: both fields may be left out (`{}`, or no body at all).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
#[schema(example = json!({"scope": "read", "ttl_seconds": 600}))]
pub struct NewPortalLink {
    /// How long the link can be used, 1 to 86,400 seconds (24 h); 900 (15 minutes) when left
    /// out. A longer one is refused with 400 `invalid_ttl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false, minimum = 1, maximum = 86400)]
    pub ttl_seconds: Option<u32>,
    /// What the session it opens may do; `manage` when left out.
    #[serde(default)]
    #[schema(required = false)]
    pub scope: PortalScope,
}

impl NewPortalLink {
    /// A link with this scope and the default lifetime.
    pub fn new(scope: PortalScope) -> NewPortalLink {
        NewPortalLink {
            ttl_seconds: None,
            scope,
        }
    }

    /// The same link, usable for `seconds`.
    pub fn ttl_seconds(self, seconds: u32) -> NewPortalLink {
        NewPortalLink {
            ttl_seconds: Some(seconds),
            ..self
        }
    }
}

/// The answer of `POST /v1/portal-links`. The URL holds the token and works once: send the
/// merchant there now, and do not log it. The server keeps only the token's SHA-256 hash.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PortalLink {
    /// The absolute sign-in URL (`<public url>/console/sign-in/<token>`).
    pub url: String,
    /// When the link stops working, if it was not used before.
    pub expires_at: Timestamp,
    /// What the session it opens may do.
    pub scope: PortalScope,
}

/// The URL is a credential until used: it is not printed.
impl core::fmt::Debug for PortalLink {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PortalLink")
            .field("url", &"[redacted]")
            .field("expires_at", &self.expires_at)
            .field("scope", &self.scope)
            .finish()
    }
}

/// `POST /v1/listen-tokens`: the body may be empty or `{}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
#[schema(example = json!({"ttl_seconds": 3600}))]
pub struct NewListenToken {
    /// How long the token works, 1 to 86,400 seconds (24 h); 28,800 (8 hours, a working day)
    /// when left out. A longer one is refused with 400 `invalid_ttl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false, minimum = 1, maximum = 86400)]
    pub ttl_seconds: Option<u32>,
}

/// A listen token, shown once: `kxp listen --token <token>`. It creates, reads and deletes
/// its account's temporary pull endpoints, and nothing else (403 `forbidden`). The server
/// keeps only its hash. Its `Debug` leaves the token out.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"token": "kxp_lt_5b1e0c…", "expires_at": "2026-11-30T09:02:03Z"}))]
pub struct ListenToken {
    /// `kxp_lt_…`.
    pub token: String,
    /// When it stops working.
    pub expires_at: Timestamp,
}

impl core::fmt::Debug for ListenToken {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ListenToken")
            .field("token", &"[redacted]")
            .field("expires_at", &self.expires_at)
            .finish()
    }
}
