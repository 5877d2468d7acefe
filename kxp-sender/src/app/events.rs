//! Taking an event in: every check `POST /v1/events` makes (the body, the schema, the tags,
//! the idempotency key), the backlog's backpressure, then the store. The API and the broker
//! sources both come through [`accept`], so a message on a queue is held to exactly what a
//! request is.

use kxp_api::{
    EventId, MAX_RETENTION_DAYS, MAX_TAGS, NewEvent, is_event_id, is_ordering_key, is_tag,
};
use serde_json::value::RawValue;

use super::checks::{check_name, check_unicode, parse};
use super::{AppState, Error};
use crate::engine::backlog::Admission;
use crate::engine::traces::{self, Source};
use crate::model::{Account, Ingest, Ingested, Trace, sha256_hex};

/// Whether `key` can be an idempotency key: 1 to 255 printable ASCII characters.
pub(crate) fn is_idempotency_key(key: &str) -> bool {
    (1..=255).contains(&key.len()) && key.bytes().all(|b| b.is_ascii_graphic())
}

/// An event taken in by [`accept`].
pub(crate) struct Accepted {
    /// Its id.
    pub id: EventId,
    /// Its type.
    pub event_type: String,
    /// The envelope, byte for byte as receivers get it.
    pub payload: String,
    /// Whether this call stored it (false: an earlier request with the same idempotency key
    /// did).
    pub created: bool,
}

/// Takes in one event from `body` (what `POST /v1/events` is sent) for `account`, idempotent
/// on `key` ([`is_idempotency_key`]): every check, the backlog's backpressure
/// ([`Error::BacklogFull`], nothing stored), then the store. `producer` is the request's (or
/// message's) trace context, if it had a valid one: the ingestion's span from `source` is its
/// child, and the event keeps it (else, when traces are exported, that span's own context, so
/// that the event's attempts join the ingestion's trace).
pub(crate) async fn accept(
    state: &AppState,
    account: &Account,
    body: &[u8],
    key: Option<&str>,
    producer: Option<Trace>,
    source: Source,
) -> Result<Accepted, Error> {
    let span = state.shared.traces.ingest(producer.as_ref(), source);
    let trace = producer.or_else(|| {
        span.traceparent().map(|parent| Trace {
            parent,
            state: None,
        })
    });
    let accepted = take_in(state, account, body, key, trace).await;
    let ended = match &accepted {
        Ok(a) if a.created => traces::Ingested::Created { id: a.id.as_str() },
        Ok(a) => traces::Ingested::Replayed { id: a.id.as_str() },
        Err(e) => traces::Ingested::Refused { code: e.code() },
    };
    span.end_ingest(ended, accepted.as_ref().ok().map(|a| a.event_type.as_str()));
    accepted
}

/// [`accept`], once the span is started.
async fn take_in(
    state: &AppState,
    account: &Account,
    body: &[u8],
    key: Option<&str>,
    trace: Option<Trace>,
) -> Result<Accepted, Error> {
    let new: NewEvent = parse(body)?;
    check_name("type", &new.event_type, 128)?;
    let data = new.data.as_raw().get();
    let limit = state.shared.config.max_event_data;
    if data.len() > limit {
        return Err(Error::TooLarge(format!(
            "data is {} bytes of JSON; this server's limit is {limit} (receivers accept \
             bodies up to 1 MiB by default)",
            data.len()
        )));
    }
    check_unicode("data", data)?;
    let api_version = new
        .api_version
        .unwrap_or_else(|| account.default_api_version.clone());
    check_name("api_version", &api_version, 64)?;
    let tags = check_tags(&new.tags)?;
    if let Some(key) = &new.ordering_key
        && !is_ordering_key(key)
    {
        return Err(Error::invalid(
            "ordering_key must be 1 to 128 printable ASCII characters without spaces (`!` to \
             `~`), such as pay_123",
        ));
    }
    if let Some(days) = new.retention_days
        && !(1..=MAX_RETENTION_DAYS).contains(&days)
    {
        return Err(Error::invalid(format!(
            "retention_days must be 1 to {MAX_RETENTION_DAYS} (days the payload is kept)"
        )));
    }
    check_schema(
        state,
        account,
        &new.event_type,
        &api_version,
        new.data.as_raw(),
    )
    .await?;
    let item = Ingest {
        account: account.clone(),
        event_type: new.event_type.clone(),
        api_version: api_version.clone(),
        data: new.data.as_raw().to_owned(),
        idempotency: key.map(str::to_owned),
        id: new.id.as_ref().map(check_event_id).transpose()?,
        request_hash: sha256_hex(body),
        tags,
        ordering_key: new.ordering_key.clone(),
        only: None,
        trace,
        retention_days: new.retention_days,
    };
    let ingested = match state.shared.backlog.admit(&state.db, &account.id).await? {
        Admission::Admit => state.shared.ingester.ingest(item).await?,
        Admission::Full(due) => {
            let before = if item.idempotency.is_some() || item.id.is_some() {
                state.db.ingested_before(&item).await?
            } else {
                None
            };
            before.ok_or_else(|| {
                state.shared.metrics.ingest_refused();
                Error::BacklogFull(format!(
                    "{due} deliveries of this account are due and waiting (limit {}); nothing \
                     was stored, retry later",
                    state.shared.backlog.limit()
                ))
            })?
        }
    };
    match ingested {
        Ingested::Created(event, due_to) => {
            state.shared.metrics.event_ingested();
            state.shared.backlog.queued(&account.id, due_to.len());
            state.shared.wake_for(due_to);
            Ok(Accepted {
                id: event.id,
                event_type: event.event_type,
                payload: event.payload,
                created: true,
            })
        }
        Ingested::Replayed(event) => {
            // The retry of a request accepted before its payload was erased or expired answers
            // the event as it is now.
            let payload = event.api_body();
            Ok(Accepted {
                id: event.id,
                event_type: event.event_type,
                payload,
                created: false,
            })
        }
        Ingested::KeyReused => Err(Error::KeyReused),
    }
}

/// The id a producer chose for its event, checked ([`is_event_id`]).
fn check_event_id(id: &EventId) -> Result<EventId, Error> {
    if is_event_id(id.as_str()) {
        Ok(id.clone())
    } else {
        Err(Error::invalid(
            "id must be a UUID in lowercase hyphenated form (such as \
             6f1c2b0e-8d4a-4c1e-9f3b-7a1d2c4e5f62), not the nil UUID",
        ))
    }
}

/// An event's `tags`, checked: at most [`MAX_TAGS`] entries, each a tag ([`is_tag`]: 1 to
/// [`MAX_TAG_LEN`](kxp_api::MAX_TAG_LEN) printable ASCII characters without spaces); returned
/// sorted, each once.
fn check_tags(tags: &[String]) -> Result<Vec<String>, Error> {
    if tags.len() > MAX_TAGS {
        return Err(Error::invalid(format!(
            "tags holds {} entries; an event has at most {MAX_TAGS}",
            tags.len()
        )));
    }
    if let Some(at) = tags.iter().position(|tag| !is_tag(tag)) {
        return Err(Error::invalid(format!("tags[{at}] {TAG_RULE}")));
    }
    let mut tags = tags.to_vec();
    tags.sort();
    tags.dedup();
    Ok(tags)
}

/// What a tag must be, for error messages (the value itself is never quoted: it may hold
/// control characters).
pub(crate) const TAG_RULE: &str = "must be 1 to 64 printable ASCII characters without spaces \
     (`!` to `~`), such as order:1234";

/// Checks `data` against the schema registered for its type and version, if any:
/// [`Error::SchemaViolation`] when it does not fit.
async fn check_schema(
    state: &AppState,
    account: &Account,
    event_type: &str,
    api_version: &str,
    data: &RawValue,
) -> Result<(), Error> {
    let violation = state
        .schemas
        .check(&state.db, &account.id, event_type, api_version, data)
        .await?;
    match violation {
        None => Ok(()),
        Some(v) => Err(Error::SchemaViolation {
            message: format!(
                "data{} does not match the schema of {event_type} {api_version}: {}",
                v.path, v.message
            ),
            path: v.path,
        }),
    }
}
