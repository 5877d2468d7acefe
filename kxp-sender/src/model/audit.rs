//! The audit log's entries: a change, who made it, and by which way.

use std::borrow::Cow;

use sqlx::FromRow;

use super::ids::{AccountId, OperatorId};

/// Who made a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Actor {
    /// An operator (console session or operator key).
    Operator {
        /// `op_…`
        id: OperatorId,
        /// Its name.
        name: String,
    },
    /// A merchant's portal session.
    Account {
        /// `acc_…`
        id: AccountId,
        /// The account's name.
        name: String,
    },
}

impl Actor {
    /// `operator` or `account`, as the log's `actor_kind` says.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Actor::Operator { .. } => "operator",
            Actor::Account { .. } => "account",
        }
    }

    /// The actor's id, as the log's `actor_id` holds it.
    pub(crate) fn id(&self) -> &str {
        match self {
            Actor::Operator { id, .. } => id.as_str(),
            Actor::Account { id, .. } => id.as_str(),
        }
    }

    /// The actor's name when it acted.
    pub(crate) fn name(&self) -> &str {
        match self {
            Actor::Operator { name, .. } | Actor::Account { name, .. } => name,
        }
    }
}

/// What a change was. The console's actions are a closed set, so a page cannot record a
/// misspelt one; the API's are its method and route, whatever routes there are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AuditAction {
    /// An operator key's successful call: `POST /v1/endpoints/{id}/pause`.
    Api {
        /// The request's method.
        method: String,
        /// The matched route (its template, not the path: the ids are the entry's target).
        route: String,
    },
    /// A console button.
    Console(ConsoleAction),
}

/// The changes the console makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConsoleAction {
    /// An endpoint registered.
    EndpointCreate,
    /// An endpoint's settings changed.
    EndpointEdit,
    /// An endpoint's custom headers or authentication replaced.
    EndpointCredentials,
    /// An endpoint's content filter set or removed.
    EndpointFilter,
    /// An endpoint paused.
    EndpointPause,
    /// An endpoint resumed.
    EndpointResume,
    /// An endpoint's secret rotated.
    EndpointRotateSecret,
    /// A test event sent to an endpoint.
    EndpointTestEvent,
    /// An endpoint deleted.
    EndpointDelete,
    /// A listen token made ("Listen locally").
    ListenTokenCreate,
    /// An erasure by tag accepted (the target is the erasure; the tag is on its row).
    Erasure,
    /// One delivery replayed.
    DeliveryReplay,
    /// The dead-letter queue (of the account or one endpoint) replayed: `queued` deliveries.
    DeadLettersReplay {
        /// How many replays were queued.
        queued: u64,
    },
}

impl AuditAction {
    /// `console` or `api`: which way the change came.
    pub(crate) fn via(&self) -> &'static str {
        match self {
            AuditAction::Api { .. } => "api",
            AuditAction::Console(_) => "console",
        }
    }

    /// The action as the log's `action` holds it: `endpoint.pause`, or `POST /v1/…`.
    pub(crate) fn text(&self) -> Cow<'static, str> {
        let console = match self {
            AuditAction::Api { method, route } => return format!("{method} {route}").into(),
            AuditAction::Console(action) => action,
        };
        match console {
            ConsoleAction::EndpointCreate => "endpoint.create".into(),
            ConsoleAction::EndpointEdit => "endpoint.edit".into(),
            ConsoleAction::EndpointCredentials => "endpoint.credentials".into(),
            ConsoleAction::EndpointFilter => "endpoint.filter".into(),
            ConsoleAction::EndpointPause => "endpoint.pause".into(),
            ConsoleAction::EndpointResume => "endpoint.resume".into(),
            ConsoleAction::EndpointRotateSecret => "endpoint.rotate_secret".into(),
            ConsoleAction::EndpointTestEvent => "endpoint.test_event".into(),
            ConsoleAction::EndpointDelete => "endpoint.delete".into(),
            ConsoleAction::ListenTokenCreate => "listen_token.create".into(),
            ConsoleAction::Erasure => "erasure.create".into(),
            ConsoleAction::DeliveryReplay => "delivery.replay".into(),
            ConsoleAction::DeadLettersReplay { queued } => {
                format!("dead_letters.replay ({queued} queued)").into()
            }
        }
    }
}

/// A change to record.
#[derive(Debug, Clone)]
pub(crate) struct NewAudit<'a> {
    /// Who.
    pub actor: &'a Actor,
    /// The account acted on, if one.
    pub account_id: Option<&'a AccountId>,
    /// What, and which way ([`AuditAction::via`]).
    pub action: &'a AuditAction,
    /// The object acted on (an id, or the API's path), if one.
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
