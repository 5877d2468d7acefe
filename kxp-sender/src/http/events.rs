//! `/v1/events`: ingestion (schema check, `Idempotency-Key`) and reading an event back.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use kxp_api::{ErrorCode, Event, NewEvent};
use serde_json::value::RawValue;

use super::checks::{check_name, check_unicode};
use super::{ApiBody, ApiError, AppState, Authed, parse};
use crate::engine::backlog::{Admission, RETRY_AFTER_SECS};
use crate::model::{Account, Ingest, Ingested, sha256_hex};

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
        (status = 422, description = "`invalid_request` or `idempotency_key_reused`", body = kxp_api::ErrorBody),
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
    let hash = sha256_hex(body);
    let idempotency = key.map(|k| (k, hash.as_str()));
    let ingested = match state.shared.backlog.admit(&state.db, &account.id).await? {
        Admission::Admit => {
            let item = Ingest {
                account: account.clone(),
                event_type: new.event_type.clone(),
                api_version: api_version.clone(),
                data: new.data.as_raw().to_owned(),
                idempotency: idempotency.map(|(key, hash)| (key.to_owned(), hash.to_owned())),
            };
            state.shared.ingester.ingest(item).await?
        }
        Admission::Full(due) => {
            let before = match idempotency {
                Some((key, hash)) => {
                    state
                        .db
                        .ingested_before(account.id.as_str(), key, hash)
                        .await?
                }
                None => None,
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
            "this Idempotency-Key was used with a different request",
        )),
    }
}

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
