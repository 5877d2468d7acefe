//! Accounts: the unit of isolation. Every other row belongs to one.

use serde::Serialize;
use sqlx::FromRow;

use super::ids::AccountId;

/// An account: the unit of isolation. Every row below belongs to one.
#[derive(Debug, Clone, FromRow, Serialize)]
pub struct Account {
    /// `acc_…`
    pub id: AccountId,
    /// A human name.
    pub name: String,
    /// The `api_version` events get when they name none.
    pub default_api_version: String,
    /// Where operational webhooks go (an endpoint's circuit opened, an endpoint was disabled).
    pub ops_url: Option<String>,
    /// Where operational e-mails go.
    pub contact_email: Option<String>,
    /// Unix ms.
    #[serde(skip)]
    pub created_at: i64,
}

/// An account as the operators' console lists it: how many endpoints it has, how many of them
/// have an open (or probing) circuit, and how many of its deliveries are dead.
#[derive(Debug, Clone)]
pub(crate) struct AccountOverview {
    /// The account.
    pub account: Account,
    /// Its endpoints (deleted ones left out).
    pub endpoints: i64,
    /// Of which the circuit is not closed.
    pub open_circuits: i64,
    /// Its dead deliveries.
    pub dead: i64,
}

/// Every account as the operators' console lists it, oldest first.
#[derive(Debug, Clone)]
pub(crate) struct AccountsOverview {
    /// The accounts that could be read, with their counts.
    pub accounts: Vec<AccountOverview>,
    /// On Citus, the shards that did not answer (a worker is down): their accounts are missing
    /// from `accounts`. 0 elsewhere.
    pub unanswered_shards: usize,
}

/// Changes to an account: `None` leaves a field as it is; `Some(None)` clears a nullable one.
#[derive(Debug, Clone, Default)]
pub(crate) struct AccountChanges {
    /// A new name.
    pub name: Option<String>,
    /// A new default `api_version`.
    pub default_api_version: Option<String>,
    /// Set (with a new ops secret) or remove the ops URL.
    pub ops_url: Option<Option<String>>,
    /// Set or remove the contact address.
    pub contact_email: Option<Option<String>>,
}

/// The API version a new account starts with.
pub(crate) const DEFAULT_API_VERSION: &str = "2026-11-01";
