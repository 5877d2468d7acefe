//! The event envelope, which can only be parsed from a [`Verified`] body.

use alloc::borrow::Cow;
use alloc::string::String;
use core::fmt;

use serde::de::{DeserializeOwned, IgnoredAny};
use serde::{Deserialize, Serialize};

use crate::verify::Verified;

/// A webhook event: `{"id", "type", "api_version", "created_at", "data"}`.
///
/// There is deliberately no `Deserialize` for `Event`: the only way to get one from bytes is
/// [`Verified::parse`], so an unverified body cannot be mistaken for an event. Senders build one
/// with [`Event::new`] and serialize it.
///
/// ```
/// use kxp_verify::{Event, Secret, Signer, Verifier};
///
/// let body = br#"{"id":"5f0c6a52-3d2e-4c1f-9a51-8e2b7f1d9c01","type":"payment.succeeded",
///   "api_version":"2026-11-01","created_at":"2026-11-30T01:02:03Z","data":{"amount":1999}}"#;
/// let signer = Signer::new(Secret::new("whsec")?);
/// let header = signer.sign(1764464523, body).to_string();
///
/// let verifier = Verifier::new(Secret::new("whsec")?);
/// let event: Event = verifier.verify(&header, body, 1764464523)?.parse()?;
/// assert_eq!(event.id(), "5f0c6a52-3d2e-4c1f-9a51-8e2b7f1d9c01");
/// assert_eq!(event.data()["amount"], 1999);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event<T = serde_json::Value> {
    id: String,
    #[serde(rename = "type")]
    event_type: String,
    api_version: String,
    created_at: String,
    data: T,
}

/// The longest event id accepted: ids are dedup keys, and a key has to fit an index.
const MAX_ID_LEN: usize = 255;

impl<T> Event<T> {
    /// An event to send. `id` should be a fresh UUIDv4, kept for every delivery and replay.
    pub fn new(
        id: impl Into<String>,
        event_type: impl Into<String>,
        api_version: impl Into<String>,
        created_at: impl Into<String>,
        data: T,
    ) -> Event<T> {
        Event {
            id: id.into(),
            event_type: event_type.into(),
            api_version: api_version.into(),
            created_at: created_at.into(),
            data,
        }
    }

    /// The event id: the same on every delivery and replay, so it is the dedup key.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The event type, such as `payment.succeeded`.
    pub fn event_type(&self) -> &str {
        &self.event_type
    }

    /// The schema version `data` follows.
    pub fn api_version(&self) -> &str {
        &self.api_version
    }

    /// When the event was created, RFC 3339 in UTC.
    pub fn created_at(&self) -> &str {
        &self.created_at
    }

    /// The payload.
    pub fn data(&self) -> &T {
        &self.data
    }

    /// The payload, by value.
    pub fn into_data(self) -> T {
        self.data
    }
}

#[derive(Deserialize)]
struct Wire<T> {
    id: String,
    #[serde(rename = "type")]
    event_type: String,
    api_version: String,
    created_at: String,
    data: T,
}

/// The envelope of a verified event, read without copying: each field borrows the body unless
/// it holds a JSON escape. `data` is checked to be present and well-formed, not kept.
///
/// This is what a middleware needs before the handler runs (the id to deduplicate and log on,
/// the type to route on), for a fraction of [`Verified::parse`]'s allocations.
///
/// ```
/// use kxp_verify::{Secret, Signer, Verifier};
///
/// let body = br#"{"id":"evt_1","type":"payment.succeeded","api_version":"2026-11-01",
///   "created_at":"2026-11-30T01:02:03Z","data":{"amount":1999}}"#;
/// let header = Signer::new(Secret::new("whsec")?).sign(1764464523, body).to_string();
/// let verified = Verifier::new(Secret::new("whsec")?).verify(&header, body, 1764464523)?;
/// let envelope = verified.envelope()?;
/// assert_eq!(envelope.id(), "evt_1");
/// assert_eq!(envelope.event_type(), "payment.succeeded");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Like [`Event`], it has no `Deserialize`: only a [`Verified`] body gives one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope<'a> {
    id: Cow<'a, str>,
    event_type: Cow<'a, str>,
    api_version: Cow<'a, str>,
    created_at: Cow<'a, str>,
    thin: bool,
}

/// What [`Verified::envelope`] reads: [`Wire`]'s fields in [`Wire`]'s order (serde reports the
/// first missing one), borrowed, with `data` required but skipped, so that it accepts and
/// refuses exactly what `parse` does, with the same errors.
#[derive(Deserialize)]
struct EnvelopeWire<'a> {
    #[serde(borrow)]
    id: Cow<'a, str>,
    #[serde(rename = "type", borrow)]
    event_type: Cow<'a, str>,
    #[serde(borrow)]
    api_version: Cow<'a, str>,
    #[serde(borrow)]
    created_at: Cow<'a, str>,
    #[serde(rename = "data")]
    _data: IgnoredAny,
}

/// A thin notice, `{"id","type","api_version","created_at","thin":true}`: an endpoint with
/// `"payload": "thin"` is sent these, and the receiver fetches the event. Read only once
/// [`EnvelopeWire`] found `data` missing, so a full event is parsed once.
#[derive(Deserialize)]
struct ThinWire<'a> {
    #[serde(borrow)]
    id: Cow<'a, str>,
    #[serde(rename = "type", borrow)]
    event_type: Cow<'a, str>,
    #[serde(borrow)]
    api_version: Cow<'a, str>,
    #[serde(borrow)]
    created_at: Cow<'a, str>,
    thin: bool,
}

impl Envelope<'_> {
    /// Whether this is a thin notice (`"thin": true`, no `data`): an endpoint with `"payload":
    /// "thin"` is sent these, and the receiver fetches the event itself.
    pub fn is_thin(&self) -> bool {
        self.thin
    }

    /// The event id: the dedup key.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The event type, such as `payment.succeeded`.
    pub fn event_type(&self) -> &str {
        &self.event_type
    }

    /// The schema version `data` follows.
    pub fn api_version(&self) -> &str {
        &self.api_version
    }

    /// When the event was created, RFC 3339 in UTC.
    pub fn created_at(&self) -> &str {
        &self.created_at
    }
}

impl<'b> Verified<'b> {
    /// Parses the verified body as an [`Event`] whose `data` is a `T`.
    ///
    /// Unknown top-level fields are ignored (versions evolve by adding fields). The `id` must be
    /// 1 to 255 bytes of printable ASCII.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<Event<T>, EnvelopeError> {
        let wire: Wire<T> = read(self.body())?;
        check_id(&wire.id)?;
        Ok(Event {
            id: wire.id,
            event_type: wire.event_type,
            api_version: wire.api_version,
            created_at: wire.created_at,
            data: wire.data,
        })
    }

    /// Reads the [`Envelope`] of the verified body, borrowing instead of copying: what
    /// [`parse`](Verified::parse) accepts, with its checks and errors, and a thin notice
    /// ([`Envelope::is_thin`]), which `parse` refuses for its missing `data`.
    pub fn envelope(&self) -> Result<Envelope<'b>, EnvelopeError> {
        let envelope = match read::<EnvelopeWire<'b>>(self.body()) {
            Ok(wire) => Envelope {
                id: wire.id,
                event_type: wire.event_type,
                api_version: wire.api_version,
                created_at: wire.created_at,
                thin: false,
            },
            Err(error) if error.reason == Some(MISSING_DATA) => {
                match read::<ThinWire<'b>>(self.body()) {
                    Ok(wire) if wire.thin => Envelope {
                        id: wire.id,
                        event_type: wire.event_type,
                        api_version: wire.api_version,
                        created_at: wire.created_at,
                        thin: true,
                    },
                    // Not a thin notice either: an event without `data`, refused as `parse`
                    // refuses it.
                    _ => return Err(error),
                }
            }
            Err(error) => return Err(error),
        };
        check_id(&envelope.id)?;
        Ok(envelope)
    }
}

/// Deserializes a body that must be a UTF-8 JSON object, with the errors of an envelope.
fn read<'de, W: Deserialize<'de>>(body: &'de [u8]) -> Result<W, EnvelopeError> {
    // serde_json skips the bytes of fields it does not know without checking them, and
    // a derived Deserialize also takes a JSON array; an event is a UTF-8 JSON object.
    let is_object = body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    let Ok(body) = core::str::from_utf8(body) else {
        return Err(EnvelopeError::because(
            EnvelopeErrorKind::InvalidJson,
            "the body is not UTF-8",
        ));
    };
    if !is_object {
        let kind = match serde_json::from_str::<IgnoredAny>(body) {
            Ok(_) => EnvelopeErrorKind::InvalidEnvelope,
            Err(_) => EnvelopeErrorKind::InvalidJson,
        };
        return Err(EnvelopeError::because(
            kind,
            "the body is not a JSON object",
        ));
    }
    // From the `str`: serde_json then does not check the UTF-8 of each string a second time.
    serde_json::from_str(body).map_err(|e| {
        let kind = match e.classify() {
            serde_json::error::Category::Data => EnvelopeErrorKind::InvalidEnvelope,
            _ => EnvelopeErrorKind::InvalidJson,
        };
        EnvelopeError {
            kind,
            line: e.line(),
            column: e.column(),
            reason: missing_field(&e),
        }
    })
}

fn check_id(id: &str) -> Result<(), EnvelopeError> {
    let id_ok =
        !id.is_empty() && id.len() <= MAX_ID_LEN && id.bytes().all(|b| (b'!'..=b'~').contains(&b));
    if id_ok {
        Ok(())
    } else {
        Err(EnvelopeError::because(
            EnvelopeErrorKind::InvalidEnvelope,
            "`id` must be 1 to 255 bytes of printable ASCII",
        ))
    }
}

/// The reason of an event without `data`, which [`Verified::envelope`] then reads as a thin
/// notice.
const MISSING_DATA: &str = "missing field `data`";

/// Names the missing envelope field, if that is what went wrong. serde_json's other messages
/// can quote the body, so only this one is passed on.
fn missing_field(error: &serde_json::Error) -> Option<&'static str> {
    use alloc::string::ToString;
    let message = error.to_string();
    [
        "missing field `id`",
        "missing field `type`",
        "missing field `api_version`",
        "missing field `created_at`",
        MISSING_DATA,
    ]
    .into_iter()
    .find(|reason| message.starts_with(reason))
}

/// The stable name of an envelope failure (a receiver answers 400 with it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EnvelopeErrorKind {
    /// `invalid_json`: the verified body is not JSON.
    InvalidJson,
    /// `invalid_envelope`: JSON, but not an event: a field is missing or of the wrong type, or
    /// the `id` is unusable.
    InvalidEnvelope,
}

impl EnvelopeErrorKind {
    /// The stable snake_case name.
    pub const fn as_str(self) -> &'static str {
        match self {
            EnvelopeErrorKind::InvalidJson => "invalid_json",
            EnvelopeErrorKind::InvalidEnvelope => "invalid_envelope",
        }
    }
}

/// A verified body that is not a valid event.
///
/// It gives the position but never quotes the body: payment payloads can carry personal data,
/// and this error ends up in logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvelopeError {
    kind: EnvelopeErrorKind,
    line: usize,
    column: usize,
    reason: Option<&'static str>,
}

impl EnvelopeError {
    fn because(kind: EnvelopeErrorKind, reason: &'static str) -> EnvelopeError {
        EnvelopeError {
            kind,
            line: 0,
            column: 0,
            reason: Some(reason),
        }
    }

    /// The stable kind.
    pub fn kind(&self) -> EnvelopeErrorKind {
        self.kind
    }
}

impl fmt::Display for EnvelopeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind.as_str())?;
        match self.reason {
            Some(reason) => write!(f, ": {reason}"),
            None => write!(f, ": at line {} column {}", self.line, self.column),
        }
    }
}

impl core::error::Error for EnvelopeError {}
