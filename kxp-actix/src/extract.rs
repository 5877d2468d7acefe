//! Extractors for handlers behind [`VerifyMiddleware`](crate::VerifyMiddleware), and the
//! rejection response they share with it.

use std::fmt;
use std::future::{Ready, ready};
use std::ops::Deref;
use std::sync::Arc;

use actix_web::dev::Payload;
use actix_web::http::StatusCode;
use actix_web::{FromRequest, HttpMessage, HttpRequest, HttpResponse, ResponseError};
use bytes::Bytes;
use kxp_receiver::{Accepted, Rejection};
use kxp_verify::{Event, VerifiedBuf};
use serde::de::DeserializeOwned;

/// The verified raw body and its event id, as the middleware left them.
///
/// Only the middleware creates one, after the signature checked out. On a route without
/// [`VerifyMiddleware`](crate::VerifyMiddleware), extracting it fails with 500 `not_verified`.
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

    fn from_extensions(request: &HttpRequest) -> Result<VerifiedBody, WebhookRejection> {
        request
            .extensions()
            .get::<VerifiedBody>()
            .cloned()
            .ok_or(WebhookRejection(Rejection::NotVerified))
    }
}

impl FromRequest for VerifiedBody {
    type Error = WebhookRejection;
    type Future = Ready<Result<VerifiedBody, WebhookRejection>>;

    fn from_request(request: &HttpRequest, _payload: &mut Payload) -> Self::Future {
        ready(VerifiedBody::from_extensions(request))
    }
}

/// The verified event, with `data` parsed as a `T` (a `serde_json::Value` by default).
///
/// ```no_run
/// use actix_web::{App, HttpServer, web};
/// use kxp_actix::{VerifiedEvent, VerifyMiddleware};
///
/// async fn webhook(event: VerifiedEvent) -> &'static str {
///     println!("{} {}", event.event_type(), event.id());
///     "ok"
/// }
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let verify = VerifyMiddleware::from_env("KXP_WEBHOOK_SECRET")?;
/// HttpServer::new(move || {
///     App::new().service(
///         web::resource("/webhooks")
///             .wrap(verify.clone())
///             .route(web::post().to(webhook)),
///     )
/// })
/// .bind(("127.0.0.1", 3000))?
/// .run()
/// .await?;
/// # Ok(()) }
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

impl<T: DeserializeOwned> FromRequest for VerifiedEvent<T> {
    type Error = WebhookRejection;
    type Future = Ready<Result<VerifiedEvent<T>, WebhookRejection>>;

    fn from_request(request: &HttpRequest, _payload: &mut Payload) -> Self::Future {
        ready(VerifiedBody::from_extensions(request).and_then(|body| {
            body.verified
                .verified()
                .parse()
                .map(VerifiedEvent)
                .map_err(|e| WebhookRejection(Rejection::Envelope(e)))
        }))
    }
}

/// A [`Rejection`] as an actix-web error: its status and `{"error":"<code>"}` with
/// `Content-Type: application/json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookRejection(pub Rejection);

impl fmt::Display for WebhookRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for WebhookRejection {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

impl ResponseError for WebhookRejection {
    fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.0.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    fn error_response(&self) -> HttpResponse {
        HttpResponse::build(self.status_code())
            .content_type("application/json")
            .body(self.0.json_body())
    }
}
