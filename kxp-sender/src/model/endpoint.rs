//! Endpoints: where one account's events are delivered, and what changes them.

use sqlx::FromRow;

use super::ids::{AccountId, EndpointId};
use super::keys::Material;
use super::status::{CircuitState, EndpointStatus};

/// An endpoint: where one account's events are delivered.
#[derive(Debug, Clone, FromRow)]
pub struct Endpoint {
    /// `ep_…`
    pub id: EndpointId,
    /// The owner.
    pub account_id: AccountId,
    /// Where deliveries are POSTed; empty for a pull endpoint, which has none.
    pub url: String,
    /// `push`, or `pull`: its receiver reads the feed, and nothing is attempted.
    #[sqlx(try_from = "String")]
    pub mode: kxp_api::EndpointMode,
    /// A pull endpoint of one `kxp listen` session, removed once no one reads it.
    pub temporary: bool,
    /// `full`, or `thin`: its deliveries carry a notice, and its receiver fetches the event.
    #[sqlx(try_from = "String")]
    pub payload_mode: kxp_api::PayloadMode,
    /// The number a pull endpoint's reader committed last (0: none).
    pub pull_cursor: i64,
    /// When it did (Unix ms).
    pub pull_cursor_at: Option<i64>,
    /// When its feed was last read (Unix ms, written at most once a [`READ_MARK_EVERY`], or a
    /// quarter of the server's `temporary_idle` if that is shorter).
    pub pull_read_at: Option<i64>,
    /// Free text.
    pub description: String,
    /// The event types it subscribes to (stored as a JSON array; `["*"]` for all).
    #[sqlx(try_from = "String")]
    pub event_types: EventTypes,
    /// Per-attempt timeout.
    pub timeout_ms: i64,
    /// `active`; `paused` (deliveries are held, events still queue for it); `disabled` (held
    /// like paused, by the sender, after failing for too long); `deleted` (soft: the row stays
    /// for its deliveries' history, the API answers 404).
    #[sqlx(try_from = "String")]
    pub status: EndpointStatus,
    /// The schema version pinned for this endpoint, if any.
    pub api_version: Option<String>,
    /// Deliveries per second allowed to this endpoint; `None`: the server's default.
    pub rate_limit_per_second: Option<i64>,
    /// The circuit breaker: `closed`, `open` or `half_open` (see the circuit policy).
    #[sqlx(try_from = "String")]
    pub circuit_state: CircuitState,
    /// When the circuit opened (Unix ms), while it is not closed.
    pub circuit_opened_at: Option<i64>,
    /// When an open circuit is probed next (Unix ms).
    pub circuit_probe_at: Option<i64>,
    /// Unix ms.
    pub created_at: i64,
    /// Unix ms.
    pub updated_at: i64,
    /// What the endpoint's deliveries are signed with.
    #[sqlx(try_from = "String")]
    pub signing: kxp_api::Signing,
    /// The form its new secrets and keys take.
    #[sqlx(try_from = "String")]
    pub format: kxp_api::Format,
    /// The public JWK each attempt encrypts `data` to ([`kxp_jwe::EncryptionKey::to_jwk`]);
    /// `None`: in the clear.
    pub encryption_jwk: Option<String>,
    /// The first secret (or key) a `when_confirmed` rotation made, while that rotation is
    /// under way: the rotation's new material is every live row from this id on.
    pub confirm_secret_id: Option<i64>,
    /// How many consecutive deliveries verified with it end the rotation.
    pub confirm_needed: Option<i64>,
    /// How many there have been so far.
    pub confirmations: i64,
    /// Whether each attempt carries a `traceparent` naming its span (false: none at all).
    pub trace_propagation: bool,
    /// What answers show of its credentials ([`CredentialsView`](super::CredentialsView)'s
    /// JSON); `None`: it has none. The credentials themselves are only read by the claim.
    pub credentials_view: Option<String>,
    /// What a recent TLS handshake showed of its own certificate (JSON: issuer, not_after,
    /// seen_at); `None` before the first.
    pub server_certificate: Option<String>,
    /// Its content filter as compact JSON ([`kxp_filter::Filter::to_json`]), checked when it
    /// was written; `None`: it takes every event of its types.
    pub content_filter: Option<String>,
}

/// The `next_attempt_at` of a delivery held for a paused endpoint: past every real time, so
/// held deliveries sit outside the range the claim scans (`next_attempt_at <= now` on the
/// `kxp_deliveries_due` index), however many pile up while the endpoint is paused. Resuming
/// sets them due at once.
pub(crate) const HELD: i64 = i64::MAX;

/// How often a read of a pull endpoint's feed is written down (`pull_read_at`): often enough
/// for health and for removing abandoned temporary endpoints, rarely enough that a reader
/// long-polling in a loop does not write a row per request.
pub(crate) const READ_MARK_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

impl Endpoint {
    /// Whether its receiver reads the feed rather than being sent deliveries.
    pub(crate) fn is_pull(&self) -> bool {
        self.mode == kxp_api::EndpointMode::Pull
    }
}

/// What a new endpoint is made of (all checked by the caller).
#[derive(Debug, Clone)]
pub(crate) struct NewEndpoint<'a> {
    /// Where deliveries go (empty for a pull endpoint).
    pub url: &'a str,
    /// `push` or `pull`.
    pub mode: kxp_api::EndpointMode,
    /// A `kxp listen` session's pull endpoint.
    pub temporary: bool,
    /// `full` or `thin`.
    pub payload_mode: kxp_api::PayloadMode,
    /// Subscribed types.
    pub event_types: &'a [String],
    /// The content filter, as compact JSON (an empty filter is `None`).
    pub content_filter: Option<String>,
    /// Free text.
    pub description: &'a str,
    /// Per-attempt timeout.
    pub timeout_ms: i64,
    /// Pinned schema version.
    pub api_version: Option<&'a str>,
    /// What its deliveries are signed with.
    pub signing: kxp_api::Signing,
    /// Their headers and signed content.
    pub format: kxp_api::Format,
    /// The normalized public JWK to encrypt `data` to.
    pub encryption_jwk: Option<String>,
    /// Rate limit.
    pub rate_limit_per_second: Option<i64>,
    /// Whether attempts carry a `traceparent`.
    pub trace_propagation: bool,
    /// Custom headers, `auth` and `tls` (checked), with what answers show of them: sealed by
    /// the store for the new endpoint.
    pub credentials: Option<(super::Credentials, super::CredentialsView)>,
}

/// Changes to an endpoint: `None` leaves a field as it is; for the two nullable settings,
/// `Some(None)` clears them.
#[derive(Debug, Clone, Default)]
pub(crate) struct EndpointChanges {
    /// A new URL.
    pub url: Option<String>,
    /// New subscribed types.
    pub event_types: Option<Vec<String>>,
    /// A new content filter (`Some(Some)`, compact JSON) or none (`Some(None)`).
    pub content_filter: Option<Option<String>>,
    /// A new description.
    pub description: Option<String>,
    /// A new per-attempt timeout.
    pub timeout_ms: Option<i64>,
    /// Pin (`Some(Some)`) or unpin (`Some(None)`) a schema version.
    pub api_version: Option<Option<String>>,
    /// Set (`Some(Some)`) or lift (`Some(None)`) the rate limit.
    pub rate_limit_per_second: Option<Option<i64>>,
    /// Encrypt to a new key (`Some(Some)`, normalized) or stop encrypting (`Some(None)`).
    pub encryption_jwk: Option<Option<String>>,
    /// Send a `traceparent` with each attempt, or stop.
    pub trace_propagation: Option<bool>,
    /// Send full envelopes or thin notices from now on.
    pub payload_mode: Option<kxp_api::PayloadMode>,
    /// New credentials, sealed for the endpoint (both columns `None`: remove them).
    pub credentials: Option<super::SealedCredentials>,
    /// With `credentials`: the credentials they were merged onto, as stored (`None`: none);
    /// the change applies only while the row still holds them.
    pub credentials_were: Option<Option<String>>,
}

impl EndpointChanges {
    /// Whether nothing would change.
    pub(crate) fn is_empty(&self) -> bool {
        self.url.is_none()
            && self.event_types.is_none()
            && self.content_filter.is_none()
            && self.description.is_none()
            && self.timeout_ms.is_none()
            && self.api_version.is_none()
            && self.rate_limit_per_second.is_none()
            && self.encryption_jwk.is_none()
            && self.trace_propagation.is_none()
            && self.payload_mode.is_none()
            && self.credentials.is_none()
    }
}

/// One of an endpoint's live secrets (or Ed25519 keys), with what receivers said about it (its
/// `Debug` leaves the secret out).
#[derive(Clone, FromRow)]
pub(crate) struct LiveSecret {
    /// Its row: newer secrets have higher ids.
    pub id: i64,
    /// `hmac` or `ed25519`.
    pub kind: String,
    /// The secret, or the key's seed (base64), with its format in its text (`whsec_…`, `sw:…`).
    pub secret: String,
    /// Unix ms.
    pub created_at: i64,
    /// When it stops signing (Unix ms); `None`: not before the next rotation.
    pub expires_at: Option<i64>,
    /// When a receiver last said it verified a delivery with it (Unix ms).
    pub last_verified_at: Option<i64>,
}

impl LiveSecret {
    /// Its material, as a job lists it.
    pub(crate) fn material(&self) -> Option<Material> {
        Material::of_row(&self.kind, &self.secret)
    }

    /// What receivers and the console name it by (of the public key, for a key pair).
    pub(crate) fn fingerprint(&self) -> String {
        self.material()
            .map_or_else(|| "unreadable".to_owned(), |m| m.fingerprint())
    }

    /// Its public key, for an Ed25519 key.
    pub(crate) fn public_key(&self) -> Option<kxp_verify::PublicKey> {
        self.material()?.public_key()
    }
}

impl std::fmt::Debug for LiveSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveSecret")
            .field("id", &self.id)
            .field("fingerprint", &self.fingerprint())
            .field("expires_at", &self.expires_at)
            .field("last_verified_at", &self.last_verified_at)
            .finish_non_exhaustive()
    }
}

/// A new endpoint, with what it signs with: shown once.
#[derive(Debug, Clone)]
pub(crate) struct Created {
    /// The endpoint.
    pub endpoint: Endpoint,
    /// Its HMAC secret, if it signs with HMAC.
    pub secret: Option<String>,
    /// Its Ed25519 public key, if it signs with Ed25519.
    pub public_key: Option<kxp_verify::PublicKey>,
}

/// A secret rotation's result.
#[derive(Debug, Clone)]
pub struct Rotated {
    /// The new secret, shown once (its `Debug` is redacted), for an endpoint that signs with
    /// HMAC.
    pub secret: Option<kxp_api::Secret>,
    /// The new key's public key, for an endpoint that signs with Ed25519.
    pub public_key: Option<kxp_verify::PublicKey>,
    /// When the secrets it replaces stop signing (Unix ms; now, for an overlap of zero).
    pub previous_expires_at: i64,
}

impl Endpoint {
    /// The subscribed types.
    pub fn types(&self) -> &[String] {
        &self.event_types.0
    }

    /// When a new delivery to this endpoint is due: now while it is active with a closed
    /// circuit, else `HELD` (paused, disabled, or its circuit not closed: the probe release or
    /// a resume lets it go). The one rule for ingestion and replays alike.
    pub fn due_for_new_delivery(&self, now: i64) -> i64 {
        due_for_new_delivery(self.status, self.circuit_state, now)
    }

    /// Whether an event of `event_type` goes to this endpoint: `*` takes everything,
    /// `payment.*` every type under `payment.`, anything else only itself.
    pub fn subscribes_to(&self, event_type: &str) -> bool {
        self.event_types.take(event_type)
    }
}

/// What ingestion reads of an endpoint: enough to route an event to it and nothing more, since
/// every event reads all of its account's endpoints (hundreds, for some accounts).
#[derive(Debug, Clone, FromRow)]
pub(crate) struct Subscriber {
    /// `ep_…`
    pub id: EndpointId,
    /// Its status (deleted endpoints are never read as subscribers).
    #[sqlx(try_from = "String")]
    pub status: EndpointStatus,
    /// Its circuit.
    #[sqlx(try_from = "String")]
    pub circuit_state: CircuitState,
    /// The event types it subscribes to.
    #[sqlx(try_from = "String")]
    pub event_types: EventTypes,
    /// The schema version pinned for it, if any.
    pub api_version: Option<String>,
    /// Its content filter as stored (compact JSON): compiled ([`ContentFilter::of`]) only
    /// when its types take the event.
    pub content_filter: Option<String>,
    /// `push` or `pull`.
    #[sqlx(try_from = "String")]
    pub mode: kxp_api::EndpointMode,
}

impl Subscriber {
    /// Whether an event of this type and version goes to it: its types take the type, and a
    /// pinned endpoint takes only events of its version (an unpinned one takes all). Its
    /// content filter is asked apart ([`ContentFilter::takes`]): reading an event's content
    /// costs a parse of `data`, paid only when some endpoint has a filter.
    pub(crate) fn takes(&self, event_type: &str, api_version: &str) -> bool {
        self.event_types.take(event_type)
            && self.api_version.as_deref().is_none_or(|v| v == api_version)
    }

    /// A new delivery's status and when it is due: a push endpoint's is `pending`, due by
    /// [`Endpoint::due_for_new_delivery`]'s rule; a pull endpoint's is `unread` and never due
    /// (nothing is attempted: its reader reads the feed).
    pub(crate) fn new_delivery(&self, now: i64) -> (&'static str, i64) {
        match self.mode {
            kxp_api::EndpointMode::Pull => (UNREAD, HELD),
            _ => (
                "pending",
                due_for_new_delivery(self.status, self.circuit_state, now),
            ),
        }
    }
}

/// The status of a pull endpoint's delivery its reader has not committed past.
pub(crate) const UNREAD: &str = "unread";

/// [`Endpoint::due_for_new_delivery`]'s rule, for any row that has the two states.
fn due_for_new_delivery(status: EndpointStatus, circuit: CircuitState, now: i64) -> i64 {
    if status == EndpointStatus::Active && circuit == CircuitState::Closed {
        now
    } else {
        HELD
    }
}

/// The event types an endpoint subscribes to: `*` takes everything, `payment.*` every type
/// under `payment.`, anything else only itself. Stored as a JSON array; a row that does not
/// hold one subscribes to nothing (as a hand-edited row should not route events anywhere).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EventTypes(pub Vec<String>);

impl EventTypes {
    /// Whether an event of `event_type` goes to an endpoint with these types.
    pub fn take(&self, event_type: &str) -> bool {
        self.0
            .iter()
            .any(|pattern| match pattern.strip_suffix('*') {
                Some(prefix) => event_type.starts_with(prefix),
                None => pattern == event_type,
            })
    }

    /// The JSON array the row stores.
    pub(crate) fn json(&self) -> String {
        serde_json::to_string(&self.0).unwrap_or_else(|_| "[\"*\"]".to_owned())
    }
}

impl From<String> for EventTypes {
    fn from(json: String) -> EventTypes {
        EventTypes(serde_json::from_str(&json).unwrap_or_default())
    }
}

/// An endpoint's content filter, compiled.
#[derive(Debug, Clone, Default)]
pub(crate) enum ContentFilter {
    /// No filter: every event of its types.
    #[default]
    None,
    /// The filter.
    Some(kxp_filter::Filter),
    /// A stored filter this version cannot read (one a newer version wrote, before a
    /// rollback; a hand-edited row): it takes every event, as no filter does. A filter that
    /// took nothing would leave events with no delivery at all; one too many is the lesser
    /// fault, and the merchant's dedup and handler see it as any other event.
    Unreadable,
}

impl ContentFilter {
    /// The filter stored as `stored` (compact JSON; `None`: none).
    pub(crate) fn of(stored: Option<&str>) -> ContentFilter {
        match stored.map(kxp_filter::Filter::from_json) {
            None => ContentFilter::None,
            Some(Ok(filter)) if filter.is_empty() => ContentFilter::None,
            Some(Ok(filter)) => ContentFilter::Some(filter),
            Some(Err(_)) => ContentFilter::Unreadable,
        }
    }

    /// Whether it takes `event`; `None` when the event's content could not be read (numbers
    /// past a float's range, say), which every filter takes, for the reason
    /// [`ContentFilter::Unreadable`] does.
    pub(crate) fn takes(&self, event: Option<&kxp_filter::Event<'_>>) -> bool {
        match (self, event) {
            (ContentFilter::Some(filter), Some(event)) => filter.matches(event),
            _ => true,
        }
    }
}
