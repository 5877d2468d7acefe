//! Extractors for handlers behind [`VerifyLayer`](crate::VerifyLayer), and the rejection
//! response they share with it.

use std::ops::Deref;
use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::request::Parts;
use http::{StatusCode, header};
use kxp_receiver::{Accepted, Rejection};
use kxp_verify::{Event, VerifiedBuf};
use serde::de::DeserializeOwned;

/// The verified raw body and its event id, as the layer left them.
///
/// Only the layer creates one, after the signature checked out.
#[derive(Debug, Clone)]
pub struct VerifiedBody {
    verified: VerifiedBuf<Bytes>,
    event_id: Arc<str>,
}

impl VerifiedBody {
    pub(crate) fn new(accepted: Accepted<Bytes>) -> VerifiedBody {
        let (verified, event_id) = accepted.into_parts();
        VerifiedBody { verified, event_id }
    }

    /// The event id from the verified body: the dedup key.
    pub fn event_id(&self) -> &str {
        &self.event_id
    }

    /// The same id, shared, for the middleware's log line after the handler has the body.
    pub(crate) fn shared_event_id(&self) -> Arc<str> {
        Arc::clone(&self.event_id)
    }

    /// The verified bytes, exactly as received.
    pub fn bytes(&self) -> &Bytes {
        self.verified.get_ref()
    }

    /// The proof of verification with the bytes, for parsing them another way.
    pub fn verified(&self) -> &VerifiedBuf<Bytes> {
        &self.verified
    }
}

impl<S: Send + Sync> FromRequestParts<S> for VerifiedBody {
    type Rejection = WebhookRejection;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<VerifiedBody>()
            .cloned()
            .ok_or(WebhookRejection(Rejection::NotVerified))
    }
}

/// The verified event, with `data` parsed as a `T` (a `serde_json::Value` by default).
///
/// ```no_run
/// use axum::{Router, routing::post};
/// use kxp_axum::{Receiver, VerifiedEvent, VerifyLayer};
///
/// async fn webhook(event: VerifiedEvent) -> &'static str {
///     println!("{} {}", event.event_type(), event.id());
///     "ok"
/// }
///
/// # fn app() -> Result<Router, kxp_axum::FromEnvError> {
/// // On the webhook route only: a `Router::layer` would also answer challenges, and 401,
/// // at every other path.
/// let verify = VerifyLayer::new(Receiver::from_env("KXP_WEBHOOK_SECRET")?);
/// let app = Router::new()
///     .route("/webhooks", post(webhook).layer(verify));
/// # Ok(app) }
/// ```
#[derive(Debug, Clone)]
pub struct VerifiedEvent<T = serde_json::Value>(Event<T>);

impl<T> VerifiedEvent<T> {
    /// The event.
    pub fn into_inner(self) -> Event<T> {
        self.0
    }
}

impl<T> Deref for VerifiedEvent<T> {
    type Target = Event<T>;

    fn deref(&self) -> &Event<T> {
        &self.0
    }
}

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for VerifiedEvent<T> {
    type Rejection = WebhookRejection;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let body = VerifiedBody::from_request_parts(parts, state).await?;
        let event = body
            .verified
            .verified()
            .parse()
            .map_err(|e| WebhookRejection(Rejection::Envelope(e)))?;
        Ok(VerifiedEvent(event))
    }
}

/// A [`Rejection`] as an axum response: its status and `{"error":"<code>"}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookRejection(pub Rejection);

impl IntoResponse for WebhookRejection {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.0.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (
            status,
            [(header::CONTENT_TYPE, "application/json")],
            self.0.json_body(),
        )
            .into_response()
    }
}
