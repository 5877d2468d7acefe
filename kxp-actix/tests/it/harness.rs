//! A real actix-web server on 127.0.0.1:0 per test, and the log lines it wrote.
//!
//! actix-web runs requests on worker threads of its own, so the test thread's default
//! subscriber would see nothing. One global subscriber serves the whole test binary (scoped
//! per-test subscribers race with tracing's global callsite-interest cache and drop lines now
//! and then, as kxp-axum's tests found) and writes each line to the buffer of the thread that
//! logged it. Every test server has exactly one worker thread, which claims the server's
//! buffer when it builds the app, so each test reads exactly the lines its own server wrote.

use std::cell::RefCell;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Once};

use actix_web::dev::ServerHandle;
use actix_web::{App, HttpServer, web};
use kxp_actix::{Receiver, VerifyMiddleware};
use kxp_verify::{Secret, Signer};

pub const SECRET: &str = "41ab92590637ac82026ca65266b2898428ea491b1e6d543d7202cf486ea62965";
pub const NOW: u64 = 1_764_464_523;

/// A running server: its base URL and the log lines it wrote. Dropping the test's runtime stops
/// it; [`Server::stop`] does so sooner.
pub struct Server {
    pub url: String,
    pub logs: Logs,
    handle: ServerHandle,
}

impl Server {
    pub async fn stop(self) {
        self.handle.stop(false).await;
    }
}

/// Serves `routes` with a [`VerifyMiddleware`] built from `receiver` around the whole app.
pub async fn serve<F>(routes: F, receiver: Receiver) -> Server
where
    F: Fn(&mut web::ServiceConfig) + Send + Clone + 'static,
{
    let logs = Logs::new();
    let worker_logs = logs.clone();
    let verify = VerifyMiddleware::new(receiver);
    let http = HttpServer::new(move || {
        worker_logs.capture_this_thread();
        App::new().configure(routes.clone()).wrap(verify.clone())
    });
    let http = http.workers(1).disable_signals().bind(LOCAL).unwrap();
    let addr = http.addrs()[0];
    start(http.run(), addr, logs)
}

/// Serves `routes` as they are: the test wires (or leaves out) the middleware itself.
pub async fn serve_routes<F>(routes: F) -> Server
where
    F: Fn(&mut web::ServiceConfig) + Send + Clone + 'static,
{
    let logs = Logs::new();
    let worker_logs = logs.clone();
    let http = HttpServer::new(move || {
        worker_logs.capture_this_thread();
        App::new().configure(routes.clone())
    });
    let http = http.workers(1).disable_signals().bind(LOCAL).unwrap();
    let addr = http.addrs()[0];
    start(http.run(), addr, logs)
}

const LOCAL: (&str, u16) = ("127.0.0.1", 0);

fn start(http: actix_web::dev::Server, addr: SocketAddr, logs: Logs) -> Server {
    let handle = http.handle();
    actix_web::rt::spawn(http);
    Server {
        url: format!("http://{addr}"),
        logs,
        handle,
    }
}

/// A receiver with [`SECRET`] and the clock pinned at [`NOW`].
pub fn receiver() -> Receiver {
    Receiver::new(kxp_verify::Verifier::from_secret_list(SECRET).unwrap()).clock(|| NOW)
}

pub fn event_body(id: &str) -> String {
    format!(
        r#"{{"id":"{id}","type":"payment.succeeded","api_version":"2026-11-01","created_at":"2026-11-30T01:02:03Z","data":{{"amount":1999}}}}"#
    )
}

pub fn sign(secret: &str, body: &[u8]) -> String {
    Signer::new(Secret::new(secret).unwrap())
        .sign(NOW, body)
        .to_string()
}

/// An HTTP client for the tests: plain HTTP to the test's own server on 127.0.0.1, never
/// through a proxy from the environment.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

pub async fn post(
    url: &str,
    header: Option<&str>,
    body: impl Into<reqwest::Body>,
) -> (u16, String) {
    let mut request = client().post(format!("{url}/webhooks")).body(body);
    if let Some(header) = header {
        request = request.header("X-Kxp-Signature", header);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// The JSON log lines one server wrote.
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

thread_local! {
    static CAPTURE: RefCell<Option<Logs>> = const { RefCell::new(None) };
}

/// The global subscriber's writer: appends to the logging thread's buffer, if it has one.
struct ThreadWriter;

impl Write for ThreadWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        CAPTURE.with(|c| {
            if let Some(logs) = c.borrow().as_ref() {
                logs.0.lock().unwrap().extend_from_slice(buf);
            }
        });
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// An empty buffer; installs the global subscriber the first time.
    fn new() -> Logs {
        static GLOBAL: Once = Once::new();
        GLOBAL.call_once(|| {
            tracing_subscriber::fmt()
                .json()
                .flatten_event(true)
                .with_writer(|| ThreadWriter)
                .init();
        });
        Logs::default()
    }

    /// Sends what the calling thread logs from now on to this buffer. Called by the server's
    /// app factory, which actix-web runs on the worker thread itself.
    fn capture_this_thread(&self) {
        CAPTURE.with(|c| *c.borrow_mut() = Some(self.clone()));
    }

    pub fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }

    /// The request lines, parsed.
    pub fn requests(&self) -> Vec<serde_json::Value> {
        self.text()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|l| l["target"] == "kxp_webhooks")
            .collect()
    }
}
