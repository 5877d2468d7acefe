//! Events, as stored: the exact envelope every attempt sends.

use sqlx::FromRow;

use super::ids::{AccountId, EventId};

/// A stored event.
#[derive(Debug, Clone, FromRow)]
pub struct Event {
    /// UUIDv4: the receivers' dedup key.
    pub id: EventId,
    /// The owner.
    pub account_id: AccountId,
    /// `payment.succeeded`, …
    pub event_type: String,
    /// The schema version of `data`.
    pub api_version: String,
    /// The exact envelope bytes every attempt sends.
    pub payload: String,
    /// Unix ms.
    pub created_at: i64,
    /// Hash of the request that created it, when it had an `Idempotency-Key`.
    pub request_hash: Option<String>,
}

/// The result of `POST /v1/events`.
#[derive(Debug)]
pub enum Ingested {
    /// A new event, with this many deliveries queued.
    Created(Event, usize),
    /// The `Idempotency-Key` was seen before with the same request: the original event.
    Replayed(Event),
    /// The `Idempotency-Key` was seen before with a different request.
    KeyReused,
}
