//! `/v1/events`: ingestion (schema check, tags, `Idempotency-Key`), reading an event back,
//! and listing events (by tag, type and time).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use kxp_api::{
    ErrorCode, Event, EventId, EventSummary, MAX_TAGS, NewEvent, Page, is_event_id,
    is_ordering_key, is_tag,
};
use serde::Deserialize;
use serde_json::value::RawValue;
use utoipa::IntoParams;

use super::checks::{check_name, check_unicode, parse_time};
use super::pagination::{PageParams, page};
use super::views::time;
use super::{ApiBody, ApiError, ApiQuery, AppState, Authed, parse};
use crate::engine::backlog::{Admission, RETRY_AFTER_SECS};
use crate::model::{Account, EventFilter, EventListed, Ingest, Ingested, sha256_hex};

/// Emits an event: stored with one delivery per subscribed endpoint, in one transaction,
/// before this answers. The answer is the envelope exactly as receivers will get it. With an
/// `Idempotency-Key`, a retried request returns the original event instead of a second one.
///
/// Backpressure: while the account's due backlog (deliveries whose time has come, held ones
/// left out) is at the server's `backlog_limit`, the answer is 503 `backlog_full` with
/// `Retry-After` and nothing is stored. A retry of a request already accepted under its
/// `Idempotency-Key` still answers its event: it adds nothing to the backlog.
#[utoipa::path(post, path = "/v1/events", tag = "events",
    request_body = NewEvent,
    params(("Idempotency-Key" = Option<String>, Header,
        description = "1 to 255 printable ASCII characters. The same key with the same body \
            answers the first request's event again (for as long as the event is retained); \
            with another body, 422 `idempotency_key_reused`.")),
    responses(
        (status = 202, description = "Accepted: stored, deliveries queued", body = Event),
        (status = 400, description = "`invalid_json`, `invalid_idempotency_key`, or `schema_violation` (with `path`)", body = kxp_api::ErrorBody),
        (status = 422, description = "`invalid_request` (the message names the field: a bad `tags` entry, too many tags, …) or `idempotency_key_reused`", body = kxp_api::ErrorBody),
        (status = 503, description = "`backlog_full`: the account's due backlog is at the server's `backlog_limit`; nothing was stored, retry after `Retry-After` seconds. `store_unavailable`: the database is unreachable; retry",
            body = kxp_api::ErrorBody,
            headers(("Retry-After" = u64, description = "With `backlog_full`: seconds to wait before retrying"))),
    ))]
pub(super) async fn create_event(
    State(state): State<AppState>,
    Authed(account): Authed,
    headers: HeaderMap,
    ApiBody(body): ApiBody,
) -> Result<Response, ApiError> {
    let key = match headers.get("idempotency-key") {
        None => None,
        Some(value) => Some(
            value
                .to_str()
                .ok()
                .filter(|k| is_idempotency_key(k))
                .ok_or_else(|| {
                    ApiError::new(
                        ErrorCode::InvalidIdempotencyKey,
                        "Idempotency-Key must be 1 to 255 printable ASCII characters",
                    )
                })?,
        ),
    };
    let accepted = accept(&state, &account, &body, key).await?;
    Ok((StatusCode::ACCEPTED, raw_json(accepted.payload)).into_response())
}

/// Whether `key` can be an idempotency key: 1 to 255 printable ASCII characters.
pub(crate) fn is_idempotency_key(key: &str) -> bool {
    (1..=255).contains(&key.len()) && key.bytes().all(|b| b.is_ascii_graphic())
}

/// An event taken in by [`accept`].
pub(crate) struct Accepted {
    /// The envelope, byte for byte as receivers get it.
    pub payload: String,
    /// Whether this call stored it (false: an earlier request with the same idempotency key
    /// did).
    pub created: bool,
}

/// Takes in one event from `body` (what `POST /v1/events` is sent) for `account`, idempotent
/// on `key` ([`is_idempotency_key`]): every check of the API, the backlog's backpressure
/// (503 `backlog_full`, nothing stored), then the store. The API and the broker sources both
/// come through here, so a message on a queue is held to exactly what a request is.
pub(crate) async fn accept(
    state: &AppState,
    account: &Account,
    body: &[u8],
    key: Option<&str>,
) -> Result<Accepted, ApiError> {
    let new: NewEvent = parse(body)?;
    check_name("type", &new.event_type, 128)?;
    let data = new.data.as_raw().get();
    let limit = state.shared.config.max_event_data;
    if data.len() > limit {
        return Err(ApiError::new(
            ErrorCode::PayloadTooLarge,
            format!(
                "data is {} bytes of JSON; this server's limit is {limit} (receivers accept \
                 bodies up to 1 MiB by default)",
                data.len()
            ),
        ));
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
        return Err(ApiError::invalid(
            "ordering_key must be 1 to 128 printable ASCII characters without spaces (`!` to \
             `~`), such as pay_123",
        ));
    }
    if let Some(violation) = check_schema(
        state,
        account,
        &new.event_type,
        &api_version,
        new.data.as_raw(),
    )
    .await?
    {
        return Err(violation);
    }
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
                ApiError::new(
                    ErrorCode::BacklogFull,
                    format!(
                        "{due} deliveries of this account are due and waiting (limit {}); \
                         nothing was stored, retry later",
                        state.shared.backlog.limit()
                    ),
                )
                .retry_after(RETRY_AFTER_SECS)
            })?
        }
    };
    match ingested {
        Ingested::Created(event, due_to) => {
            state.shared.metrics.event_ingested();
            state.shared.backlog.queued(&account.id, due_to.len());
            state.shared.wake_for(due_to);
            Ok(Accepted {
                payload: event.payload,
                created: true,
            })
        }
        Ingested::Replayed(event) => Ok(Accepted {
            payload: event.payload,
            created: false,
        }),
        Ingested::KeyReused => Err(ApiError::new(
            ErrorCode::IdempotencyKeyReused,
            "this Idempotency-Key or event id was used with a different request",
        )),
    }
}

/// The id a producer chose for its event, checked ([`is_event_id`]).
fn check_event_id(id: &EventId) -> Result<EventId, ApiError> {
    if is_event_id(id.as_str()) {
        Ok(id.clone())
    } else {
        Err(ApiError::invalid(
            "id must be a UUID in lowercase hyphenated form (such as \
             6f1c2b0e-8d4a-4c1e-9f3b-7a1d2c4e5f62), not the nil UUID",
        ))
    }
}

/// An event's `tags`, checked: at most [`MAX_TAGS`] entries, each a tag ([`is_tag`]: 1 to
/// [`MAX_TAG_LEN`](kxp_api::MAX_TAG_LEN) printable ASCII characters without spaces); returned
/// sorted, each once.
fn check_tags(tags: &[String]) -> Result<Vec<String>, ApiError> {
    if tags.len() > MAX_TAGS {
        return Err(ApiError::invalid(format!(
            "tags holds {} entries; an event has at most {MAX_TAGS}",
            tags.len()
        )));
    }
    if let Some(at) = tags.iter().position(|tag| !is_tag(tag)) {
        return Err(ApiError::invalid(format!("tags[{at}] {TAG_RULE}")));
    }
    let mut tags = tags.to_vec();
    tags.sort();
    tags.dedup();
    Ok(tags)
}

/// What a tag must be, for error messages (the value itself is never quoted: it may hold
/// control characters).
const TAG_RULE: &str = "must be 1 to 64 printable ASCII characters without spaces \
     (`!` to `~`), such as order:1234";

/// Checks `data` against the schema registered for its type and version, if any: the 400
/// `schema_violation` error when it does not fit.
pub(super) async fn check_schema(
    state: &AppState,
    account: &Account,
    event_type: &str,
    api_version: &str,
    data: &RawValue,
) -> Result<Option<ApiError>, ApiError> {
    let violation = state
        .schemas
        .check(&state.db, &account.id, event_type, api_version, data)
        .await?;
    Ok(violation.map(|v| {
        let message = format!(
            "data{} does not match the schema of {event_type} {api_version}: {}",
            v.path, v.message
        );
        ApiError::new(ErrorCode::SchemaViolation, message).at(v.path)
    }))
}

/// The stored envelope, sent as it is: the API shows exactly what receivers get.
pub(super) fn raw_json(payload: String) -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        payload,
    )
        .into_response()
}

/// An event's envelope, byte for byte as receivers get it.
#[utoipa::path(get, path = "/v1/events/{id}", tag = "events",
    params(("id" = kxp_api::EventId, Path, description = "The event")),
    responses((status = 200, description = "The envelope", body = Event)))]
pub(super) async fn get_event(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(raw_json(
        state.db.event(account.id.as_str(), &id).await?.payload,
    ))
}

/// Which events to list.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct EventParams {
    /// Only events carrying this tag (1 to 64 printable ASCII characters without spaces).
    #[param(example = "order:1234")]
    tag: Option<String>,
    /// Only events of exactly this type.
    #[serde(rename = "type")]
    #[param(rename = "type", example = "payment.succeeded")]
    event_type: Option<String>,
    /// Only events created at or after this RFC 3339 time.
    #[param(format = DateTime)]
    since: Option<String>,
    /// Only events created before this RFC 3339 time.
    #[param(format = DateTime)]
    until: Option<String>,
    /// The `next_cursor` of the previous page.
    cursor: Option<String>,
    /// Items per page, 1 to 500 (default 50).
    #[param(minimum = 1, maximum = 500)]
    limit: Option<i64>,
}

/// The account's events, newest first, without their `data` (`GET /v1/events/{id}` answers
/// the envelope): all of them, or those carrying a tag (`?tag=order:1234`), of one type, or
/// created in a time range; the filters combine. A parameter this route does not know is
/// refused (400 `invalid_query`) rather than ignored.
#[utoipa::path(get, path = "/v1/events", tag = "events",
    params(EventParams),
    responses(
        (status = 200, description = "A page of events, newest first", body = Page<EventSummary>),
        (status = 400, description = "`invalid_query`: a parameter that is not one of these, or unreadable", body = kxp_api::ErrorBody),
        (status = 422, description = "`invalid_request`: a `tag` that cannot be a tag, a time that is not RFC 3339, a `limit` out of range, a `cursor` this list did not give", body = kxp_api::ErrorBody),
    ))]
pub(super) async fn list_events(
    State(state): State<AppState>,
    Authed(account): Authed,
    ApiQuery(q): ApiQuery<EventParams>,
) -> Result<Json<Page<EventSummary>>, ApiError> {
    let limit = PageParams {
        cursor: None,
        limit: q.limit,
    }
    .limit()?;
    if let Some(tag) = &q.tag
        && !is_tag(tag)
    {
        return Err(ApiError::invalid(format!("tag {TAG_RULE}")));
    }
    let before = q.cursor.as_deref().map(parse_cursor).transpose()?;
    let filter = EventFilter {
        tag: q.tag,
        event_type: q.event_type,
        since: q.since.as_deref().map(parse_time).transpose()?,
        until: q.until.as_deref().map(parse_time).transpose()?,
        before,
    };
    let items = state.db.events(account.id.as_str(), &filter, limit).await?;
    // The cursor needs the stored millisecond, which the summary's `created_at` does not show.
    let listed = page(items, limit, cursor_of);
    Ok(Json(Page::new(
        listed.data.into_iter().map(summary).collect(),
        listed.next_cursor,
    )))
}

/// The cursor after `event`: its `created_at` in Unix ms and its id (`1764464523000_6f1c…`).
fn cursor_of(event: &EventListed) -> String {
    format!("{}_{}", event.created_at, event.id)
}

/// The `(created_at, id)` a cursor of [`cursor_of`] names.
fn parse_cursor(cursor: &str) -> Result<(i64, String), ApiError> {
    cursor
        .split_once('_')
        .and_then(|(at, id)| Some((at.parse().ok()?, id.to_owned())))
        .ok_or_else(|| ApiError::invalid("cursor is not a next_cursor of this list"))
}

fn summary(event: EventListed) -> EventSummary {
    EventSummary {
        id: event.id,
        event_type: event.event_type,
        api_version: event.api_version,
        created_at: time(event.created_at),
        tags: event.tags,
    }
}
