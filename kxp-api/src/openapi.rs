//! The OpenAPI 3.1 description, derived from this crate's types: the server serves it at
//! `GET /v1/openapi.json`, and it is the contract other languages generate clients from.

use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::{
    Account, AccountCreated, AccountPatch, AccountUpdated, Attempt, BulkReplay, CertificateInfo,
    CircuitState, ClientAuth, CommitCursor, Credential, Cursor, Delivery, DeliveryQuery,
    DeliveryStatus, EgressProxyHealth, Endpoint, EndpointAuth, EndpointAuthView, EndpointCreated,
    EndpointDeleted, EndpointDetails, EndpointHealth, EndpointId, EndpointMode, EndpointPatch,
    EndpointStatus, EndpointTls, EndpointTlsView, EndpointUpdated, Erasure, ErasureId,
    ErasureStatus, ErrorBody, ErrorCode, Event, EventId, EventQuery, EventSummary, ExpireOld,
    FeedItem, FeedPage, FeedQuery, FeedToken, FilterTested, Format, GoneReason, HealthWindow,
    ListenToken, NewAccount, NewEndpoint, NewErasure, NewEvent, NewListenToken, NewPortalLink,
    Notification, NotificationChannel, NotificationId, NotificationKind, NotificationStatus, Page,
    PageQuery, PayloadGone, PayloadMode, PortalLink, PortalScope, PublicKey, PublicKeys,
    PullCursor, PullHealth, RawJson, ReceiverKey, Redacted, ReplayQueued, RotateSecret, Rotation,
    Schema, SchemaDeleted, SchemaId, Secret, SecretRotated, SecretState, ServiceHealth, Signing,
    SourceHealth, TestFilter, Timestamp,
};
use crate::{AccountId, CertificateRole, DeliveryId, ExpiringCertificate, ServerCertificate};

/// The document's definition: `ApiDoc::openapi()` (or [`openapi`]) builds it.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "kxp sender API",
        description = include_str!("openapi.md"),
        license(name = "MIT OR Apache-2.0", identifier = "MIT OR Apache-2.0"),
    ),
    components(schemas(
        ErrorBody, ErrorCode,
        AccountId, EndpointId, EventId, DeliveryId, NotificationId, SchemaId, ErasureId, Cursor,
        Timestamp, Secret, RawJson,
        Endpoint, EndpointCreated, NewEndpoint, EndpointPatch, EndpointUpdated, EndpointDeleted,
        EndpointStatus, EndpointMode, PayloadMode, Format,
        CircuitState, RotateSecret, SecretRotated, BulkReplay, ReplayQueued, TestFilter, FilterTested,
        EndpointDetails, SecretState, Rotation, ExpireOld, ReceiverKey, Signing, PublicKey,
        PublicKeys, EndpointAuth, EndpointAuthView, ClientAuth, Credential, Redacted,
        EndpointTls, EndpointTlsView, CertificateInfo, ServerCertificate, CertificateRole,
        ExpiringCertificate,
        EndpointHealth, PullHealth, HealthWindow, ServiceHealth, SourceHealth, EgressProxyHealth,
        NewEvent, Event, EventSummary, EventQuery, PayloadGone, GoneReason,
        NewErasure, Erasure, ErasureStatus,
        Delivery, DeliveryStatus, Attempt, DeliveryQuery,
        FeedPage, FeedItem, FeedQuery, FeedToken, PullCursor, CommitCursor,
        Account, AccountPatch, AccountUpdated, NewAccount, AccountCreated,
        NewPortalLink, PortalLink, PortalScope, NewListenToken, ListenToken,
        Notification, NotificationKind, NotificationChannel, NotificationStatus,
        Schema, SchemaDeleted,
        PageQuery, Page<Endpoint>, Page<Delivery>, Page<Attempt>, Page<Notification>, Page<Schema>,
        Page<Account>, Page<EventSummary>,
    )),
    modifiers(&BearerKey),
    security(("api_key" = [])),
)]
pub struct ApiDoc;

/// The API's OpenAPI document.
pub fn openapi() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

/// `Authorization: Bearer <api key>` on every route (but `/healthz` and `/metrics`).
struct BearerKey;

impl Modify for BearerKey {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "api_key",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}
