//! `/v1/events`: what a platform emits, and the envelope receivers get.

use core::fmt;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::{IntoParams, ToSchema};

use crate::ids::{Cursor, ErasureId, EventId};
use crate::timestamp::Timestamp;

/// The most tags one event may carry.
pub const MAX_TAGS: usize = 10;

/// The longest tag, in characters (printable ASCII, so bytes too).
pub const MAX_TAG_LEN: usize = 64;

/// Whether `tag` can be an event's tag: 1 to [`MAX_TAG_LEN`] printable ASCII characters
/// without spaces (`!` to `~`), such as `order:1234` or `customer:cus_9`.
pub fn is_tag(tag: &str) -> bool {
    (1..=MAX_TAG_LEN).contains(&tag.len()) && tag.bytes().all(|b| b.is_ascii_graphic())
}

/// The longest ordering key, in characters (printable ASCII, so bytes too).
pub const MAX_ORDERING_KEY_LEN: usize = 128;

/// Whether `key` can be an event's [ordering key](NewEvent::ordering_key): 1 to
/// [`MAX_ORDERING_KEY_LEN`] printable ASCII characters without spaces (`!` to `~`), such as a
/// payment id.
pub fn is_ordering_key(key: &str) -> bool {
    (1..=MAX_ORDERING_KEY_LEN).contains(&key.len()) && key.bytes().all(|b| b.is_ascii_graphic())
}

/// Whether `id` can be an event id a producer chooses ([`NewEvent::id`]): a UUID in its
/// canonical form (36 characters, lowercase hex, hyphens after the 8th, 12th, 16th and 20th
/// digit) other than the nil UUID, so one UUID is never two events by its spelling.
pub fn is_event_id(id: &str) -> bool {
    let bytes = id.as_bytes();
    bytes.len() == 36
        && bytes.iter().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => *b == b'-',
            _ => b.is_ascii_digit() || (b'a'..=b'f').contains(b),
        })
        && bytes.iter().any(|b| !matches!(b, b'0' | b'-'))
}

/// JSON kept byte for byte: an event's `data` goes to receivers exactly as the platform sent
/// it (key order, number spelling, whitespace), and the API shows it the same way. Two values
/// are equal when their texts are.
#[derive(Clone)]
pub struct RawJson(Box<RawValue>);

impl RawJson {
    /// `value` as JSON.
    pub fn from_value<T: Serialize + ?Sized>(value: &T) -> Result<RawJson, serde_json::Error> {
        serde_json::value::to_raw_value(value).map(RawJson)
    }

    /// `text`, checked to be one JSON value and kept as it is.
    pub fn from_string(text: String) -> Result<RawJson, serde_json::Error> {
        RawValue::from_string(text).map(RawJson)
    }

    /// The JSON text.
    pub fn get(&self) -> &str {
        self.0.get()
    }

    /// The JSON as serde_json's raw value, for code that passes it on unread.
    pub fn as_raw(&self) -> &RawValue {
        &self.0
    }

    /// Reads the JSON into a type.
    pub fn parse<'a, T: Deserialize<'a>>(&'a self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.0.get())
    }
}

impl PartialEq for RawJson {
    fn eq(&self, other: &RawJson) -> bool {
        self.get() == other.get()
    }
}

impl Eq for RawJson {}

impl fmt::Debug for RawJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.get())
    }
}

impl fmt::Display for RawJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.get())
    }
}

impl Serialize for RawJson {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for RawJson {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<RawJson, D::Error> {
        Box::<RawValue>::deserialize(deserializer).map(RawJson)
    }
}

impl utoipa::PartialSchema for RawJson {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::schema::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::SchemaType::AnyValue)
            .description(Some(
                "Any JSON value, kept byte for byte as the platform sent it.",
            ))
            .into()
    }
}

impl utoipa::ToSchema for RawJson {}

/// `POST /v1/events`: one event, delivered to every endpoint subscribed to its type. With an
/// `Idempotency-Key` header (1 to 255 printable ASCII characters) a retried request returns
/// the original event, and the same key with another body is refused with 422
/// `idempotency_key_reused`.
///
/// The producer may choose the event's `id` itself (a UUID), to store it beside its own record
/// before the event is sent (what an outbox does): the request is then idempotent on the id as
/// on a key, for as long as the event is retained. Ids, like keys, are unique within the
/// account: the same id in two accounts is two events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
#[schema(example = json!({"type": "payment.succeeded", "data": {"payment_id": "pay_123", "amount": 4200, "currency": "EUR"}, "tags": ["order:1234", "customer:cus_9"]}))]
pub struct NewEvent {
    /// The event's id, chosen by the producer: a UUID in its canonical form (lowercase,
    /// hyphenated) other than the nil UUID; default a new UUIDv4. Sending the same id again
    /// with the same body answers the first request's event; with another body, or an id
    /// another event of the account holds, 422 `idempotency_key_reused`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<EventId>,
    /// The event type (letters, digits, `.` `_` `-`, at most 128), matched against endpoints'
    /// `event_types`.
    #[serde(rename = "type")]
    pub event_type: String,
    /// The payload, delivered byte for byte; checked against the schema registered for its
    /// type and version, if any.
    pub data: RawJson,
    /// The schema version; default the account's `default_api_version`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// The platform's own labels, to find the event by later (`GET /v1/events?tag=…`): at
    /// most 10, each 1 to 64 printable ASCII characters without spaces (`!` to `~`), such as
    /// `order:1234`; a repeated tag counts once. Stored beside the event, never delivered:
    /// the envelope receivers get does not carry them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(max_items = 10)]
    pub tags: Vec<String>,
    /// What the event must stay in order with, such as the payment id: a receiver in ordered
    /// mode (kxp-catchup) hands the events of one key to its handler in the endpoint's sequence
    /// order, so `payment.created` comes before `payment.succeeded`. 1 to 128 printable ASCII
    /// characters without spaces ([`is_ordering_key`]). Stored beside the event and served in
    /// the catch-up feed (`FeedItem::ordering_key`), never in the envelope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 128, min_length = 1)]
    pub ordering_key: Option<String>,
    /// How many days the payload is kept, 1 to 3650 ([`MAX_RETENTION_DAYS`]); default the
    /// server's retention. When they pass, the payload is erased wherever the server holds it
    /// (the event, the receivers' response snippets) and a delivery not made by then ends
    /// `expired`; the event's id, type, times and delivery outcomes stay until the server's
    /// retention removes the event. The payload never outlives the event: a value past the
    /// server's retention changes nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 3650)]
    pub retention_days: Option<u32>,
}

/// The longest [`NewEvent::retention_days`]: ten years.
pub const MAX_RETENTION_DAYS: u32 = 3650;

impl NewEvent {
    /// An event of `event_type` whose `data` is `data` serialized.
    pub fn new<T: Serialize + ?Sized>(
        event_type: impl Into<String>,
        data: &T,
    ) -> Result<NewEvent, serde_json::Error> {
        Ok(NewEvent::raw(event_type, RawJson::from_value(data)?))
    }

    /// An event of `event_type` whose `data` is already JSON.
    pub fn raw(event_type: impl Into<String>, data: RawJson) -> NewEvent {
        NewEvent {
            id: None,
            event_type: event_type.into(),
            data,
            api_version: None,
            tags: Vec::new(),
            ordering_key: None,
            retention_days: None,
        }
    }

    /// The same event, with the id `id` (a UUID the producer chose, see [`NewEvent::id`]).
    pub fn id(self, id: impl Into<EventId>) -> NewEvent {
        NewEvent {
            id: Some(id.into()),
            ..self
        }
    }

    /// The same event, of schema version `api_version`.
    pub fn api_version(self, api_version: impl Into<String>) -> NewEvent {
        NewEvent {
            api_version: Some(api_version.into()),
            ..self
        }
    }

    /// The same event, kept in order with the others of `key` (see [`NewEvent::ordering_key`]).
    pub fn ordering_key(self, key: impl Into<String>) -> NewEvent {
        NewEvent {
            ordering_key: Some(key.into()),
            ..self
        }
    }

    /// The same event, its payload kept `days` days ([`NewEvent::retention_days`]).
    pub fn retention_days(self, days: u32) -> NewEvent {
        NewEvent {
            retention_days: Some(days),
            ..self
        }
    }

    /// The same event, with `tags` added to its tags.
    pub fn tags<I: IntoIterator<Item = T>, T: Into<String>>(mut self, tags: I) -> NewEvent {
        self.tags.extend(tags.into_iter().map(Into::into));
        self
    }
}

/// An event's envelope, exactly as receivers get it (the answer of `POST /v1/events` and
/// `GET /v1/events/{id}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({
    "id": "6f1c2b0e-8d4a-4c1e-9f3b-7a1d2c4e5f62",
    "type": "payment.succeeded",
    "api_version": "2026-11-01",
    "created_at": "2026-11-30T01:02:03Z",
    "data": {"payment_id": "pay_123", "amount": 4200, "currency": "EUR"}
}))]
pub struct Event {
    /// The event's id: receivers deduplicate on it (it is also `X-Kxp-Event-Id`).
    pub id: EventId,
    /// The event type.
    #[serde(rename = "type")]
    pub event_type: String,
    /// The schema version of `data`.
    pub api_version: String,
    /// When it was accepted.
    pub created_at: Timestamp,
    /// The payload, byte for byte as it was sent; `null` once it is gone (`gone` says why).
    pub data: RawJson,
    /// Present only when the payload is no longer held: erased by tag, or past its
    /// `retention_days`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gone: Option<PayloadGone>,
}

string_enum! {
    /// Why an event's payload is no longer held.
    pub enum GoneReason {
        /// An erasure by tag (`POST /v1/erasures`) erased it.
        Erased = "erased",
        /// Its `retention_days` passed.
        Expired = "expired",
    }
}

/// Why, and by what, an event's payload is gone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"reason": "erased", "erasure_id": "er_0193a0c4c1e07c2e9f3b7a1d2c4e5f67"}))]
pub struct PayloadGone {
    /// `erased` or `expired`.
    pub reason: GoneReason,
    /// The erasure, for `erased`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub erasure_id: Option<ErasureId>,
}

/// One event in a list (`GET /v1/events`): what it is and how it is tagged, without its
/// `data` (`GET /v1/events/{id}` answers the envelope).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({
    "id": "6f1c2b0e-8d4a-4c1e-9f3b-7a1d2c4e5f62",
    "type": "payment.succeeded",
    "api_version": "2026-11-01",
    "created_at": "2026-11-30T01:02:03Z",
    "tags": ["customer:cus_9", "order:1234"]
}))]
pub struct EventSummary {
    /// The event's id.
    pub id: EventId,
    /// The event type.
    #[serde(rename = "type")]
    pub event_type: String,
    /// The schema version of its `data`.
    pub api_version: String,
    /// When it was accepted (the envelope's `created_at`).
    pub created_at: Timestamp,
    /// Its tags, sorted, each once; empty when it has none.
    pub tags: Vec<String>,
}

/// `GET /v1/events?…`: filters and paging. The list is newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema, IntoParams)]
#[into_params(parameter_in = Query)]
#[non_exhaustive]
pub struct EventQuery {
    /// Only events carrying this tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(example = "order:1234")]
    pub tag: Option<String>,
    /// Only events of exactly this type.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    #[param(rename = "type", example = "payment.succeeded")]
    pub event_type: Option<String>,
    /// Only events created at or after this RFC 3339 time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(value_type = Option<String>, format = DateTime)]
    pub since: Option<Timestamp>,
    /// Only events created before this RFC 3339 time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(value_type = Option<String>, format = DateTime)]
    pub until: Option<Timestamp>,
    /// The `next_cursor` of the previous page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(value_type = Option<String>)]
    pub cursor: Option<Cursor>,
    /// Items per page, 1 to 500 (default 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
}

impl EventQuery {
    /// The events carrying `tag`.
    pub fn tag(tag: impl Into<String>) -> EventQuery {
        EventQuery {
            tag: Some(tag.into()),
            ..EventQuery::default()
        }
    }

    /// The same query, only events of type `event_type`.
    pub fn event_type(self, event_type: impl Into<String>) -> EventQuery {
        EventQuery {
            event_type: Some(event_type.into()),
            ..self
        }
    }

    /// The same query, only events created at or after `since` and before `until` (either
    /// may be `None`: no bound).
    pub fn between(self, since: Option<Timestamp>, until: Option<Timestamp>) -> EventQuery {
        EventQuery {
            since,
            until,
            ..self
        }
    }

    /// The same query, pages of `limit`.
    pub fn limit(self, limit: u32) -> EventQuery {
        EventQuery {
            limit: Some(limit),
            ..self
        }
    }

    /// The same query from `cursor` on.
    pub fn after(&self, cursor: Option<Cursor>) -> EventQuery {
        EventQuery {
            cursor,
            ..self.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_event_id;

    #[test]
    fn only_canonical_non_nil_uuids_are_event_ids() {
        assert!(is_event_id("0190f1e2-7c3a-7def-8abc-0123456789ab"));
        for id in [
            "0190F1E2-7C3A-7DEF-8ABC-0123456789AB",
            "0190f1e27c3a7def8abc0123456789ab",
            "{0190f1e2-7c3a-7def-8abc-0123456789ab}",
            "urn:uuid:0190f1e2-7c3a-7def-8abc-0123456789ab",
            "0190f1e2-7c3a-7def-8abc-0123456789a",
            "0190f1e2-7c3a-7def-8abc-0123456789ag",
            "0190f1e2+7c3a-7def-8abc-0123456789ab",
            "00000000-0000-0000-0000-000000000000",
            "",
        ] {
            assert!(!is_event_id(id), "{id}");
        }
    }
}
