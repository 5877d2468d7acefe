//! `/v1/endpoints`: where an account's events go, and what can be done to one.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use std::collections::BTreeMap;

use crate::credentials::{
    Credential, EndpointAuth, EndpointAuthView, EndpointTls, EndpointTlsView, ServerCertificate,
};
use crate::deliveries::DeliveryStatus;
use crate::ids::{EndpointId, EventId};
use crate::patch::{Patch, present};
use crate::secret::Secret;
use crate::timestamp::Timestamp;

string_enum! {
    /// Whether an endpoint gets deliveries.
    pub enum EndpointStatus {
        /// Deliveries are sent.
        Active = "active",
        /// Paused by the account: deliveries are held (events still create them) until resumed.
        Paused = "paused",
        /// Held like paused, by the sender, after failing for too long; resume re-enables it.
        Disabled = "disabled",
        /// Deleted: only in the answer of `DELETE` (a deleted endpoint answers 404).
        Deleted = "deleted",
    }
}

string_enum! {
    /// How an endpoint gets its events.
    pub enum EndpointMode {
        /// The sender POSTs each event to the endpoint's `url`, with retries (the default).
        Push = "push",
        /// The endpoint has no URL: its receiver reads its events from the endpoint's feed
        /// (`GET /v1/endpoints/{id}/feed`, long-polled with `wait`) and commits how far it got
        /// (`PUT /v1/endpoints/{id}/cursor`). For receivers that accept no inbound traffic, and
        /// for `kxp listen`. Nothing is ever attempted; its deliveries are `unread` until the
        /// cursor passes them, then `delivered`.
        Pull = "pull",
    }
}

/// `push`: what an endpoint is unless told otherwise, and what a server that predates the
/// setting means.
impl Default for EndpointMode {
    fn default() -> EndpointMode {
        EndpointMode::Push
    }
}

string_enum! {
    /// What an endpoint's deliveries carry.
    pub enum PayloadMode {
        /// The whole envelope, `data` included (the default).
        Full = "full",
        /// A thin notice, `{"id","type","api_version","created_at","thin":true}`, signed like
        /// any delivery: the receiver fetches the full envelope with
        /// `GET /v1/endpoints/{id}/events/{event_id}` (the feed's credentials), answered with
        /// the signature headers a full delivery would carry. Less personal data travels and
        /// sits in the receiver's logs; kxp-axum and kxp-actix fetch it for the handler
        /// (`thin_events`). The catch-up feed serves thin items too. Push endpoints only.
        Thin = "thin",
    }
}

/// `full`: what an endpoint's deliveries carry unless told otherwise, and what a server that
/// predates the setting sends.
impl Default for PayloadMode {
    fn default() -> PayloadMode {
        PayloadMode::Full
    }
}

string_enum! {
    /// The endpoint's circuit breaker.
    pub enum CircuitState {
        /// Deliveries flow.
        Closed = "closed",
        /// Too many failures: deliveries are held until the next probe.
        Open = "open",
        /// One probing delivery is in flight; its outcome closes or reopens the circuit.
        HalfOpen = "half_open",
    }
}

string_enum! {
    /// What an endpoint's deliveries are signed with.
    pub enum Signing {
        /// A shared secret: one `v1` (HMAC-SHA256) per live secret (the default).
        Hmac = "hmac",
        /// A private key the sender keeps: one `v1a` (Ed25519) per live key. Merchants hold
        /// only the public key (`GET /v1/endpoints/{id}/public-key`, or the JWKS at
        /// `/jwks/{id}`), so nobody who can read their configuration can forge an event.
        Ed25519 = "ed25519",
        /// Both, for moving a receiver from HMAC to Ed25519. As long as the HMAC secret
        /// exists, whoever holds it can still forge: change to `ed25519` once the receiver
        /// verifies `v1a`.
        Both = "both",
    }
}

/// `hmac`: what an endpoint signs with unless told otherwise, and what a server that predates
/// the setting means.
impl Default for Signing {
    fn default() -> Signing {
        Signing::Hmac
    }
}

impl Signing {
    /// Whether deliveries carry `v1` items.
    pub fn hmac(&self) -> bool {
        matches!(self, Signing::Hmac | Signing::Both)
    }

    /// Whether deliveries carry `v1a` items.
    pub fn ed25519(&self) -> bool {
        matches!(self, Signing::Ed25519 | Signing::Both)
    }
}

string_enum! {
    /// The headers and signed content of an endpoint's deliveries.
    pub enum Format {
        /// `X-Kxp-Signature: t=<t>,v1=<hex>,v1a=<base64>` over `<t>.<body>` (the default).
        Kxp = "kxp",
        /// Standard Webhooks 1.0: `webhook-id` (the event id), `webhook-timestamp` and
        /// `webhook-signature` (`v1,<base64>` and `v1a,<base64>` items) over
        /// `<id>.<timestamp>.<body>`, secrets shown as `whsec_<base64 of 32 bytes>`: what the
        /// `standardwebhooks` packages and Svix's SDKs verify.
        StandardWebhooks = "standard-webhooks",
    }
}

/// `kxp`: what an endpoint is sent unless told otherwise, and what a server that predates the
/// setting means.
impl Default for Format {
    fn default() -> Format {
        Format::Kxp
    }
}

/// An Ed25519 public key in the forms receivers' libraries read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PublicKey {
    /// The standard base64 of the 32 raw bytes: what `kxp_verify::PublicKey::from_base64`
    /// reads.
    pub public_key: String,
    /// The key as a JWK (RFC 8037: `kty` `OKP`, `crv` `Ed25519`, `x` base64url, `kid` its
    /// fingerprint).
    #[schema(value_type = Object)]
    pub jwk: serde_json::Value,
    /// The key as a PEM `PUBLIC KEY` (SubjectPublicKeyInfo), for OpenSSL and most crypto
    /// libraries.
    pub pem: String,
    /// `whpk_` and the base64 of the raw bytes: the Standard Webhooks form.
    pub whpk: String,
}

/// `GET /v1/endpoints/{id}/public-key`: the newest key, and during a rotation's overlap the one
/// it replaces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PublicKeys {
    /// The newest key.
    #[serde(flatten)]
    pub newest: PublicKey,
    /// The previous key while it still signs; `null` otherwise.
    #[schema(required = true)]
    pub previous: Option<PublicKey>,
}

/// An endpoint, as every endpoint route answers it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({
    "id": "ep_0193a0c4c1e07c2e9f3b7a1d2c4e5f61",
    "url": "https://merchant.example/webhooks",
    "mode": "push",
    "temporary": false,
    "payload": "full",
    "description": "orders service",
    "event_types": ["payment.*"],
    "filter": {"data.amount": {"$gte": 10000}, "data.currency": {"$in": ["EUR", "USD"]}},
    "timeout_ms": 5000,
    "status": "active",
    "api_version": null,
    "rate_limit_per_second": null,
    "circuit_state": "closed",
    "signing": "hmac",
    "format": "kxp",
    "encryption_jwk": null,
    "trace_propagation": true,
    "headers": ["X-Gateway-Key"],
    "auth": {
        "type": "oauth2_client_credentials",
        "token_url": "https://auth.merchant.example/oauth/token",
        "client_id": "kxp-webhooks",
        "client_secret": "redacted",
        "scope": "webhooks:write",
        "audience": null,
        "client_auth": "basic"
    },
    "tls": {
        "client_certificate": {
            "subject": "CN=kxp-webhooks",
            "issuer": "CN=Merchant Private CA",
            "not_after": "2027-06-01T00:00:00Z",
            "sha256": "5b0d3c6a6f7e1e0c9f1b7b3c0d2a4e6f8a9b1c3d5e7f90123456789abcdef012"
        },
        "ca_certificates": []
    },
    "server_certificate": {
        "issuer": "CN=R11,O=Let's Encrypt,C=US",
        "not_after": "2027-01-15T08:30:00Z",
        "seen_at": "2026-11-30T01:02:03Z"
    },
    "created_at": "2026-11-30T01:02:03Z",
    "updated_at": "2026-11-30T01:02:03Z"
}))]
pub struct Endpoint {
    /// The endpoint's id.
    pub id: EndpointId,
    /// Where deliveries are POSTed; `null` for a pull endpoint.
    #[schema(required = true)]
    pub url: Option<String>,
    /// `push` (deliveries are POSTed to `url`) or `pull` (the receiver reads the feed).
    #[serde(default)]
    pub mode: EndpointMode,
    /// Made by `kxp listen` for one session: deleted when it ends, and by the server once it
    /// has had no reader for a while.
    #[serde(default)]
    pub temporary: bool,
    /// `full` (the envelope) or `thin` (a notice the receiver fetches the envelope for).
    #[serde(default)]
    pub payload: PayloadMode,
    /// Free text (empty when none was given).
    pub description: String,
    /// Exact event types, or prefixes ending in `*` (`["*"]` for every type).
    pub event_types: Vec<String>,
    /// Which of those events it takes, by their content (see `NewEndpoint::filter`); `null`:
    /// every one.
    #[serde(default)]
    #[schema(value_type = Option<Object>, required = true)]
    pub filter: Option<serde_json::Value>,
    /// The per-attempt timeout, 100 to 30000 ms.
    pub timeout_ms: u64,
    /// Whether it gets deliveries.
    pub status: EndpointStatus,
    /// The `api_version` pinned for this endpoint: it receives only events of that version.
    /// `null`: no pin.
    #[schema(required = true)]
    pub api_version: Option<String>,
    /// Deliveries per second allowed to this endpoint; `null`: the server's default.
    #[schema(required = true)]
    pub rate_limit_per_second: Option<u32>,
    /// The circuit breaker's state.
    pub circuit_state: CircuitState,
    /// What its deliveries are signed with.
    #[serde(default)]
    pub signing: Signing,
    /// The headers and signed content of its deliveries.
    #[serde(default)]
    pub format: Format,
    /// The merchant's public key (a JWK, P-256 or X25519) that each delivery's `data` is
    /// encrypted to, as `data_jwe` (JWE, `ECDH-ES+A256KW` and `A256GCM`); `null`: deliveries
    /// carry `data` in the clear.
    #[serde(default)]
    #[schema(value_type = Option<Object>, required = true)]
    pub encryption_jwk: Option<serde_json::Value>,
    /// Whether each delivery carries a W3C `traceparent` naming its attempt's span, so the
    /// merchant's handler can join the producer's trace (never the producer's `tracestate`).
    #[serde(default = "yes")]
    pub trace_propagation: bool,
    /// The names of the headers each delivery carries beside the sender's own (their values
    /// are write-only).
    #[serde(default)]
    pub headers: Vec<String>,
    /// How the sender authenticates to the endpoint, its credentials `"redacted"`; `null`:
    /// only the signature.
    #[serde(default)]
    #[schema(required = true)]
    pub auth: Option<EndpointAuthView>,
    /// Its client certificate and private CA, if any (the key is write-only).
    #[serde(default)]
    #[schema(required = true)]
    pub tls: Option<EndpointTlsView>,
    /// The endpoint's own certificate as a recent TLS handshake showed it; `null` before the
    /// first, and for `http://` endpoints.
    #[serde(default)]
    #[schema(required = true)]
    pub server_certificate: Option<ServerCertificate>,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
}

/// The answer of `POST /v1/endpoints`: the endpoint and its signing secret, which no other
/// answer shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct EndpointCreated {
    /// The endpoint.
    #[serde(flatten)]
    pub endpoint: Endpoint,
    /// The signing secret, shown only here: hand it to the receiver. `null` for an endpoint
    /// that signs with `ed25519` only.
    #[schema(required = true)]
    pub secret: Option<Secret>,
    /// The public key of an endpoint that signs with Ed25519 (`ed25519` or `both`); `null`
    /// otherwise. It is not secret, and stays readable at `GET /v1/endpoints/{id}/public-key`.
    #[serde(default)]
    #[schema(required = true)]
    pub public_key: Option<PublicKey>,
}

/// `POST /v1/endpoints`. Everything but a push endpoint's `url` has a default; `null` means the
/// default too.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
#[schema(example = json!({
    "url": "https://merchant.example/webhooks",
    "event_types": ["payment.*"],
    "description": "orders service",
    "timeout_ms": 5000
}))]
pub struct NewEndpoint {
    /// `https://` with a host and no credentials (`http://` only on a server in development
    /// mode); a host that is a blocked address is refused. Required for a push endpoint, refused
    /// for a pull one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// `push` (the default) or `pull`: an endpoint without a URL whose receiver reads its feed.
    /// A pull endpoint signs with HMAC (`signing` `hmac`) and takes none of what only an HTTP
    /// attempt uses (`timeout_ms`, `rate_limit_per_second`, `encryption_jwk`, `headers`,
    /// `auth`, `tls`): those are refused (422).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<EndpointMode>,
    /// A pull endpoint for one `kxp listen` session: the server deletes it once no one has read
    /// its feed for a while (10 minutes by default). Push endpoints cannot be temporary.
    #[serde(default, skip_serializing_if = "core::ops::Not::not")]
    pub temporary: bool,
    /// `full` (the default) or `thin`: deliveries carry only the event's id, type, version
    /// and time, and the receiver fetches the envelope ([`PayloadMode::Thin`]). Push
    /// endpoints only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<PayloadMode>,
    /// Exact types or prefixes ending in `*` (letters, digits, `.` `_` `-`); default `["*"]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_types: Option<Vec<String>>,
    /// Takes only the events (of `event_types`) whose content matches: an object whose keys
    /// are dot paths into the event (`type`, `data.amount`, `data.customer.country`, `tags`;
    /// a path starts with `id`, `type`, `api_version`, `created_at`, `data` or `tags`) and
    /// whose values are a literal (equality) or an operator object (`$eq`, `$ne`, `$gt`,
    /// `$gte`, `$lt`, `$lte`, `$in`, `$nin`, `$exists`, `$prefix`), combined with `$and`,
    /// `$or` and `$not`. Numbers compare numerically, strings bytewise, a type mismatch is no
    /// match; a missing field matches only `$exists: false`, `$ne` and `$nin`; an array
    /// matches when any element does (`$ne` and `$nin`: when none does). At most 4 KiB and 8
    /// levels deep; a fault is refused (422) naming its place. An event it does not take
    /// creates no delivery for the endpoint (and takes no sequence number); replays ignore it.
    /// Default: none (`{}` is none too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub filter: Option<serde_json::Value>,
    /// Free text, at most 512 bytes; default empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The per-attempt timeout, 100 to 30000 ms; default the server's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Pins the endpoint to one `api_version` (letters, digits, `.` `_` `-`, at most 64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// 1 to 10000 deliveries per second; default the server's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit_per_second: Option<u32>,
    /// `hmac` (the default), `ed25519` or `both`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signing: Option<Signing>,
    /// `kxp` (the default) or `standard-webhooks`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<Format>,
    /// A public JWK (P-256 with `kty` `EC`, or X25519 with `kty` `OKP`) to encrypt each
    /// delivery's `data` to; a JWK holding its private part (`d`) is refused. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub encryption_jwk: Option<serde_json::Value>,
    /// Whether deliveries carry a W3C `traceparent` (default true); false for a merchant who
    /// must not see it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_propagation: Option<bool>,
    /// Headers each delivery carries (an API gateway's key, a tenant id), at most 20: names
    /// are HTTP tokens, and names the sender sets itself are refused (`Host`, `Content-*`,
    /// hop-by-hop and framing headers, `X-Kxp-*`, `webhook-*`, `traceparent`, `tracestate`,
    /// and `Authorization` beside `auth`). Values are sealed at rest and never shown again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<BTreeMap<String, Credential>>,
    /// How the sender authenticates to the endpoint, beside the signature. Its credentials are
    /// sealed at rest and never shown again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<EndpointAuth>,
    /// A client certificate presented on every attempt, and CA certificates that replace the
    /// public roots for this endpoint. Checked on the way in: a key that does not match its
    /// certificate, an expired certificate or PEM that does not read is refused (422).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<EndpointTls>,
    /// Registers without the challenge (`GET <url>?challenge=<token>`), for a receiver that is
    /// not up yet or does not speak kxp.
    #[serde(default, skip_serializing_if = "core::ops::Not::not")]
    pub skip_challenge: bool,
}

impl NewEndpoint {
    /// A push endpoint at `url`, everything else by default.
    pub fn new(url: impl Into<String>) -> NewEndpoint {
        NewEndpoint {
            url: Some(url.into()),
            mode: None,
            ..NewEndpoint::pull()
        }
    }

    /// This pull endpoint, [temporary](NewEndpoint::temporary): `kxp listen`'s.
    pub fn temporary(mut self) -> NewEndpoint {
        self.temporary = true;
        self
    }

    /// A pull endpoint ([`EndpointMode::Pull`]), everything else by default.
    pub fn pull() -> NewEndpoint {
        NewEndpoint {
            url: None,
            mode: Some(EndpointMode::Pull),
            temporary: false,
            payload: None,
            event_types: None,
            filter: None,
            description: None,
            timeout_ms: None,
            api_version: None,
            rate_limit_per_second: None,
            signing: None,
            format: None,
            encryption_jwk: None,
            trace_propagation: None,
            headers: None,
            auth: None,
            tls: None,
            skip_challenge: false,
        }
    }
}

/// `PATCH /v1/endpoints/{id}`: a field left out stays as it is. `null` clears the two
/// nullable settings (`api_version`, `rate_limit_per_second`) and is refused for the others.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
#[schema(example = json!({"description": "orders service (EU)", "rate_limit_per_second": null}))]
pub struct EndpointPatch {
    /// A new URL, challenged like a new endpoint's unless `skip_challenge`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    #[schema(value_type = String, required = false)]
    pub url: Option<String>,
    /// New event types (for events created from then on).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    #[schema(value_type = Vec<String>, required = false)]
    pub event_types: Option<Vec<String>>,
    /// A new filter (for events created from then on); `null` or `{}` removes it.
    #[serde(default, skip_serializing_if = "Patch::is_unchanged")]
    #[schema(value_type = Option<Object>, required = false)]
    pub filter: Patch<serde_json::Value>,
    /// A new description.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    #[schema(value_type = String, required = false)]
    pub description: Option<String>,
    /// A new timeout, 100 to 30000 ms.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    #[schema(value_type = u64, required = false)]
    pub timeout_ms: Option<u64>,
    /// A new pinned version; `null` removes the pin.
    #[serde(default, skip_serializing_if = "Patch::is_unchanged")]
    #[schema(value_type = Option<String>, required = false)]
    pub api_version: Patch<String>,
    /// A new rate limit; `null` goes back to the server's default.
    #[serde(default, skip_serializing_if = "Patch::is_unchanged")]
    #[schema(value_type = Option<u32>, required = false)]
    pub rate_limit_per_second: Patch<u32>,
    /// What deliveries are signed with from now on: `hmac` → `both` or `ed25519` makes the
    /// endpoint's first Ed25519 key; dropping a kind ends its secrets or keys at once. An
    /// `ed25519` endpoint cannot take up HMAC again (422).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    #[schema(value_type = Signing, required = false)]
    pub signing: Option<Signing>,
    /// A new format is a rotation into it: new secrets (and keys) in the new format's form,
    /// answered once in `rotated`; until the default overlap (24 hours) ends, deliveries carry
    /// both formats' headers, each signed with its own secrets, so a receiver moves over
    /// without a gap. The same format again changes nothing.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    #[schema(value_type = Format, required = false)]
    pub format: Option<Format>,
    /// A new encryption key, used from the next attempt on (pending deliveries and retries
    /// included); `null` stops encrypting.
    #[serde(default, skip_serializing_if = "Patch::is_unchanged")]
    #[schema(value_type = Option<Object>, required = false)]
    pub encryption_jwk: Patch<serde_json::Value>,
    /// Start (`true`) or stop (`false`) sending a `traceparent` with each delivery.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    #[schema(value_type = bool, required = false)]
    pub trace_propagation: Option<bool>,
    /// `full` or `thin`, from the next attempt on (pending deliveries and retries included).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    #[schema(value_type = PayloadMode, required = false)]
    pub payload: Option<PayloadMode>,
    /// Replaces every custom header (values are write-only, so the whole set is sent again);
    /// `null` or `{}` removes them.
    #[serde(default, skip_serializing_if = "Patch::is_unchanged")]
    #[schema(value_type = Option<BTreeMap<String, Credential>>, required = false)]
    pub headers: Patch<BTreeMap<String, Credential>>,
    /// Replaces the authentication, credentials included; `null` removes it.
    #[serde(default, skip_serializing_if = "Patch::is_unchanged")]
    #[schema(value_type = Option<EndpointAuth>, required = false)]
    pub auth: Patch<EndpointAuth>,
    /// Replaces `tls` as a whole (the key is sent again); `null` removes it.
    #[serde(default, skip_serializing_if = "Patch::is_unchanged")]
    #[schema(value_type = Option<EndpointTls>, required = false)]
    pub tls: Patch<EndpointTls>,
    /// Changes the URL without the challenge.
    #[serde(default, skip_serializing_if = "core::ops::Not::not")]
    pub skip_challenge: bool,
}

/// The answer of `PATCH /v1/endpoints/{id}`: the endpoint as changed, and the new secret
/// when the change was a rotation (a new `format`), shown only here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct EndpointUpdated {
    /// The endpoint as it now is.
    #[serde(flatten)]
    pub endpoint: Endpoint,
    /// The rotation a new `format` made; `null` for any other change.
    #[serde(default)]
    #[schema(required = true)]
    pub rotated: Option<SecretRotated>,
}

/// The answer of `DELETE /v1/endpoints/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"id": "ep_0193a0c4c1e07c2e9f3b7a1d2c4e5f61", "status": "deleted", "dead_deliveries": 2}))]
pub struct EndpointDeleted {
    /// The deleted endpoint.
    pub id: EndpointId,
    /// Always `deleted`.
    pub status: EndpointStatus,
    /// The deliveries it was still owed, now `dead` with `last_error: "endpoint_deleted"`.
    pub dead_deliveries: u64,
}

/// `POST /v1/endpoints/{id}/rotate-secret`; the body may also be empty.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
#[schema(example = json!({"overlap": "24h", "expire_old": "when_confirmed"}))]
pub struct RotateSecret {
    /// How long the previous secrets stay valid: a duration such as `"30m"`, `"24h"`, `"7d"`
    /// (units `ms`, `s`, `m`, `h`, `d`), at most `"7d"`; default `"24h"`. `"0s"` retires them
    /// at once (for a leaked secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap: Option<String>,
    /// When the previous secrets stop signing: `after_overlap` (the default) or
    /// `when_confirmed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_old: Option<ExpireOld>,
    /// With `when_confirmed`: how many consecutive deliveries the receiver must verify with the
    /// new secret, 1 to 1000; default 20.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmations: Option<u32>,
}

impl RotateSecret {
    /// A rotation keeping the previous secrets for `overlap` (`"24h"`).
    pub fn overlap(overlap: impl Into<String>) -> RotateSecret {
        RotateSecret {
            overlap: Some(overlap.into()),
            ..RotateSecret::default()
        }
    }

    /// This rotation, ending as soon as the receiver confirms the new secret
    /// ([`ExpireOld::WhenConfirmed`]), its overlap still the upper bound.
    pub fn when_confirmed(mut self) -> RotateSecret {
        self.expire_old = Some(ExpireOld::WhenConfirmed);
        self
    }

    /// This rotation, with `confirmations` consecutive confirmations needed instead of
    /// [`DEFAULT_CONFIRMATIONS`].
    pub fn confirmations(mut self, confirmations: u32) -> RotateSecret {
        self.confirmations = Some(confirmations);
        self
    }
}

/// How many consecutive deliveries the receiver must verify with the new secret (and none with
/// an older one) before a `when_confirmed` rotation retires the older secrets: enough that one
/// instance of a fleet still on the old secret is very likely to have answered one of them.
pub const DEFAULT_CONFIRMATIONS: u32 = 20;

/// The most confirmations a rotation may ask for.
pub const MAX_CONFIRMATIONS: u32 = 1000;

string_enum! {
    /// When a rotation's previous secrets stop signing.
    pub enum ExpireOld {
        /// When the overlap ends, whatever the receiver does (the default).
        AfterOverlap = "after_overlap",
        /// As soon as the receiver has verified `confirmations` consecutive deliveries with the
        /// new secret and none with an older one, as its `X-Kxp-Verified-Key` says; at the
        /// latest when the overlap ends (a receiver that never sends the header falls back to
        /// it). A 2xx without the header, or naming an older secret, starts the count again.
        WhenConfirmed = "when_confirmed",
    }
}

/// One of an endpoint's live signing secrets, by fingerprint: the secret itself is shown only
/// when it is made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SecretState {
    /// `hmac` (a secret) or `ed25519` (a key pair, by its public key).
    #[serde(default)]
    pub kind: Signing,
    /// The headers it signs: during a change of format, the older secrets sign the old
    /// format's.
    #[serde(default)]
    pub format: Format,
    /// The first 8 bytes of SHA-256 of `"kxp-key-id\0"` and the secret (for a key pair, its 32
    /// public-key bytes), in hex: what receivers answer in `X-Kxp-Verified-Key` and the console
    /// shows.
    pub fingerprint: String,
    /// When it was made.
    pub created_at: Timestamp,
    /// When it stops signing; `null`: not before the next rotation.
    #[schema(required = true)]
    pub expires_at: Option<Timestamp>,
    /// When a receiver last said it verified a delivery with it (to the minute, or exactly
    /// during a `when_confirmed` rotation); `null`: never, or the receiver does not send
    /// `X-Kxp-Verified-Key`.
    #[schema(required = true)]
    pub last_verified_at: Option<Timestamp>,
}

string_enum! {
    /// Which secret the receiver verifies with, during a rotation, by its latest confirmation.
    pub enum ReceiverKey {
        /// The new one: the merchant has switched.
        New = "new",
        /// An older one: the merchant has not deployed the new secret yet.
        Old = "old",
        /// No confirmation since the rotation: the receiver does not send
        /// `X-Kxp-Verified-Key`, or nothing was delivered yet.
        Unconfirmed = "unconfirmed",
    }
}

/// A rotation under way that ends when the receiver confirms the new secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Rotation {
    /// Always `when_confirmed`: a rotation that ends with its overlap has nothing to report
    /// beyond the secrets' `expires_at`.
    pub expire_old: ExpireOld,
    /// The new secret's fingerprint.
    pub secret: String,
    /// Consecutive deliveries verified with the new secret so far.
    pub confirmations: u32,
    /// How many end the rotation.
    pub needed: u32,
    /// Which secret the receiver verified its latest delivery with.
    pub receiver: ReceiverKey,
    /// When the older secrets stop signing anyway (the overlap's end).
    pub ends_by: Timestamp,
}

/// `GET /v1/endpoints/{id}`: the endpoint, its live secrets and its rotation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct EndpointDetails {
    /// The endpoint.
    #[serde(flatten)]
    pub endpoint: Endpoint,
    /// Its live signing secrets, newest first (deliveries carry one `v1` each).
    pub secrets: Vec<SecretState>,
    /// The rotation waiting for the receiver's confirmation; `null` when there is none.
    #[schema(required = true)]
    pub rotation: Option<Rotation>,
}

/// The answer of a rotation: the new secret, shown only here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({
    "secret": "4f0c1d9e2b7a3c5d6e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9012a3b4c5d6",
    "public_key": null,
    "previous_expires_at": "2026-12-01T10:00:00Z"
}))]
pub struct SecretRotated {
    /// The new signing secret; deliveries carry one `v1` per live secret, newest first.
    /// `null` for an endpoint that signs with `ed25519` only.
    #[schema(required = true)]
    pub secret: Option<Secret>,
    /// The new public key of an endpoint that signs with Ed25519 (deliveries carry one `v1a`
    /// per live key, newest first); `null` otherwise.
    #[serde(default)]
    #[schema(required = true)]
    pub public_key: Option<PublicKey>,
    /// When the previous secrets stop being valid.
    pub previous_expires_at: Timestamp,
}

/// `POST /v1/endpoints/{id}/replay`: replays the endpoint's finished deliveries; the body may
/// also be empty.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
#[schema(example = json!({"status": "dead", "since": "2026-11-30T00:00:00Z"}))]
pub struct BulkReplay {
    /// `dead` (the default) or `delivered`; `pending` and `delivering` are refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<DeliveryStatus>,
    /// Only deliveries created at or after this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Timestamp>,
    /// Only deliveries created before this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<Timestamp>,
}

impl BulkReplay {
    /// Every delivery of `status` (`dead`, usually).
    pub fn status(status: DeliveryStatus) -> BulkReplay {
        BulkReplay {
            status: Some(status),
            since: None,
            until: None,
        }
    }
}

/// The answer of a bulk replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"queued": 3}))]
pub struct ReplayQueued {
    /// New deliveries queued, one per delivery replayed.
    pub queued: u64,
}

/// `POST /v1/endpoints/{id}/test-filter`: a dry run of a filter over the account's most
/// recent events. Nothing changes; the body may also be empty.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
#[schema(example = json!({"filter": {"data.amount": {"$gte": 10000}}, "limit": 100}))]
pub struct TestFilter {
    /// The filter to try (checked as `filter` on `PATCH` is); left out or `null`, the
    /// endpoint's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub filter: Option<serde_json::Value>,
    /// How many of the account's events to run it on, newest first: 1 to 1000, default 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

impl TestFilter {
    /// A dry run of `filter` (the endpoint's own if `None`) over the `limit` newest events
    /// (100 if `None`).
    pub fn new(filter: Option<serde_json::Value>, limit: Option<u32>) -> TestFilter {
        TestFilter { filter, limit }
    }
}

/// The answer of a dry run: which of the events the filter takes. The filter alone is run:
/// the endpoint's `event_types` and `api_version` are not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"tested": 100, "matched": 2, "matches": ["6f1c2b0e-8d4a-4c1e-9f3b-7a1d2c4e5f62", "0b7d1f6e-3d0a-4c55-9d0e-6d1c2f3a4b5c"]}))]
pub struct FilterTested {
    /// How many events it ran on: fewer than `limit` when the account has fewer, or once the
    /// events read reach 64 MiB of payload (the newest first, so those are the ones run).
    pub tested: u64,
    /// How many it takes.
    pub matched: u64,
    /// The ids of those it takes, newest first.
    pub matches: Vec<EventId>,
}

/// `trace_propagation`'s default when an answer leaves it out (a server from before it).
fn yes() -> bool {
    true
}
