//! `GET /v1/endpoints/{id}/events/{event_id}`: the full event behind a thin delivery, for the
//! endpoint's receiver, with the endpoint's own credential (as the feed's).

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Uri, header};
use axum::response::{IntoResponse, Response};
use kxp_api::ErrorCode;

use super::feed::{Budget, Reader};
use super::{ApiError, AppState};
use crate::engine::dispatch::signature_headers;
use crate::engine::worker::sealed;
use crate::model::{EndpointId, EventId, Gone};

/// The envelope of an event the endpoint was sent, byte for byte as a full delivery carries it
/// (for an endpoint with an encryption key, `data` sealed anew as `data_jwe`), with the
/// signature headers a full delivery made now would carry: verify it with the same verifier
/// as a delivery. Authenticated like the feed (`X-Kxp-Feed-Signature` over `GET <target>` with
/// the feed key of a live HMAC secret, or the feed token); an API key is refused. 404 for an
/// event the endpoint was never sent; 410 `erased` or `expired` once its payload is gone.
#[utoipa::path(get, path = "/v1/endpoints/{id}/events/{event_id}", tag = "endpoints", security(()),
    params(
        ("id" = kxp_api::EndpointId, Path, description = "The endpoint"),
        ("event_id" = kxp_api::EventId, Path, description = "The event"),
    ),
    responses(
        (status = 200, description = "The envelope, with the delivery's signature headers", body = kxp_api::Event),
        (status = 401, description = "Not signed with the endpoint's credential", body = kxp_api::ErrorBody),
        (status = 404, description = "The endpoint was never sent this event", body = kxp_api::ErrorBody),
        (status = 410, description = "`erased` or `expired`: the payload is gone", body = kxp_api::ErrorBody),
        (status = 429, description = "More than 1,000 fetches in the last second", body = kxp_api::ErrorBody)))]
pub(super) async fn fetch_event(
    State(state): State<AppState>,
    Path((id, event_id)): Path<(EndpointId, EventId)>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let reader =
        Reader::authenticate(&state, &id, &method, &uri, &headers, b"", Budget::Fetch).await?;
    let source = &reader.source;
    let event = state.db.delivered_event(source, &event_id).await?;
    if let Some(gone) = Gone::parse(event.withheld.as_deref()) {
        let (code, why) = match gone {
            Gone::Erased => (ErrorCode::Erased, "erased"),
            Gone::Expired => (ErrorCode::Expired, "past its retention"),
        };
        return Err(ApiError::new(
            code,
            format!("event {event_id}'s payload is {why}: the server holds nothing of it"),
        ));
    }
    let unsendable = |why: String| {
        tracing::error!(
            target: "kxp_sender", endpoint_id = %source.id, error = %why,
            "a thin event's fetch could not be sealed or signed"
        );
        ApiError::new(
            ErrorCode::StoreUnavailable,
            format!("the event cannot be signed or sealed now: {why}"),
        )
        .retry_after(60)
    };
    let body = sealed(source.encryption_jwk.as_deref(), &event.payload)
        .map_err(|e| unsendable(e.to_string()))?
        .into_owned();
    let signed = signature_headers(event_id.as_str(), &body, &reader.secrets)
        .map_err(|e| unsendable(e.to_string()))?;
    let mut response = body.into_response();
    let out = response.headers_mut();
    out.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    for (name, value) in signed {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            out.insert(name, value);
        }
    }
    if let Ok(value) = HeaderValue::from_str(&event.event_type) {
        out.insert(HeaderName::from_static("x-kxp-event-type"), value);
    }
    Ok(response)
}
