//! Serving an app with the bounds `axum::serve` has no settings for: a header-read and idle
//! timeout, a cap on open connections, and a shutdown that ends.
//!
//! Without them a server on the open internet is at the mercy of its slowest clients: a
//! connection that sends half a request header, or nothing at all after its last response, is
//! kept forever, and enough of them use up the process's file descriptors (then nothing else
//! can open a socket or a file) and hold a graceful shutdown open indefinitely.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::response::Response;
use http::Request;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tower_service::Service;

/// The bounds [`serve`] enforces.
///
/// ```
/// use std::time::Duration;
/// use kxp_axum::ServeLimits;
///
/// let limits = ServeLimits::default()
///     .header_timeout(Duration::from_secs(5))
///     .max_connections(256);
/// assert_eq!(limits.connections(), 256);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeLimits {
    header_timeout: Duration,
    max_connections: usize,
    shutdown_grace: Duration,
}

impl Default for ServeLimits {
    /// 10 s to send a request header, and to start the next one on a kept-alive connection;
    /// 1,024 connections open at once (fewer if the file limit is lower, see
    /// [`ServeLimits::within_file_limit`]); 10 s for requests in flight at shutdown.
    fn default() -> ServeLimits {
        ServeLimits {
            header_timeout: Duration::from_secs(10),
            max_connections: 1024,
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

impl ServeLimits {
    /// How long a client has to send a whole request header, counted from when the connection
    /// opens or its last response was sent: it is also the idle timeout of kept-alive
    /// connections. Webhook senders send the header at once, so a few seconds is plenty.
    #[must_use]
    pub fn header_timeout(mut self, timeout: Duration) -> ServeLimits {
        self.header_timeout = timeout;
        self
    }

    /// The most connections open at once (at least 1). Beyond it new connections wait in the
    /// kernel's accept queue, taking no file descriptor, until one closes.
    #[must_use]
    pub fn max_connections(mut self, connections: usize) -> ServeLimits {
        self.max_connections = connections.max(1);
        self
    }

    /// How long requests in flight may take to finish after shutdown starts; connections still
    /// open then are closed.
    #[must_use]
    pub fn shutdown_grace(mut self, grace: Duration) -> ServeLimits {
        self.shutdown_grace = grace;
        self
    }

    /// Lowers the connection cap so that the process's file limit (`RLIMIT_NOFILE`, soft, as Linux reports it) keeps
    /// `reserved` descriptors for everything else it opens: database connections, outgoing
    /// HTTP, files. Clients then can never take the last descriptor. Never below 16. Unchanged
    /// where the limit cannot be read (unlimited, or not Linux).
    #[must_use]
    pub fn within_file_limit(self, reserved: usize) -> ServeLimits {
        match file_limit() {
            Some(limit) => {
                let room = limit.saturating_sub(reserved).max(16);
                self.max_connections(self.max_connections.min(room))
            }
            None => self,
        }
    }

    /// The connection cap.
    pub fn connections(&self) -> usize {
        self.max_connections
    }

    /// The header-read and idle timeout.
    pub fn header_read_timeout(&self) -> Duration {
        self.header_timeout
    }
}

/// The app on one connection: each request is given the connection's remote address as
/// [`ConnectInfo`] before the router sees it.
#[derive(Clone)]
struct WithPeer {
    app: Router,
    peer: SocketAddr,
}

impl Service<Request<Incoming>> for WithPeer {
    type Response = Response;
    type Error = Infallible;
    type Future = <Router as Service<Request<Incoming>>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Service::<Request<Incoming>>::poll_ready(&mut self.app, cx)
    }

    fn call(&mut self, mut request: Request<Incoming>) -> Self::Future {
        request.extensions_mut().insert(ConnectInfo(self.peer));
        self.app.call(request)
    }
}

/// The soft `Max open files` of `/proc/self/limits`: Linux's file limit without `unsafe`.
#[cfg(target_os = "linux")]
fn file_limit() -> Option<usize> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.trim_start_matches("Max open files")
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(not(target_os = "linux"))]
fn file_limit() -> Option<usize> {
    None
}

/// Serves `app` on `listener` over HTTP/1.1 within `limits` until `shutdown` completes, then
/// stops accepting, lets the requests in flight finish (within the grace) and closes every
/// connection. Every request carries its connection's remote address, for axum's
/// `ConnectInfo<SocketAddr>` extractor (as `axum::serve` does with
/// `into_make_service_with_connect_info`).
///
/// ```no_run
/// use axum::{Router, routing::post};
/// use kxp_axum::{Receiver, ServeLimits, VerifiedEvent, VerifyLayer};
///
/// async fn webhook(event: VerifiedEvent) -> &'static str {
///     println!("{}", event.id());
///     "ok"
/// }
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let verify = VerifyLayer::new(Receiver::from_env("KXP_WEBHOOK_SECRET")?);
/// let app = Router::new().route("/webhooks", post(webhook).layer(verify));
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
/// let limits = ServeLimits::default().within_file_limit(64);
/// kxp_axum::serve(listener, app, limits, async {
///     let _ = tokio::signal::ctrl_c().await;
/// })
/// .await?;
/// # Ok(()) }
/// ```
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ServeLimits,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        // Finished connections' tasks, so the set holds only the open ones.
        while connections.try_join_next().is_some() {}
        let permit = tokio::select! {
            permit = Arc::clone(&permits).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of descriptors, or a connection reset before it was accepted: not
                    // the listener's end. Back off a little rather than spin.
                    tracing::warn!(target: "kxp_webhooks", %error, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let app = WithPeer {
            app: app.clone(),
            peer,
        };
        let connection =
            builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
        let connection = graceful.watch(connection);
        connections.spawn(async move {
            // A client that went away or timed out ends its connection: nothing to report.
            let _ = connection.await;
            drop(permit);
        });
    }
    drop(listener);
    // Requests in flight finish; idle connections close now. What is left after the grace is
    // cut off when the set is dropped.
    let _ = tokio::time::timeout(limits.shutdown_grace, graceful.shutdown()).await;
    connections.abort_all();
    Ok(())
}
