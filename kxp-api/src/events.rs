//! `/v1/events`: what a platform emits, and the envelope receivers get.

use core::fmt;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::ToSchema;

use crate::ids::EventId;
use crate::timestamp::Timestamp;

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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
#[schema(example = json!({"type": "payment.succeeded", "data": {"payment_id": "pay_123", "amount": 4200, "currency": "EUR"}}))]
pub struct NewEvent {
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
}

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
            event_type: event_type.into(),
            data,
            api_version: None,
        }
    }

    /// The same event, of schema version `api_version`.
    pub fn api_version(self, api_version: impl Into<String>) -> NewEvent {
        NewEvent {
            api_version: Some(api_version.into()),
            ..self
        }
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
    /// The payload, byte for byte as it was sent.
    pub data: RawJson,
}
