//! The API's errors: [`kxp_api::ErrorBody`] (`{"error": "<code>", "message": "…"}`) with the
//! status its [`ErrorCode`] fixes, the service's [`Error`]s in that form, and the extractors and
//! fallbacks that make axum's own refusals (an unreadable query, a body over the limit, a
//! wrong method, an unknown path) answer in the same form.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, FromRequestParts, Query, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use kxp_api::{ErrorBody, ErrorCode};
use serde::de::DeserializeOwned;

use crate::app::Error;
use crate::engine::backlog::RETRY_AFTER_SECS;
use crate::store::StoreError;

/// Seconds a client waits before retrying a request the database could not serve: a pool
/// exhausted by a burst, a statement cancelled by the timeout, a Citus worker down (its
/// restart, or a failover, takes seconds).
const STORE_RETRY_AFTER: u64 = 2;

/// An API error: one of the vocabulary's codes and a message for people.
#[derive(Debug)]
pub(crate) struct ApiError {
    /// Boxed: an error travels on every `Result` of the API's handlers, and the body with its
    /// optional fields is larger than the values they return.
    body: Box<ErrorBody>,
    /// Seconds for a `Retry-After` header.
    retry_after: Option<u64>,
}

impl ApiError {
    pub(crate) fn new(code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError {
            body: Box::new(ErrorBody::new(code, message)),
            retry_after: None,
        }
    }

    /// A field that is not acceptable: 422 `invalid_request`.
    pub(crate) fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::InvalidRequest, message)
    }

    /// Tells the client when to try again: a `Retry-After` header of `seconds`.
    pub(crate) fn retry_after(mut self, seconds: u64) -> ApiError {
        self.retry_after = Some(seconds);
        self
    }

    /// With `sequence_purged`: the next number the feed holds, and its MAC.
    pub(crate) fn earliest(mut self, sequence: u64, mac: String) -> ApiError {
        self.body.earliest = Some(sequence);
        self.body.mac = Some(mac);
        self
    }

    /// Points at the part of the request at fault (a JSON pointer into `data`).
    pub(crate) fn at(mut self, path: String) -> ApiError {
        self.body.path = Some(path);
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.body.error.status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, Json(*self.body)).into_response();
        if let Some(seconds) = self.retry_after {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(seconds),
            );
        }
        response
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> ApiError {
        ApiError::from(Error::from(error))
    }
}

/// The service's refusals as the API answers them: each kind fixes the code (and so the
/// status); the message is the service's.
impl From<Error> for ApiError {
    fn from(error: Error) -> ApiError {
        let code = error.code();
        let message = error.to_string();
        match error {
            Error::SchemaViolation { path, .. } => ApiError::new(code, message).at(path),
            Error::BacklogFull(_) => ApiError::new(code, message).retry_after(RETRY_AFTER_SECS),
            Error::Unavailable => ApiError::new(code, message).retry_after(STORE_RETRY_AFTER),
            Error::TooManyPortalLinks { retry_after } => {
                ApiError::new(code, message).retry_after(retry_after)
            }
            _ => ApiError::new(code, message),
        }
    }
}

/// The query string as a `T`, or 400 `invalid_query` naming what could not be read.
pub(crate) struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(value)| ApiQuery(value))
            // The text names the parameter and the problem (`limit: invalid digit …`); it
            // quotes no value beyond what the caller sent.
            .map_err(|e| ApiError::new(ErrorCode::InvalidQuery, e.body_text()))
    }
}

/// The raw request body, or 413 `payload_too_large` over the limit (400 `invalid_json` if it
/// could not be read at all).
pub(crate) struct ApiBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for ApiBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        Bytes::from_request(request, state)
            .await
            .map(ApiBody)
            .map_err(|e| match e {
                BytesRejection::FailedToBufferBody(ref failed)
                    if failed.status() == StatusCode::PAYLOAD_TOO_LARGE =>
                {
                    ApiError::new(ErrorCode::PayloadTooLarge, e.body_text())
                }
                other => ApiError::new(ErrorCode::InvalidJson, other.body_text()),
            })
    }
}

/// A known path asked with a method it does not have. axum adds the `Allow` header.
pub(crate) async fn method_not_allowed() -> ApiError {
    ApiError::new(
        ErrorCode::MethodNotAllowed,
        "this path does not take this method (see the Allow header)",
    )
}

/// No route at this path.
pub(crate) async fn no_route() -> ApiError {
    ApiError::new(ErrorCode::NotFound, "no such route")
}
