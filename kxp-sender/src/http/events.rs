//! `/v1/events`: ingestion (the service's [`accept`], behind the `Idempotency-Key` header),
//! reading an event back, and listing events (by tag, type and time).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use kxp_api::{ErrorCode, Event, EventSummary, NewEvent, Page, TRACEPARENT, TRACESTATE, is_tag};
use serde::Deserialize;
use utoipa::IntoParams;

use super::pagination::{PageParams, page};
use super::{ApiBody, ApiError, ApiQuery, AppState, Authed};
use crate::app::checks::parse_time;
use crate::app::views::time;
use crate::app::{TAG_RULE, accept, is_idempotency_key};
use crate::engine::traces::Source;
use crate::model::{EventFilter, EventId, EventListed, Trace};

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
            with another body, 422 `idempotency_key_reused`."),
        ("traceparent" = Option<String>, Header,
        description = "The producer's W3C trace context (`00-<trace id>-<parent id>-<flags>`, \
            version 00, lowercase): the event's spans are its children, it is stored with the \
            event, and deliveries carry a `traceparent` of the same trace (unless the \
            endpoint's `trace_propagation` is false). Outside the idempotency hash; an invalid \
            value is ignored, never refused."),
        ("tracestate" = Option<String>, Header,
        description = "Vendor data that goes with `traceparent` (at most 512 characters): \
            stored with the event for the sender's own spans, never forwarded to merchants.")),
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
    // Outside the body, so outside its hash: the same event sent again in another trace is
    // still the same request. An invalid `traceparent` is ignored, as W3C asks, not refused.
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let producer = Trace::from_headers(header(TRACEPARENT), header(TRACESTATE));
    let accepted = accept(&state, &account, &body, key, producer, Source::Api).await?;
    Ok((StatusCode::ACCEPTED, raw_json(accepted.payload)).into_response())
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
    Path(id): Path<EventId>,
) -> Result<Response, ApiError> {
    Ok(raw_json(state.db.event(&account.id, &id).await?.api_body()))
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
    let items = state.db.events(&account.id, &filter, limit).await?;
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
