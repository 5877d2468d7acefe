//! kxp-actix as a receiver under test: `VerifyMiddleware` on one resource whose handler uses
//! every extractor and the dedup glue of one mode. Each server runs on a thread of its own (an
//! actix system) with one worker thread, which claims the server's log buffer when it builds
//! the app, so each server's lines are its own.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::dev::ServerHandle;
use actix_web::{App, Either, HttpResponse, HttpServer, web};
use futures_util::StreamExt;
use kxp_actix::dedup::{self, Handled, Store, Tx};
use kxp_actix::{Receiver, VerifiedBody, VerifiedEvent, VerifyMiddleware};
use kxp_testkit::conformance::payments::{self, Conn};
use kxp_testkit::conformance::{
    CapturedLogs, Config, Effect, Framework, Mode, ReceiverUnderTest, RunningReceiver,
};
use kxp_verify::{Secret, Verifier};

/// The lease of claim/complete mode: far longer than any test.
const LEASE: Duration = Duration::from_secs(60);

/// A running actix-web server: its base URL and the log lines it wrote. Stopped when dropped.
pub(crate) struct Server {
    pub base: String,
    pub logs: CapturedLogs,
    handle: ServerHandle,
}

impl Drop for Server {
    fn drop(&mut self) {
        // The command is sent at once; the returned future only waits for the end.
        drop(self.handle.stop(false));
    }
}

/// Serves the app `routes` configures, with one worker thread, on 127.0.0.1:0.
pub(crate) fn serve<F>(routes: F) -> Server
where
    F: Fn(&mut web::ServiceConfig) + Send + Clone + 'static,
{
    let logs = CapturedLogs::new();
    let worker_logs = logs.clone();
    let (sender, receiver) = std::sync::mpsc::channel::<(SocketAddr, ServerHandle)>();
    std::thread::spawn(move || {
        actix_web::rt::System::new().block_on(async move {
            let http = HttpServer::new(move || {
                worker_logs.capture_this_thread();
                App::new().configure(routes.clone())
            })
            .workers(1)
            .disable_signals()
            .bind(("127.0.0.1", 0))
            .unwrap();
            let addr = http.addrs()[0];
            let server = http.run();
            sender.send((addr, server.handle())).unwrap();
            server.await.unwrap();
        });
    });
    let (addr, handle) = receiver.recv().unwrap();
    Server {
        base: format!("http://{addr}"),
        logs,
        handle,
    }
}

/// kxp-actix with its handler in one dedup mode.
pub(crate) struct Actix(pub Mode);

/// The `data` the handler reads, typed.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
pub(crate) struct Payment {
    amount: Option<i64>,
    currency: Option<String>,
}

#[derive(Clone)]
struct AppState {
    store: Store,
    mode: Mode,
    slow: Option<Duration>,
    failing: Arc<AtomicBool>,
    /// The effects of claim/complete mode (in-transaction mode writes them to the database).
    effects: Arc<Mutex<Vec<Effect>>>,
}

pub(crate) struct Running {
    server: Server,
    state: AppState,
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

impl ReceiverUnderTest for Actix {
    type Running = Running;

    fn name(&self) -> String {
        format!("kxp-actix ({:?})", self.0)
    }

    fn mode(&self) -> Mode {
        self.0
    }

    fn framework(&self) -> Framework {
        Framework::Actix
    }

    async fn start(&self, config: Config) -> Running {
        let store = Store::connect(&config.database_url).await.unwrap();
        if self.0 == Mode::InTransaction {
            if let Some(pool) = store.sqlite_pool() {
                payments::create_table(Conn::Sqlite(&mut pool.acquire().await.unwrap())).await;
            } else {
                let pool = store.postgres_pool().unwrap();
                payments::create_table(Conn::Postgres(&mut pool.acquire().await.unwrap())).await;
            }
        }
        let state = AppState {
            store,
            mode: self.0,
            slow: config.slow,
            failing: Arc::default(),
            effects: Arc::default(),
        };
        let data = web::Data::new(state.clone());
        // As the crate docs show it: the middleware on the resource, the state as `web::Data`.
        let verify = VerifyMiddleware::new(receiver_for(&config));
        let server = serve(move |cfg: &mut web::ServiceConfig| {
            cfg.app_data(data.clone()).service(
                web::resource("/webhooks")
                    .wrap(verify.clone())
                    .route(web::post().to(webhook)),
            );
        });
        Running { server, state }
    }
}

/// Every extractor at once: the raw bytes must be the payload, unchanged, and whole (actix-web's
/// own 256 KiB limit for `web::Bytes` would not do: the payload is read by hand).
async fn webhook(
    app: web::Data<AppState>,
    raw: VerifiedBody,
    event: VerifiedEvent<Payment>,
    mut payload: web::Payload,
) -> Either<Handled, HttpResponse> {
    let mut body = Vec::new();
    while let Some(chunk) = payload.next().await {
        body.extend_from_slice(&chunk.unwrap());
    }
    if raw.bytes()[..] != body[..] || raw.event_id() != event.id() {
        return Either::Right(HttpResponse::InternalServerError().body("the body changed"));
    }
    let effect = Effect {
        event_id: event.id().to_owned(),
        amount: event.data().amount,
        currency: event.data().currency.clone(),
    };
    Either::Left(match app.mode {
        Mode::ClaimComplete => {
            dedup::process(&app.store, &event, LEASE, || async {
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
        }
        Mode::InTransaction => {
            dedup::process_in_transaction(&app.store, &event, |tx| async {
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
        }
    })
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
        format!("{}/webhooks", self.server.base)
    }

    async fn log_lines(&self, request_lines: usize) -> Vec<String> {
        self.server.logs.wait_for(request_lines).await
    }

    async fn effects(&self) -> Vec<Effect> {
        if self.state.mode == Mode::ClaimComplete {
            return self.state.effects.lock().unwrap().clone();
        }
        let store = &self.state.store;
        if let Some(pool) = store.sqlite_pool() {
            payments::recorded(Conn::Sqlite(&mut pool.acquire().await.unwrap())).await
        } else {
            let pool = store.postgres_pool().unwrap();
            payments::recorded(Conn::Postgres(&mut pool.acquire().await.unwrap())).await
        }
    }

    async fn fail_handler(&self, failing: bool) {
        self.state.failing.store(failing, Ordering::SeqCst);
    }

    async fn abandon_claim(&self, event_id: &str, lease: Duration) {
        let claim = self.state.store.claim(event_id, lease).await.unwrap();
        assert_eq!(claim, kxp_dedup::Claim::Claimed);
    }
}
