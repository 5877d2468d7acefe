//! The HTTP client every request to a merchant's URL goes through: the address guard's, and
//! the egress proxy's when there is one.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method};
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use reqwest::{Client, Url};

use crate::engine::egress::{self, Egress};
use crate::engine::guard::{AddressGuard, BlockedName, GuardedResolver};
use crate::model::{Failure, FailureKind};

/// The shared HTTP client, with the address guard it enforces: no automatic redirects (they
/// would turn a POST into a GET, and [`send`] checks each hop itself), no proxy from the
/// environment (a proxy would resolve names beyond the guard's reach), and a DNS resolver that
/// hands over only addresses the guard let through. With an egress proxy, every request goes
/// through tunnels to addresses the guard vetted instead ([`egress`]). Cheap to clone.
#[derive(Clone)]
pub(crate) struct GuardedClient {
    http: Client,
    guard: AddressGuard,
    through: Option<Through>,
}

/// The egress proxy's side of a client: its tunnels, with the client's TLS inside.
#[derive(Clone)]
struct Through {
    egress: Arc<Egress>,
    client: hyper_util::client::legacy::Client<egress::Connector, Full<Bytes>>,
}

impl std::fmt::Debug for GuardedClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardedClient")
            .field("guard", &self.guard)
            .field("egress", &self.through.as_ref().map(|t| &t.egress.proxy))
            .finish_non_exhaustive()
    }
}

/// The `User-Agent` of every request.
const USER_AGENT: &str = concat!("kxp-webhooks/", env!("CARGO_PKG_VERSION"));

impl GuardedClient {
    /// The address guard this client enforces.
    pub(crate) fn guard(&self) -> &AddressGuard {
        &self.guard
    }

    /// The egress proxy this client sends through, if any.
    pub(crate) fn egress(&self) -> Option<&Arc<Egress>> {
        self.through.as_ref().map(|t| &t.egress)
    }

    /// The same client, sending every request through `egress`'s tunnels with `tls` inside
    /// them (the client's own TLS: its roots, its certificate).
    pub(crate) fn through(
        mut self,
        egress: Arc<Egress>,
        tls: rustls::ClientConfig,
    ) -> GuardedClient {
        let connector = egress::Connector::new(egress.clone(), self.guard.clone(), Arc::new(tls));
        let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector);
        self.through = Some(Through { egress, client });
        self
    }

    /// Sends one request, following no redirect: through the egress proxy when there is one.
    /// IP-literal URLs are checked with [`Self::guard`] by the caller first (the resolver and
    /// the tunnel check every name).
    pub(crate) async fn execute(
        &self,
        method: Method,
        url: &Url,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<reqwest::Response, Failure> {
        let Some(through) = &self.through else {
            return self
                .http
                .request(method, url.clone())
                .headers(headers)
                .body(body)
                .send()
                .await
                .map_err(|e| describe(&e));
        };
        let mut request = http::Request::new(Full::new(body));
        *request.method_mut() = method;
        *request.uri_mut() = url
            .as_str()
            .parse()
            .map_err(|e| Failure::new(FailureKind::InvalidUrl, format!("{e}")))?;
        *request.headers_mut() = headers;
        request
            .headers_mut()
            .entry(http::header::USER_AGENT)
            .or_insert(HeaderValue::from_static(USER_AGENT));
        match through.client.request(request).await {
            Ok(response) => Ok(reqwest::Response::from(response.map(reqwest::Body::wrap))),
            Err(e) => Err(egress::connect_failure(&e)
                .unwrap_or_else(|| Failure::new(FailureKind::Request, causes(&e)))),
        }
    }
}

/// Builds the shared HTTP client around `guard`. There is no fallback to an unguarded client:
/// if this fails, nothing is sent.
pub(crate) fn client(guard: AddressGuard) -> Result<GuardedClient, reqwest::Error> {
    client_with(guard, None, None)
}

/// [`client`] for one endpoint's TLS: presenting `identity` (mutual TLS), and trusting only
/// `roots` when given (a private CA) instead of the public roots.
pub(crate) fn client_with(
    guard: AddressGuard,
    identity: Option<reqwest::Identity>,
    roots: Option<Vec<reqwest::Certificate>>,
) -> Result<GuardedClient, reqwest::Error> {
    let mut builder = Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .dns_resolver(GuardedResolver::new(guard.clone()))
        .user_agent(USER_AGENT)
        // The server's certificate on each response, for its expiry (engine/tls.rs).
        .tls_info(true);
    if let Some(identity) = identity {
        builder = builder.identity(identity);
    }
    if let Some(roots) = roots {
        builder = builder.tls_certs_only(roots);
    }
    let http = builder.build()?;
    Ok(GuardedClient {
        http,
        guard,
        through: None,
    })
}

/// What a failed request of the direct client comes to.
fn describe(error: &reqwest::Error) -> Failure {
    // A name the resolver refused: its error says so first, and nothing was connected.
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if let Some(blocked) = cause.downcast_ref::<BlockedName>() {
            return Failure::new(
                FailureKind::BlockedAddress,
                format!("{}: {}", blocked.name, blocked.blocked),
            );
        }
        source = cause.source();
    }
    let kind = if error.is_timeout() {
        FailureKind::Timeout
    } else if error.is_connect() {
        FailureKind::Connect
    } else {
        FailureKind::Request
    };
    // reqwest's Display names the URL, which holds nothing secret (secrets travel in headers).
    Failure::new(kind, causes(error))
}

/// An error's text and its causes', `: `-separated.
fn causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
