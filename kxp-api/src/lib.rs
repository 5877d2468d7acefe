#![doc = include_str!("../README.md")]
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

// Private modules, one per resource; everything public is re-exported below.
//
// The two shapes the resource modules repeat; first, so their macros are in scope below.
#[macro_use]
mod macros;

mod account;
#[cfg(feature = "client")]
mod client;
mod credentials;
mod deliveries;
mod endpoints;
mod erasures;
mod error;
mod events;
mod feed;
mod health;
mod ids;
mod notifications;
mod openapi;
mod pagination;
mod patch;
mod portal;
mod schemas;
mod secret;
mod timestamp;
mod trace;

// The public interface.
pub use account::{Account, AccountCreated, AccountPatch, AccountUpdated, NewAccount};
#[cfg(feature = "client")]
pub use client::{Client, ClientError};
pub use credentials::{
    CertificateInfo, CertificateRole, ClientAuth, Credential, EndpointAuth, EndpointAuthView,
    EndpointTls, EndpointTlsView, ExpiringCertificate, Redacted, ServerCertificate,
};
pub use deliveries::{Attempt, Delivery, DeliveryQuery, DeliveryStatus};
pub use endpoints::{
    BulkReplay, CircuitState, DEFAULT_CONFIRMATIONS, Endpoint, EndpointCreated, EndpointDeleted,
    EndpointDetails, EndpointMode, EndpointPatch, EndpointStatus, EndpointUpdated, ExpireOld,
    FilterTested, Format, MAX_CONFIRMATIONS, NewEndpoint, PayloadMode, PublicKey, PublicKeys,
    ReceiverKey, ReplayQueued, RotateSecret, Rotation, SecretRotated, SecretState, Signing,
    TestFilter,
};
pub use erasures::{Erasure, ErasureStatus, NewErasure};
pub use error::{ErrorBody, ErrorCode};
pub use events::{
    Event, EventQuery, EventSummary, GoneReason, MAX_ORDERING_KEY_LEN, MAX_RETENTION_DAYS,
    MAX_TAG_LEN, MAX_TAGS, NewEvent, PayloadGone, RawJson, is_event_id, is_ordering_key, is_tag,
};
pub use feed::{
    CommitCursor, DEFAULT_FEED_LIMIT, FeedItem, FeedPage, FeedQuery, FeedToken, MAX_FEED_LIMIT,
    MAX_FEED_WAIT, PullCursor,
};
pub use health::{
    EgressProxyHealth, EndpointHealth, HealthWindow, Probe, PullHealth, ServiceHealth, SourceHealth,
};
pub use ids::{
    AccountId, Cursor, DeliveryId, EndpointId, ErasureId, EventId, NotificationId, OperatorId,
    SchemaId,
};
pub use notifications::{Notification, NotificationChannel, NotificationKind, NotificationStatus};
pub use openapi::{ApiDoc, openapi};
pub use pagination::{Page, PageQuery};
pub use patch::Patch;
pub use portal::{ListenToken, NewListenToken, NewPortalLink, PortalLink, PortalScope};
pub use schemas::{Schema, SchemaDeleted};
pub use secret::Secret;
pub use timestamp::{Timestamp, TimestampError};
pub use trace::{TRACEPARENT, TRACESTATE, TraceContext};

/// The header that makes `POST /v1/events` idempotent.
pub const IDEMPOTENCY_KEY: &str = "Idempotency-Key";

/// The header that names the account an operator key acts for (`X-Kxp-Account: acc_…`).
/// Every route of one account needs it with an operator key (400 `account_required` without
/// it); with an account key it may only name the key's own account (any other answers 404).
pub const ACCOUNT_HEADER: &str = "X-Kxp-Account";
