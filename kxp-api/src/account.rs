//! `/v1/account`: the caller's account, and where its operational notices go; `/v1/accounts`:
//! the accounts an operator key creates and lists.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::ids::AccountId;
use crate::patch::{Patch, present};
use crate::secret::Secret;

/// The caller's account (`GET /v1/account`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({
    "id": "acc_0193a0c4c1e07c2e9f3b7a1d2c4e5f60",
    "name": "Acme Payments",
    "default_api_version": "2026-11-01",
    "ops_url": null,
    "contact_email": "ops@acme.example"
}))]
pub struct Account {
    /// The account's id.
    pub id: AccountId,
    /// A human name.
    pub name: String,
    /// The `api_version` events get when they name none.
    pub default_api_version: String,
    /// Where operational webhooks go (an endpoint's circuit opened, an endpoint was
    /// disabled); `null`: none.
    #[schema(required = true)]
    pub ops_url: Option<String>,
    /// Where operational e-mails go; `null`: none.
    #[schema(required = true)]
    pub contact_email: Option<String>,
}

/// The answer of `PATCH /v1/account`: the account, and the ops secret when the request set
/// `ops_url` (operational webhooks are signed with it; shown only here).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AccountUpdated {
    /// The account as it now is.
    #[serde(flatten)]
    pub account: Account,
    /// Present only when `ops_url` was set by this request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub ops_secret: Option<Secret>,
}

/// `POST /v1/accounts` (operator keys only): a new account.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
#[schema(example = json!({"name": "Acme Payments"}))]
pub struct NewAccount {
    /// A human name, 1 to 256 bytes: the merchant's, typically.
    pub name: String,
}

impl NewAccount {
    /// An account called `name`.
    pub fn new(name: impl Into<String>) -> NewAccount {
        NewAccount { name: name.into() }
    }
}

/// The answer of `POST /v1/accounts`: the account, and its API key. The key is in this answer
/// only: the server keeps just its SHA-256 hash, so hand it to the merchant now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AccountCreated {
    /// The new account.
    #[serde(flatten)]
    pub account: Account,
    /// The account's API key (`kxp_` and 64 hex digits), for `Authorization: Bearer`.
    pub api_key: Secret,
}

/// `PATCH /v1/account`: a field left out stays as it is; `null` removes the ops URL or the
/// contact address (and is refused for the others).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
#[schema(example = json!({"ops_url": "https://ops.acme.example/kxp", "contact_email": null}))]
pub struct AccountPatch {
    /// A new name, 1 to 256 bytes.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    #[schema(value_type = String, required = false)]
    pub name: Option<String>,
    /// A new default `api_version`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    #[schema(value_type = String, required = false)]
    pub default_api_version: Option<String>,
    /// Where operational webhooks go (the endpoints' URL rules apply); setting it answers a
    /// new `ops_secret`.
    #[serde(default, skip_serializing_if = "Patch::is_unchanged")]
    #[schema(value_type = Option<String>, required = false)]
    pub ops_url: Patch<String>,
    /// Where operational e-mails go.
    #[serde(default, skip_serializing_if = "Patch::is_unchanged")]
    #[schema(value_type = Option<String>, required = false)]
    pub contact_email: Patch<String>,
}
