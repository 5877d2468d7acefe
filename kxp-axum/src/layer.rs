//! The tower middleware: answer the challenge, bound and buffer the body, verify, check the
//! envelope, and log one line per request.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Version, header};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use kxp_receiver::{
    Receiver, Rejection, RequestLog, VERIFIED_KEY_HEADER, challenge_token, outcome_for_status,
    verified_key_value,
};
use tower_layer::Layer;
use tower_service::Service;

use crate::extract::{VerifiedBody, WebhookRejection};

/// Verifies kxp webhooks before the wrapped service sees them.
///
/// - `GET ?challenge=<token>` is answered with the token (`text/plain`), for endpoint
///   registration; other requests go on.
/// - An HTTP/1.0 `POST` without `Content-Length` is answered 400 `length_required`: hyper
///   would read its body as empty (as actix-http refuses it with 400 before any middleware).
/// - A body over the limit (1 MiB by default) is answered 413 without being read further: a
///   declared `Content-Length` is checked before reading, and the bytes are counted as they
///   stream in otherwise.
/// - A bad signature is answered 401 `{"error":"<kind>"}`; an authentic body that is not an
///   event, 400.
/// - Otherwise the request reaches the inner service with the body intact and a
///   [`VerifiedBody`] in its extensions, which the [`VerifiedEvent`](crate::VerifiedEvent) and
///   [`VerifiedBody`] extractors read. Its answer, when 2xx, gets `X-Kxp-Verified-Key`: the
///   [fingerprint](kxp_verify::key_fingerprint) of the secret (or public key) that verified
///   it, so the sender can tell when a rotation's new secret is in use here. No other answer
///   has it.
///
/// Each request logs one line (target `kxp_webhooks`) with `event_id`, `verification`,
/// `outcome`, `status` and `duration_ms`.
///
/// Put it on the webhook route, `.route("/webhooks", post(handler).layer(verify))`, not on the
/// whole router: `Router::layer` also wraps the fallback, so the challenge would be answered at
/// every path (a URL would pass the sender's challenge without being a webhook route) and
/// unsigned requests to other paths would get 401 instead of 404. On the route's
/// `MethodRouter` it covers every method of that path, so the challenge's `GET` reaches it.
#[derive(Debug, Clone)]
pub struct VerifyLayer {
    receiver: Receiver,
    #[cfg(feature = "catch-up")]
    thin: Option<kxp_catchup::ThinEvents>,
}

impl VerifyLayer {
    /// A layer checking requests with `receiver`'s secrets, limit and clock.
    pub fn new(receiver: Receiver) -> VerifyLayer {
        VerifyLayer {
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
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use kxp_axum::catch_up::{Credential, FeedClient, ThinEvents};
    /// use kxp_axum::{Receiver, VerifyLayer};
    /// use kxp_verify::{Secret, Verifier};
    ///
    /// let secret = std::env::var("KXP_WEBHOOK_SECRET")?;
    /// let feed = FeedClient::new(
    ///     "https://webhooks.platform.example",
    ///     Credential::Secret(Secret::new(&secret)?),
    /// )?;
    /// let layer = VerifyLayer::new(Receiver::new(Verifier::from_secret_list(&secret)?))
    ///     .thin_events(ThinEvents::new(feed));
    /// # let _ = layer;
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "catch-up")]
    pub fn thin_events(self, thin: kxp_catchup::ThinEvents) -> VerifyLayer {
        VerifyLayer {
            thin: Some(thin),
            ..self
        }
    }

    /// A layer whose secrets are the comma-separated list in the environment variable `var`.
    pub fn from_env(var: &str) -> Result<VerifyLayer, kxp_receiver::FromEnvError> {
        Receiver::from_env(var).map(VerifyLayer::new)
    }
}

impl<S> Layer<S> for VerifyLayer {
    type Service = Verify<S>;

    fn layer(&self, inner: S) -> Verify<S> {
        Verify {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service [`VerifyLayer`] wraps around `S`.
#[derive(Debug, Clone)]
pub struct Verify<S> {
    inner: S,
    layer: VerifyLayer,
}

impl<S> Service<Request> for Verify<S>
where
    S: Service<Request, Response = Response> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        // The clone is the ready one for this call (tower's "clone and swap" rule).
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(handle(inner, self.layer.clone(), request))
    }
}

async fn handle<S>(mut inner: S, layer: VerifyLayer, request: Request) -> Result<Response, S::Error>
where
    S: Service<Request, Response = Response>,
{
    let receiver = &layer.receiver;
    let log = RequestLog::start();
    if request.method() == Method::GET
        && let Some(token) = challenge_token(request.uri().query())
    {
        return Ok(match token {
            Ok(token) => {
                log.finish("", "not_attempted", "challenge", 200);
                challenge_response(token)
            }
            Err(rejection) => reject(log, rejection),
        });
    }

    let (parts, body) = match read_request(receiver, request).await {
        Ok(read) => read,
        Err(rejection) => return Ok(reject(log, rejection)),
    };
    let header = |name: &str| parts.headers.get(name).map_or(&b""[..], |v| v.as_bytes());
    let accepted = match receiver.check_request(header, body.clone()) {
        Ok(accepted) => accepted,
        Err(rejection) => return Ok(reject(log, rejection)),
    };

    let key = accepted.key_fingerprint();
    #[cfg(feature = "catch-up")]
    let (accepted, body) = match &layer.thin {
        None => (accepted, body),
        Some(thin) => {
            let endpoint = parts
                .headers
                .get(kxp_verify::ENDPOINT_ID_HEADER)
                .and_then(|v| v.to_str().ok());
            match thin.resolve(receiver, endpoint, &accepted).await {
                Ok(None) => (accepted, body),
                Ok(Some(kxp_catchup::Resolved::Full(full))) => {
                    let body = full.verified().get_ref().clone();
                    (full, body)
                }
                // The sender no longer holds the payload: nothing to handle, now or later.
                Ok(Some(kxp_catchup::Resolved::Gone(_))) => {
                    log.finish(accepted.event_id(), "ok", "gone", 200);
                    return Ok(gone_response());
                }
                Err(rejection) => return Ok(reject(log, rejection)),
            }
        }
    };
    let verified = VerifiedBody::new(accepted);
    let event_id = verified.shared_event_id();
    // Only now, once the signature verified: the handler joins the sender's trace.
    #[cfg(feature = "otel")]
    let span = kxp_receiver::handler_span(
        parts
            .headers
            .get(kxp_verify::TRACEPARENT)
            .and_then(|v| v.to_str().ok()),
        &event_id,
    );
    let mut request = Request::from_parts(parts, Body::from(body));
    request.extensions_mut().insert(verified);
    let call = inner.call(request);
    #[cfg(feature = "otel")]
    let call = tracing::Instrument::instrument(call, span);
    let mut response = call.await?;

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
        .extensions()
        .get::<HandlerOutcome>()
        .map_or_else(|| outcome_for_status(status), |o| o.0);
    log.finish(&event_id, "ok", outcome, status);
    Ok(response)
}

/// Set by the dedup glue on its responses, so the log says `duplicate` rather than guessing
/// `processed` from the 200.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HandlerOutcome(pub(crate) &'static str);

/// The request's head and its body, read as the verifier reads it: refused when it cannot be
/// framed or is over the limit (ordered mode reads it so too, `crate::catch_up`).
pub(crate) async fn read_request(
    receiver: &Receiver,
    request: Request,
) -> Result<(http::request::Parts, Bytes), Rejection> {
    if let Some(rejection) = receiver.unframed(
        request.version() == Version::HTTP_10,
        request.method() == Method::POST,
        request.headers().contains_key(header::CONTENT_LENGTH),
    ) {
        return Err(rejection);
    }
    let (parts, body) = request.into_parts();
    let body = read_body(receiver, &parts.headers, body).await?;
    Ok((parts, body))
}

async fn read_body(
    receiver: &Receiver,
    headers: &http::HeaderMap,
    body: Body,
) -> Result<Bytes, Rejection> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(rejection) = receiver.too_large(declared) {
        return Err(rejection);
    }
    match Limited::new(body, receiver.limit()).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<LengthLimitError>() => Err(Rejection::PayloadTooLarge {
            limit: receiver.limit(),
        }),
        Err(_) => Err(Rejection::BodyUnreadable),
    }
}

pub(crate) fn reject(log: RequestLog, rejection: Rejection) -> Response {
    log.finish("", rejection.verification(), "rejected", rejection.status());
    WebhookRejection(rejection).into_response()
}

/// The answer to a thin delivery whose event the sender no longer holds: nothing to retry.
#[cfg(feature = "catch-up")]
fn gone_response() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        r#"{"outcome":"gone"}"#,
    )
        .into_response()
}

fn challenge_response(token: &str) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        token.to_owned(),
    )
        .into_response()
}
