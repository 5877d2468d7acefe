//! Writing an event into the outbox, inside the producer's transaction.

use sqlx::Transaction;

use kxp_api::TraceContext;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

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
    event: NewEvent,
) -> Result<EventId, EmitError> {
    write(tx, event, None).await
}

/// [`emit`] as part of the producer's trace: the row keeps `trace` (its `traceparent` and
/// `tracestate`) inside its stored request, and the relay's `POST /v1/events` carries it, so
/// the sender's spans and the merchant's handler join the trace the producer's transaction
/// ran in, however much later the row is handed off.
pub async fn emit_in_trace<DB: Backend>(
    tx: &mut Transaction<'_, DB>,
    event: NewEvent,
    trace: &TraceContext,
) -> Result<EventId, EmitError> {
    write(tx, event, Some(trace)).await
}

/// A row's stored request when it carries a trace context: the event beside it. (A row without
/// one stores the event alone, as before: the outbox's table never gains a column, and a row
/// written by an earlier version reads the same.)
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Traced<'a> {
    traceparent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tracestate: Option<String>,
    #[serde(borrow)]
    event: &'a RawValue,
}

/// The event a stored request holds, and the trace context it was emitted in, if any.
pub(crate) fn stored(request: &str) -> Result<(NewEvent, Option<TraceContext>), serde_json::Error> {
    match serde_json::from_str::<Traced<'_>>(request) {
        Ok(traced) => {
            let event = serde_json::from_str(traced.event.get())?;
            let trace = TraceContext {
                traceparent: traced.traceparent,
                tracestate: traced.tracestate,
            };
            Ok((event, Some(trace)))
        }
        Err(_) => Ok((serde_json::from_str(request)?, None)),
    }
}

async fn write<DB: Backend>(
    tx: &mut Transaction<'_, DB>,
    mut event: NewEvent,
    trace: Option<&TraceContext>,
) -> Result<EventId, EmitError> {
    let id = match event.id.take() {
        Some(id) if kxp_api::is_event_id(id.as_str()) => id,
        Some(_) => return Err(EmitError::InvalidId),
        None => EventId::from(uuid::Uuid::new_v4().to_string()),
    };
    event.id = Some(id.clone());
    let request = match trace {
        None => serde_json::to_string(&event)?,
        Some(trace) => serde_json::to_string(&Traced {
            traceparent: trace.traceparent.clone(),
            tracestate: trace.tracestate.clone(),
            event: &serde_json::value::to_raw_value(&event)?,
        })?,
    };
    let row = format!("ob_{}", uuid::Uuid::now_v7().simple());
    DB::insert(tx, &row, id.as_str(), &request, crate::relay::now_ms()).await?;
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::{NewEvent, stored};

    #[test]
    fn a_stored_request_keeps_the_events_retention_and_tags() {
        let event = NewEvent::new(
            "customer.updated",
            &serde_json::json!({"email": "a@b.example"}),
        )
        .unwrap()
        .retention_days(7)
        .tags(["customer:cus_9"]);
        let (back, trace) = stored(&serde_json::to_string(&event).unwrap()).unwrap();
        assert_eq!(back.retention_days, Some(7));
        assert_eq!(back.tags, vec!["customer:cus_9".to_owned()]);
        assert!(trace.is_none());
    }
}
