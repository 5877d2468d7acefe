//! The address guard end to end, over loopback only: an allow-listed address is delivered to,
//! a blocked one (by name, by IP literal, or as a redirect hop) fails the attempt with
//! `blocked_address` before any connection, and registration refuses blocked IP literals.
//! Other ranges are only ever checked by the pure decisions (`kxp_sender::guard`'s unit
//! tests): nothing here connects beyond 127.0.0.0/8.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kxp_sender::Server;
use serde_json::{Value, json};

use crate::support::{Receiver, Reply, Sender, sender, sender_with};

/// A TCP listener that counts the connections it accepts and never answers: the proof that
/// nothing connected, stronger than "no HTTP request arrived".
struct Tripwire {
    addr: SocketAddr,
    hits: Arc<AtomicUsize>,
}

impl Tripwire {
    async fn bind(ip: [u8; 4]) -> Tripwire {
        let listener = tokio::net::TcpListener::bind(SocketAddr::from((ip, 0)))
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let hits = Arc::new(AtomicUsize::new(0));
        let counter = hits.clone();
        tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                open.push(stream);
            }
        });
        Tripwire { addr, hits }
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

/// Outside dev mode, with `allow` allow-listed; one try, then dead.
async fn strict_sender(allow: &[&str]) -> Sender {
    let allow: Vec<_> = allow.iter().map(|c| c.parse().unwrap()).collect();
    sender_with("0s", move |config| {
        config.dev = false;
        config.allow_addresses = allow;
    })
    .await
}

/// Stores an endpoint straight in the database, as if registered earlier under another policy
/// (registration outside dev mode takes https:// only, and the receivers here speak http).
async fn stored_endpoint(server: &Server, url: &str, event_types: &[&str]) -> String {
    let db = server.db();
    let account = db.account_by_key("kxp_test_key").await.unwrap().unwrap();
    let types: Vec<String> = event_types.iter().map(|t| (*t).to_owned()).collect();
    let (endpoint, _secret) = db
        .create_endpoint(&account, url, &types, "", 2000)
        .await
        .unwrap();
    endpoint.id.into_string()
}

/// Emits `event_type`, waits for its delivery to end as `status`, and returns its attempts.
async fn deliver(s: &Sender, event_type: &str, status: &str) -> Vec<Value> {
    let event = s.api.emit(event_type, json!({"n": 1})).await;
    let delivery = s
        .api
        .wait_for(&event, status, Duration::from_secs(10))
        .await;
    s.api.attempts(delivery["id"].as_str().unwrap()).await
}

fn error_of(attempt: &Value) -> &str {
    attempt["error"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn an_allow_listed_loopback_address_is_delivered_to_outside_dev_mode() {
    let s = strict_sender(&["127.0.0.1/32"]).await;
    let receiver = Receiver::start(vec![]).await;
    stored_endpoint(&s.server, &receiver.url, &["*"]).await;

    let attempts = deliver(&s, "payment.succeeded", "delivered").await;
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    assert_eq!(receiver.seen().len(), 1);
    s.server.shutdown().await;
}

#[tokio::test]
async fn a_name_or_literal_resolving_to_loopback_is_blocked_and_never_connected() {
    let s = strict_sender(&[]).await;
    let tripwire = Tripwire::bind([127, 0, 0, 1]).await;
    let port = tripwire.addr.port();
    // `localhost` goes through the resolver; the literal and its odd spelling never reach one
    // and are checked before sending.
    stored_endpoint(
        &s.server,
        &format!("http://localhost:{port}/hook"),
        &["by.name"],
    )
    .await;
    stored_endpoint(
        &s.server,
        &format!("http://127.0.0.1:{port}/hook"),
        &["by.ip"],
    )
    .await;
    stored_endpoint(
        &s.server,
        &format!("http://2130706433:{port}/hook"),
        &["by.odd_ip"],
    )
    .await;

    let by_name = deliver(&s, "by.name", "dead").await;
    assert_eq!(by_name.len(), 1, "{by_name:?}");
    assert!(
        error_of(&by_name[0]).starts_with("blocked_address: localhost: 127.0.0.1 "),
        "{by_name:?}"
    );
    assert!(error_of(&by_name[0]).contains("loopback"), "{by_name:?}");
    for event_type in ["by.ip", "by.odd_ip"] {
        let attempts = deliver(&s, event_type, "dead").await;
        assert_eq!(attempts.len(), 1, "{attempts:?}");
        assert_eq!(
            error_of(&attempts[0]),
            "blocked_address: 127.0.0.1 is in a blocked range: loopback"
        );
        assert!(attempts[0]["status_code"].is_null(), "{attempts:?}");
    }
    // Give a stray connection time to show up before declaring there was none.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        tripwire.hits(),
        0,
        "the receiver must see no connection at all"
    );
    s.server.shutdown().await;
}

#[tokio::test]
async fn a_redirect_to_a_blocked_address_fails_before_the_next_hop_connects() {
    let s = strict_sender(&["127.0.0.1/32"]).await;
    // 127.0.0.2 is loopback too (Linux routes all of 127/8 to lo): no traffic leaves the
    // machine even if the guard failed, but it is outside the allow-list.
    let tripwire = Tripwire::bind([127, 0, 0, 2]).await;
    let port = tripwire.addr.port();
    let allowed_target = Receiver::start(vec![]).await;
    let first = Receiver::start(vec![
        Reply::Redirect(307, format!("http://127.0.0.2:{port}/hook")),
        Reply::Redirect(308, format!("http://0x7f.0.0.2:{port}/hook")),
        Reply::Redirect(302, format!("http://[::ffff:127.0.0.2]:{port}/hook")),
        Reply::Redirect(307, allowed_target.url.clone()),
    ])
    .await;
    stored_endpoint(&s.server, &first.url, &["*"]).await;

    for n in 1..=3 {
        let attempts = deliver(&s, "payment.succeeded", "dead").await;
        assert_eq!(attempts.len(), 1, "{attempts:?}");
        let error = error_of(&attempts[0]);
        assert!(
            error.starts_with("blocked_address: redirect 1: ") && error.contains("127.0.0.2"),
            "{error}"
        );
        assert!(
            error.ends_with("is in a blocked range: loopback"),
            "{error}"
        );
        assert_eq!(first.seen().len(), n);
    }
    // The control: a hop to an allowed address is followed as before.
    deliver(&s, "payment.succeeded", "delivered").await;
    assert_eq!(first.seen().len(), 4);
    assert_eq!(allowed_target.seen().len(), 1);

    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        tripwire.hits(),
        0,
        "the blocked hop must see no connection at all"
    );
    s.server.shutdown().await;
}

/// Registration refuses blocked IP literals with 422 `blocked_address` naming the range. No
/// event is emitted and the challenge is skipped, so nothing connects anywhere.
#[tokio::test]
async fn blocked_ip_literals_are_refused_at_registration() {
    let register = |s: &Sender, url: &str| {
        let api = s.api.clone();
        let body = json!({"url": url, "event_types": ["never.emitted"], "skip_challenge": true});
        async move { api.call("POST", "/v1/endpoints", Some(body)).await }
    };
    let refused = [
        ("https://127.0.0.2/x", "loopback"),
        ("https://0x7f.0.0.2/x", "loopback"),
        ("https://[::1]/x", "loopback"),
        ("https://10.0.0.1/x", "private (RFC 1918)"),
        ("https://[::ffff:192.168.0.1]/x", "private (RFC 1918)"),
        (
            "https://169.254.169.254/latest",
            "cloud metadata / link-local",
        ),
        ("https://2852039166/latest", "cloud metadata / link-local"),
        (
            "https://[64:ff9b::a9fe:a9fe]/x",
            "cloud metadata / link-local",
        ),
        ("https://100.64.0.1/x", "CGNAT"),
        ("https://[fd00::1]/x", "unique local (fc00::/7)"),
        ("https://[fe80::1]/x", "link-local"),
        ("https://0.0.0.0/x", "unspecified"),
        ("https://224.0.0.1/x", "multicast"),
        ("https://255.255.255.255/x", "broadcast"),
    ];

    let strict = strict_sender(&["127.0.0.1/32"]).await;
    for (url, range) in refused {
        let (status, error) = register(&strict, url).await;
        assert_eq!(status, 422, "{url}: {error}");
        assert_eq!(error["error"], "blocked_address", "{url}: {error}");
        assert!(
            error["message"].as_str().unwrap().contains(range),
            "{url}: {error}"
        );
    }
    for url in [
        "https://127.0.0.1:1/x",
        "https://localhost/x",
        "https://merchant.example/x",
    ] {
        let (status, created) = register(&strict, url).await;
        assert_eq!(status, 201, "{url}: {created}");
    }
    strict.server.shutdown().await;

    // Without the allow-list, loopback names are refused too.
    let bare = strict_sender(&[]).await;
    for url in [
        "https://127.0.0.1/x",
        "https://localhost/x",
        "https://a.localhost./x",
    ] {
        let (status, error) = register(&bare, url).await;
        assert_eq!(status, 422, "{url}: {error}");
        assert_eq!(error["error"], "blocked_address", "{url}: {error}");
    }
    bare.server.shutdown().await;

    // `--dev` lets loopback (and http://) through, and nothing else.
    let dev = sender("0s").await;
    for url in [
        "http://127.0.0.2:1/x",
        "http://[::1]:1/x",
        "http://localhost:1/x",
    ] {
        let (status, created) = register(&dev, url).await;
        assert_eq!(status, 201, "{url}: {created}");
    }
    for (url, range) in refused.iter().filter(|(_, range)| *range != "loopback") {
        let (status, error) = register(&dev, url).await;
        assert_eq!(status, 422, "{url}: {error}");
        assert!(
            error["message"].as_str().unwrap().contains(range),
            "{url}: {error}"
        );
    }
    dev.server.shutdown().await;
}
