//! `/v1/schemas/{type}/{api_version}`: JSON Schemas that events' `data` is checked against.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::ids::SchemaId;
use crate::timestamp::Timestamp;

/// A registered schema. `PUT` takes the JSON Schema document itself as the body (an object or
/// a boolean, at most 64 KiB, remote `$ref`s refused) and answers this.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({
    "id": "sch_0193a0c4c1e07c2e9f3b7a1d2c4e5f65",
    "type": "payment.succeeded",
    "api_version": "2026-11-01",
    "schema": {"type": "object", "required": ["amount"], "properties": {"amount": {"type": "integer"}}},
    "created_at": "2026-11-30T01:02:03Z",
    "updated_at": "2026-11-30T01:02:03Z"
}))]
pub struct Schema {
    /// The schema's id.
    pub id: SchemaId,
    /// The event type it checks.
    #[serde(rename = "type")]
    pub event_type: String,
    /// The version it checks.
    pub api_version: String,
    /// The JSON Schema document (draft from `$schema`, 2020-12 when absent).
    #[schema(value_type = Object)]
    pub schema: serde_json::Value,
    /// When it was first registered.
    pub created_at: Timestamp,
    /// When it was last replaced.
    pub updated_at: Timestamp,
}

/// The answer of `DELETE /v1/schemas/{type}/{api_version}`: events of that type and version
/// are no longer checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"deleted": true, "type": "payment.succeeded", "api_version": "2026-11-01"}))]
pub struct SchemaDeleted {
    /// Always `true`.
    pub deleted: bool,
    /// The event type.
    #[serde(rename = "type")]
    pub event_type: String,
    /// The version.
    pub api_version: String,
}
