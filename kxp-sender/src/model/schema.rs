//! Schema versions: a JSON Schema registered per (account, event type, `api_version`).

use super::ids::{AccountId, SchemaId};

/// A registered schema.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Schema {
    /// `sch_…`.
    pub id: SchemaId,
    /// The owner.
    pub account_id: AccountId,
    /// The event type it checks.
    pub event_type: String,
    /// The version it checks.
    pub api_version: String,
    /// The JSON Schema document, as registered.
    pub schema: String,
    /// Changes on every PUT.
    pub revision: String,
    /// Unix milliseconds.
    pub created_at: i64,
    /// Unix milliseconds.
    pub updated_at: i64,
}
