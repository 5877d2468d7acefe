//! Egress through a forward proxy (`Config::egress_proxy`), against a real tinyproxy on
//! 127.0.0.1 with this test's own configuration (no `ConnectPort` restriction, a log file read
//! here). The sender runs outside development mode with only 127.0.0.1/32 allow-listed, so the
//! address guard's refusals still mean something: deliveries reach an https receiver through a
//! tunnel to its vetted address, TLS inside with the endpoint's name and certificate; private
//! and metadata addresses are refused before any `CONNECT`; a stopped proxy spends no attempt
//! and opens no circuit, and deliveries resume when it is back; a `407` is the proxy's fault; a
//! `500` to an endpoint's tunnel while the probe passes is the endpoint's.
//!
//! Skipped, loudly, where tinyproxy is not installed (Debian: `tinyproxy-bin`); with
//! `KXP_REQUIRE_PROXY=1`, as `.ci/run` sets, they fail instead.

use std::net::TcpListener as StdListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kxp_sender::{Config, EgressProxy, Protection};
use rcgen::ExtendedKeyUsagePurpose;
use serde_json::{Value, json};

use crate::console::Browser;
use crate::console_pages::{key_session, page};
use crate::mtls::{Issued, Pki, Receiver, receiver};
use crate::support::{Sender, metric, sender_with};

/// A tinyproxy on 127.0.0.1, its log read by the tests; killed when dropped.
struct Tinyproxy {
    port: u16,
    dir: tempfile::TempDir,
    extra: Vec<String>,
    child: Option<Child>,
}

impl Tinyproxy {
    /// Starts one with `extra` configuration lines, or says why not: `None` after the SKIPPED
    /// line when tinyproxy is not installed (a panic where `KXP_REQUIRE_PROXY=1`).
    fn start(test: &str, extra: &[&str]) -> Option<Tinyproxy> {
        if Command::new("tinyproxy")
            .arg("-v")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_err()
        {
            assert!(
                std::env::var("KXP_REQUIRE_PROXY").as_deref() != Ok("1"),
                "KXP_REQUIRE_PROXY=1 but tinyproxy is not installed (Debian: tinyproxy-bin)"
            );
            eprintln!("*** SKIPPED {test}: tinyproxy is not installed (Debian: tinyproxy-bin) ***");
            return None;
        }
        let port = StdListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut proxy = Tinyproxy {
            port,
            dir: tempfile::tempdir().unwrap(),
            extra: extra.iter().map(|l| (*l).to_owned()).collect(),
            child: None,
        };
        proxy.run();
        Some(proxy)
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("tinyproxy.log")
    }

    /// Starts the process (again) on the same port, and waits until it accepts connections.
    fn run(&mut self) {
        let config = self.dir.path().join("tinyproxy.conf");
        let mut text = format!(
            "Port {}\nListen 127.0.0.1\nTimeout 30\nMaxClients 64\nAllow 127.0.0.1\n\
             LogLevel Connect\nLogFile \"{}\"\n",
            self.port,
            self.log_path().display()
        );
        for line in &self.extra {
            text.push_str(line);
            text.push('\n');
        }
        std::fs::write(&config, text).unwrap();
        let child = Command::new("tinyproxy")
            .arg("-d")
            .arg("-c")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!("tinyproxy did not listen on 127.0.0.1:{}", self.port);
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The targets of the `CONNECT` requests the proxy received, in order.
    fn connects(&self) -> Vec<String> {
        let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        log.lines()
            .filter_map(|line| line.split("): CONNECT ").nth(1))
            .filter_map(|rest| rest.split(' ').next())
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Tinyproxy {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The allow-list: 127.0.0.1/32, and `::1/128` only where `localhost` resolves to it too (the
/// guard refuses a name if any of its addresses is blocked).
fn loopback_allowed() -> Vec<kxp_sender::Cidr> {
    let mut allow = vec!["127.0.0.1/32".parse().unwrap()];
    let v6 = std::net::ToSocketAddrs::to_socket_addrs(&("localhost", 1))
        .unwrap()
        .any(|a| a.ip().is_ipv6());
    if v6 {
        allow.push("::1/128".parse().unwrap());
    }
    allow
}

/// A sender outside development mode sending through `proxy` (a URL, and a probe target), one
/// try per delivery and a circuit that opens on the first failure: any counted failure shows.
async fn sender_through(proxy: &str, probe: Option<&str>) -> Sender {
    let mut egress: EgressProxy = proxy.parse().unwrap();
    if let Some(target) = probe {
        egress = egress.with_probe(target).unwrap();
    }
    sender_with("0s", move |config: &mut Config| {
        config.dev = false;
        config.allow_addresses = loopback_allowed();
        config.egress_proxy = Some(egress);
        config.protection = Protection {
            breaker_failures: 1,
            ..Protection::default()
        };
    })
    .await
}

/// A private CA, a client certificate, and an https receiver requiring it, with a server
/// certificate for `localhost`: reached by name, so the tunnel's TLS has a name to check.
async fn merchant() -> (Pki, Issued, Receiver, String) {
    let pki = Pki::new("Merchant Private CA");
    let server = pki.issue(
        "localhost",
        &["localhost"],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let client = pki.issue("kxp-webhooks", &[], ExtendedKeyUsagePurpose::ClientAuth);
    let r = receiver(&server, &pki).await;
    let url = r.url.replace("127.0.0.1", "localhost");
    (pki, client, r, url)
}

fn tls(pki: &Pki, client: &Issued) -> Value {
    json!({"client_certificate": client.cert, "client_key": client.key, "ca_certificates": pki.pem()})
}

/// `POST /v1/endpoints` with `body`: the status and the answer.
async fn register(s: &Sender, body: Value) -> (u16, Value) {
    s.api.call("POST", "/v1/endpoints", Some(body)).await
}

async fn health(s: &Sender) -> Value {
    let (status, body) = s.api.call("GET", "/healthz", None).await;
    assert_eq!(status, 200, "{body}");
    body
}

/// `/healthz` once it says the egress proxy is failing (within 15 s).
async fn failing(s: &Sender) -> Value {
    for _ in 0..600 {
        let h = health(s).await;
        if h["egress_proxy"]["state"] == "proxy_error" {
            return h;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the proxy was not found failing: {}", health(s).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_leave_through_the_proxy_to_vetted_addresses_with_tls_inside() {
    let Some(proxy) = Tinyproxy::start("egress through tinyproxy", &[]) else {
        return;
    };
    let (pki, client, r, url) = merchant().await;
    let s = sender_through(&proxy.url(), None).await;
    // The challenge goes through the proxy too, over mutual TLS to the private CA's server.
    let (status, created) = register(&s, json!({"url": url, "tls": tls(&pki, &client)})).await;
    assert_eq!(status, 201, "{created}");
    for i in 0..3 {
        let event = s.api.emit("payment.succeeded", json!({"n": i})).await;
        s.api
            .wait_for(&event, "delivered", Duration::from_secs(10))
            .await;
    }
    assert_eq!(*r.requests.lock().unwrap(), 3);
    // Mutual TLS inside the tunnel: the endpoint's certificate, every connection.
    let presented = r.presented.lock().unwrap().clone();
    assert!(!presented.is_empty() && presented.iter().all(|c| *c == client.der));
    // The proxy was asked for the vetted address, never for the name.
    let port = url.rsplit(':').next().unwrap().trim_end_matches("/hook");
    let connects = proxy.connects();
    assert!(
        !connects.is_empty() && connects.iter().all(|t| *t == format!("127.0.0.1:{port}")),
        "{connects:?}"
    );

    let h = health(&s).await;
    assert_eq!(h["status"], "ok", "{h}");
    assert_eq!(h["egress_proxy"]["state"], "up", "{h}");
    assert_eq!(h["egress_proxy"]["proxy"], proxy.url(), "{h}");
    assert_eq!(metric(&s.api, "kxp_egress_proxy_up").await, 1);
    s.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_and_metadata_addresses_are_refused_before_any_connect() {
    let Some(proxy) = Tinyproxy::start("egress guard", &[]) else {
        return;
    };
    let s = sender_through(&proxy.url(), None).await;
    let db = s.server.db();
    let account = db.account_by_key("kxp_test_key").await.unwrap().unwrap();
    // Stored as if registered under another policy: registration refuses them already.
    for url in [
        "http://169.254.169.254/latest/meta-data/",
        "https://10.0.0.5:8443/hook",
        "http://[::ffff:169.254.169.254]/",
        "https://[fd00::1]/hook",
    ] {
        db.create_endpoint(&account, url, &["*".to_owned()], "", 2000)
            .await
            .unwrap();
    }
    let event = s.api.emit("payment.succeeded", json!({})).await;
    let mut ended = Vec::new();
    for _ in 0..400 {
        ended = s.api.deliveries_of(&event).await;
        if ended.len() == 4 && ended.iter().all(|d| d["status"] == "dead") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(ended.len(), 4, "{ended:?}");
    for delivery in &ended {
        assert_eq!(delivery["status"], "dead", "{delivery}");
        let error = delivery["last_error"].as_str().unwrap();
        assert!(error.starts_with("blocked_address"), "{error}");
    }
    // Nothing asked of the proxy: the guard decided before any CONNECT.
    assert_eq!(proxy.connects(), Vec::<String>::new());
    s.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_proxy_spends_no_attempt_and_deliveries_resume_when_it_is_back() {
    let Some(mut proxy) = Tinyproxy::start("egress outage", &[]) else {
        return;
    };
    let (pki, client, r, url) = merchant().await;
    let s = sender_through(&proxy.url(), None).await;
    let (status, created) = register(
        &s,
        json!({"url": url, "tls": tls(&pki, &client), "skip_challenge": true}),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let endpoint = created["id"].as_str().unwrap().to_owned();

    proxy.stop();
    let mut events = Vec::new();
    for i in 0..3 {
        events.push(s.api.emit("payment.succeeded", json!({"n": i})).await);
    }
    // One try per delivery and a circuit that opens on one failure: had the outage counted,
    // they would be dead and the circuit open by now.
    let h = failing(&s).await;
    assert_eq!(h["status"], "degraded", "{h}");
    assert_eq!(h["egress_proxy"]["state"], "proxy_error", "{h}");
    let why = h["egress_proxy"]["last_error"].as_str().unwrap();
    assert!(why.contains("unreachable"), "{why}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for event in &events {
        for delivery in s.api.deliveries_of(event).await {
            assert_eq!(delivery["status"], "pending", "{delivery}");
            assert_eq!(delivery["attempts"], 0, "{delivery}");
        }
    }
    let (_, health_of) = s
        .api
        .call("GET", &format!("/v1/endpoints/{endpoint}/health"), None)
        .await;
    assert_eq!(health_of["circuit_state"], "closed", "{health_of}");
    assert_eq!(health_of["consecutive_failures"], 0, "{health_of}");
    assert!(metric(&s.api, "kxp_egress_proxy_errors_total").await >= 1);
    assert_eq!(metric(&s.api, "kxp_egress_proxy_up").await, 0);
    assert_eq!(*r.requests.lock().unwrap(), 0);
    // The operators' console says so.
    let b = Browser::of(&s);
    let (_, op_key) = s.server.db().create_operator("Olga").await.unwrap();
    let cookie = key_session(&b, &op_key).await;
    let (_, html) = page(&b, "/console", &cookie).await;
    assert!(
        html.contains("is failing") && html.contains(&proxy.url()) && html.contains("unreachable"),
        "{html}"
    );

    proxy.run();
    for event in &events {
        let delivered = s
            .api
            .wait_for(event, "delivered", Duration::from_secs(15))
            .await;
        assert_eq!(delivered["attempts"], 1, "{delivered}");
    }
    assert_eq!(*r.requests.lock().unwrap(), 3);
    let h = health(&s).await;
    assert_eq!(h["status"], "ok", "{h}");
    assert_eq!(h["egress_proxy"]["state"], "up", "{h}");
    let (_, html) = page(&b, "/console", &cookie).await;
    assert!(
        html.contains("Deliveries leave through the egress proxy") && !html.contains("is failing"),
        "{html}"
    );
    s.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_407_is_the_proxys_failure_and_the_urls_credentials_answer_it() {
    let Some(proxy) = Tinyproxy::start("egress 407", &["BasicAuth egress s3cret"]) else {
        return;
    };
    let (pki, client, r, url) = merchant().await;
    let body = json!({"url": url, "tls": tls(&pki, &client), "skip_challenge": true});

    // Without credentials: held back, not counted, and /healthz says why.
    let s = sender_through(&proxy.url(), None).await;
    let (status, _) = register(&s, body.clone()).await;
    assert_eq!(status, 201);
    let event = s.api.emit("payment.succeeded", json!({})).await;
    let h = failing(&s).await;
    let why = h["egress_proxy"]["last_error"].as_str().unwrap_or_default();
    assert!(
        why.contains("407") && why.contains("wants credentials"),
        "{h}"
    );
    // Put back untried, and claimed again at the next poll (so `delivering` for a moment):
    // never counted as an attempt.
    for delivery in s.api.deliveries_of(&event).await {
        assert!(
            ["pending", "delivering"].contains(&delivery["status"].as_str().unwrap_or_default()),
            "{delivery}"
        );
        assert_eq!(delivery["attempts"], 0, "{delivery}");
    }
    s.server.shutdown().await;

    // With them in the URL: delivered, and never printed.
    let with = format!("http://egress:s3cret@127.0.0.1:{}", proxy.port);
    let s = sender_through(&with, None).await;
    let (status, _) = register(&s, body).await;
    assert_eq!(status, 201);
    let event = s.api.emit("payment.succeeded", json!({})).await;
    s.api
        .wait_for(&event, "delivered", Duration::from_secs(10))
        .await;
    assert_eq!(*r.requests.lock().unwrap(), 1);
    let h = health(&s).await;
    assert_eq!(
        h["egress_proxy"]["proxy"],
        format!("http://***@127.0.0.1:{}", proxy.port),
        "{h}"
    );
    assert!(!h.to_string().contains("s3cr"), "{h}");
    s.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_tunnel_while_the_probe_passes_is_the_endpoints_connect_failure() {
    let Some(proxy) = Tinyproxy::start("egress refused tunnel", &[]) else {
        return;
    };
    // The probe target: a listener known to accept connections.
    let known_good = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let probe = known_good.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        loop {
            let _ = known_good.accept().await;
        }
    });
    // Nothing listens on the endpoint's port: tinyproxy answers its CONNECT with a 500.
    let closed = StdListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let s = sender_through(&proxy.url(), Some(&probe)).await;
    let (status, created) = register(
        &s,
        json!({"url": format!("https://localhost:{port}/hook"), "skip_challenge": true}),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let event = s.api.emit("payment.succeeded", json!({})).await;
    let dead = s
        .api
        .wait_for(&event, "dead", Duration::from_secs(10))
        .await;
    assert_eq!(dead["attempts"], 1, "{dead}");
    let error = dead["last_error"].as_str().unwrap();
    assert!(
        error.starts_with("connect") && error.contains("answered 500 to CONNECT"),
        "{error}"
    );
    assert!(
        proxy.connects().contains(&probe),
        "the probe asked for its target: {:?}",
        proxy.connects()
    );
    let h = health(&s).await;
    assert_eq!(h["egress_proxy"]["state"], "up", "{h}");
    s.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_that_accepts_but_never_answers_spends_no_attempt() {
    // A "proxy" that takes connections and says nothing: attempts through it time out, and the
    // probe (a tunnel to a target known to answer) fails the same way, so the timeouts are the
    // proxy's.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = format!("http://{}", silent.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = silent.accept().await {
            held.push(stream);
        }
    });
    let known_good = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let probe = known_good.local_addr().unwrap().to_string();
    let r = crate::support::Receiver::start(vec![]).await;
    let s = sender_through(&proxy, Some(&probe)).await;
    let (status, created) = register(
        &s,
        json!({"url": r.url.replace("http://", "https://"), "timeout_ms": 500,
                        "skip_challenge": true}),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let event = s.api.emit("payment.succeeded", json!({})).await;
    let h = failing(&s).await;
    assert_eq!(h["egress_proxy"]["state"], "proxy_error", "{h}");
    let why = h["egress_proxy"]["last_error"].as_str().unwrap();
    assert!(why.contains("did not"), "{why}");
    for delivery in s.api.deliveries_of(&event).await {
        assert_eq!(delivery["status"], "pending", "{delivery}");
        assert_eq!(delivery["attempts"], 0, "{delivery}");
    }
    drop(known_good);
    s.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_challenge_that_fails_at_the_proxy_is_503_not_the_endpoints_fault() {
    let Some(mut proxy) = Tinyproxy::start("egress challenge", &[]) else {
        return;
    };
    let (pki, client, _r, url) = merchant().await;
    let s = sender_through(&proxy.url(), None).await;
    proxy.stop();
    let (status, body) = register(&s, json!({"url": url, "tls": tls(&pki, &client)})).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"], "egress_unavailable", "{body}");
    // Nothing of the proxy reaches the merchant.
    assert!(!body.to_string().contains(&proxy.url()), "{body}");

    proxy.run();
    let mut created = Value::Null;
    for _ in 0..100 {
        let (status, body) = register(&s, json!({"url": url, "tls": tls(&pki, &client)})).await;
        created = body;
        if status == 201 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(created["id"].is_string(), "{created}");
    s.server.shutdown().await;
}
