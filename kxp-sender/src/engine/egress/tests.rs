use super::connect::{head_end, status};
use super::*;

#[test]
fn a_proxy_url_is_read_and_printed_without_its_user_or_password() {
    let proxy: EgressProxy = "http://egress:s3cr%3At@proxy.internal:3128"
        .parse()
        .unwrap();
    assert_eq!(proxy.address(), ("proxy.internal".to_owned(), 3128));
    assert_eq!(proxy.to_string(), "http://***@proxy.internal:3128");
    assert!(!format!("{proxy:?}").contains("s3cr"));
    // RFC 7617: user ":" password, percent-decoded, base64.
    assert_eq!(
        proxy.authorization.as_deref().map(|a| a.as_str()),
        Some(format!("Basic {}", STANDARD.encode("egress:s3cr:t")).as_str())
    );

    let plain: EgressProxy = "http://127.0.0.1:8888".parse().unwrap();
    assert_eq!(plain.to_string(), "http://127.0.0.1:8888");
    assert!(plain.authorization.is_none());
    let v6: EgressProxy = "http://[::1]:8888/".parse().unwrap();
    assert_eq!(v6.address(), ("::1".to_owned(), 8888));
    assert_eq!(v6.to_string(), "http://[::1]:8888");
    let default_port: EgressProxy = "http://proxy.internal".parse().unwrap();
    assert_eq!(default_port.address().1, 80);
}

#[test]
fn a_proxy_url_that_is_not_one_is_refused_without_repeating_the_password() {
    for (text, why) in [
        ("https://proxy:3128", "the scheme must be http"),
        ("socks5://proxy:1080", "the scheme must be http"),
        ("http://proxy:3128/path", "no path, query or fragment"),
        ("http://proxy:3128?x=1", "no path, query or fragment"),
        ("proxy:3128", "the scheme must be http"),
        ("http://user:hunter2@", "not a URL"),
        ("", "not a URL"),
    ] {
        let error = text.parse::<EgressProxy>().unwrap_err().to_string();
        assert!(error.contains(why), "{text}: {error}");
        assert!(!error.contains("hunter2"), "{text}: {error}");
    }
}

#[test]
fn a_probe_target_is_host_and_port() {
    let proxy: EgressProxy = "http://127.0.0.1:8888".parse().unwrap();
    for good in ["127.0.0.1:443", "status.example.com:443", "[::1]:8443"] {
        assert_eq!(proxy.clone().with_probe(good).unwrap().probe(), Some(good));
    }
    for bad in [
        "example.com",
        "example.com:0",
        "example.com:https",
        ":443",
        "a b:443",
    ] {
        assert!(proxy.clone().with_probe(bad).is_err(), "{bad}");
    }
    let probed = proxy.with_probe("127.0.0.1:443").unwrap();
    assert_eq!(
        format!("{probed:?}"),
        "EgressProxy(http://127.0.0.1:8888, probe 127.0.0.1:443)"
    );
}

#[test]
fn the_answer_to_connect_is_read_to_its_blank_line() {
    let answer = b"HTTP/1.1 200 Connection established\r\nProxy-agent: tinyproxy\r\n\r\n";
    assert_eq!(head_end(answer), Some(answer.len()));
    assert_eq!(head_end(&answer[..answer.len() - 1]), None);
    assert_eq!(status(answer), Some(200));
    assert_eq!(
        status(b"HTTP/1.0 407 Proxy Authentication Required\r\n\r\n"),
        Some(407)
    );
    assert_eq!(status(b"HTTP/1.1 502 Bad Gateway\r\n\r\n"), Some(502));
    for bad in [
        &b"SSH-2.0-OpenSSH\r\n\r\n"[..],
        b"HTTP/2 200\r\n\r\n",
        b"HTTP/1.1 20 OK\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/1.1 999 What\r\n\r\n",
        b"HTTP/1.1 +20 OK\r\n\r\n",
        b"\xff\xfe\r\n\r\n",
    ] {
        assert_eq!(status(bad), None, "{}", String::from_utf8_lossy(bad));
    }
}

#[test]
fn health_goes_down_on_a_failure_and_up_on_a_success() {
    let health = Health::default();
    assert!(health.is_up());
    assert_eq!(health.view("p".into()).state, "up");
    health.failed("the egress proxy http://127.0.0.1:9 is unreachable");
    health.failed("again");
    assert!(!health.is_up());
    let view = health.view("p".into());
    assert_eq!(view.state, "proxy_error");
    assert_eq!(view.last_error.as_deref(), Some("again"));
    assert!(view.since.is_some());
    let mut text = String::new();
    health.render(&mut text);
    assert!(text.contains("kxp_egress_proxy_up 0\n"), "{text}");
    assert!(text.contains("kxp_egress_proxy_errors_total 2\n"), "{text}");
    health.succeeded();
    assert!(health.is_up());
    let mut text = String::new();
    health.render(&mut text);
    assert!(text.contains("kxp_egress_proxy_up 1\n"), "{text}");
}

#[tokio::test]
async fn a_proxy_that_refused_the_credentials_is_not_cleared_by_a_connection_alone() {
    // Nothing listens on port 1: had the probe connected, it would have failed anyway; the
    // point is that it does not try, and says why.
    let egress = Egress::new("http://egress:wrong@127.0.0.1:1".parse().unwrap());
    egress.health.refused_credentials(
        "the egress proxy answered 407: it refused the proxy URL's credentials",
    );
    assert!(egress.health.credentials_refused());
    assert_eq!(
        connect::probe(&egress).await,
        Err("it refused the credentials".to_owned())
    );
    assert!(!egress.health.is_up());
    // A tunnel (here: the watcher's trial, then a tunnel) clears it.
    egress.health.tunnelled();
    assert!(egress.health.is_up() && !egress.health.credentials_refused());
    assert!(egress.health.tunnelled_lately());
}

#[tokio::test]
async fn probes_run_one_at_a_time_and_their_result_stands() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let egress = Egress::new(format!("http://127.0.0.1:{port}").parse().unwrap());
    let accepted = tokio::spawn(async move {
        let mut n = 0;
        while let Ok(Ok(_)) =
            tokio::time::timeout(std::time::Duration::from_millis(500), listener.accept()).await
        {
            n += 1;
        }
        n
    });
    let results = futures_util::future::join_all((0..8).map(|_| connect::probe(&egress))).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    // Eight callers at once, one connection: the others shared its result.
    assert_eq!(accepted.await.unwrap(), 1);
}

/// A small deterministic generator for the mutation test below.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % n.max(1) as u64).unwrap_or(0)
    }
}

/// The proxy's answer and the proxy URL are read from outside: mutated valid inputs (bytes
/// flipped, inserted, dropped, cut short) never panic, and what is read stays within bounds.
#[test]
fn mutated_answers_and_urls_are_read_without_panicking() {
    let answers: [&[u8]; 4] = [
        b"HTTP/1.1 200 Connection established\r\nProxy-agent: tinyproxy/1.11.1\r\n\r\n",
        b"HTTP/1.0 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic\r\n\r\n",
        b"HTTP/1.1 500 Unable to connect\r\nConnection: close\r\n\r\n<html>",
        b"HTTP/1.1 200 OK\n\n",
    ];
    let urls = [
        "http://egress:s3cret@proxy.internal:3128",
        "http://[::1]:8888/",
        "http://127.0.0.1:8888",
    ];
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    for round in 0..20_000 {
        let mut bytes = answers[round % answers.len()].to_vec();
        for _ in 0..=rng.below(4) {
            let at = rng.below(bytes.len() + 1);
            match rng.below(4) {
                0 if at < bytes.len() => bytes[at] ^= 1 << rng.below(8),
                1 => bytes.insert(at, (rng.next() & 0xff) as u8),
                2 if at < bytes.len() => {
                    bytes.remove(at);
                }
                _ => bytes.truncate(at),
            }
        }
        if let Some(end) = head_end(&bytes) {
            assert!(end <= bytes.len());
            let head = &bytes[..end];
            assert!(
                head.ends_with(b"\r\n\r\n") || head.ends_with(b"\n\n"),
                "{bytes:?}"
            );
            if let Some(code) = status(&bytes[..end]) {
                assert!((100..600).contains(&code));
            }
        }

        let mut url = urls[round % urls.len()].as_bytes().to_vec();
        let at = rng.below(url.len() + 1);
        match rng.below(3) {
            0 if at < url.len() => url[at] = b"@:/[]%?#x9 "[rng.below(11)],
            1 => url.insert(at, b"@:/[]%?#x9 "[rng.below(11)]),
            _ => url.truncate(at),
        }
        let text = String::from_utf8_lossy(&url);
        if let Ok(proxy) = text.parse::<EgressProxy>() {
            assert!(!proxy.to_string().contains("s3cret"), "{text}");
            assert!(!format!("{proxy:?}").contains("s3cret"), "{text}");
            let _ = proxy.with_probe(&text);
        }
    }
}
