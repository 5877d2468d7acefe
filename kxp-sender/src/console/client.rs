//! Which client a sign-in comes from, for the failed sign-in limit
//! ([`SignInLimiter`](crate::policy::sign_in::SignInLimiter)).
//!
//! `kxp serve` listens on plain HTTP, so in production a reverse proxy terminates TLS in front
//! of it and every connection comes from the proxy: counting by the connection's address alone
//! would make one budget for everybody, which a stranger could use up to lock every merchant
//! and operator out. So when the connection comes from a proxy's kind of address (loopback,
//! private, shared, link-local or unique local: the proxy on this host or its network), the
//! client is read from `X-Forwarded-For`, right to left, as the first address that is not
//! itself such a hop: what the nearest proxy appended, which the client cannot forge. A
//! connection from a public address is its own client, whatever it sends; an entry that is not
//! an address ends the walk at the hop before it.

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::HeaderMap;
use axum::http::request::Parts;

use crate::engine::guard::{Range, classify};

/// The header a reverse proxy names the client in.
const FORWARDED_FOR: &str = "x-forwarded-for";

/// The client's address.
pub(crate) struct ClientIp(pub IpAddr);

impl<S: Send + Sync> FromRequestParts<S> for ClientIp {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Infallible> {
        // `kxp_axum::serve` gives every request its connection's address; a request without
        // one (never, when served) counts as one unknown client.
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |info| info.0.ip());
        Ok(ClientIp(client_of(peer, &parts.headers)))
    }
}

/// The client behind a connection from `peer` that sent `headers`.
fn client_of(peer: IpAddr, headers: &HeaderMap) -> IpAddr {
    let mut client = peer;
    let hops = headers
        .get_all(FORWARDED_FOR)
        .iter()
        .rev()
        .flat_map(|value| {
            let entries: Vec<&str> = value.to_str().unwrap_or_default().split(',').collect();
            entries.into_iter().rev()
        });
    for hop in hops {
        if !is_proxy(client) {
            break;
        }
        match address(hop) {
            Some(ip) => client = ip,
            None => break,
        }
    }
    client
}

/// An address a reverse proxy of this server would have.
fn is_proxy(ip: IpAddr) -> bool {
    classify(ip.to_canonical()).is_some_and(|blocked| {
        matches!(
            blocked.range(),
            Range::Loopback
                | Range::Private
                | Range::SharedAddressSpace
                | Range::LinkLocal
                | Range::UniqueLocal
        )
    })
}

/// An `X-Forwarded-For` entry as an address: `203.0.113.7`, `2001:db8::1`, or either with a
/// port (`[2001:db8::1]:443`).
fn address(entry: &str) -> Option<IpAddr> {
    let entry = entry.trim();
    entry
        .parse::<IpAddr>()
        .ok()
        .or_else(|| entry.parse::<SocketAddr>().ok().map(|addr| addr.ip()))
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn with(values: &[&'static str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(FORWARDED_FOR, HeaderValue::from_static(value));
        }
        headers
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn behind_a_local_proxy_the_client_is_the_last_address_it_did_not_add_itself() {
        let proxy = ip("127.0.0.1");
        assert_eq!(client_of(proxy, &with(&[])), proxy);
        assert_eq!(client_of(proxy, &with(&["203.0.113.7"])), ip("203.0.113.7"));
        // What the client sent itself comes first; the proxies' own hops are skipped.
        assert_eq!(
            client_of(proxy, &with(&["198.51.100.1, 203.0.113.7, 10.0.0.2"])),
            ip("203.0.113.7")
        );
        assert_eq!(
            client_of(
                ip("10.1.2.3"),
                &with(&["198.51.100.1", "[2001:db8::5]:443"])
            ),
            ip("2001:db8::5")
        );
        // Not an address: the walk ends at the hop before it.
        assert_eq!(client_of(proxy, &with(&["203.0.113.7, unknown"])), proxy);
    }

    #[test]
    fn a_public_peer_is_its_own_client_whatever_it_sends() {
        let peer = ip("198.51.100.9");
        assert_eq!(client_of(peer, &with(&["203.0.113.7"])), peer);
    }
}
