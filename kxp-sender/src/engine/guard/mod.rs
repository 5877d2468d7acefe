//! The address guard (SSRF): which IP addresses the sender may connect to.
//!
//! Endpoint URLs come from merchants, so without a guard anyone holding an API key could make
//! the sender POST to `http://169.254.169.254/` (cloud metadata), to the database next door, or
//! to the sender's own admin ports. Every address the sender is about to connect to goes
//! through [`AddressGuard::check`]: loopback, private, shared (CGNAT), link-local, multicast,
//! unspecified, broadcast, documentation and reserved ranges are refused, in IPv4 and IPv6 and
//! in every IPv6 form that embeds an IPv4 address (IPv4-mapped, IPv4-compatible, NAT64, 6to4),
//! unless an operator allow-lists them (`kxp serve --allow-address CIDR`). Development mode
//! (`--dev`) lets loopback through, and nothing else.
//!
//! Two doors lead to a connection, and both are guarded:
//! - host names go through `GuardedResolver`, the HTTP client's DNS resolver: it refuses the
//!   whole name if **any** address it resolves to is blocked, and hands the client only the
//!   addresses it checked, so the address connected to is the address checked (no DNS
//!   rebinding window between a check and a second lookup);
//! - IP-literal URLs never reach a resolver, so [`AddressGuard::check_url`] checks the URL's
//!   host before anything is sent: the first URL and every redirect hop. The `url` crate has
//!   already turned odd IPv4 spellings (`http://2130706433/`, `http://0x7f.1/`,
//!   `http://0177.0.0.1/`) into the address they mean.
//!
//! Everything here except `GuardedResolver`'s lookup is pure: tests check decisions
//! without connecting anywhere (`guard/tests.rs`: every range, every embedding form, the
//! allow-list, development mode, odd URL spellings).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// The ranges the guard refuses. Each names a class of addresses a webhook has no business
/// reaching; [`Range::name`] is what error messages say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub(crate) enum Range {
    /// `0.0.0.0` and `::`: connecting to them reaches this very machine on most systems.
    Unspecified,
    /// `0.0.0.0/8` ("this network"), apart from `0.0.0.0` itself.
    ThisNetwork,
    /// `127.0.0.0/8` and `::1`: this machine.
    Loopback,
    /// `10.0.0.0/8`, `172.16.0.0/12`, `192.168.0.0/16` (RFC 1918).
    Private,
    /// `100.64.0.0/10`, shared address space (carrier-grade NAT, RFC 6598).
    SharedAddressSpace,
    /// `169.254.0.0/16` and `fe80::/10`: link-local, where cloud metadata services live.
    LinkLocal,
    /// `192.0.0.0/24` and `2001::/23` (Teredo included): IETF protocol assignments.
    IetfProtocol,
    /// `192.0.2.0/24`, `198.51.100.0/24`, `203.0.113.0/24`, `2001:db8::/32`, `3fff::/20`.
    Documentation,
    /// `198.18.0.0/15`: network benchmarking (RFC 2544).
    Benchmarking,
    /// `224.0.0.0/4` and `ff00::/8`.
    Multicast,
    /// `240.0.0.0/4`, reserved (apart from the broadcast address).
    Reserved,
    /// `255.255.255.255`.
    Broadcast,
    /// `fc00::/7`: unique local addresses, IPv6's private ranges.
    UniqueLocal,
    /// `fec0::/10`: site-local, deprecated but still routed inside some networks.
    SiteLocal,
    /// `100::/64`: discard-only.
    Discard,
    /// `64:ff9b:1::/48`: local-use NAT64 (RFC 8215), a translator inside the network.
    LocalNat64,
    /// IPv6 outside `2000::/3`, the only block allocated for global unicast.
    NotGlobalUnicast,
}

impl Range {
    /// What the range is, for error messages.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Range::Unspecified => "unspecified",
            Range::ThisNetwork => "\"this network\" (0.0.0.0/8)",
            Range::Loopback => "loopback",
            Range::Private => "private (RFC 1918)",
            Range::SharedAddressSpace => "shared address space / CGNAT (100.64.0.0/10)",
            Range::LinkLocal => "cloud metadata / link-local",
            Range::IetfProtocol => "IETF protocol assignments (192.0.0.0/24, 2001::/23)",
            Range::Documentation => "documentation",
            Range::Benchmarking => "benchmarking (198.18.0.0/15)",
            Range::Multicast => "multicast",
            Range::Reserved => "reserved (240.0.0.0/4)",
            Range::Broadcast => "broadcast",
            Range::UniqueLocal => "unique local (fc00::/7)",
            Range::SiteLocal => "site-local (fec0::/10)",
            Range::Discard => "discard-only (100::/64)",
            Range::LocalNat64 => "local-use NAT64 (64:ff9b:1::/48)",
            Range::NotGlobalUnicast => "reserved (IPv6 outside 2000::/3)",
        }
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An IPv6 form that carries an IPv4 address; the guard judges the IPv4 address inside.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub(crate) enum Embedding {
    /// `::ffff:a.b.c.d`: the kernel connects to `a.b.c.d` itself.
    Mapped,
    /// `::a.b.c.d` (deprecated IPv4-compatible).
    Compatible,
    /// `64:ff9b::a.b.c.d`: a NAT64 gateway connects to `a.b.c.d`.
    Nat64,
    /// `2002:aabb:ccdd::/48`: 6to4, tunnelled to `a.b.c.d`.
    SixToFour,
}

impl Embedding {
    /// What the form is, for error messages.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Embedding::Mapped => "IPv4-mapped",
            Embedding::Compatible => "IPv4-compatible",
            Embedding::Nat64 => "NAT64",
            Embedding::SixToFour => "6to4",
        }
    }
}

/// Why an address was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Blocked {
    ip: IpAddr,
    range: Range,
    embedded: Option<(Embedding, Ipv4Addr)>,
}

impl Blocked {
    /// The refused address, as given (the verdict's text names it; the tests read it).
    #[cfg(test)]
    pub(crate) fn ip(&self) -> IpAddr {
        self.ip
    }

    /// The range it falls in (for an embedding form: the range of the embedded IPv4 address).
    pub(crate) fn range(&self) -> Range {
        self.range
    }

    /// The IPv6 form and the IPv4 address it carries, when the verdict is about that address.
    #[cfg(test)]
    pub(crate) fn embedded(&self) -> Option<(Embedding, Ipv4Addr)> {
        self.embedded
    }
}

impl fmt::Display for Blocked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.embedded {
            None => write!(f, "{} is in a blocked range: {}", self.ip, self.range),
            Some((form, v4)) => write!(
                f,
                "{} ({} form of {v4}) is in a blocked range: {}",
                self.ip,
                form.name(),
                self.range
            ),
        }
    }
}

impl std::error::Error for Blocked {}

/// A host name refused because one of its addresses is blocked. Its text starts with
/// `blocked_address:`, the attempt's error code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("blocked_address: {name}: {blocked}")]
pub(crate) struct BlockedName {
    /// The name that was resolved.
    pub name: String,
    /// The first blocked address among its addresses.
    pub blocked: Blocked,
}

/// Which range `ip` is in, if a blocked one, without regard to any allow-list. Public
/// addresses answer `None`.
pub(crate) fn classify(ip: IpAddr) -> Option<Blocked> {
    match ip {
        IpAddr::V4(v4) => v4_range(v4).map(|range| Blocked {
            ip,
            range,
            embedded: None,
        }),
        IpAddr::V6(v6) => match v6_class(v6) {
            V6Class::Public => None,
            V6Class::Blocked(range) => Some(Blocked {
                ip,
                range,
                embedded: None,
            }),
            V6Class::Embeds(form, v4) => v4_range(v4).map(|range| Blocked {
                ip,
                range,
                embedded: Some((form, v4)),
            }),
        },
    }
}

fn v4_range(ip: Ipv4Addr) -> Option<Range> {
    let [a, b, c, _] = ip.octets();
    let range = if ip.is_unspecified() {
        Range::Unspecified
    } else if a == 0 {
        Range::ThisNetwork
    } else if a == 127 {
        Range::Loopback
    } else if a == 10 || (a == 172 && (16..=31).contains(&b)) || (a == 192 && b == 168) {
        Range::Private
    } else if a == 100 && (64..=127).contains(&b) {
        Range::SharedAddressSpace
    } else if a == 169 && b == 254 {
        Range::LinkLocal
    } else if (a, b, c) == (192, 0, 0) {
        Range::IetfProtocol
    } else if matches!((a, b, c), (192, 0, 2) | (198, 51, 100) | (203, 0, 113)) {
        Range::Documentation
    } else if a == 198 && (b == 18 || b == 19) {
        Range::Benchmarking
    } else if (224..=239).contains(&a) {
        Range::Multicast
    } else if ip.is_broadcast() {
        Range::Broadcast
    } else if a >= 240 {
        Range::Reserved
    } else {
        return None;
    };
    Some(range)
}

enum V6Class {
    Public,
    Blocked(Range),
    Embeds(Embedding, Ipv4Addr),
}

fn v6_class(ip: Ipv6Addr) -> V6Class {
    let s = ip.segments();
    let v4 = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    let range = if ip.is_unspecified() {
        Range::Unspecified
    } else if ip.is_loopback() {
        Range::Loopback
    } else if s[..6] == [0, 0, 0, 0, 0, 0xffff] {
        return V6Class::Embeds(Embedding::Mapped, v4(s[6], s[7]));
    } else if s[..6] == [0; 6] {
        return V6Class::Embeds(Embedding::Compatible, v4(s[6], s[7]));
    } else if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return V6Class::Embeds(Embedding::Nat64, v4(s[6], s[7]));
    } else if s[0] == 0x2002 {
        return V6Class::Embeds(Embedding::SixToFour, v4(s[1], s[2]));
    } else if s[..3] == [0x64, 0xff9b, 1] {
        Range::LocalNat64
    } else if s[0] & 0xff00 == 0xff00 {
        Range::Multicast
    } else if s[0] & 0xfe00 == 0xfc00 {
        Range::UniqueLocal
    } else if s[0] & 0xffc0 == 0xfe80 {
        Range::LinkLocal
    } else if s[0] & 0xffc0 == 0xfec0 {
        Range::SiteLocal
    } else if s[..4] == [0x100, 0, 0, 0] {
        Range::Discard
    } else if s[0] == 0x2001 && s[1] < 0x200 {
        Range::IetfProtocol
    } else if (s[0] == 0x2001 && s[1] == 0xdb8) || (s[0] == 0x3fff && s[1] < 0x1000) {
        Range::Documentation
    } else if s[0] & 0xe000 != 0x2000 {
        Range::NotGlobalUnicast
    } else {
        return V6Class::Public;
    };
    V6Class::Blocked(range)
}

/// An address block, `10.0.0.0/8` or `fd00::/8`; a bare address is a block of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr(IpNet);

/// Why a CIDR block did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid CIDR block `{text}`: {why}")]
pub struct CidrError {
    text: String,
    why: String,
}

impl Cidr {
    /// The block of `prefix` leading bits of `network`; the other bits must be zero.
    pub fn new(network: IpAddr, prefix: u8) -> Result<Cidr, CidrError> {
        let error = |why: String| CidrError {
            text: format!("{network}/{prefix}"),
            why,
        };
        let max = if network.is_ipv4() { 32 } else { 128 };
        let net = IpNet::new(network, prefix)
            .map_err(|_| error(format!("the prefix length is at most {max}")))?;
        // ipnet keeps the host bits (`10.0.0.1/8` is an interface address to it); as an
        // allow-list entry that is most likely a typo, so it is refused with the block meant.
        if net.network() != network {
            return Err(error(format!(
                "bits are set after the first {prefix}; did you mean {}?",
                net.trunc()
            )));
        }
        Ok(Cidr(net))
    }

    /// The first address of the block.
    pub fn network(&self) -> IpAddr {
        self.0.network()
    }

    /// How many leading bits are fixed.
    pub fn prefix(&self) -> u8 {
        self.0.prefix_len()
    }

    /// Whether `ip` is in the block (an IPv4 block holds no IPv6 address, and the other way
    /// round; the address guard tries IPv4-mapped addresses as their IPv4 address too).
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.contains(&ip)
    }
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(text: &str) -> Result<Cidr, CidrError> {
        let error = |why: &str| CidrError {
            text: text.to_owned(),
            why: why.to_owned(),
        };
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text, None),
        };
        // std's parser takes dotted decimal only: no `0x7f.1` or `010.0.0.1` ambiguity here.
        // (Not ipnet's parser: it reads `010.0.0.1` as `10.0.0.1`.)
        let network: IpAddr = address
            .parse()
            .map_err(|_| error("not an IPv4 or IPv6 address"))?;
        let prefix = match prefix {
            None if network.is_ipv4() => 32,
            None => 128,
            Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => p
                .parse::<u8>()
                .map_err(|_| error("the prefix length is not a number from 0 to 128"))?,
            Some(_) => return Err(error("the prefix length is not a number from 0 to 128")),
        };
        Cidr::new(network, prefix).map_err(|e| CidrError {
            text: text.to_owned(),
            why: e.why,
        })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// The policy: the blocked ranges, minus the allow-list, minus loopback in development mode.
/// Cheap to clone.
#[derive(Debug, Clone, Default)]
pub(crate) struct AddressGuard {
    dev: bool,
    allow: Arc<[Cidr]>,
}

impl AddressGuard {
    /// A guard that lets through public addresses, the blocks in `allow`, and with `dev`
    /// loopback (`127.0.0.0/8`, `::1`, and `::ffff:127.0.0.0/104`) too.
    pub(crate) fn new(dev: bool, allow: Vec<Cidr>) -> AddressGuard {
        AddressGuard {
            dev,
            allow: allow.into(),
        }
    }

    /// Whether `ip` may be connected to. An IPv4-mapped address (`::ffff:a.b.c.d`) is matched
    /// against the allow-list as `a.b.c.d` too: the kernel connects to that very address.
    pub(crate) fn check(&self, ip: IpAddr) -> Result<(), Blocked> {
        let canonical = ip.to_canonical();
        if self
            .allow
            .iter()
            .any(|cidr| cidr.contains(ip) || cidr.contains(canonical))
        {
            return Ok(());
        }
        let Some(blocked) = classify(ip) else {
            return Ok(());
        };
        let loopback_itself = blocked.range == Range::Loopback
            && matches!(blocked.embedded, None | Some((Embedding::Mapped, _)));
        if self.dev && loopback_itself {
            return Ok(());
        }
        Err(blocked)
    }

    /// The IP address of an IP-literal URL host, or `None` for a host name (checked when it
    /// is resolved, by `GuardedResolver`). For `http` and `https` URLs the `url` crate has
    /// parsed the host already, odd IPv4 spellings included (`2130706433`, `0x7f.1`,
    /// `0177.0.0.1`, `127.1`), and serializes an IP host in its one canonical form; a host
    /// name never looks like an address (a name whose last label is a number is parsed as
    /// IPv4 or refused).
    pub(crate) fn url_ip(url: &Url) -> Option<IpAddr> {
        // `Url::host()` says the same (Host::Ipv4 / Host::Ipv6 / Host::Domain), but naming
        // `url::Host` needs the `url` crate as a direct dependency; the canonical text of
        // those variants is exactly what `host_str` returns.
        let host = url.host_str()?;
        match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            Some(v6) => v6.parse::<Ipv6Addr>().ok().map(IpAddr::V6),
            None => host.parse::<Ipv4Addr>().ok().map(IpAddr::V4),
        }
    }

    /// Checks the host of `url` when it is an IP literal (which no resolver ever sees); host
    /// names pass here and are checked when resolved.
    pub(crate) fn check_url(&self, url: &Url) -> Result<(), Blocked> {
        match AddressGuard::url_ip(url) {
            Some(ip) => self.check(ip),
            None => Ok(()),
        }
    }

    /// All of `addrs` when every one passes; the name is refused as a whole if any is
    /// blocked (one blocked address among public ones is how DNS tricks reach a private
    /// network).
    pub(crate) fn check_resolved(
        &self,
        name: &str,
        addrs: Vec<SocketAddr>,
    ) -> Result<Vec<SocketAddr>, BlockedName> {
        for addr in &addrs {
            if let Err(blocked) = self.check(addr.ip()) {
                return Err(BlockedName {
                    name: name.to_owned(),
                    blocked,
                });
            }
        }
        Ok(addrs)
    }
}

/// The HTTP client's DNS resolver: resolves with the system resolver (through tokio), then
/// refuses the name if any address is blocked, and otherwise hands over only the addresses it
/// checked, which are the ones connected to.
#[derive(Debug, Clone)]
pub(crate) struct GuardedResolver {
    guard: AddressGuard,
}

impl GuardedResolver {
    /// A resolver enforcing `guard`.
    pub(crate) fn new(guard: AddressGuard) -> GuardedResolver {
        GuardedResolver { guard }
    }
}

/// How long a name may take to resolve: the system resolver can wait far longer (retries over
/// several servers), and an attempt's own timeout should not be spent there silently.
pub(crate) const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// A name did not resolve within [`RESOLVE_TIMEOUT`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct ResolveTimedOut;

impl fmt::Display for ResolveTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DNS resolution took over {} s",
            RESOLVE_TIMEOUT.as_secs()
        )
    }
}

impl std::error::Error for ResolveTimedOut {}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let guard = self.guard.clone();
        let name = name.as_str().to_owned();
        Box::pin(async move {
            type BoxError = Box<dyn std::error::Error + Send + Sync>;
            // Port 0: the connector puts the URL's port on every address.
            let lookup = tokio::net::lookup_host((name.as_str(), 0));
            let addrs: Vec<SocketAddr> = tokio::time::timeout(RESOLVE_TIMEOUT, lookup)
                .await
                .map_err(|_| ResolveTimedOut)??
                .collect();
            let addrs = guard.check_resolved(&name, addrs)?;
            let addrs: Addrs = Box::new(addrs.into_iter());
            Ok::<Addrs, BoxError>(addrs)
        })
    }
}

#[cfg(test)]
mod tests;
