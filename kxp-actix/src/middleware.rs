//! The actix-web middleware: answer the challenge, bound and buffer the payload, verify, check
//! the envelope, re-inject the payload, and log one line per request.

use std::rc::Rc;

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{Payload, Service, ServiceRequest, ServiceResponse, Transform, forward_ready};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::http::{Method, Version, header};
use actix_web::{Error, HttpMessage, HttpResponse, ResponseError};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use futures_util::future::LocalBoxFuture;
use kxp_receiver::{
    Receiver, Rejection, RequestLog, VERIFIED_KEY_HEADER, challenge_token, outcome_for_status,
    verified_key_value,
};

use crate::extract::{VerifiedBody, WebhookRejection};

/// Verifies kxp webhooks before the wrapped service sees them: an actix-web middleware
/// ([`Transform`]) for [`App::wrap`](actix_web::App::wrap), [`Scope::wrap`](actix_web::Scope::wrap)
/// or [`Resource::wrap`](actix_web::Resource::wrap).
///
/// - `GET ?challenge=<token>` is answered with the token (`text/plain`), for endpoint
///   registration; every other request must be signed, whatever its method.
/// - A body over the limit (1 MiB by default) is answered 413 without being read further: a
///   declared `Content-Length` is checked before reading, and the bytes are counted as they
///   stream in otherwise.
/// - A bad signature is answered 401 `{"error":"<kind>"}`; an authentic body that is not an
///   event, 400.
/// - Otherwise the request reaches the wrapped service with the payload intact (so `web::Bytes`
///   or `web::Json` still read it) and a [`VerifiedBody`] in its extensions, which the
///   [`VerifiedEvent`](crate::VerifiedEvent) and [`VerifiedBody`] extractors read.
///   Its answer, when 2xx, gets `X-Kxp-Verified-Key`: the
///   [fingerprint](kxp_verify::key_fingerprint) of the secret (or public key) that verified
///   it, so the sender can tell when a rotation's new secret is in use here. No other answer
///   has it.
///
/// Each request logs one line (target `kxp_webhooks`) with `event_id`, `verification`,
/// `outcome`, `status` and `duration_ms`.
///
/// Cheap to clone and `Send`: build it once (reading the secrets once) and clone it into the
/// `HttpServer` factory, which runs on every worker thread.
#[derive(Debug, Clone)]
pub struct VerifyMiddleware {
    receiver: Receiver,
    #[cfg(feature = "catch-up")]
    thin: Option<kxp_catchup::ThinEvents>,
}

impl VerifyMiddleware {
    /// A middleware checking requests with `receiver`'s secrets, limit and clock.
    pub fn new(receiver: Receiver) -> VerifyMiddleware {
        VerifyMiddleware {
            receiver,
            #[cfg(feature = "catch-up")]
            thin: None,
        }
    }

    /// Also takes thin deliveries (an endpoint with `"payload": "thin"`): once a thin notice
    /// verifies, the full event is fetched from the sender with `thin`'s feed credential and
    /// verified with the same receiver, and the handler gets it in the notice's place, so its
    /// code is the same for thin and full endpoints. A fetch that fails answers 503 (the
    /// sender retries), one that does not verify 502; an event whose payload the sender
    /// erased (or that passed its retention) is answered 200 `{"outcome":"gone"}` without the
    /// handler. Full deliveries pass as before.
    #[cfg(feature = "catch-up")]
    pub fn thin_events(self, thin: kxp_catchup::ThinEvents) -> VerifyMiddleware {
        VerifyMiddleware {
            thin: Some(thin),
            ..self
        }
    }

    /// A middleware whose secrets are the comma-separated list in the environment variable
    /// `var` (conventionally `KXP_WEBHOOK_SECRET`; `new,old` while rotating).
    pub fn from_env(var: &str) -> Result<VerifyMiddleware, kxp_receiver::FromEnvError> {
        Receiver::from_env(var).map(VerifyMiddleware::new)
    }
}

impl<S, B> Transform<S, ServiceRequest> for VerifyMiddleware
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = Error;
    type Transform = VerifyService<S>;
    type InitError = ();
    type Future = std::future::Ready<Result<VerifyService<S>, ()>>;

    fn new_transform(&self, service: S) -> Self::Future {
        std::future::ready(Ok(VerifyService {
            service: Rc::new(service),
            config: Rc::new(self.clone()),
        }))
    }
}

/// The service [`VerifyMiddleware`] wraps around `S`.
///
/// One per worker thread: the wrapped service and the configuration sit in [`Rc`]s, so each
/// request's future takes its own handle without atomic reference counting.
pub struct VerifyService<S> {
    service: Rc<S>,
    config: Rc<VerifyMiddleware>,
}

impl<S> std::fmt::Debug for VerifyService<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerifyService")
            .field("receiver", &self.config.receiver)
            .finish_non_exhaustive()
    }
}

impl<S, B> Service<ServiceRequest> for VerifyService<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = Error;
    type Future = LocalBoxFuture<'static, Result<Self::Response, Error>>;

    forward_ready!(service);

    fn call(&self, request: ServiceRequest) -> Self::Future {
        Box::pin(handle(
            Rc::clone(&self.service),
            Rc::clone(&self.config),
            request,
        ))
    }
}

async fn handle<S, B>(
    service: Rc<S>,
    config: Rc<VerifyMiddleware>,
    mut request: ServiceRequest,
) -> Result<ServiceResponse<EitherBody<B>>, Error>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error>,
{
    let receiver = &config.receiver;
    let log = RequestLog::start();
    if request.method() == Method::GET
        && let Some(token) = challenge_token(request.uri().query())
    {
        let response = match token {
            Ok(token) => {
                log.finish("", "not_attempted", "challenge", 200);
                challenge_response(token)
            }
            Err(rejection) => reject(log, rejection),
        };
        return Ok(request.into_response(response).map_into_right_body());
    }

    let body = match read_request(receiver, &mut request).await {
        Ok(body) => body,
        Err(rejection) => {
            let response = reject(log, rejection);
            return Ok(request.into_response(response).map_into_right_body());
        }
    };
    let headers = request.headers();
    let header = |name: &str| headers.get(name).map_or(&b""[..], |v| v.as_bytes());
    let accepted = match receiver.check_request(header, body.clone()) {
        Ok(accepted) => accepted,
        Err(rejection) => {
            let response = reject(log, rejection);
            return Ok(request.into_response(response).map_into_right_body());
        }
    };

    let key = accepted.key_fingerprint();
    #[cfg(feature = "catch-up")]
    let (accepted, body) = match &config.thin {
        None => (accepted, body),
        Some(thin) => {
            let endpoint = request
                .headers()
                .get(kxp_verify::ENDPOINT_ID_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            match thin.resolve(receiver, endpoint.as_deref(), &accepted).await {
                Ok(None) => (accepted, body),
                Ok(Some(kxp_catchup::Resolved::Full(full))) => {
                    let body = full.verified().get_ref().clone();
                    (full, body)
                }
                // The sender no longer holds the payload: nothing to handle, now or later.
                Ok(Some(kxp_catchup::Resolved::Gone(_))) => {
                    log.finish(accepted.event_id(), "ok", "gone", 200);
                    let response = HttpResponse::Ok()
                        .content_type("application/json")
                        .body(r#"{"outcome":"gone"}"#);
                    return Ok(request.into_response(response).map_into_right_body());
                }
                Err(rejection) => {
                    let response = reject(log, rejection);
                    return Ok(request.into_response(response).map_into_right_body());
                }
            }
        }
    };
    let verified = VerifiedBody::new(accepted);
    let event_id = verified.shared_event_id();
    // Only now, once the signature verified: the handler joins the sender's trace.
    #[cfg(feature = "otel")]
    let span = kxp_receiver::handler_span(
        request
            .headers()
            .get(kxp_verify::TRACEPARENT)
            .and_then(|v| v.to_str().ok()),
        &event_id,
    );
    // The payload was consumed above: hand the same bytes to the extractors that come next.
    request.set_payload(Payload::from(body));
    request.extensions_mut().insert(verified);

    let call = service.call(request);
    #[cfg(feature = "otel")]
    let call = tracing::Instrument::instrument(call, span);
    match call.await {
        Ok(mut response) => {
            let status = response.status().as_u16();
            // Set here, whatever the handler did: the header names the verifier's key on a 2xx, and
            // is on no other answer.
            let name = HeaderName::from_static(VERIFIED_KEY_HEADER);
            match verified_key_value(status, key).and_then(|v| HeaderValue::from_str(&v).ok()) {
                Some(value) => {
                    response.headers_mut().insert(name, value);
                }
                None => {
                    response.headers_mut().remove(name);
                }
            }
            let outcome = response
                .response()
                .extensions()
                .get::<HandlerOutcome>()
                .map_or_else(|| outcome_for_status(status), |o| o.0);
            log.finish(&event_id, "ok", outcome, status);
            Ok(response.map_into_left_body())
        }
        Err(error) => {
            // actix-web turns the error into its response later; log the status it will have,
            // so an error is one line like any other request.
            let status = error.as_response_error().status_code().as_u16();
            log.finish(&event_id, "ok", outcome_for_status(status), status);
            Err(error)
        }
    }
}

/// Set by the dedup glue on its responses, so the log says `duplicate` rather than guessing
/// `processed` from the 200.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HandlerOutcome(pub(crate) &'static str);

/// Takes the payload and buffers it as the verifier reads it (ordered mode too,
/// `crate::catch_up`): refused when it cannot be framed, or its declared or actual length is
/// over the limit.
pub(crate) async fn read_request(
    receiver: &Receiver,
    request: &mut ServiceRequest,
) -> Result<Bytes, Rejection> {
    // actix-http refuses this request with 400 before any middleware runs; asked here too, so
    // the answer stays 400 on either adapter if that ever changes.
    if let Some(rejection) = receiver.unframed(
        request.version() == Version::HTTP_10,
        request.method() == Method::POST,
        request.headers().contains_key(header::CONTENT_LENGTH),
    ) {
        return Err(rejection);
    }
    let limit = receiver.limit();
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(rejection) = receiver.too_large(declared) {
        return Err(rejection);
    }
    // Within the limit here, so a declared length is a safe capacity.
    let capacity = declared
        .and_then(|len| usize::try_from(len).ok())
        .unwrap_or(0);
    let mut buffer = BytesMut::with_capacity(capacity.min(limit));
    let mut payload = request.take_payload();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|_| Rejection::BodyUnreadable)?;
        if buffer.len() + chunk.len() > limit {
            return Err(Rejection::PayloadTooLarge { limit });
        }
        buffer.extend_from_slice(&chunk);
    }
    Ok(buffer.freeze())
}

pub(crate) fn reject(log: RequestLog, rejection: Rejection) -> HttpResponse {
    log.finish("", rejection.verification(), "rejected", rejection.status());
    WebhookRejection(rejection).error_response()
}

fn challenge_response(token: &str) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain; charset=utf-8")
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .body(token.to_owned())
}
