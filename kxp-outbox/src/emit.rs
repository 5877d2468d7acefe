//! Writing an event into the outbox, inside the producer's transaction.

use sqlx::Transaction;

use crate::backend::Backend;
use crate::{EventId, NewEvent};

/// Why [`emit`] wrote nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmitError {
    /// `invalid_id`: the event names an id that is not a UUID in canonical form (lowercase,
    /// hyphenated) or is the nil UUID; the sender would refuse it.
    #[error("invalid_id: an event id is a UUID in lowercase hyphenated form, not the nil UUID")]
    InvalidId,
    /// `encode`: the event could not be serialized.
    #[error("encode: {0}")]
    Encode(#[from] serde_json::Error),
    /// `database`: the insert failed; the caller's transaction should be rolled back (a
    /// commit would keep the business write without its event).
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
}

/// Writes `event` into the outbox **in `tx`**, the producer's own transaction: the event exists
/// if and only if `tx` commits, with whatever else `tx` wrote (the payment the event is about).
/// A [`Relay`](crate::Relay) hands it to the sender after the commit.
///
/// Returns the event's id: the one `event` names ([`NewEvent::id`]), else a new UUIDv4. The
/// sender keeps it, so the producer can store it beside its own row now, and every delivery,
/// the console and `GET /v1/events/{id}` will show the same id.
pub async fn emit<DB: Backend>(
    tx: &mut Transaction<'_, DB>,
    mut event: NewEvent,
) -> Result<EventId, EmitError> {
    let id = match event.id.take() {
        Some(id) if kxp_api::is_event_id(id.as_str()) => id,
        Some(_) => return Err(EmitError::InvalidId),
        None => EventId::from(uuid::Uuid::new_v4().to_string()),
    };
    event.id = Some(id.clone());
    let request = serde_json::to_string(&event)?;
    let row = format!("ob_{}", uuid::Uuid::now_v7().simple());
    DB::insert(tx, &row, id.as_str(), &request, crate::relay::now_ms()).await?;
    Ok(id)
}
