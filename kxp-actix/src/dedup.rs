//! Exactly-once processing: the [`kxp_dedup`] outcome of a handler, as an actix-web response.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use actix_web::{App, HttpServer, web};
//! use kxp_actix::dedup::{self, Handled, Store};
//! use kxp_actix::{VerifiedEvent, VerifyMiddleware};
//!
//! async fn webhook(store: web::Data<Store>, event: VerifiedEvent) -> Handled {
//!     dedup::process(&store, &event, Duration::from_secs(60), || async {
//!         // Fulfil the order. An error here answers 500, and the next delivery retries.
//!         Ok::<(), std::io::Error>(())
//!     })
//!     .await
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let store = Store::connect("sqlite://webhooks.db").await?;
//! let verify = VerifyMiddleware::from_env("KXP_WEBHOOK_SECRET")?;
//! HttpServer::new(move || {
//!     App::new().app_data(web::Data::new(store.clone())).service(
//!         web::resource("/webhooks")
//!             .wrap(verify.clone())
//!             .route(web::post().to(webhook)),
//!     )
//! })
//! .bind(("127.0.0.1", 3000))?
//! .run()
//! .await?;
//! # Ok(()) }
//! ```

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use actix_web::body::BoxBody;
use actix_web::http::{StatusCode, header};
use actix_web::{HttpRequest, HttpResponse, Responder};
pub use kxp_dedup::{Outcome, Store, Tx};

use crate::extract::VerifiedEvent;
use crate::middleware::HandlerOutcome;

/// A dedup [`Outcome`] as a response: 200 processed or duplicate, 409 in progress, 500 failed,
/// 503 store unavailable, with `Retry-After` on 409 and 503 and `{"outcome":"<name>"}` as the
/// body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handled(pub Outcome);

impl Responder for Handled {
    type Body = BoxBody;

    fn respond_to(self, _request: &HttpRequest) -> HttpResponse {
        let outcome = self.0;
        let status =
            StatusCode::from_u16(outcome.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut builder = HttpResponse::build(status);
        builder.content_type("application/json");
        if let Some(seconds) = outcome.retry_after_header() {
            builder.insert_header((header::RETRY_AFTER, seconds));
        }
        let mut response = builder.body(outcome.json_body());
        response
            .extensions_mut()
            .insert(HandlerOutcome(outcome.as_str()));
        response
    }
}

/// Runs `work` once per event id: claims the id with a `lease` (how long a delivery may take
/// before another one may assume this one died), then marks it done, or failed so that the next
/// delivery retries.
pub async fn process<T, F, Fut, E>(
    store: &Store,
    event: &VerifiedEvent<T>,
    lease: Duration,
    work: F,
) -> Handled
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: Display,
{
    Handled(kxp_dedup::process(store, event.id(), lease, work).await)
}

/// Runs `work` inside a database transaction that also records the event id, so the side effect
/// and the "done" mark commit together or not at all. `work` gets the transaction and hands it
/// back; an error rolls everything back and answers 500.
pub async fn process_in_transaction<T, F, Fut, E>(
    store: &Store,
    event: &VerifiedEvent<T>,
    work: F,
) -> Handled
where
    F: FnOnce(Tx) -> Fut,
    Fut: Future<Output = Result<Tx, E>>,
    E: Display,
{
    Handled(kxp_dedup::process_in_transaction(store, event.id(), work).await)
}
