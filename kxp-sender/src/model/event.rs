//! Events, as stored: the exact envelope every attempt sends.

use kxp_verify::TraceParent;
use serde_json::value::RawValue;
use sqlx::FromRow;

use super::account::Account;
use super::ids::{AccountId, EndpointId, EndpointKey, ErasureId, EventId};

/// A stored event.
#[derive(Debug, Clone, FromRow)]
pub(crate) struct Event {
    /// UUIDv4: the receivers' dedup key.
    pub id: EventId,
    /// The owner.
    pub account_id: AccountId,
    /// `payment.succeeded`, …
    pub event_type: String,
    /// The schema version of `data`.
    pub api_version: String,
    /// The exact envelope bytes every attempt sends; '' once the payload is gone.
    pub payload: String,
    /// Unix ms.
    pub created_at: i64,
    /// Hash of the request that created it, when it had an `Idempotency-Key`.
    pub request_hash: Option<String>,
    /// Why the payload is gone, once it is: `erased` or `expired` ([`Event::gone`]).
    pub payload_gone: Option<String>,
    /// The erasure that erased it.
    pub erasure_id: Option<ErasureId>,
}

/// Why an event's payload is no longer held (`kxp_events.payload_gone`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gone {
    /// An erasure by tag erased it.
    Erased,
    /// Its retention passed.
    Expired,
}

impl Gone {
    /// The stored name, which is also the API's [`kxp_api::GoneReason`] and the feed's marker
    /// key.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Gone::Erased => "erased",
            Gone::Expired => "expired",
        }
    }

    /// What a feed item of a gone event carries instead of its body: `{"erased":true}` or
    /// `{"expired":true}`, MACed like any item.
    pub(crate) fn marker(self) -> String {
        format!("{{\"{}\":true}}", self.as_str())
    }
}

impl Gone {
    /// The reason stored as `text`; `None` for anything else (a payload still held).
    pub(crate) fn parse(text: Option<&str>) -> Option<Gone> {
        match text? {
            "erased" => Some(Gone::Erased),
            "expired" => Some(Gone::Expired),
            _ => None,
        }
    }
}

impl Event {
    /// Why its payload is gone, once it is.
    pub(crate) fn gone(&self) -> Option<Gone> {
        Gone::parse(self.payload_gone.as_deref())
    }

    /// What the API answers for the event (`POST /v1/events`, `GET /v1/events/{id}`): the
    /// envelope as receivers get it, or once its payload is gone, the envelope's fields with
    /// `data` null and `gone` saying why.
    pub(crate) fn api_body(&self) -> String {
        let Some(gone) = self.gone() else {
            return self.payload.clone();
        };
        let gone = kxp_api::PayloadGone {
            reason: kxp_api::GoneReason::parse(gone.as_str()),
            erasure_id: self.erasure_id.clone(),
        };
        serde_json::json!({
            "id": self.id,
            "type": self.event_type,
            "api_version": self.api_version,
            "created_at": super::rfc3339(self.created_at),
            "data": null,
            "gone": gone,
        })
        .to_string()
    }
}

/// The result of `POST /v1/events`.
#[derive(Debug)]
pub(crate) enum Ingested {
    /// A new event, and the endpoints it queued a delivery for that is due now (held
    /// deliveries of resting endpoints are queued too, and not listed): whom the workers may
    /// claim for at once.
    Created(Event, Vec<EndpointKey>),
    /// The `Idempotency-Key`, or the id the producer chose, was seen before with the same
    /// request: the original event.
    Replayed(Event),
    /// The `Idempotency-Key` was seen before with a different request, or the id the producer
    /// chose is another event's.
    KeyReused,
}

/// An event to ingest, as `POST /v1/events` checked it: owned, so a batch of ingestions can
/// hold many.
#[derive(Debug, Clone)]
pub(crate) struct Ingest {
    /// The account it is for.
    pub account: Account,
    /// Its type.
    pub event_type: String,
    /// The schema version of `data`.
    pub api_version: String,
    /// `data`, byte for byte as the caller sent it.
    pub data: Box<RawValue>,
    /// The `Idempotency-Key`, if the request had one.
    pub idempotency: Option<String>,
    /// The id the producer chose (checked: a canonical UUID), if it chose one.
    pub id: Option<EventId>,
    /// The SHA-256 (hex) of the request: a repeat under the same key or id answers the first
    /// event only if it is the same request.
    pub request_hash: String,
    /// Its tags, checked, each once (stored beside the event, never in the envelope).
    pub tags: Vec<String>,
    /// Its ordering key, checked (stored beside the event, served in the feed).
    pub ordering_key: Option<String>,
    /// Deliver it to this endpoint only, whatever the endpoint subscribes to (the console's
    /// "send a test event"); `None`: to every endpoint subscribed to its type.
    pub only: Option<EndpointId>,
    /// The trace the event belongs to: the producer's context (`traceparent`, `tracestate`),
    /// else the ingestion span's when traces are exported; stored with the event.
    pub trace: Option<Trace>,
    /// How many days its payload is kept (checked: 1 to [`kxp_api::MAX_RETENTION_DAYS`]);
    /// `None`: as long as the event.
    pub retention_days: Option<u32>,
}

/// The W3C trace context an event is stored with: the parent of its spans.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Trace {
    /// The span the event's spans are children of (`kxp_events.traceparent`).
    pub parent: TraceParent,
    /// The producer's vendor data (`kxp_events.tracestate`): for the sender's own spans,
    /// never forwarded to a merchant.
    pub state: Option<String>,
}

impl Trace {
    /// The context of a request's (or message's) `traceparent` and `tracestate` headers;
    /// `None` unless `traceparent` parses strictly ([`TraceParent::parse`]): an invalid one is
    /// ignored, not refused, and a `tracestate` without it goes with it (W3C).
    pub(crate) fn from_headers(
        traceparent: Option<&str>,
        tracestate: Option<&str>,
    ) -> Option<Trace> {
        Some(Trace {
            parent: TraceParent::parse(traceparent?)?,
            state: tracestate
                .and_then(kxp_verify::tracestate)
                .map(str::to_owned),
        })
    }
}

/// An event in a list: its columns but the envelope, and its tags.
#[derive(Debug, Clone, FromRow)]
pub(crate) struct EventListed {
    /// UUIDv4.
    pub id: EventId,
    /// `payment.succeeded`, …
    pub event_type: String,
    /// The schema version of `data`.
    pub api_version: String,
    /// Unix ms.
    pub created_at: i64,
    /// Its tags, sorted (filled in after the row is read).
    #[sqlx(skip)]
    pub tags: Vec<String>,
}

/// Which of an account's events to list, newest first.
#[derive(Debug, Clone, Default)]
pub(crate) struct EventFilter {
    /// Only events carrying this tag.
    pub tag: Option<String>,
    /// Only events of exactly this type.
    pub event_type: Option<String>,
    /// Only events created at or after this (Unix ms).
    pub since: Option<i64>,
    /// Only events created before this (Unix ms).
    pub until: Option<i64>,
    /// Only events before this one in the list's order: `(created_at, id)` of the last event
    /// of the previous page.
    pub before: Option<(i64, String)>,
}

/// The head of an envelope: what a thin notice carries of it.
#[derive(serde::Deserialize, serde::Serialize)]
struct Head<'a> {
    #[serde(borrow)]
    id: std::borrow::Cow<'a, str>,
    #[serde(rename = "type", borrow)]
    event_type: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    api_version: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    created_at: std::borrow::Cow<'a, str>,
}

/// The thin notice a `thin` endpoint is sent for the envelope `payload`:
/// `{"id","type","api_version","created_at","thin":true}`, the envelope's own values. `None`
/// when `payload` is no envelope (never, for a stored event).
pub(crate) fn thin_notice(payload: &str) -> Option<String> {
    #[derive(serde::Serialize)]
    struct Thin<'a> {
        #[serde(flatten)]
        head: Head<'a>,
        thin: bool,
    }
    let head: Head<'_> = serde_json::from_str(payload).ok()?;
    serde_json::to_string(&Thin { head, thin: true }).ok()
}

#[cfg(test)]
mod tests {
    use super::thin_notice;

    #[test]
    fn a_thin_notice_is_the_envelopes_head_and_nothing_of_its_data() {
        let envelope = r#"{"id":"6f1c2b0e-8d4a-4c1e-9f3b-7a1d2c4e5f62","type":"customer.updated","api_version":"2026-11-01","created_at":"2026-12-05T10:00:00Z","data":{"email":"a\u0040b.example"}}"#;
        assert_eq!(
            thin_notice(envelope).unwrap(),
            r#"{"id":"6f1c2b0e-8d4a-4c1e-9f3b-7a1d2c4e5f62","type":"customer.updated","api_version":"2026-11-01","created_at":"2026-12-05T10:00:00Z","thin":true}"#
        );
        assert_eq!(thin_notice(""), None);
        assert_eq!(thin_notice(r#"{"erased":true}"#), None);
    }
}
