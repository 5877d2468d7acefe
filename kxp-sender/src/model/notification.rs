//! Operational notifications: the outbox rows that tell a merchant an endpoint is in trouble.

use serde::Serialize;
use sqlx::FromRow;

use super::ids::{AccountId, EndpointId, EventId, NotificationId};
use super::status::{CircuitState, EndpointStatus};

/// One row of the outbox.
#[derive(Debug, Clone, FromRow, Serialize)]
pub struct Notification {
    /// `ntf_…`
    pub id: NotificationId,
    /// The owner.
    #[serde(skip)]
    pub account_id: AccountId,
    /// The endpoint it is about.
    pub endpoint_id: EndpointId,
    /// `endpoint.circuit_opened` or `endpoint.disabled`.
    pub kind: String,
    /// `webhook` or `email`.
    pub channel: String,
    /// The ops URL or the address it goes to.
    pub target: String,
    /// The notice's event id, shared by its channels (`X-Kxp-Event-Id` of the webhook).
    pub event_id: EventId,
    /// The webhook's envelope bytes.
    #[serde(skip)]
    pub payload: String,
    /// `pending`, `sent` or `failed`.
    pub status: String,
    /// Tries so far.
    pub attempts: i64,
    /// Why the last try failed.
    pub last_error: Option<String>,
    /// Unix ms.
    #[serde(skip)]
    pub created_at: i64,
}

/// What a try of a notification leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoticeNext {
    /// Done.
    Sent,
    /// Try again at this Unix ms.
    RetryAt(i64),
    /// The last try failed.
    Failed,
}

/// A certificate a notice announces the expiry of.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct CertificateNotice {
    /// `client` (the certificate the sender presents) or `server` (the endpoint's own).
    pub certificate: kxp_api::CertificateRole,
    /// Its subject, when the sender holds the certificate (the client certificate).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// Its issuer.
    pub issuer: String,
    /// When it expires (RFC 3339).
    pub not_after: String,
    /// Whole days left.
    pub days_left: i64,
}

/// That some of an endpoint's dead deliveries reach the dead-letter retention soon: what the
/// notice `endpoint.dead_letters_expiring` says beside the endpoint.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct DeadLettersNotice {
    /// How many dead deliveries go.
    pub count: u64,
    /// When they go, at the earliest (RFC 3339).
    pub delete_after: String,
}

/// What a notice says beside the endpoint, for the kinds that say more.
#[derive(Debug, Clone, Copy)]
pub(crate) enum NoticeDetail<'a> {
    /// Nothing more.
    None,
    /// A certificate's expiry.
    Certificate(&'a CertificateNotice),
    /// Dead deliveries about to go.
    DeadLetters(&'a DeadLettersNotice),
}

/// The endpoint, account and statistics a notice describes, read in the transaction of the
/// state change it announces.
#[derive(Debug, Clone, FromRow)]
pub(crate) struct NoticeFacts {
    /// The endpoint.
    pub endpoint_id: EndpointId,
    /// Its owner.
    pub account_id: AccountId,
    /// Its URL.
    pub url: String,
    /// Its description.
    pub description: String,
    /// Its status after the change.
    #[sqlx(try_from = "String")]
    pub status: EndpointStatus,
    /// Its circuit after the change.
    #[sqlx(try_from = "String")]
    pub circuit_state: CircuitState,
    /// When an open circuit is probed next (Unix ms).
    pub circuit_probe_at: Option<i64>,
    /// Where operational webhooks go.
    pub ops_url: Option<String>,
    /// Where operational e-mails go.
    pub contact_email: Option<String>,
    /// The account's default `api_version`: the notice's envelope carries it.
    pub default_api_version: String,
    /// Failed attempts since the last success.
    pub consecutive_failures: Option<i64>,
    /// When the current run of failures began (Unix ms).
    pub failing_since: Option<i64>,
    /// The last failed attempt's error.
    pub last_error: Option<String>,
}
