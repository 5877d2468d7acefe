//! Catch-up on the webhook route: one layer that watches the deliveries' sequence hints and
//! hands the events the receiver missed, pulled from the sender's signed feed, to this same
//! route — through the same verifier, handler and dedup (see [`kxp_catchup`]). With
//! [`CatchUpConfig::ordered`] the layer holds each verified delivery, answers 200, and the
//! route gets each key's events in sequence order from the feed.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use axum::{Router, extract::State, routing::post};
//! use kxp_axum::catch_up::{CatchUp, CatchUpConfig, CatchUpExt, Credential};
//! use kxp_verify::Verifier;
//! use kxp_axum::dedup::{self, Handled, Store};
//! use kxp_axum::{Receiver, VerifiedEvent, VerifyLayer};
//!
//! async fn webhook(State(store): State<Store>, event: VerifiedEvent) -> Handled {
//!     dedup::process(&store, &event, Duration::from_secs(60), || async {
//!         Ok::<(), std::io::Error>(())
//!     })
//!     .await
//! }
//!
//! # async fn app() -> Result<Router, Box<dyn std::error::Error>> {
//! let secret = std::env::var("KXP_WEBHOOK_SECRET")?;
//! let store = Store::connect("sqlite://webhooks.db").await?;
//! let credential = Credential::Secret(kxp_verify::Secret::new(&secret)?);
//! let config = CatchUpConfig::new("https://webhooks.platform.example", credential);
//! let catch_up = CatchUp::new(config, store.clone())?;
//! let app = Router::new()
//!     .route(
//!         "/webhooks",
//!         // The one line: outside the verifier, so what it hands back is verified too.
//!         post(webhook)
//!             .layer(VerifyLayer::new(Receiver::new(Verifier::from_secret_list(&secret)?)))
//!             .layer(catch_up.layer()),
//!     )
//!     .with_state(store);
//! # Ok(app) }
//! ```

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::{HeaderName, HeaderValue, Method, StatusCode, header};
use kxp_catchup::{BoxFuture, Deliver, Received};
pub use kxp_catchup::{
    CatchUp, CatchUpConfig, CatchUpError, Credential, FeedClient, Report, ThinEvents,
};
use kxp_receiver::{RequestLog, VERIFIED_KEY_HEADER, verified_key_value};

use crate::dedup::{Handled, Outcome};
use crate::layer::{read_request, reject};
use tower_layer::Layer;
use tower_service::Service;

/// [`CatchUpExt::layer`]'s layer: put it on the webhook route, outside [`VerifyLayer`].
///
/// [`VerifyLayer`]: crate::VerifyLayer
#[derive(Clone)]
pub struct CatchUpLayer {
    catch_up: CatchUp,
    routes: Routes,
}

impl std::fmt::Debug for CatchUpLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CatchUpLayer")
            .field("catch_up", &self.catch_up)
            .finish_non_exhaustive()
    }
}

/// The extension that gives a [`CatchUp`] its layer.
pub trait CatchUpExt {
    /// The layer that feeds this catch-up the route's hints and delivers recovered events to
    /// the route. Building the router inside a Tokio runtime starts the catch-up's task; else
    /// the first request does.
    fn layer(&self) -> CatchUpLayer;

    /// A health check to mount (`.route("/healthz/webhooks", catch_up.health())`): `GET`
    /// answers [`Status::json`](kxp_catchup::Status::json), 200 while
    /// [healthy](kxp_catchup::Status::is_healthy), 503 while ordered mode is stopped, a reset
    /// waits to be dealt with, or the feed fails.
    fn health<S: Clone + Send + Sync + 'static>(&self) -> axum::routing::MethodRouter<S>;

    /// The catch-up's metrics to mount (`.route("/metrics/webhooks", catch_up.metrics())`):
    /// `GET` answers [`Status::prometheus`](kxp_catchup::Status::prometheus).
    fn metrics<S: Clone + Send + Sync + 'static>(&self) -> axum::routing::MethodRouter<S>;
}

impl CatchUpExt for CatchUp {
    fn layer(&self) -> CatchUpLayer {
        let routes = Routes::default();
        self.deliver_with(routes.clone());
        CatchUpLayer {
            catch_up: self.clone(),
            routes,
        }
    }

    fn health<S: Clone + Send + Sync + 'static>(&self) -> axum::routing::MethodRouter<S> {
        let catch_up = self.clone();
        axum::routing::get(move || async move {
            let status = catch_up.status();
            let code = if status.is_healthy() {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            (
                code,
                [(header::CONTENT_TYPE, "application/json")],
                status.json(),
            )
        })
    }

    fn metrics<S: Clone + Send + Sync + 'static>(&self) -> axum::routing::MethodRouter<S> {
        let catch_up = self.clone();
        axum::routing::get(move || async move {
            (
                [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                catch_up.status().prometheus(),
            )
        })
    }
}

/// The route's service, wrapped: what [`CatchUpLayer`] makes.
#[derive(Debug, Clone)]
pub struct CatchUpService<S> {
    inner: S,
    catch_up: CatchUp,
}

/// The wrapped service is infallible, as every axum route is: requiring it lets the compiler
/// infer the error type of the layers between this one and the handler.
impl<S> Layer<S> for CatchUpLayer
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
{
    type Service = CatchUpService<S>;

    fn layer(&self, inner: S) -> CatchUpService<S> {
        self.routes.add(inner.clone());
        if tokio::runtime::Handle::try_current().is_ok() {
            self.catch_up.start();
        }
        CatchUpService {
            inner,
            catch_up: self.catch_up.clone(),
        }
    }
}

impl<S> Service<Request> for CatchUpService<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        if !self.catch_up.is_started() {
            self.catch_up.start();
        }
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let catch_up = self.catch_up.clone();
        if let Some(receiver) = catch_up.ordered_receiver().cloned()
            && request.method() == Method::POST
        {
            return Box::pin(ordered(inner, catch_up, receiver, request));
        }
        let headers = request.headers();
        let hint = kxp_catchup::hint(|name| headers.get(name)?.to_str().ok());
        Box::pin(async move {
            let response = inner.call(request).await?;
            if let Some((endpoint_id, sequence)) = hint
                && response.status().is_success()
            {
                catch_up.observe(&endpoint_id, sequence);
            }
            Ok(response)
        })
    }
}

/// Ordered mode's side of a `POST`: the body read as the verifier reads it, then held and
/// answered here, or handed to the route (the catch-up's own requests).
async fn ordered<S>(
    mut inner: S,
    catch_up: CatchUp,
    receiver: kxp_receiver::Receiver,
    request: Request,
) -> Result<Response, Infallible>
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    let log = RequestLog::start();
    let (parts, body) = match read_request(&receiver, request).await {
        Ok(read) => read,
        Err(rejection) => return Ok(reject(log, rejection)),
    };
    let header = |name: &str| parts.headers.get(name).map_or(&b""[..], |v| v.as_bytes());
    Ok(match catch_up.receive(header, body.clone()).await {
        Received::Held {
            event_id,
            key,
            duplicate,
        } => {
            let outcome = if duplicate { "duplicate" } else { "held" };
            log.finish(&event_id, "ok", outcome, 200);
            let mut response = (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                Received::json_body(duplicate),
            )
                .into_response();
            if let Some(value) =
                verified_key_value(200, key).and_then(|v| HeaderValue::from_str(&v).ok())
            {
                response
                    .headers_mut()
                    .insert(HeaderName::from_static(VERIFIED_KEY_HEADER), value);
            }
            response
        }
        Received::Rejected(rejection) => reject(log, rejection),
        Received::Stopped {
            event_id,
            stop,
            retry_after,
        } => {
            log.finish(&event_id, "ok", "stopped", 503);
            (
                StatusCode::SERVICE_UNAVAILABLE,
                [
                    (header::CONTENT_TYPE, "application/json".to_owned()),
                    (header::RETRY_AFTER, retry_after.to_string()),
                ],
                Received::stopped_body(stop),
            )
                .into_response()
        }
        Received::Unavailable => {
            let outcome = Outcome::StoreUnavailable {
                retry_after: kxp_dedup::STORE_UNAVAILABLE_RETRY_AFTER,
            };
            log.finish("", "ok", outcome.as_str(), outcome.status());
            Handled(outcome).into_response()
        }
        Received::PassThrough => {
            let Ok(response) = inner
                .call(Request::from_parts(parts, Body::from(body)))
                .await;
            response
        }
    })
}

/// One wrapped service, called with a request: its status.
type Call = Arc<dyn Fn(Request) -> BoxFuture<'static, Result<u16, String>> + Send + Sync>;

/// Delivers recovered events by calling the route's own services in process. A layer on a
/// `MethodRouter` wraps each method's handler and the method fallback (which answers 405), so
/// a request goes to each in turn until one is not the fallback's 405.
#[derive(Clone, Default)]
struct Routes(Arc<Mutex<Vec<Call>>>);

impl Routes {
    fn add<S>(&self, service: S)
    where
        S: Service<Request, Response = Response, Error = Infallible>
            + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Send + 'static,
    {
        let call: Call = Arc::new(move |request: Request| {
            let mut service = service.clone();
            Box::pin(async move {
                let Ok(()) = std::future::poll_fn(|cx| service.poll_ready(cx)).await;
                let Ok(response) = service.call(request).await;
                Ok(response.status().as_u16())
            })
        });
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(call);
    }
}

impl Deliver for Routes {
    fn deliver(&self, item: kxp_catchup::Request) -> BoxFuture<'_, Result<u16, String>> {
        let calls = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        Box::pin(async move {
            let mut status = Err("the catch-up layer wraps no route".to_owned());
            for call in calls {
                status = call(request(&item)?).await;
                if status != Ok(405) {
                    break;
                }
            }
            status
        })
    }
}

/// The item as an axum request to the route.
fn request(item: &kxp_catchup::Request) -> Result<Request, String> {
    let mut request = http::Request::post("/")
        .body(Body::from(item.body.clone()))
        .map_err(|e| e.to_string())?;
    for (name, value) in &item.headers {
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(name.as_bytes()),
            http::HeaderValue::from_str(value),
        ) {
            request.headers_mut().append(name, value);
        }
    }
    Ok(request)
}
