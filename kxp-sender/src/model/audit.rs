//! The audit log's entries: a change, who made it, and by which way.

use sqlx::FromRow;

/// Who made a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Actor {
    /// An operator (console session or operator key).
    Operator {
        /// `op_…`
        id: String,
        /// Its name.
        name: String,
    },
    /// A merchant's portal session.
    Account {
        /// `acc_…`
        id: String,
        /// The account's name.
        name: String,
    },
}

/// A change to record.
#[derive(Debug, Clone)]
pub(crate) struct NewAudit<'a> {
    /// Who.
    pub actor: &'a Actor,
    /// `console` or `api`.
    pub via: &'a str,
    /// The account acted on, if one.
    pub account_id: Option<&'a str>,
    /// What: `endpoint.pause`, or the API's `POST /v1/endpoints/{id}/pause`.
    pub action: &'a str,
    /// The object acted on (an id), if one.
    pub target: Option<&'a str>,
}

/// A recorded change.
#[derive(Debug, Clone, FromRow)]
pub(crate) struct AuditEntry {
    /// `aud_…`, time-ordered.
    pub id: String,
    /// Unix ms.
    pub at: i64,
    /// `operator` or `account`.
    pub actor_kind: String,
    /// `op_…` or `acc_…`.
    pub actor_id: String,
    /// The actor's name when it acted.
    pub actor_name: String,
    /// `console` or `api`.
    pub via: String,
    /// The account acted on.
    pub account_id: Option<String>,
    /// What.
    pub action: String,
    /// On what.
    pub target: Option<String>,
}
