//! The guard's decisions, checked without connecting anywhere.

use super::*;

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn strict() -> AddressGuard {
    AddressGuard::new(false, vec![])
}

/// Every blocked range with addresses at its edges, and public neighbours.
const TABLE: &[(&str, Option<Range>)] = &[
    // IPv4
    ("0.0.0.0", Some(Range::Unspecified)),
    ("0.0.0.1", Some(Range::ThisNetwork)),
    ("0.255.255.255", Some(Range::ThisNetwork)),
    ("127.0.0.1", Some(Range::Loopback)),
    ("127.0.0.2", Some(Range::Loopback)),
    ("127.255.255.255", Some(Range::Loopback)),
    ("10.0.0.0", Some(Range::Private)),
    ("10.255.255.255", Some(Range::Private)),
    ("172.16.0.0", Some(Range::Private)),
    ("172.31.255.255", Some(Range::Private)),
    ("192.168.0.1", Some(Range::Private)),
    ("192.168.255.255", Some(Range::Private)),
    ("100.64.0.0", Some(Range::SharedAddressSpace)),
    ("100.127.255.255", Some(Range::SharedAddressSpace)),
    ("169.254.0.0", Some(Range::LinkLocal)),
    ("169.254.169.254", Some(Range::LinkLocal)),
    ("169.254.255.255", Some(Range::LinkLocal)),
    ("192.0.0.0", Some(Range::IetfProtocol)),
    ("192.0.0.170", Some(Range::IetfProtocol)),
    ("192.0.0.255", Some(Range::IetfProtocol)),
    ("192.0.2.1", Some(Range::Documentation)),
    ("198.51.100.7", Some(Range::Documentation)),
    ("203.0.113.255", Some(Range::Documentation)),
    ("198.18.0.0", Some(Range::Benchmarking)),
    ("198.19.255.255", Some(Range::Benchmarking)),
    ("224.0.0.1", Some(Range::Multicast)),
    ("239.255.255.255", Some(Range::Multicast)),
    ("240.0.0.0", Some(Range::Reserved)),
    ("255.255.255.254", Some(Range::Reserved)),
    ("255.255.255.255", Some(Range::Broadcast)),
    // IPv4 neighbours that are public
    ("1.1.1.1", None),
    ("8.8.8.8", None),
    ("9.255.255.255", None),
    ("11.0.0.0", None),
    ("172.15.255.255", None),
    ("172.32.0.0", None),
    ("192.167.255.255", None),
    ("192.169.0.0", None),
    ("100.63.255.255", None),
    ("100.128.0.0", None),
    ("126.255.255.255", None),
    ("128.0.0.0", None),
    ("169.253.255.255", None),
    ("169.255.0.0", None),
    ("192.0.1.255", None),
    ("192.0.3.0", None),
    ("198.17.255.255", None),
    ("198.20.0.0", None),
    ("198.51.99.255", None),
    ("203.0.112.255", None),
    ("223.255.255.255", None),
    // IPv6
    ("::", Some(Range::Unspecified)),
    ("::1", Some(Range::Loopback)),
    ("fc00::", Some(Range::UniqueLocal)),
    ("fd00:ec2::254", Some(Range::UniqueLocal)),
    (
        "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        Some(Range::UniqueLocal),
    ),
    ("fe80::1", Some(Range::LinkLocal)),
    ("febf:ffff::1", Some(Range::LinkLocal)),
    ("fec0::1", Some(Range::SiteLocal)),
    ("ff00::", Some(Range::Multicast)),
    ("ff02::1", Some(Range::Multicast)),
    ("ff0e::1", Some(Range::Multicast)),
    ("2001:db8::1", Some(Range::Documentation)),
    (
        "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff",
        Some(Range::Documentation),
    ),
    ("3fff::1", Some(Range::Documentation)),
    ("3fff:fff::1", Some(Range::Documentation)),
    ("2001::1", Some(Range::IetfProtocol)),
    (
        "2001:0:4136:e378:8000:63bf:3fff:fdd2",
        Some(Range::IetfProtocol),
    ),
    ("2001:1ff::1", Some(Range::IetfProtocol)),
    ("100::1", Some(Range::Discard)),
    ("64:ff9b:1::a00:1", Some(Range::LocalNat64)),
    ("1::", Some(Range::NotGlobalUnicast)),
    ("4000::1", Some(Range::NotGlobalUnicast)),
    ("5f00::1", Some(Range::NotGlobalUnicast)),
    ("::ffff:0:a00:1", Some(Range::NotGlobalUnicast)),
    // IPv6 that is public, embedding forms of public IPv4 included
    ("2606:4700:4700::1111", None),
    ("2001:4860:4860::8888", None),
    ("2001:200::1", None),
    ("2a00:1450:4001::1", None),
    ("3ffe::1", None),
    ("3fff:1000::1", None),
    ("::ffff:1.1.1.1", None),
    ("::8.8.8.8", None),
    ("64:ff9b::1.1.1.1", None),
    ("2002:808:808::1", None),
];

#[test]
fn every_range_is_classified() {
    let guard = strict();
    for (text, expected) in TABLE {
        let got = classify(ip(text)).map(|b| b.range());
        assert_eq!(got, *expected, "{text}");
        assert_eq!(guard.check(ip(text)).is_ok(), expected.is_none(), "{text}");
        if let Some(blocked) = classify(ip(text)) {
            assert_eq!(blocked.ip(), ip(text));
            assert_eq!(blocked.embedded(), None, "{text}");
        }
    }
}

/// Every IPv6 form that carries an IPv4 address inherits the IPv4 verdict.
#[test]
fn embedded_ipv4_is_judged_in_every_form() {
    let guard = strict();
    for (text, expected) in TABLE {
        let IpAddr::V4(v4) = ip(text) else { continue };
        let [a, b, c, d] = v4.octets();
        let (hi, lo) = (u16::from_be_bytes([a, b]), u16::from_be_bytes([c, d]));
        let mut forms = vec![
            (
                Embedding::Mapped,
                Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, hi, lo),
            ),
            (
                Embedding::Nat64,
                Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, hi, lo),
            ),
            (
                Embedding::SixToFour,
                Ipv6Addr::new(0x2002, hi, lo, 0, 0, 0, 0, 1),
            ),
        ];
        // `::` and `::1` are the unspecified and loopback addresses, not IPv4-compatible.
        if u32::from(v4) > 1 {
            forms.push((
                Embedding::Compatible,
                Ipv6Addr::new(0, 0, 0, 0, 0, 0, hi, lo),
            ));
        }
        for (form, v6) in forms {
            let v6 = IpAddr::V6(v6);
            let verdict = classify(v6);
            assert_eq!(verdict.map(|b| b.range()), *expected, "{v6} ({text})");
            assert_eq!(guard.check(v6).is_ok(), expected.is_none(), "{v6}");
            if let Some(blocked) = verdict {
                assert_eq!(blocked.embedded(), Some((form, v4)), "{v6}");
                assert_eq!(blocked.ip(), v6);
            }
        }
    }
    // The text spellings reach the same verdicts.
    for (text, range) in [
        ("::ffff:127.0.0.1", Range::Loopback),
        ("::ffff:169.254.169.254", Range::LinkLocal),
        ("::ffff:a9fe:a9fe", Range::LinkLocal),
        ("::10.0.0.1", Range::Private),
        ("64:ff9b::192.168.1.1", Range::Private),
        ("64:ff9b::100.64.0.1", Range::SharedAddressSpace),
        ("2002:a9fe:a9fe::", Range::LinkLocal),
        ("2002:7f00:1::1", Range::Loopback),
        ("::ffff:0.0.0.0", Range::Unspecified),
        ("::ffff:255.255.255.255", Range::Broadcast),
    ] {
        assert_eq!(classify(ip(text)).map(|b| b.range()), Some(range), "{text}");
    }
}

#[test]
fn messages_name_the_range_and_the_form() {
    let guard = strict();
    assert_eq!(
        guard.check(ip("10.1.2.3")).unwrap_err().to_string(),
        "10.1.2.3 is in a blocked range: private (RFC 1918)"
    );
    assert_eq!(
        guard.check(ip("169.254.169.254")).unwrap_err().to_string(),
        "169.254.169.254 is in a blocked range: cloud metadata / link-local"
    );
    assert_eq!(
        guard.check(ip("::ffff:10.1.2.3")).unwrap_err().to_string(),
        "::ffff:10.1.2.3 (IPv4-mapped form of 10.1.2.3) is in a blocked range: private (RFC 1918)"
    );
    let refused = guard
        .check_resolved(
            "intranet.example",
            vec![
                SocketAddr::from(([1, 1, 1, 1], 0)),
                SocketAddr::from(([10, 0, 0, 5], 0)),
            ],
        )
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .starts_with("blocked_address: intranet.example: 10.0.0.5 ")
    );
}

#[test]
fn dev_mode_allows_loopback_and_nothing_else() {
    let dev = AddressGuard::new(true, vec![]);
    for allowed in [
        "127.0.0.1",
        "127.0.0.2",
        "127.255.255.254",
        "::1",
        "::ffff:127.0.0.1",
        "8.8.8.8",
    ] {
        assert!(dev.check(ip(allowed)).is_ok(), "{allowed}");
    }
    for (text, expected) in TABLE {
        if expected.is_some() && *expected != Some(Range::Loopback) {
            assert!(
                dev.check(ip(text)).is_err(),
                "{text} must stay blocked in dev mode"
            );
        }
    }
    // Forms that only carry loopback somewhere else (a NAT64 gateway's or a 6to4 relay's
    // loopback) are not this machine's loopback.
    for blocked in [
        "64:ff9b::127.0.0.1",
        "2002:7f00:1::1",
        "::127.0.0.1",
        "0.0.0.0",
        "::",
    ] {
        assert!(dev.check(ip(blocked)).is_err(), "{blocked}");
    }
}

#[test]
fn the_allow_list_overrides_exactly_its_blocks() {
    let guard = AddressGuard::new(
        false,
        vec![
            "10.1.0.0/16".parse().unwrap(),
            "127.0.0.1".parse().unwrap(),
            "fd00:1234::/32".parse().unwrap(),
            "169.254.169.254/32".parse().unwrap(),
        ],
    );
    for allowed in [
        "10.1.0.0",
        "10.1.255.255",
        "127.0.0.1",
        "::ffff:10.1.2.3",
        "::ffff:127.0.0.1",
        "fd00:1234::1",
        "fd00:1234:ffff::1",
        "169.254.169.254",
        "1.1.1.1",
    ] {
        assert!(guard.check(ip(allowed)).is_ok(), "{allowed}");
    }
    for blocked in [
        "10.0.255.255",
        "10.2.0.0",
        "127.0.0.2",
        "::1",
        "fd00:1235::1",
        "169.254.169.253",
        "192.168.1.1",
        // An IPv4 block says nothing about what a NAT64 gateway or 6to4 relay reaches.
        "64:ff9b::10.1.2.3",
        "2002:a01:203::1",
    ] {
        assert!(guard.check(ip(blocked)).is_err(), "{blocked}");
    }
    assert!(
        AddressGuard::new(false, vec!["0.0.0.0/0".parse().unwrap()])
            .check(ip("10.0.0.1"))
            .is_ok()
    );
    assert!(
        AddressGuard::new(false, vec!["::/0".parse().unwrap()])
            .check(ip("fe80::1"))
            .is_ok()
    );
}

#[test]
fn cidr_blocks_parse_strictly() {
    for (text, shown) in [
        ("10.0.0.0/8", "10.0.0.0/8"),
        ("127.0.0.1", "127.0.0.1/32"),
        ("0.0.0.0/0", "0.0.0.0/0"),
        ("::1", "::1/128"),
        ("fd00::/8", "fd00::/8"),
        ("::/0", "::/0"),
    ] {
        assert_eq!(text.parse::<Cidr>().unwrap().to_string(), shown);
    }
    for bad in [
        "10.0.0.1/8",
        "10.0.0.0/33",
        "::/129",
        "10.0.0.0/",
        "10.0.0.0/+8",
        "10.0.0.0/08x",
        "0x7f.0.0.1/32",
        "010.0.0.0/8",
        "localhost",
        "",
        "[::1]/128",
    ] {
        assert!(bad.parse::<Cidr>().is_err(), "{bad}");
    }
    let error = "10.1.2.3/8".parse::<Cidr>().unwrap_err().to_string();
    assert!(error.contains("did you mean 10.0.0.0/8?"), "{error}");
    let c: Cidr = "192.168.0.0/23".parse().unwrap();
    assert!(c.contains(ip("192.168.1.255")));
    assert!(!c.contains(ip("192.168.2.0")));
    assert!(!c.contains(ip("::ffff:192.168.1.1")));
}

#[test]
fn odd_ipv4_spellings_in_urls_are_the_address_they_mean() {
    let guard = strict();
    for (url, means) in [
        ("http://2130706433/", "127.0.0.1"),
        ("http://0x7f.1/", "127.0.0.1"),
        ("http://0X7F.0.0.1/", "127.0.0.1"),
        ("http://0x7f000001/", "127.0.0.1"),
        ("http://0177.0.0.1/", "127.0.0.1"),
        ("http://017700000001/", "127.0.0.1"),
        ("http://127.1/", "127.0.0.1"),
        ("http://127.0.0.1./", "127.0.0.1"),
        ("http://%31%32%37.0.0.1/", "127.0.0.1"),
        ("http://\u{ff11}\u{ff12}\u{ff17}.0.0.1/", "127.0.0.1"),
        ("http://127\u{3002}0\u{3002}0\u{3002}1/", "127.0.0.1"),
        ("https://0x7f.0.0.2:8443/x", "127.0.0.2"),
        ("http://2852039166/latest/meta-data/", "169.254.169.254"),
        ("http://0xa9.0xfe.0xa9.0xfe/", "169.254.169.254"),
        ("http://0251.0376.0251.0376/", "169.254.169.254"),
        ("http://0xa9fea9fe/", "169.254.169.254"),
        ("http://10.1/", "10.0.0.1"),
        ("http://0/", "0.0.0.0"),
        ("http://[::ffff:7f00:1]/", "::ffff:127.0.0.1"),
        (
            "http://[0:0:0:0:0:ffff:a9fe:a9fe]/",
            "::ffff:169.254.169.254",
        ),
        ("http://[::1]:8080/", "::1"),
        ("http://[FE80::1]/", "fe80::1"),
    ] {
        let parsed = Url::parse(url).unwrap();
        assert_eq!(AddressGuard::url_ip(&parsed), Some(ip(means)), "{url}");
        assert!(guard.check_url(&parsed).is_err(), "{url} must be refused");
    }
    // Loopback spellings pass in dev mode, because they are loopback.
    let dev = AddressGuard::new(true, vec![]);
    assert!(
        dev.check_url(&Url::parse("http://0x7f.1:9/").unwrap())
            .is_ok()
    );
    assert!(
        dev.check_url(&Url::parse("http://0xa9fea9fe/").unwrap())
            .is_err()
    );
    // Public literals pass; names are left to the resolver.
    for url in [
        "https://1.1.1.1/hook",
        "https://16843009/hook",
        "https://[2606:4700:4700::1111]/hook",
        "https://merchant.example/hook",
        "http://localhost/",
        "http://0x7f.1.example/",
    ] {
        let parsed = Url::parse(url).unwrap();
        assert!(guard.check_url(&parsed).is_ok(), "{url}");
    }
    assert_eq!(
        AddressGuard::url_ip(&Url::parse("http://localhost/").unwrap()),
        None
    );
    // A name ending in a number is an address or nothing: never a name.
    assert!(Url::parse("http://example.0x7f/").is_err());
}

#[test]
fn one_blocked_address_refuses_the_whole_name() {
    let guard = strict();
    let public = vec![
        SocketAddr::from(([1, 1, 1, 1], 0)),
        SocketAddr::from((ip("2606:4700:4700::1111"), 0)),
    ];
    assert_eq!(
        guard.check_resolved("a.example", public.clone()).unwrap(),
        public
    );
    for bad in ["169.254.169.254", "::1", "::ffff:10.0.0.1", "fd00::1"] {
        let mut addrs = public.clone();
        addrs.insert(1, SocketAddr::from((ip(bad), 0)));
        let refused = guard.check_resolved("a.example", addrs).unwrap_err();
        assert_eq!(refused.blocked.ip(), ip(bad));
    }
}

/// The resolver itself, on the one name that resolves without the network: /etc/hosts'
/// `localhost`.
#[tokio::test]
async fn the_resolver_refuses_localhost_outside_dev_mode() {
    let name = |text: &str| text.parse::<Name>().unwrap();
    let error = GuardedResolver::new(strict())
        .resolve(name("localhost"))
        .await
        .err()
        .unwrap();
    assert!(
        error
            .to_string()
            .starts_with("blocked_address: localhost: "),
        "{error}"
    );
    let addrs: Vec<SocketAddr> = GuardedResolver::new(AddressGuard::new(true, vec![]))
        .resolve(name("localhost"))
        .await
        .unwrap()
        .collect();
    assert!(!addrs.is_empty());
    assert!(addrs.iter().all(|a| a.ip().is_loopback()), "{addrs:?}");
}
