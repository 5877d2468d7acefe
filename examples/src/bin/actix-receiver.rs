//! A complete kxp webhook receiver on actix-web: it checks `X-Kxp-Signature`, answers the
//! endpoint challenge, and records each payment exactly once, however often it is delivered.
//!
//! ```sh
//! KXP_WEBHOOK_SECRET=… cargo run -p kxp-examples --bin actix-receiver
//! ```
//!
//! Settings (see `kxp_examples::Config`): `KXP_WEBHOOK_SECRET` (required; `new,old` while
//! rotating), `KXP_LISTEN` (default `127.0.0.1:3000`), `DATABASE_URL` (default
//! `sqlite://kxp-receiver.db`; `postgres://…` works the same).

use std::process::ExitCode;
use std::time::Duration;

use actix_web::{App, HttpServer, web};
use kxp_actix::dedup::{self, Handled, Store};
use kxp_actix::{VerifiedEvent, VerifyMiddleware};
use kxp_examples::{Config, Payment};

/// What the handler needs: the dedup store (also this app's database) and the testing aids.
struct AppState {
    store: Store,
    slow: Option<Duration>,
    refuse: Option<String>,
}

/// `POST /webhooks`, reached only with a verified event. In one transaction: mark the event id
/// processed and insert the payment. A duplicate answers 200 without running the closure; an
/// error rolls both back and answers 500, so the sender's retry runs it again.
async fn webhook(app: web::Data<AppState>, event: VerifiedEvent<Payment>) -> Handled {
    dedup::process_in_transaction(&app.store, &event, |tx| {
        kxp_examples::record_payment(tx, &event, app.slow, app.refuse.as_deref())
    })
    .await
}

#[actix_web::main]
async fn main() -> ExitCode {
    let config = match Config::from_env() {
        Ok(config) => config,
        Err(error) => {
            eprintln!("actix-receiver: {error}");
            return ExitCode::from(2);
        }
    };
    kxp_examples::init_logging();
    match run(config).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("actix-receiver: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(config: Config) -> Result<(), Box<dyn std::error::Error>> {
    if config.ordered.is_some() {
        return Err(
            "ordered mode (KXP_ORDERED=1) is shown in the axum example; with actix-web it is \
             kxp-actix's CatchUpMiddleware with CatchUpConfig::ordered"
                .into(),
        );
    }
    let store = kxp_examples::open_database(&config.database_url).await?;
    let state = web::Data::new(AppState {
        store: store.clone(),
        slow: config.slow,
        refuse: config.refuse,
    });
    // Built once, here: the factory below runs on every worker thread and clones it.
    let verify = VerifyMiddleware::new(config.receiver);
    let server = HttpServer::new(move || {
        App::new().app_data(state.clone()).service(
            // The middleware wraps the resource, and also answers `GET /webhooks?challenge=…`;
            // every other request to it must be signed.
            web::resource("/webhooks")
                .wrap(verify.clone())
                .route(web::post().to(webhook)),
        )
    })
    // actix-web's own signal handling stops gracefully on SIGTERM but at once on SIGINT
    // (Ctrl-C), cutting off the requests in flight: both are handled below instead. 10 s for
    // the requests in flight, as the axum example.
    .disable_signals()
    .shutdown_timeout(10)
    .bind(config.listen)?;
    for addr in server.addrs() {
        kxp_examples::log_listening(addr, &store);
    }
    let server = server.run();
    let handle = server.handle();
    actix_web::rt::spawn(async move {
        kxp_examples::stop_requested().await;
        // Graceful: stop accepting, finish the requests in flight, then end `run`.
        handle.stop(true).await;
    });
    server.await?;
    store.close().await;
    Ok(())
}
