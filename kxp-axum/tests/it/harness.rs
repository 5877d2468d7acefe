//! A real server on 127.0.0.1:0 per test, and the log lines it wrote.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use kxp_axum::{Receiver, VerifyLayer};
use kxp_verify::{Secret, Signer};

pub const SECRET: &str = "41ab92590637ac82026ca65266b2898428ea491b1e6d543d7202cf486ea62965";
pub const NOW: u64 = 1_764_464_523;

/// Serves `routes` behind a `VerifyLayer` built from `receiver`; returns the base URL.
pub async fn serve(routes: Router, receiver: Receiver) -> String {
    let app = routes.layer(VerifyLayer::new(receiver));
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
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

/// An HTTP client for the tests (plain HTTP on loopback).
pub fn client() -> reqwest::Client {
    reqwest::Client::new()
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

/// Collects the JSON log lines a test's server writes.
///
/// One global subscriber serves the whole test binary (per-test scoped subscribers race with
/// tracing's global callsite-interest cache and drop lines now and then); it writes each line to
/// the buffer of the thread that logged it. Tests run on a current-thread runtime, so the
/// server's tasks log into the test's own buffer.
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

thread_local! {
    static CAPTURE: std::cell::RefCell<Option<Logs>> = const { std::cell::RefCell::new(None) };
}

/// Stops capturing into a test's buffer when the test ends.
pub struct Capturing;

impl Drop for Capturing {
    fn drop(&mut self) {
        CAPTURE.with(|c| c.borrow_mut().take());
    }
}

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
    pub fn install(&self) -> Capturing {
        static GLOBAL: std::sync::Once = std::sync::Once::new();
        GLOBAL.call_once(|| {
            tracing_subscriber::fmt()
                .json()
                .flatten_event(true)
                .with_writer(|| ThreadWriter)
                .init();
        });
        CAPTURE.with(|c| *c.borrow_mut() = Some(self.clone()));
        Capturing
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
