//! A complete kxp webhook receiver on axum: it checks `X-Kxp-Signature`, answers the endpoint
//! challenge, and records each payment exactly once, however often it is delivered.
//!
//! ```sh
//! KXP_WEBHOOK_SECRET=… cargo run -p kxp-examples --bin axum-receiver
//! ```
//!
//! Settings (see `kxp_examples::Config`): `KXP_WEBHOOK_SECRET` (required; `new,old` while
//! rotating), `KXP_LISTEN` (default `127.0.0.1:3000`), `DATABASE_URL` (default
//! `sqlite://kxp-receiver.db`; `postgres://…` works the same).
//!
//! With `KXP_ORDERED=1`, `KXP_SENDER_URL` and `KXP_ENDPOINT_ID` it runs in **ordered mode**:
//! each delivery is verified, held and answered 200, and the handler gets each payment's events
//! in the order the platform produced them, from the sender's feed (read with the webhook
//! secret). `GET /healthz/webhooks` and `GET /metrics/webhooks` then say where it stands.

use std::process::ExitCode;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use kxp_axum::catch_up::{CatchUp, CatchUpConfig, CatchUpExt, Credential};
use kxp_axum::dedup::{self, Handled, Store};
use kxp_axum::{ServeLimits, VerifiedEvent, VerifyLayer};
use kxp_examples::{Config, Payment};

/// What the handler needs: the dedup store (also this app's database) and the testing aids.
#[derive(Clone)]
struct AppState {
    store: Store,
    slow: Option<Duration>,
    refuse: Option<String>,
}

/// `POST /webhooks`, reached only with a verified event. In one transaction: mark the event id
/// processed and insert the payment. A duplicate answers 200 without running the closure; an
/// error rolls both back and answers 500, so the sender's retry runs it again.
async fn webhook(State(app): State<AppState>, event: VerifiedEvent<Payment>) -> Handled {
    dedup::process_in_transaction(&app.store, &event, |tx| {
        kxp_examples::record_payment(tx, &event, app.slow, app.refuse.as_deref())
    })
    .await
}

#[tokio::main]
async fn main() -> ExitCode {
    let config = match Config::from_env() {
        Ok(config) => config,
        Err(error) => {
            eprintln!("axum-receiver: {error}");
            return ExitCode::from(2);
        }
    };
    kxp_examples::init_logging();
    match run(config).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("axum-receiver: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(config: Config) -> Result<(), Box<dyn std::error::Error>> {
    let store = kxp_examples::open_database(&config.database_url).await?;
    // On the webhook route only (any method of it): the layer answers
    // `GET /webhooks?challenge=…` there, and every other request to it must be signed. A
    // `Router::layer` would wrap every path, fallback included: a challenge answered at any URL
    // proves nothing, and unsigned requests elsewhere would get 401 instead of 404.
    let route = post(webhook).layer(VerifyLayer::new(config.receiver.clone()));
    let (route, catch_up) = match &config.ordered {
        None => (route, None),
        Some(ordered) => {
            // Ordered mode: outside the verifier, with the same receiver. The feed is read with
            // the webhook secret's feed key; the checkpoint and held events live in this
            // database, beside the dedup records.
            let credential = Credential::Secret(ordered.secret.clone());
            let catch_up_config = CatchUpConfig::new(&ordered.sender_url, credential)
                .endpoint(&ordered.endpoint_id)
                .ordered(config.receiver.clone());
            let catch_up = CatchUp::new(catch_up_config, store.clone())?;
            (route.layer(catch_up.layer()), Some(catch_up))
        }
    };
    let mut app = Router::new().route("/webhooks", route);
    if let Some(catch_up) = &catch_up {
        app = app
            .route("/healthz/webhooks", catch_up.health())
            .route("/metrics/webhooks", catch_up.metrics());
    }
    let app = app.with_state(AppState {
        store: store.clone(),
        slow: config.slow,
        refuse: config.refuse,
    });
    let listener = tokio::net::TcpListener::bind(config.listen).await?;
    kxp_examples::log_listening(listener.local_addr()?, &store);
    // `kxp_axum::serve` rather than `axum::serve`: a client gets 10 s to send a request header
    // (and to start the next on a kept-alive connection), open connections are capped below
    // the file limit (64 descriptors kept for the database and the logs), and shutdown ends.
    let limits = ServeLimits::default().within_file_limit(64);
    // SIGTERM (what systemd, Kubernetes or Docker send to stop a process) or Ctrl-C: finish
    // the requests in flight (for up to 10 s), then stop. Any other end loses nothing either:
    // an unfinished transaction rolls back, and the sender delivers again.
    kxp_axum::serve(listener, app, limits, kxp_examples::stop_requested()).await?;
    if let Some(catch_up) = catch_up {
        catch_up.stop();
    }
    store.close().await;
    Ok(())
}
