//! `GET`/`PATCH /v1/account`: the account, and where its operational notices go.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use serde::{Deserialize, Serialize};

use super::checks::{check_name, check_url};
use super::pagination::{nullable, present};
use super::{ApiError, AppState, Authed, parse};
use crate::engine::mail;
use crate::model::{Account, AccountChanges};

/// `PATCH /v1/account`: a field left out stays as it is; `null` removes the ops URL or the
/// contact address.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AccountPatch {
    #[serde(default, deserialize_with = "present")]
    name: Option<String>,
    #[serde(default, deserialize_with = "present")]
    default_api_version: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    ops_url: Option<Option<String>>,
    #[serde(default, deserialize_with = "nullable")]
    contact_email: Option<Option<String>>,
}

#[derive(Serialize)]
pub(super) struct AccountView {
    #[serde(flatten)]
    account: Account,
    /// Shown once, when the ops URL is set: operational webhooks are signed with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    ops_secret: Option<String>,
}

pub(super) async fn get_account(Authed(account): Authed) -> Json<AccountView> {
    Json(AccountView {
        account,
        ops_secret: None,
    })
}

pub(super) async fn patch_account(
    State(state): State<AppState>,
    Authed(account): Authed,
    body: Bytes,
) -> Result<Json<AccountView>, ApiError> {
    let patch: AccountPatch = parse(&body)?;
    if let Some(name) = &patch.name
        && (name.is_empty() || name.len() > 256)
    {
        return Err(ApiError::invalid("name must be 1 to 256 bytes"));
    }
    if let Some(version) = &patch.default_api_version {
        check_name("default_api_version", version, 64)?;
    }
    // The ops URL obeys the endpoints' rules: https (http only with --dev), no credentials,
    // no address in a blocked range.
    let ops_url = match patch.ops_url {
        Some(Some(url)) => Some(Some(check_url(&url, &state.shared)?.to_string())),
        other => other,
    };
    if let Some(Some(address)) = &patch.contact_email {
        mail::check_address(address)
            .map_err(|e| ApiError::invalid(format!("contact_email: {e}")))?;
    }
    let changes = AccountChanges {
        name: patch.name,
        default_api_version: patch.default_api_version,
        ops_url,
        contact_email: patch.contact_email,
    };
    let (account, ops_secret) = state.db.update_account(&account.id, &changes).await?;
    Ok(Json(AccountView {
        account,
        ops_secret,
    }))
}
