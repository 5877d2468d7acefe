//! Deliveries (one event to one endpoint), their attempts, and what a worker holds.

use sqlx::FromRow;

use super::credentials::StoredCredentials;
use super::failure::AttemptError;
use super::ids::{AccountId, DeliveryId, EndpointId, EventId};
use super::status::{CircuitState, DeliveryStatus, EndpointStatus, Transition};

/// A delivery: one event to one endpoint, tried until delivered or dead.
#[derive(Debug, Clone, FromRow)]
pub struct Delivery {
    /// `dlv_…`
    pub id: DeliveryId,
    /// The event.
    pub event_id: EventId,
    /// The endpoint.
    pub endpoint_id: EndpointId,
    /// `pending`, `delivering`, `delivered` or `dead`.
    #[sqlx(try_from = "String")]
    pub status: DeliveryStatus,
    /// Tries so far.
    pub attempts: i64,
    /// Unix ms of the next try (meaningful while pending).
    pub next_attempt_at: i64,
    /// The last try's HTTP status, if it got one.
    pub last_status: Option<i64>,
    /// The last try's error.
    pub last_error: Option<String>,
    /// The delivery that replayed this one, if any.
    pub replayed_by: Option<DeliveryId>,
    /// Unix ms.
    pub created_at: i64,
    /// Unix ms.
    pub updated_at: i64,
    /// Its number in the endpoint's sequence; `None` until the sequencer numbers it.
    pub sequence: Option<i64>,
}

/// One HTTP try.
#[derive(Debug, Clone, FromRow)]
pub struct Attempt {
    /// 1-based.
    pub attempt: i64,
    /// Unix ms.
    pub started_at: i64,
    /// How long it took.
    pub duration_ms: i64,
    /// The response status, if a response came.
    pub status_code: Option<i64>,
    /// What went wrong, if it failed.
    pub error: Option<String>,
    /// The start of the response body.
    pub response_snippet: Option<String>,
    /// The fingerprints of the secrets that signed it ([`kxp_verify::key_fingerprint`]),
    /// comma-separated, newest first; `None` for attempts recorded before they were kept.
    pub signed_with: Option<String>,
    /// The fingerprint of the key the receiver says verified it (`X-Kxp-Verified-Key` on its
    /// 2xx); `None` when it did not say.
    pub verified_key: Option<String>,
}

/// A delivery claimed by a worker, with everything needed to send it: the claim returns it
/// whole, so an attempt reads nothing more before sending.
#[derive(Debug, Clone, FromRow)]
pub(crate) struct Job {
    /// The delivery.
    pub id: DeliveryId,
    /// The event.
    pub event_id: EventId,
    /// The event's type.
    pub event_type: String,
    /// The envelope bytes.
    pub payload: String,
    /// The endpoint.
    pub endpoint_id: EndpointId,
    /// The endpoint's (and so the delivery's) account: what the worker's fair shares count
    /// by, and what every statement about the delivery is scoped by.
    pub account_id: AccountId,
    /// Its URL.
    pub url: String,
    /// Its per-attempt timeout.
    pub timeout_ms: i64,
    /// Tries before this one.
    pub attempts: i64,
    /// The endpoint's status now: only an `active` endpoint's deliveries are sent.
    #[sqlx(try_from = "String")]
    pub endpoint_status: EndpointStatus,
    /// The endpoint's own rate limit, if it has one.
    pub rate_limit_per_second: Option<i64>,
    /// The endpoint's circuit now.
    #[sqlx(try_from = "String")]
    pub circuit_state: CircuitState,
    /// The half-open circuit's probe, if there is one.
    pub circuit_probe_id: Option<DeliveryId>,
    /// The endpoint's live secrets at the claim, newest first: what the attempt signs with,
    /// each with its row id (what a receiver's confirmation names).
    #[sqlx(try_from = "String")]
    pub secrets: Secrets,
    /// Whether a `when_confirmed` rotation was under way at the claim: then every 2xx counts,
    /// with or without a confirmation.
    pub confirming: bool,
    /// The endpoint's encryption key at the claim (a normalized public JWK): the attempt sends
    /// `data_jwe` made with it.
    pub encryption_jwk: Option<String>,
    /// The delivery's number in the endpoint's sequence, for `X-Kxp-Sequence`; `None` if the
    /// sequencer has not numbered it yet (the attempt is never held back for a number).
    pub sequence: Option<i64>,
    /// The producer's W3C `traceparent`, stored with the event: the parent of the attempt's
    /// span. `None` for an event that came without a valid one.
    pub traceparent: Option<String>,
    /// The producer's `tracestate`, for the attempt's span; never sent to the endpoint.
    #[cfg_attr(
        not(feature = "otel"),
        expect(dead_code, reason = "only the attempt's span reads it")
    )]
    pub tracestate: Option<String>,
    /// Whether the endpoint takes a `traceparent` with each attempt.
    pub trace_propagation: bool,
    /// The endpoint's custom headers and `auth` at the claim, as stored.
    #[sqlx(try_from = "String")]
    pub credentials: StoredCredentials,
    /// Whether the endpoint takes thin notices ([`thin_notice`](crate::model::thin_notice))
    /// rather than the envelope.
    pub thin: bool,
    /// Set when the event may not be sent: `erased` (its payload was erased, or a running
    /// erasure covers it) or `expired` (its retention passed). The delivery then ends so,
    /// untried.
    pub withheld: Option<String>,
}

/// An endpoint's live signing secrets, newest first, each as its row id and its stored text,
/// as the claim reads them: one text of comma-separated `<id>:<stored>` (a stored secret or key
/// is hex, base64 or a sealed form, so it never holds a comma).
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct Secrets(pub Vec<(i64, String)>);

impl From<String> for Secrets {
    fn from(joined: String) -> Secrets {
        Secrets(
            joined
                .split(',')
                .filter_map(|item| {
                    let (id, stored) = item.split_once(':')?;
                    Some((id.parse().ok()?, stored.to_owned()))
                })
                .collect(),
        )
    }
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secrets([{} redacted])", self.0.len())
    }
}

impl Job {
    /// Whether the delivery may be sent now: its endpoint is active and its circuit closed, or
    /// this is the half-open circuit's probe. The claim checked the same, but an endpoint can
    /// be paused, or its circuit opened, between the claim and the send.
    pub(crate) fn sendable(&self) -> bool {
        self.endpoint_status == EndpointStatus::Active
            && (self.circuit_state == CircuitState::Closed
                || self.circuit_probe_id.as_ref() == Some(&self.id))
    }
}

/// What a finished attempt does to its delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextState {
    /// 2xx: done.
    Delivered,
    /// Failed; try again at this Unix ms.
    RetryAt(i64),
    /// Failed for the last time.
    Dead,
}

/// A finished attempt, to be recorded: what the store's `finish_attempts`
/// takes, many at a time.
#[derive(Debug, Clone)]
pub struct FinishAttempt {
    /// The delivery.
    pub delivery_id: DeliveryId,
    /// Its endpoint (whose statistics and breaker the attempt moves).
    pub endpoint_id: EndpointId,
    /// Their account: every row the attempt writes is the account's.
    pub account_id: AccountId,
    /// The worker that holds the delivery's lease: nothing is written unless it still does.
    pub owner: String,
    /// The attempt's number (1-based).
    pub attempt: i64,
    /// What happened.
    pub record: AttemptRecord,
    /// What becomes of the delivery.
    pub next: NextState,
    /// What a 2xx says about the endpoint's secrets, when it says anything.
    pub keys: Option<KeyCheck>,
}

impl FinishAttempt {
    /// Its endpoint's key.
    pub(crate) fn endpoint(&self) -> super::EndpointKey {
        super::EndpointKey::new(&self.account_id, &self.endpoint_id)
    }
}

/// What one delivered attempt tells about its endpoint's secrets: which one the receiver
/// verified it with, and whether it counts towards a `when_confirmed` rotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyCheck {
    /// The secret (its row id) whose fingerprint the receiver's `X-Kxp-Verified-Key` named;
    /// `None` when it sent none, or one no secret of the attempt has.
    pub verified: Option<i64>,
    /// Whether a `when_confirmed` rotation was under way at the claim.
    pub confirming: bool,
}

/// What recording a finished attempt did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    /// The attempt and its consequences are recorded.
    Recorded {
        /// The change it made to its endpoint's circuit or status, if any.
        transition: Option<Transition>,
        /// Notifications queued for that change.
        notices: usize,
    },
    /// The lease had been lost: nothing was written.
    LeaseLost,
}

/// A new attempt row.
#[derive(Debug, Clone)]
pub struct AttemptRecord {
    /// Unix ms.
    pub started_at: i64,
    /// How long.
    pub duration_ms: i64,
    /// Response status, if any.
    pub status_code: Option<u16>,
    /// Why it did not deliver, if it did not: stored as its text (`http_503`,
    /// `timeout: …`).
    pub error: Option<AttemptError>,
    /// Start of the response body.
    pub response_snippet: Option<String>,
    /// The fingerprints of the secrets that signed it, comma-separated, newest first.
    pub signed_with: String,
    /// The receiver's `X-Kxp-Verified-Key`, on a 2xx that had one.
    pub verified_key: Option<String>,
}

/// Filters for listing deliveries.
#[derive(Debug, Clone, Default)]
pub struct DeliveryFilter {
    /// Only this status (`dead` lists the dead-letter queue: dead and not yet replayed).
    pub status: Option<String>,
    /// Only this endpoint.
    pub endpoint_id: Option<EndpointId>,
    /// Created at or after (Unix ms).
    pub since: Option<i64>,
    /// Created before (Unix ms).
    pub until: Option<i64>,
    /// Last changed at or before (Unix ms): with `dead`, the deliveries that were dead by then,
    /// so a bulk replay acts on exactly the set a confirmation counted.
    pub dead_by: Option<i64>,
}
