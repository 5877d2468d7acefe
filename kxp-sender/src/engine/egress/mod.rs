//! Egress through a forward proxy (`kxp serve --egress-proxy http://host:port`): every
//! delivery, endpoint challenge and OAuth2 token request leaves from the proxy's address, the
//! static address banks and large merchants allow-list.
//!
//! Not reqwest's `Proxy`: that one sends `CONNECT name:port` and lets the proxy resolve the
//! name, beyond the address guard's reach (a name that resolves to `10.0.0.5` for the proxy
//! reaches the inside). Here the sender resolves the name and vets every address itself, asks
//! the proxy for a tunnel to the vetted address (`CONNECT 203.0.113.7:443`, plain `http://`
//! endpoints too), then runs TLS inside the tunnel with the endpoint's name (SNI, certificate
//! check, `Host`), with the endpoint's own client certificate and CAs when it has them
//! ([`connect`]).
//!
//! A proxy failure is not the endpoint's failure. When the proxy cannot be reached, answers
//! `407`, or fails its own probe ([`Health`]), the attempt is not counted and the circuit takes
//! no step: the delivery goes back untried, the delivery loop stops claiming until the proxy
//! is back, and `/healthz` and `/metrics` say `proxy_error`. A `5xx` to an endpoint's `CONNECT`
//! while the probe passes is that endpoint's connect failure, counted as usual (proxies answer
//! `502`/`503` when the destination does not accept the connection).

mod connect;
mod health;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use reqwest::Url;
use zeroize::Zeroizing;

pub(crate) use connect::{
    Connector, PeerCertificate, at_fault, connect_failure, tls_config, watch,
};
pub(crate) use health::Health;

/// A forward proxy for egress, from `http://[user:password@]host:port`: its `Display` and
/// `Debug` show neither the user nor the password (`http://***@host:port`).
#[derive(Clone)]
pub struct EgressProxy {
    host: String,
    port: u16,
    /// `Basic …` for `Proxy-Authorization`, when the URL named a user.
    authorization: Option<Arc<Zeroizing<String>>>,
    probe: Option<String>,
}

/// Why an `--egress-proxy` URL or its probe target was refused. Its text never repeats the
/// password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("egress proxy: {0}")]
pub struct EgressProxyError(String);

impl EgressProxy {
    /// The same proxy, whose health is checked by asking it for a tunnel to `target`
    /// (`host:port`, a destination known to accept connections), rather than only by connecting
    /// to it: what tells the proxy's own failures from an endpoint's when it answers `5xx`.
    pub fn with_probe(mut self, target: &str) -> Result<EgressProxy, EgressProxyError> {
        let refused = |why: &str| EgressProxyError(format!("probe target `{target}`: {why}"));
        let (host, port) = target
            .rsplit_once(':')
            .ok_or_else(|| refused("not host:port"))?;
        port.parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| refused("the port is not a number from 1 to 65535"))?;
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if bare.is_empty() || bare.bytes().any(|b| b.is_ascii_whitespace() || b == b'/') {
            return Err(refused("no host"));
        }
        self.probe = Some(target.to_owned());
        Ok(self)
    }

    /// `host:port` of the proxy, as connected to.
    fn address(&self) -> (String, u16) {
        (self.host.clone(), self.port)
    }

    /// The probe target, if one was given ([`Self::with_probe`]).
    pub fn probe(&self) -> Option<&str> {
        self.probe.as_deref()
    }
}

impl FromStr for EgressProxy {
    type Err = EgressProxyError;

    fn from_str(text: &str) -> Result<EgressProxy, EgressProxyError> {
        let refused = |why: &str| EgressProxyError(why.to_owned());
        // url's errors never quote the input, so the password cannot leak through them.
        let url = Url::parse(text).map_err(|e| refused(&format!("not a URL ({e})")))?;
        if url.scheme() != "http" {
            return Err(refused(
                "the scheme must be http (the tunnel to each endpoint carries its TLS)",
            ));
        }
        let host = url.host_str().ok_or_else(|| refused("no host"))?;
        if !matches!(url.path(), "" | "/") || url.query().is_some() || url.fragment().is_some() {
            return Err(refused("a proxy URL has no path, query or fragment"));
        }
        let decode = |part: &str| {
            percent_encoding::percent_decode_str(part)
                .decode_utf8()
                .map(|s| s.into_owned())
                .map_err(|_| refused("the user or password is not UTF-8 once decoded"))
        };
        let authorization = if url.username().is_empty() && url.password().is_none() {
            None
        } else {
            let user = decode(url.username())?;
            let password = Zeroizing::new(decode(url.password().unwrap_or(""))?);
            let pair = Zeroizing::new(format!("{user}:{}", password.as_str()));
            let header = Zeroizing::new(format!("Basic {}", STANDARD.encode(pair.as_bytes())));
            Some(Arc::new(header))
        };
        Ok(EgressProxy {
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port: url.port_or_known_default().unwrap_or(80),
            authorization,
            probe: None,
        })
    }
}

impl fmt::Display for EgressProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("http://")?;
        // The whole userinfo: a password typed where the user goes (`user pass@`) is still a
        // password.
        if self.authorization.is_some() {
            f.write_str("***@")?;
        }
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Debug for EgressProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EgressProxy({self}")?;
        if let Some(probe) = &self.probe {
            write!(f, ", probe {probe}")?;
        }
        f.write_str(")")
    }
}

/// The proxy a running sender sends through, and what it knows of the proxy's health: shared
/// by every client (the shared one, each endpoint's own) and the delivery loop.
#[derive(Debug)]
pub(crate) struct Egress {
    pub(crate) proxy: EgressProxy,
    pub(crate) health: Health,
}

impl Egress {
    pub(crate) fn new(proxy: EgressProxy) -> Arc<Egress> {
        Arc::new(Egress {
            proxy,
            health: Health::default(),
        })
    }
}

#[cfg(test)]
mod tests;
