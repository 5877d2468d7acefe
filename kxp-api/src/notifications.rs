//! `/v1/notifications`: operational notices (an endpoint's circuit opened, an endpoint was
//! disabled), one row per channel they went to.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::ids::{EndpointId, EventId, NotificationId};
use crate::timestamp::Timestamp;

string_enum! {
    /// What a notice says.
    pub enum NotificationKind {
        /// The endpoint's circuit opened: its deliveries are held until a probe succeeds.
        CircuitOpened = "endpoint.circuit_opened",
        /// The sender disabled the endpoint after it failed for too long.
        Disabled = "endpoint.disabled",
        /// The endpoint's client certificate (`tls`) expires within 30 days.
        CertificateExpiring = "endpoint.certificate_expiring",
        /// The endpoint's own server certificate expires within 14 days (again within 3).
        ServerCertificateExpiring = "endpoint.server_certificate_expiring",
        /// A pull endpoint's reader has not committed for the server's notice window (an
        /// hour by default) while events wait unread: it has stopped reading.
        ReaderStalled = "endpoint.reader_stalled",
        /// Dead deliveries of the endpoint reach the server's dead-letter retention (30 days
        /// by default) within a day: replay them before then, or they are deleted.
        DeadLettersExpiring = "endpoint.dead_letters_expiring",
    }
}

string_enum! {
    /// Where a notice went.
    pub enum NotificationChannel {
        /// A signed operational webhook to the account's `ops_url`.
        Webhook = "webhook",
        /// An e-mail to the account's `contact_email`.
        Email = "email",
    }
}

string_enum! {
    /// How sending the notice went.
    pub enum NotificationStatus {
        /// Not sent yet (or retrying).
        Pending = "pending",
        /// Sent.
        Sent = "sent",
        /// Given up.
        Failed = "failed",
    }
}

/// One notice on one channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({
    "id": "ntf_0193a0c4c1e07c2e9f3b7a1d2c4e5f64",
    "endpoint_id": "ep_0193a0c4c1e07c2e9f3b7a1d2c4e5f61",
    "kind": "endpoint.circuit_opened",
    "channel": "webhook",
    "target": "https://ops.acme.example/kxp",
    "event_id": "0c6f9a1e-3b2d-4f5e-8a7b-1c2d3e4f5a6b",
    "status": "sent",
    "attempts": 1,
    "last_error": null,
    "created_at": "2026-11-30T01:02:03Z"
}))]
pub struct Notification {
    /// The notice's id on this channel.
    pub id: NotificationId,
    /// The endpoint it is about.
    pub endpoint_id: EndpointId,
    /// What it says.
    pub kind: NotificationKind,
    /// Where it went.
    pub channel: NotificationChannel,
    /// The ops URL or the e-mail address.
    pub target: String,
    /// The notice's event id, shared by its channels (`X-Kxp-Event-Id` of the webhook).
    pub event_id: EventId,
    /// How sending it went.
    pub status: NotificationStatus,
    /// Tries so far.
    pub attempts: u32,
    /// Why the last try failed.
    #[schema(required = true)]
    pub last_error: Option<String>,
    /// When it was queued.
    pub created_at: Timestamp,
}
