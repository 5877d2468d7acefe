//! Which client a sign-in comes from, for the failed sign-in limit
//! ([`SignInLimiter`](crate::policy::sign_in::SignInLimiter)).
//!
//! `kxp serve` listens on plain HTTP, so in production a reverse proxy terminates TLS in front
//! of it and every connection comes from the proxy: counting by the connection's address alone
//! would make one budget for everybody, which a stranger could use up to lock every merchant
//! and operator out. So when the connection comes from a trusted proxy
//! ([`Config::trusted_proxies`](crate::engine::config::Config::trusted_proxies): loopback unless configured),
//! the client is read from `X-Forwarded-For`, right to left, as the first address that is not
//! itself a trusted proxy: what the nearest proxy appended, which the client cannot forge. Any
//! other connection is its own client, whatever it sends (a client on a private network must
//! not choose its own identity by a header); an entry that is not an address ends the walk at
//! the hop before it.

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::HeaderMap;
use axum::http::request::Parts;

use crate::app::AppState;
use crate::engine::guard::Cidr;

/// The header a reverse proxy names the client in.
const FORWARDED_FOR: &str = "x-forwarded-for";

/// The client's address.
pub(crate) struct ClientIp(pub IpAddr);

impl FromRequestParts<AppState> for ClientIp {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Infallible> {
        // `kxp_axum::serve` gives every request its connection's address; a request without
        // one (never, when served) counts as one unknown client.
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |info| info.0.ip());
        let trusted = &state.shared.config.trusted_proxies;
        Ok(ClientIp(client_of(peer, &parts.headers, trusted)))
    }
}

/// The client behind a connection from `peer` that sent `headers`, `trusted` being the blocks
/// of the proxies in front of this server.
fn client_of(peer: IpAddr, headers: &HeaderMap, trusted: &[Cidr]) -> IpAddr {
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
        if !trusted
            .iter()
            .any(|block| block.contains(client.to_canonical()))
        {
            break;
        }
        match address(hop) {
            Some(ip) => client = ip,
            None => break,
        }
    }
    client
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

    /// A proxy on this host and the private networks of one deployment.
    fn trusted() -> Vec<Cidr> {
        ["127.0.0.0/8", "10.0.0.0/8", "2001:db8::/32"]
            .iter()
            .map(|block| block.parse().unwrap())
            .collect()
    }

    fn client_of(peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        super::client_of(peer, headers, &trusted())
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
            ip("198.51.100.1"),
            "2001:db8::5 is a trusted hop too"
        );
        // Not an address: the walk ends at the hop before it.
        assert_eq!(client_of(proxy, &with(&["203.0.113.7, unknown"])), proxy);
    }

    #[test]
    fn a_peer_that_is_no_trusted_proxy_is_its_own_client_whatever_it_sends() {
        let peer = ip("198.51.100.9");
        assert_eq!(client_of(peer, &with(&["203.0.113.7"])), peer);
        // A private address is no proxy unless configured as one: on a VPN, a client must
        // not choose its own identity by a header.
        let vpn = ip("192.168.7.7");
        assert_eq!(client_of(vpn, &with(&["203.0.113.7"])), vpn);
        let default = crate::engine::config::Config::default().trusted_proxies;
        assert_eq!(
            super::client_of(ip("::ffff:127.0.0.1"), &with(&["203.0.113.7"]), &default),
            ip("203.0.113.7"),
            "a v4-mapped loopback peer is loopback"
        );
        assert_eq!(
            super::client_of(ip("10.1.2.3"), &with(&["203.0.113.7"]), &default),
            ip("10.1.2.3")
        );
    }
}
