//! An endpoint's credentials (custom headers, `auth`) at rest: sealed like its signing secrets,
//! under their own context, so a sealed document copied onto another endpoint's row, or into a
//! secret's, does not open. [`secrets`](super::secrets)' re-seal and census cover them too.

use crate::model::{AccountId, Credentials, CredentialsView, EndpointId, SealedCredentials};
use crate::store::seal::{KeyRing, OpenError, open_stored, to_stored};
use crate::store::{Db, StoreError, on_db};

/// The same for an endpoint's credentials (custom headers, `auth`).
pub(super) fn credentials_context(endpoint_id: &EndpointId) -> Vec<u8> {
    format!("kxp/endpoint-credentials/{endpoint_id}").into_bytes()
}

/// `credentials` as `endpoint_id`'s row stores them: the document sealed under `ring` (as it is
/// without one), and beside it `view`, what answers show of it. Empty credentials are stored as
/// none.
pub(crate) fn seal_credentials(
    ring: Option<&KeyRing>,
    endpoint_id: &EndpointId,
    credentials: &Credentials,
    view: &CredentialsView,
) -> SealedCredentials {
    if credentials.is_empty() {
        return SealedCredentials::default();
    }
    let json = zeroize::Zeroizing::new(serde_json::to_string(credentials).unwrap_or_default());
    SealedCredentials {
        stored: Some(to_stored(ring, &json, &credentials_context(endpoint_id)).to_string()),
        view: serde_json::to_string(view).ok(),
    }
}

/// An endpoint's credentials as its row stores them, opened: what an attempt presents.
pub(crate) fn open_credentials(
    ring: Option<&KeyRing>,
    endpoint_id: &EndpointId,
    stored: &str,
) -> Result<Credentials, OpenError> {
    let bytes = open_stored(ring, stored, &credentials_context(endpoint_id))?;
    serde_json::from_slice(&bytes).map_err(|_| OpenError::Malformed)
}

impl Db {
    /// The credentials of one of the account's endpoints as stored (`None`: it has none), for a
    /// change that keeps part of them.
    pub(crate) async fn endpoint_credentials(
        &self,
        account_id: &AccountId,
        id: &EndpointId,
    ) -> Result<Option<String>, StoreError> {
        on_db!(self, |pool| {
            sqlx::query_scalar::<_, Option<String>>(
                "SELECT credentials FROM kxp_endpoints WHERE account_id = $1 AND id = $2 AND status <> 'deleted'",
            )
            .bind(account_id)
            .bind(id)
            .fetch_optional(pool)
            .await?
        })
        .ok_or(StoreError::NotFound)
    }
}
