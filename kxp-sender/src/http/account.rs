//! `GET`/`PATCH /v1/account`: the account, and where its operational notices go.

use axum::Json;
use axum::extract::State;
use kxp_api::{Account, AccountPatch, AccountUpdated};

use super::{ApiBody, ApiError, AppState, Authed, parse};
use crate::app::checks::{check_account_name, check_name, check_url};
use crate::engine::mail;
use crate::model::AccountChanges;

/// The caller's account.
#[utoipa::path(get, path = "/v1/account", tag = "account",
    responses((status = 200, description = "The account", body = Account)))]
pub(super) async fn get_account(Authed(account): Authed) -> Json<Account> {
    Json(Account::from(account))
}

/// Changes the account: a field left out stays as it is; `null` removes the ops URL or the
/// contact address. Setting an ops URL answers, once, the secret its notices are signed with.
#[utoipa::path(patch, path = "/v1/account", tag = "account",
    request_body = AccountPatch,
    responses(
        (status = 200, description = "The account as changed (`ops_secret` when an ops URL was set)", body = AccountUpdated),
        (status = 422, description = "`invalid_request` or `blocked_address`", body = kxp_api::ErrorBody),
    ))]
pub(super) async fn patch_account(
    State(state): State<AppState>,
    Authed(account): Authed,
    ApiBody(body): ApiBody,
) -> Result<Json<AccountUpdated>, ApiError> {
    let patch: AccountPatch = parse(&body)?;
    if let Some(name) = &patch.name {
        check_account_name(name)?;
    }
    if let Some(version) = &patch.default_api_version {
        check_name("default_api_version", version, 64)?;
    }
    // The ops URL obeys the endpoints' rules: https (http only with --dev), no credentials,
    // no address in a blocked range.
    let ops_url = match patch.ops_url.into_option() {
        Some(Some(url)) => Some(Some(check_url(&url, &state.shared)?.to_string())),
        other => other,
    };
    let contact_email = patch.contact_email.into_option();
    if let Some(Some(address)) = &contact_email {
        mail::check_address(address)
            .map_err(|e| ApiError::invalid(format!("contact_email: {e}")))?;
    }
    let changes = AccountChanges {
        name: patch.name,
        default_api_version: patch.default_api_version,
        ops_url,
        contact_email,
    };
    let (account, ops_secret) = state
        .db
        .update_account(
            &account.id,
            &changes,
            state.shared.config.secrets_key.as_ref(),
        )
        .await?;
    Ok(Json(AccountUpdated {
        account: Account::from(account),
        ops_secret: ops_secret.map(Into::into),
    }))
}
