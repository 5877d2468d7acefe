//! Catch-up on the webhook resource: one middleware that watches the deliveries' sequence hints
//! and has the events the receiver missed, pulled from the sender's signed feed, posted to the
//! receiver's own URL — through the same verifier, handler and dedup (see [`kxp_catchup`]).
//! With [`CatchUpConfig::ordered`] the middleware holds each verified delivery, answers 200,
//! and the resource gets each key's events in sequence order from the feed.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use actix_web::{App, HttpServer, web};
//! use kxp_actix::catch_up::{CatchUp, CatchUpConfig, CatchUpMiddleware, Credential};
//! use kxp_actix::dedup::{self, Handled, Store};
//! use kxp_actix::{VerifiedEvent, VerifyMiddleware};
//!
//! async fn webhook(store: web::Data<Store>, event: VerifiedEvent) -> Handled {
//!     dedup::process(&store, &event, Duration::from_secs(60), || async {
//!         Ok::<(), std::io::Error>(())
//!     })
//!     .await
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let secret = std::env::var("KXP_WEBHOOK_SECRET")?;
//! let store = Store::connect("sqlite://webhooks.db").await?;
//! let credential = Credential::Secret(kxp_verify::Secret::new(&secret)?);
//! let config = CatchUpConfig::new("https://webhooks.platform.example", credential);
//! let catch_up = CatchUp::new(config, store.clone())?;
//! let verify = VerifyMiddleware::from_env("KXP_WEBHOOK_SECRET")?;
//! HttpServer::new(move || {
//!     App::new().app_data(web::Data::new(store.clone())).service(
//!         web::resource("/webhooks")
//!             .route(web::post().to(webhook))
//!             .wrap(verify.clone())
//!             // The one line: outermost, and the URL recovered events are posted to.
//!             .wrap(CatchUpMiddleware::new(&catch_up, "http://127.0.0.1:8080/webhooks")),
//!     )
//! })
//! .bind(("127.0.0.1", 8080))?
//! .run()
//! .await?;
//! # Ok(()) }
//! ```

use std::rc::Rc;

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{Payload, Service, ServiceRequest, ServiceResponse, Transform, forward_ready};
use actix_web::http::Method;
use actix_web::{Error, HttpResponse, Responder};
use futures_util::future::LocalBoxFuture;
pub use kxp_catchup::{
    CatchUp, CatchUpConfig, CatchUpError, Credential, FeedClient, Report, ThinEvents,
};
use kxp_catchup::{Loopback, Received};
use kxp_receiver::{Receiver, RequestLog, VERIFIED_KEY_HEADER, verified_key_value};

use crate::dedup::{Handled, Outcome};
use crate::middleware::{read_request, reject};

/// A health check for a route of the app's (`web::get().to(move || { let c = catch_up.clone();
/// async move { kxp_actix::catch_up::health(&c) } })`): [`Status::json`](kxp_catchup::Status::json),
/// 200 while [healthy](kxp_catchup::Status::is_healthy), 503 while ordered mode is stopped, a
/// reset waits to be dealt with, or the feed fails.
pub fn health(catch_up: &CatchUp) -> HttpResponse {
    let status = catch_up.status();
    let mut response = if status.is_healthy() {
        HttpResponse::Ok()
    } else {
        HttpResponse::ServiceUnavailable()
    };
    response
        .content_type("application/json")
        .body(status.json())
}

/// The catch-up's metrics for a route of the app's:
/// [`Status::prometheus`](kxp_catchup::Status::prometheus).
pub fn metrics(catch_up: &CatchUp) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(catch_up.status().prometheus())
}

/// Feeds a [`CatchUp`] the resource's hints, starts its task with the first request, and has
/// it deliver recovered events by posting them to the receiver's own URL ([`Loopback`]).
#[derive(Debug, Clone)]
pub struct CatchUpMiddleware {
    catch_up: CatchUp,
}

impl CatchUpMiddleware {
    /// The middleware for `catch_up`, which delivers recovered events to `own_url` (this
    /// resource's URL as the receiver reaches itself, e.g. over loopback).
    pub fn new(catch_up: &CatchUp, own_url: &str) -> CatchUpMiddleware {
        catch_up.deliver_with(Loopback::new(own_url));
        CatchUpMiddleware {
            catch_up: catch_up.clone(),
        }
    }
}

impl<S, B> Transform<S, ServiceRequest> for CatchUpMiddleware
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = Error;
    type Transform = CatchUpService<S>;
    type InitError = ();
    type Future = std::future::Ready<Result<CatchUpService<S>, ()>>;

    fn new_transform(&self, service: S) -> Self::Future {
        std::future::ready(Ok(CatchUpService {
            service: Rc::new(service),
            catch_up: self.catch_up.clone(),
        }))
    }
}

/// The service [`CatchUpMiddleware`] wraps around `S`.
pub struct CatchUpService<S> {
    service: Rc<S>,
    catch_up: CatchUp,
}

impl<S> std::fmt::Debug for CatchUpService<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CatchUpService")
            .field("catch_up", &self.catch_up)
            .finish_non_exhaustive()
    }
}

impl<S, B> Service<ServiceRequest> for CatchUpService<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = Error;
    type Future = LocalBoxFuture<'static, Result<Self::Response, Error>>;

    forward_ready!(service);

    fn call(&self, request: ServiceRequest) -> Self::Future {
        // On the worker's Tokio runtime, once for all workers.
        self.catch_up.start();
        let service = Rc::clone(&self.service);
        let catch_up = self.catch_up.clone();
        if let Some(receiver) = catch_up.ordered_receiver().cloned()
            && request.method() == Method::POST
        {
            return Box::pin(ordered(service, catch_up, receiver, request));
        }
        let headers = request.headers();
        let hint = kxp_catchup::hint(|name| headers.get(name)?.to_str().ok());
        Box::pin(async move {
            let response = service.call(request).await?;
            if let Some((endpoint_id, sequence)) = hint
                && response.status().is_success()
            {
                catch_up.observe(&endpoint_id, sequence);
            }
            Ok(response.map_into_left_body())
        })
    }
}

/// Ordered mode's side of a `POST`: the body read as the verifier reads it, then held and
/// answered here, or handed to the resource (the catch-up's own requests).
async fn ordered<S, B>(
    service: Rc<S>,
    catch_up: CatchUp,
    receiver: Receiver,
    mut request: ServiceRequest,
) -> Result<ServiceResponse<EitherBody<B>>, Error>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error>,
{
    let log = RequestLog::start();
    let body = match read_request(&receiver, &mut request).await {
        Ok(body) => body,
        Err(rejection) => {
            let response = reject(log, rejection);
            return Ok(request.into_response(response).map_into_right_body());
        }
    };
    let headers = request.headers();
    let header = |name: &str| headers.get(name).map_or(&b""[..], |v| v.as_bytes());
    let response = match catch_up.receive(header, body.clone()).await {
        Received::Held {
            event_id,
            key,
            duplicate,
        } => {
            log.finish(
                &event_id,
                "ok",
                if duplicate { "duplicate" } else { "held" },
                200,
            );
            let mut response = HttpResponse::Ok();
            response.content_type("application/json");
            if let Some(value) = verified_key_value(200, key) {
                response.insert_header((VERIFIED_KEY_HEADER, value));
            }
            response.body(Received::json_body(duplicate))
        }
        Received::Rejected(rejection) => reject(log, rejection),
        Received::Stopped {
            event_id,
            stop,
            retry_after,
        } => {
            log.finish(&event_id, "ok", "stopped", 503);
            HttpResponse::ServiceUnavailable()
                .content_type("application/json")
                .insert_header((
                    actix_web::http::header::RETRY_AFTER,
                    retry_after.to_string(),
                ))
                .body(Received::stopped_body(stop))
        }
        Received::Unavailable => {
            let outcome = Outcome::StoreUnavailable {
                retry_after: kxp_dedup::STORE_UNAVAILABLE_RETRY_AFTER,
            };
            log.finish("", "ok", outcome.as_str(), outcome.status());
            Handled(outcome).respond_to(request.request())
        }
        Received::PassThrough => {
            request.set_payload(Payload::from(body));
            return Ok(service.call(request).await?.map_into_left_body());
        }
    };
    Ok(request.into_response(response).map_into_right_body())
}
