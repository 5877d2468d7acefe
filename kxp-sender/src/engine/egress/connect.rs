//! The tunnel: resolve and vet the destination, `CONNECT` the proxy to the vetted address,
//! then TLS inside with the endpoint's name.

use std::fmt;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use super::Egress;
use crate::engine::guard::{AddressGuard, RESOLVE_TIMEOUT};
use crate::model::{Failure, FailureKind};

/// The most a proxy's answer to `CONNECT` may take, status line and headers.
const MAX_ANSWER: usize = 8 * 1024;

/// How long a probe may take in all.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the proxy may take to answer `CONNECT`, connection included. Proxies answer once
/// they have connected to the destination (or given up), so this is longer than their own
/// connect timeouts usually are; an attempt's own, shorter, timeout ends it sooner, and the
/// probe then says whose fault that was.
const CONNECT_WAIT: Duration = Duration::from_secs(10);

/// Opens tunnels through the egress proxy for one client (the shared one, or an endpoint's
/// with its own TLS). Cheap to clone.
#[derive(Clone)]
pub(crate) struct Connector {
    egress: Arc<Egress>,
    guard: AddressGuard,
    tls: Arc<rustls::ClientConfig>,
}

impl Connector {
    pub(crate) fn new(
        egress: Arc<Egress>,
        guard: AddressGuard,
        tls: Arc<rustls::ClientConfig>,
    ) -> Connector {
        Connector { egress, guard, tls }
    }
}

/// The TLS settings of a tunnel: the public roots (as the platform verifier checks them, like
/// the direct client's), or only `roots` when given; presenting `identity` when given.
pub(crate) fn tls_config(
    identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
    roots: Option<Vec<CertificateDer<'static>>>,
) -> Result<rustls::ClientConfig, String> {
    use rustls_platform_verifier::BuilderVerifierExt as _;

    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match roots {
        Some(roots) => {
            let mut store = rustls::RootCertStore::empty();
            for root in roots {
                store
                    .add(root)
                    .map_err(|e| format!("a CA certificate: {e}"))?;
            }
            builder.with_root_certificates(store)
        }
        None => builder
            .with_platform_verifier()
            .map_err(|e| e.to_string())?,
    };
    let mut config = match identity {
        Some((chain, key)) => builder
            .with_client_auth_cert(chain, key)
            .map_err(|e| format!("the client certificate: {e}"))?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// A request that could not be sent through the proxy, and whose fault that was: the proxy's
/// (`proxy_error`), the endpoint's (`connect`) or the address guard's refusal
/// (`blocked_address`).
#[derive(Debug)]
pub(crate) struct ConnectFailure(pub(crate) Failure);

impl fmt::Display for ConnectFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for ConnectFailure {}

/// The [`ConnectFailure`] somewhere in `error`'s causes, if any.
pub(crate) fn connect_failure(error: &(dyn std::error::Error + 'static)) -> Option<Failure> {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if let Some(failure) = e.downcast_ref::<ConnectFailure>() {
            return Some(failure.0.clone());
        }
        cause = e.source();
    }
    None
}

/// The certificate (DER) the endpoint's server presented in a tunnel, on each response that
/// came through it.
#[derive(Debug, Clone)]
pub(crate) struct PeerCertificate(pub(crate) Vec<u8>);

/// A connection to the endpoint through the proxy.
pub(crate) enum Tunnel {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Connection for Tunnel {
    fn connected(&self) -> Connected {
        let connected = Connected::new();
        match self {
            Tunnel::Plain(_) => connected,
            Tunnel::Tls(stream) => match stream.get_ref().1.peer_certificates() {
                Some([leaf, ..]) => connected.extra(PeerCertificate(leaf.to_vec())),
                _ => connected,
            },
        }
    }
}

impl AsyncRead for Tunnel {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Tunnel::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Tunnel::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Tunnel {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Tunnel::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Tunnel::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Tunnel::Plain(s) => Pin::new(s).poll_flush(cx),
            Tunnel::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Tunnel::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Tunnel::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<Tunnel>;
    type Error = ConnectFailure;
    type Future = Pin<Box<dyn Future<Output = Result<TokioIo<Tunnel>, ConnectFailure>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ConnectFailure>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connector = self.clone();
        Box::pin(async move {
            connector
                .open(&uri)
                .await
                .map(TokioIo::new)
                .map_err(ConnectFailure)
        })
    }
}

impl Connector {
    async fn open(&self, uri: &Uri) -> Result<Tunnel, Failure> {
        let tls = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            other => {
                return Err(Failure::new(
                    FailureKind::InvalidUrl,
                    format!("scheme `{}` is not http(s)", other.unwrap_or("")),
                ));
            }
        };
        let host = uri
            .host()
            .ok_or_else(|| Failure::new(FailureKind::InvalidUrl, "no host"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
        let addrs = self.vetted(host, port).await?;
        let mut last = None;
        for addr in addrs {
            match self.tunnel(addr, host).await {
                Ok(stream) => {
                    if !tls {
                        return Ok(Tunnel::Plain(stream));
                    }
                    return self.handshake(stream, host).await;
                }
                Err(failure) if failure.kind == FailureKind::Connect => last = Some(failure),
                Err(failure) => return Err(failure),
            }
        }
        Err(last.unwrap_or_else(|| Failure::new(FailureKind::Connect, "no address")))
    }

    /// The addresses of `host` the guard lets through, all of them or none (as the direct
    /// client's resolver).
    async fn vetted(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, Failure> {
        if let Ok(ip) = host.parse::<IpAddr>() {
            self.guard.check(ip).map_err(|blocked| {
                Failure::new(FailureKind::BlockedAddress, blocked.to_string())
            })?;
            return Ok(vec![SocketAddr::new(ip, port)]);
        }
        let lookup = tokio::net::lookup_host((host, port));
        let addrs: Vec<SocketAddr> = match tokio::time::timeout(RESOLVE_TIMEOUT, lookup).await {
            Ok(Ok(addrs)) => addrs.collect(),
            Ok(Err(e)) => {
                return Err(Failure::new(
                    FailureKind::Connect,
                    format!("{host} does not resolve: {e}"),
                ));
            }
            Err(_) => {
                return Err(Failure::new(
                    FailureKind::Timeout,
                    format!(
                        "{host}: DNS resolution took over {} s",
                        RESOLVE_TIMEOUT.as_secs()
                    ),
                ));
            }
        };
        self.guard.check_resolved(host, addrs).map_err(|blocked| {
            Failure::new(
                FailureKind::BlockedAddress,
                format!("{}: {}", blocked.name, blocked.blocked),
            )
        })
    }

    /// A tunnel to `addr` (one of `host`'s vetted addresses).
    async fn tunnel(&self, addr: SocketAddr, host: &str) -> Result<TcpStream, Failure> {
        let health = &self.egress.health;
        let proxy_failed = |detail: String| {
            health.failed(&detail);
            Failure::new(FailureKind::ProxyError, detail)
        };
        let (stream, answer) = match ask(&self.egress, &addr.to_string()).await {
            Ok(answer) => answer,
            Err(why) => return Err(proxy_failed(why)),
        };
        let refused = match answer {
            Answer::Tunnel => {
                health.tunnelled();
                return Ok(stream);
            }
            // The proxy opened the tunnel and the destination spoke first: the destination's
            // doing (TLS and HTTP clients speak first), and nothing a client should read.
            Answer::TunnelWithBytes => {
                health.tunnelled();
                return Err(Failure::new(
                    FailureKind::Connect,
                    format!(
                        "{host} ({addr}) spoke before the request through the egress proxy's tunnel"
                    ),
                ));
            }
            Answer::Refused(status) => status,
        };
        let detail = format!("the egress proxy answered {refused} to CONNECT {addr} ({host})");
        // A refusal is the proxy's or the destination's: proxies answer 5xx when the destination
        // does not accept the connection, and some (smokescreen) 407 or 403 when their rules
        // deny it. The probe, which presents the same credentials, tells.
        match judge(&self.egress, refused).await {
            Ok(()) => Err(Failure::new(FailureKind::Connect, detail)),
            Err(why) => Err(Failure::new(
                FailureKind::ProxyError,
                format!("{detail}, and {why}"),
            )),
        }
    }

    async fn handshake(&self, stream: TcpStream, host: &str) -> Result<Tunnel, Failure> {
        let name = ServerName::try_from(host.to_owned()).map_err(|_| {
            Failure::new(
                FailureKind::InvalidUrl,
                format!("`{host}` is not a TLS server name"),
            )
        })?;
        tokio_rustls::TlsConnector::from(self.tls.clone())
            .connect(name, stream)
            .await
            .map(|stream| Tunnel::Tls(Box::new(stream)))
            .map_err(|e| Failure::new(FailureKind::Connect, format!("TLS with {host}: {e}")))
    }
}

/// What the proxy answered to `CONNECT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Answer {
    /// 2xx: the tunnel is open.
    Tunnel,
    /// 2xx, and the destination's first bytes came with it.
    TunnelWithBytes,
    /// Any other status.
    Refused(u16),
}

/// Connects to the proxy and asks it for a tunnel to `target`, within [`CONNECT_WAIT`]: the
/// stream and the answer, or why there was none (the proxy's fault, whatever the target).
async fn ask(egress: &Egress, target: &str) -> Result<(TcpStream, Answer), String> {
    match tokio::time::timeout(CONNECT_WAIT, ask_now(egress, target)).await {
        Ok(answer) => answer,
        Err(_) => Err(format!(
            "the egress proxy did not answer CONNECT within {} s",
            CONNECT_WAIT.as_secs()
        )),
    }
}

async fn ask_now(egress: &Egress, target: &str) -> Result<(TcpStream, Answer), String> {
    let proxy = &egress.proxy;
    let (host, port) = proxy.address();
    let mut stream = TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|e| format!("the egress proxy is unreachable: {e}"))?;
    let _ = stream.set_nodelay(true);
    let mut request =
        zeroize::Zeroizing::new(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n"));
    if let Some(authorization) = &proxy.authorization {
        request.push_str("Proxy-Authorization: ");
        request.push_str(authorization.as_str());
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("the egress proxy closed the connection: {e}"))?;
    let mut answer = Vec::with_capacity(256);
    let mut buf = [0u8; 1024];
    loop {
        let n = stream
            .read(&mut buf)
            .await
            .map_err(|e| format!("the egress proxy failed while answering CONNECT: {e}"))?;
        if n == 0 {
            return Err(
                "the egress proxy closed the connection without answering CONNECT".to_owned(),
            );
        }
        answer.extend_from_slice(&buf[..n]);
        if let Some(end) = head_end(&answer) {
            let status = status(&answer[..end])
                .ok_or("the egress proxy answered CONNECT with something that is not HTTP")?;
            let answer = match status {
                200..=299 if end == answer.len() => Answer::Tunnel,
                200..=299 => Answer::TunnelWithBytes,
                status => Answer::Refused(status),
            };
            return Ok((stream, answer));
        }
        if answer.len() > MAX_ANSWER {
            return Err(format!(
                "the egress proxy answered CONNECT with over {MAX_ANSWER} bytes of headers"
            ));
        }
    }
}

/// Where the head of an HTTP answer ends (just past its blank line), once it has.
pub(super) fn head_end(bytes: &[u8]) -> Option<usize> {
    bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 4)
}

/// The status code of an HTTP/1.x status line at the start of `head`.
pub(super) fn status(head: &[u8]) -> Option<u16> {
    let line = head.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?.trim_end_matches('\r');
    let mut parts = line.splitn(3, ' ');
    let version = parts.next()?;
    if !matches!(version, "HTTP/1.0" | "HTTP/1.1") {
        return None;
    }
    let code = parts.next()?;
    if code.len() != 3 || !code.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    code.parse().ok().filter(|c| (100..600).contains(c))
}

/// Checks the proxy now, once at a time (callers that come while a probe runs share its
/// result, and a caller that gives up cannot cut it short): it accepts a connection and, with a
/// probe target, makes a tunnel to it. The result is recorded in the proxy's
/// [`Health`](super::Health) and stands for a few seconds.
pub(crate) async fn probe(egress: &Arc<Egress>) -> Result<(), String> {
    if egress.proxy.probe().is_none() && egress.health.credentials_refused() {
        // Connecting would pass and prove nothing: the watcher's trial tells instead.
        return Err("it refused the credentials".to_owned());
    }
    let _one_at_a_time = egress.health.probing().await;
    if let Some(result) = egress.health.recent_probe() {
        return result;
    }
    let running = egress.clone();
    let probing = tokio::spawn(async move {
        let result = match tokio::time::timeout(PROBE_TIMEOUT, probe_once(&running)).await {
            Ok(result) => result,
            Err(_) => Err(format!(
                "the egress proxy did not pass its probe within {} s",
                PROBE_TIMEOUT.as_secs()
            )),
        };
        running.health.probed(&result);
        result
    });
    probing
        .await
        .unwrap_or_else(|_| Err("the egress proxy's probe stopped".to_owned()))
}

async fn probe_once(egress: &Egress) -> Result<(), String> {
    let Some(target) = egress.proxy.probe() else {
        let (host, port) = egress.proxy.address();
        return TcpStream::connect((host.as_str(), port))
            .await
            .map(drop)
            .map_err(|e| format!("the egress proxy is unreachable: {e}"));
    };
    match ask(egress, target).await?.1 {
        Answer::Tunnel | Answer::TunnelWithBytes => Ok(()),
        Answer::Refused(status) => Err(format!(
            "the egress proxy answered {status} to its probe, CONNECT {target}"
        )),
    }
}

/// Whose fault a refused tunnel (`status`) is: `Ok` when the proxy works (the destination's),
/// else why the proxy is at fault. With a probe target, the probe decides. Without one, the
/// probe only connects, which proves nothing about credentials: a `407` is then the proxy's
/// unless a tunnel opened with the same credentials moments ago.
async fn judge(egress: &Arc<Egress>, status: u16) -> Result<(), String> {
    if egress.proxy.probe().is_none() && status == 407 && !egress.health.tunnelled_lately() {
        let why = if egress.proxy.authorization.is_some() {
            "it refused the proxy URL's credentials"
        } else {
            "it wants credentials (http://user:password@host:port)"
        };
        egress
            .health
            .refused_credentials(&format!("the egress proxy answered 407: {why}"));
        return Err(why.to_owned());
    }
    probe(egress)
        .await
        .map_err(|why| format!("its probe failed: {why}"))
}

/// Whether a request that failed through the proxy without a clear answer (a timeout, a
/// connection lost, a token request that did not come back) failed at the proxy: the probe
/// decides.
pub(crate) async fn at_fault(egress: &Arc<Egress>) -> bool {
    !egress.health.is_up() || probe(egress).await.is_err()
}

/// Probes the proxy while it runs, until `stopped`: every ten seconds while it works, and while
/// it fails every second at first, backing off to every 16 seconds while it keeps failing. How
/// deliveries resume when it is back, and how a proxy that stopped answering is found before
/// attempts wait on it. A proxy that refused the credentials with no probe target to ask is
/// given a trial instead (only a tunnel shows that credentials work): the delivery loop tries,
/// at most about every ten seconds.
pub(crate) async fn watch(egress: Arc<Egress>, mut stopped: tokio::sync::watch::Receiver<bool>) {
    let mut failing = 0u32;
    while !*stopped.borrow() {
        let every = if egress.health.is_up() {
            failing = 0;
            Duration::from_secs(10)
        } else {
            failing = failing.saturating_add(1);
            Duration::from_secs(1 << (failing - 1).min(4))
        };
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stopped.changed() => return,
        }
        if egress.health.credentials_refused() {
            egress.health.succeeded();
            continue;
        }
        let _ = probe(&egress).await;
    }
}
