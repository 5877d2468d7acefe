//! kxp-axum as a receiver under test: `VerifyLayer` around one route whose handler uses every
//! extractor and the dedup glue of one mode, served on 127.0.0.1:0 from the test's own
//! (current-thread) runtime, whose thread's log lines it captures.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::Bytes;
use http::StatusCode;
use kxp_axum::dedup::{self, Store, Tx};
use kxp_axum::{Receiver, VerifiedBody, VerifiedEvent};
use kxp_testkit::conformance::payments::{self, Conn};
use kxp_testkit::conformance::{
    CapturedLogs, Config, Effect, Framework, Mode, ReceiverUnderTest, RunningReceiver,
};
use kxp_verify::{Secret, Verifier};

/// The lease of claim/complete mode: far longer than any test.
const LEASE: Duration = Duration::from_secs(60);

/// kxp-axum with its handler in one dedup mode.
pub(crate) struct Axum(pub Mode);

/// The `data` the handler reads, typed.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
pub(crate) struct Payment {
    amount: Option<i64>,
    currency: Option<String>,
}

#[derive(Clone)]
struct App {
    store: Store,
    mode: Mode,
    slow: Option<Duration>,
    failing: Arc<AtomicBool>,
    /// The effects of claim/complete mode (in-transaction mode writes them to the database).
    effects: Arc<Mutex<Vec<Effect>>>,
}

pub(crate) struct Running {
    url: String,
    logs: CapturedLogs,
    app: App,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// A [`Receiver`] for `config`: secrets, clock, tolerance, body limit.
pub(crate) fn receiver_for(config: &Config) -> Receiver {
    let secrets = config.secrets.iter().map(|s| Secret::new(s).unwrap());
    let mut receiver =
        Receiver::new(Verifier::with_secrets(secrets).unwrap()).body_limit(config.body_limit);
    if let Some(now) = config.now {
        receiver = receiver.clock(move || now);
    }
    if let Some(tolerance) = config.tolerance {
        receiver = receiver.tolerance(tolerance);
    }
    receiver
}

impl ReceiverUnderTest for Axum {
    type Running = Running;

    fn name(&self) -> String {
        format!("kxp-axum ({:?})", self.0)
    }

    fn mode(&self) -> Mode {
        self.0
    }

    fn framework(&self) -> Framework {
        Framework::Axum
    }

    async fn start(&self, config: Config) -> Running {
        let store = Store::connect(&config.database_url).await.unwrap();
        if self.0 == Mode::InTransaction {
            create_payments(&store).await;
        }
        let app = App {
            store,
            mode: self.0,
            slow: config.slow,
            failing: Arc::default(),
            effects: Arc::default(),
        };
        // As the crate docs show it: the layer on the webhook route only.
        let verify = kxp_axum::VerifyLayer::new(receiver_for(&config));
        let routes = Router::new()
            .route("/webhooks", post(webhook).layer(verify))
            .with_state(app.clone());
        let logs = CapturedLogs::new();
        // The server runs on this thread (the test's runtime is current-thread): so do its logs.
        logs.capture_this_thread();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/webhooks", listener.local_addr().unwrap());
        let server = tokio::spawn(async move { axum::serve(listener, routes).await.unwrap() });
        Running {
            url,
            logs,
            app,
            server,
        }
    }
}

/// Every extractor at once: the raw bytes must be the body, unchanged.
async fn webhook(
    State(app): State<App>,
    raw: VerifiedBody,
    event: VerifiedEvent<Payment>,
    body: Bytes,
) -> Response {
    if raw.bytes() != &body || raw.event_id() != event.id() {
        return (StatusCode::INTERNAL_SERVER_ERROR, "the body changed").into_response();
    }
    let effect = Effect {
        event_id: event.id().to_owned(),
        amount: event.data().amount,
        currency: event.data().currency.clone(),
    };
    match app.mode {
        Mode::ClaimComplete => dedup::process(&app.store, &event, LEASE, || async {
            if let Some(slow) = app.slow {
                tokio::time::sleep(slow).await;
            }
            if app.failing.load(Ordering::SeqCst) {
                return Err("the card processor timed out");
            }
            app.effects.lock().unwrap().push(effect);
            Ok(())
        })
        .await
        .into_response(),
        Mode::InTransaction => dedup::process_in_transaction(&app.store, &event, |tx| async {
            if let Some(slow) = app.slow {
                tokio::time::sleep(slow).await;
            }
            let tx = record(tx, &effect).await?;
            if app.failing.load(Ordering::SeqCst) {
                // After the write: the rollback must take the row with it.
                return Err("the ledger refused".to_owned());
            }
            Ok(tx)
        })
        .await
        .into_response(),
    }
}

async fn create_payments(store: &Store) {
    if let Some(pool) = store.sqlite_pool() {
        payments::create_table(Conn::Sqlite(&mut pool.acquire().await.unwrap())).await;
    } else {
        let pool = store.postgres_pool().unwrap();
        payments::create_table(Conn::Postgres(&mut pool.acquire().await.unwrap())).await;
    }
}

/// The side effect, written on the dedup transaction's own connection.
async fn record(mut tx: Tx, effect: &Effect) -> Result<Tx, String> {
    let conn = match tx.sqlite() {
        Some(conn) => Conn::Sqlite(conn),
        None => Conn::Postgres(tx.postgres().unwrap()),
    };
    payments::record(conn, effect)
        .await
        .map_err(|e| e.to_string())?;
    Ok(tx)
}

impl RunningReceiver for Running {
    fn url(&self) -> String {
        self.url.clone()
    }

    async fn log_lines(&self, request_lines: usize) -> Vec<String> {
        self.logs.wait_for(request_lines).await
    }

    async fn effects(&self) -> Vec<Effect> {
        if self.app.mode == Mode::ClaimComplete {
            return self.app.effects.lock().unwrap().clone();
        }
        let store = &self.app.store;
        if let Some(pool) = store.sqlite_pool() {
            payments::recorded(Conn::Sqlite(&mut pool.acquire().await.unwrap())).await
        } else {
            let pool = store.postgres_pool().unwrap();
            payments::recorded(Conn::Postgres(&mut pool.acquire().await.unwrap())).await
        }
    }

    async fn fail_handler(&self, failing: bool) {
        self.app.failing.store(failing, Ordering::SeqCst);
    }

    async fn abandon_claim(&self, event_id: &str, lease: Duration) {
        let claim = self.app.store.claim(event_id, lease).await.unwrap();
        assert_eq!(claim, kxp_dedup::Claim::Claimed);
    }
}
