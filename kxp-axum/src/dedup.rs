//! Exactly-once processing: the [`kxp_dedup`] outcome of a handler, as an axum response.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use axum::{Router, extract::State, routing::post};
//! use kxp_axum::dedup::{self, Handled, Store};
//! use kxp_axum::{Receiver, VerifiedEvent, VerifyLayer};
//!
//! async fn webhook(State(store): State<Store>, event: VerifiedEvent) -> Handled {
//!     dedup::process(&store, &event, Duration::from_secs(60), || async {
//!         // Fulfil the order. An error here answers 500, and the next delivery retries.
//!         Ok::<(), std::io::Error>(())
//!     })
//!     .await
//! }
//!
//! # async fn app() -> Result<Router, Box<dyn std::error::Error>> {
//! let store = Store::connect("sqlite://webhooks.db").await?;
//! // On the webhook route only: a `Router::layer` would also answer challenges, and 401,
//! // at every other path.
//! let verify = VerifyLayer::new(Receiver::from_env("KXP_WEBHOOK_SECRET")?);
//! let app = Router::new()
//!     .route("/webhooks", post(webhook).layer(verify))
//!     .with_state(store);
//! # Ok(app) }
//! ```

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
pub use kxp_dedup::{Outcome, Store, Tx};

use crate::extract::VerifiedEvent;
use crate::layer::HandlerOutcome;

/// A dedup [`Outcome`] as a response: 200 processed or duplicate, 409 in progress, 500 failed,
/// 503 store unavailable, with `Retry-After` on 409 and 503 and `{"outcome":"<name>"}` as the
/// body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handled(pub Outcome);

impl IntoResponse for Handled {
    fn into_response(self) -> Response {
        let outcome = self.0;
        let status =
            StatusCode::from_u16(outcome.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (
            status,
            [(header::CONTENT_TYPE, "application/json")],
            outcome.json_body(),
        )
            .into_response();
        if let Some(seconds) = outcome.retry_after_header() {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
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
