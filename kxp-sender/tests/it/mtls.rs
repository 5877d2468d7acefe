//! Mutual TLS and private CAs (`tls`): a receiver on 127.0.0.1 that requires a client
//! certificate from a test CA gets every delivery with the endpoint's certificate and refuses a
//! connection without one; its server certificate, from that private CA, is trusted only with
//! `ca_certificates`. What does not check out is refused at registration with the reason; the
//! key never comes back.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use kxp_api::{EndpointTls, PortalScope};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};
use sha2_std::Digest as _;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::console::Browser;
use crate::console_pages::{account_page, page, post_form};
use crate::support::{Api, Database, sender};

/// A test CA, and certificates it signs: a PEM certificate and its PEM key.
pub(crate) struct Pki {
    ca: CertifiedIssuer<'static, KeyPair>,
}

pub(crate) struct Issued {
    pub cert: String,
    pub key: String,
    pub der: CertificateDer<'static>,
}

impl Pki {
    pub(crate) fn new(name: &str) -> Pki {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Pki { ca }
    }

    pub(crate) fn pem(&self) -> String {
        self.ca.pem()
    }

    pub(crate) fn issue(&self, name: &str, san: &[&str], usage: ExtendedKeyUsagePurpose) -> Issued {
        self.issue_with(name, san, usage, |_| {})
    }

    fn issue_with(
        &self,
        name: &str,
        san: &[&str],
        usage: ExtendedKeyUsagePurpose,
        tweak: impl FnOnce(&mut CertificateParams),
    ) -> Issued {
        let san: Vec<String> = san.iter().map(|s| (*s).to_owned()).collect();
        let mut params = CertificateParams::new(san).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![usage];
        tweak(&mut params);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        Issued {
            cert: cert.pem(),
            key: key.serialize_pem(),
            der: cert.der().clone(),
        }
    }
}

/// Accepts TCP connections and completes a TLS handshake that requires a client certificate
/// from `client_ca`; records the certificate each connection presented. Handshakes that fail
/// are counted and dropped.
struct MutualTls {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    presented: Arc<Mutex<Vec<CertificateDer<'static>>>>,
    refused: Arc<Mutex<u32>>,
}

impl axum::serve::Listener for MutualTls {
    type Io = TlsStream<tokio::net::TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, addr)) = self.tcp.accept().await else {
                continue;
            };
            match self.acceptor.accept(tcp).await {
                Ok(tls) => {
                    if let Some(certs) = tls.get_ref().1.peer_certificates() {
                        self.presented.lock().unwrap().push(certs[0].clone());
                    }
                    return (tls, addr);
                }
                Err(_) => *self.refused.lock().unwrap() += 1,
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

/// A receiver at `https://127.0.0.1:<port>/hook` with `server`'s certificate, requiring a client
/// certificate from `client_ca`: what it presented per connection, how many handshakes it
/// refused, and how many requests it answered.
pub(crate) struct Receiver {
    pub(crate) url: String,
    pub(crate) presented: Arc<Mutex<Vec<CertificateDer<'static>>>>,
    refused: Arc<Mutex<u32>>,
    pub(crate) requests: Arc<Mutex<u32>>,
}

pub(crate) async fn receiver(server: &Issued, client_ca: &Pki) -> Receiver {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(client_ca.ca.der().clone()).unwrap();
    let verifier = rustls::server::WebPkiClientVerifier::builder(Arc::new(roots))
        .build()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(server.key.as_bytes()).unwrap();
    let config = rustls::ServerConfig::builder()
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![server.der.clone()], key)
        .unwrap();
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "https://127.0.0.1:{}/hook",
        tcp.local_addr().unwrap().port()
    );
    let presented = Arc::default();
    let refused = Arc::default();
    let requests: Arc<Mutex<u32>> = Arc::default();
    let listener = MutualTls {
        tcp,
        acceptor: TlsAcceptor::from(Arc::new(config)),
        presented: Arc::clone(&presented),
        refused: Arc::clone(&refused),
    };
    let counted = requests.clone();
    // Answers the endpoint challenge (`?challenge=<token>`) with its token, counts the rest.
    let app = Router::new().fallback(
        move |axum::extract::Query(query): axum::extract::Query<Vec<(String, String)>>| {
            let counted = counted.clone();
            async move {
                if let Some((_, token)) = query.into_iter().find(|(k, _)| k == "challenge") {
                    return token;
                }
                *counted.lock().unwrap() += 1;
                "ok".to_owned()
            }
        },
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Receiver {
        url,
        presented,
        refused,
        requests,
    }
}

/// A private CA, a client certificate it issued, and a receiver with a server certificate it
/// issued that requires a client certificate from it.
async fn private_pki() -> (Pki, Issued, Receiver) {
    let pki = Pki::new("Merchant Private CA");
    let server = pki.issue(
        "127.0.0.1",
        &["127.0.0.1"],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let client = pki.issue("kxp-webhooks", &[], ExtendedKeyUsagePurpose::ClientAuth);
    let r = receiver(&server, &pki).await;
    (pki, client, r)
}

fn endpoint_body(url: &str, tls: Value) -> Value {
    json!({"url": url, "skip_challenge": true, "tls": tls})
}

/// Emits an event for each of `numbers` and waits until each is delivered.
async fn deliver(api: &Api, numbers: std::ops::Range<u32>) {
    for i in numbers {
        let event = api.emit("payment.succeeded", json!({"n": i})).await;
        api.wait_for(&event, "delivered", Duration::from_secs(10))
            .await;
    }
}

/// The first attempt's error of a new event to the (only) endpoint.
async fn first_error(api: &Api) -> String {
    let event = api.emit("payment.succeeded", json!({})).await;
    loop {
        let deliveries = api.deliveries_of(&event).await;
        if let Some(delivery) = deliveries.first()
            && let Some(error) = delivery["last_error"].as_str()
        {
            return error.to_owned();
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_delivery_presents_the_endpoints_certificate_and_trusts_its_private_ca() {
    let (pki, client, r) = private_pki().await;
    let s = sender("0s").await;
    let tls = json!({"client_certificate": client.cert, "client_key": client.key, "ca_certificates": pki.pem()});
    // The challenge, too, goes over mutual TLS to the private CA's server.
    let body = json!({"url": r.url, "tls": tls});
    let (status, created) = s.api.call("POST", "/v1/endpoints", Some(body)).await;
    assert_eq!(status, 201, "{created}");
    let shown = &created["tls"];
    assert_eq!(shown["client_certificate"]["subject"], "CN=kxp-webhooks");
    assert_eq!(
        shown["client_certificate"]["issuer"],
        "CN=Merchant Private CA"
    );
    assert_eq!(
        shown["client_certificate"]["sha256"],
        hex::encode(sha2_std::Sha256::digest(client.der.as_ref()))
    );
    assert_eq!(
        shown["ca_certificates"][0]["subject"],
        "CN=Merchant Private CA"
    );
    assert!(!created.to_string().contains("PRIVATE KEY"), "{created}");

    deliver(&s.api, 0..3).await;
    assert_eq!(*r.requests.lock().unwrap(), 3);
    let presented = r.presented.lock().unwrap().clone();
    assert!(!presented.is_empty() && presented.iter().all(|c| *c == client.der));
    let id = created["id"].as_str().unwrap();
    let (_, fetched) = s
        .api
        .call("GET", &format!("/v1/endpoints/{id}"), None)
        .await;
    assert!(!fetched.to_string().contains("PRIVATE KEY"), "{fetched}");

    // The console shows the certificate, never the key.
    let b = Browser::of(&s);
    let cookie = b.session(&s.api.client, PortalScope::Manage).await;
    let (account, _) = account_page(&b, &cookie).await;
    let (_, html) = page(&b, &format!("{account}/endpoints/{id}"), &cookie).await;
    assert!(
        html.contains("CN=kxp-webhooks") && !html.contains("PRIVATE KEY"),
        "{html}"
    );
    // Its TLS form: a key of another certificate is refused, the page keeps no key; all
    // three fields empty removes the settings.
    let (_, csrf) = account_page(&b, &cookie).await;
    let other = pki.issue("someone-else", &[], ExtendedKeyUsagePurpose::ClientAuth);
    let form = format!("{account}/endpoints/{id}/credentials/tls");
    let refused = post_form(
        &b,
        &form,
        &cookie,
        &[
            ("csrf_token", &csrf),
            ("client_certificate", &client.cert),
            ("client_key", &other.key),
        ],
    )
    .await;
    assert_eq!(refused.status(), 422);
    let refused = refused.text().await.unwrap();
    assert!(
        refused.contains("does not match") && !refused.contains("PRIVATE KEY"),
        "{refused}"
    );
    let cleared = post_form(&b, &form, &cookie, &[("csrf_token", &csrf)]).await;
    assert_eq!(cleared.status(), 303);
    let (_, fetched) = s
        .api
        .call("GET", &format!("/v1/endpoints/{id}"), None)
        .await;
    assert!(fetched["tls"].is_null(), "{fetched}");
    s.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_certificate_or_the_ca_nothing_is_delivered() {
    let (pki, client, r) = private_pki().await;

    // The private CA but no client certificate: the receiver refuses the handshake.
    let s = sender("0s,1m").await;
    let tls = json!({"ca_certificates": pki.pem()});
    let (status, body) = s
        .api
        .call("POST", "/v1/endpoints", Some(endpoint_body(&r.url, tls)))
        .await;
    assert_eq!(status, 201, "{body}");
    let error = first_error(&s.api).await;
    assert!(
        error.starts_with("request:") || error.starts_with("connect:"),
        "{error}"
    );
    assert!(*r.refused.lock().unwrap() >= 1);
    s.server.shutdown().await;

    // The client certificate but the public roots: the receiver's certificate is not trusted.
    let s = sender("0s,1m").await;
    let tls = json!({"client_certificate": client.cert, "client_key": client.key});
    let (status, body) = s
        .api
        .call("POST", "/v1/endpoints", Some(endpoint_body(&r.url, tls)))
        .await;
    assert_eq!(status, 201, "{body}");
    let error = first_error(&s.api).await;
    assert!(
        error.contains("certificate") || error.contains("UnknownIssuer"),
        "{error}"
    );
    s.server.shutdown().await;
    assert_eq!(
        *r.requests.lock().unwrap(),
        0,
        "no request reached the receiver"
    );
}

#[tokio::test]
async fn tls_that_does_not_check_out_is_refused_with_the_reason() {
    let pki = Pki::new("Merchant Private CA");
    let client = pki.issue("kxp-webhooks", &[], ExtendedKeyUsagePurpose::ClientAuth);
    let other = pki.issue("someone-else", &[], ExtendedKeyUsagePurpose::ClientAuth);
    let expired = pki.issue_with("last-year", &[], ExtendedKeyUsagePurpose::ClientAuth, |p| {
        p.not_before = time::OffsetDateTime::now_utc() - time::Duration::days(400);
        p.not_after = time::OffsetDateTime::now_utc() - time::Duration::days(1);
    });
    let s = sender("0s").await;
    let url = "https://127.0.0.1:9/hook";
    for (tls, says) in [
        (
            json!({"client_certificate": client.cert, "client_key": other.key}),
            "does not match",
        ),
        (
            json!({"client_certificate": expired.cert, "client_key": expired.key}),
            "`CN=last-year` expired on",
        ),
        (
            json!({"client_certificate": client.cert}),
            "client_key is missing",
        ),
        (
            json!({"client_key": client.key}),
            "client_certificate is missing",
        ),
        (
            json!({"client_certificate": "-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n", "client_key": client.key}),
            "tls.client_certificate",
        ),
        (
            json!({"client_certificate": client.cert, "client_key": "garbage"}),
            "not a PEM private key",
        ),
        (
            json!({"ca_certificates": "no pem here"}),
            "no `BEGIN CERTIFICATE` block",
        ),
        (
            json!({"ca_certificates": pki.pem().repeat(200)}),
            "tls.ca_certificates must be at most 65536 bytes",
        ),
    ] {
        let (status, error) = s
            .api
            .call(
                "POST",
                "/v1/endpoints",
                Some(endpoint_body(url, tls.clone())),
            )
            .await;
        assert_eq!(status, 422, "{tls}: {error}");
        let message = error["message"].as_str().unwrap();
        assert!(message.contains(says), "{message}");
        assert!(!message.contains("PRIVATE KEY"), "{message}");
    }
    // A typed client sends the same.
    let mut new = kxp_api::NewEndpoint::new(url);
    new.skip_challenge = true;
    new.tls = Some(EndpointTls::client(
        client.cert.clone(),
        client.key.as_str(),
    ));
    let created = s.api.client.create_endpoint(&new).await.unwrap();
    assert_eq!(
        created
            .endpoint
            .tls
            .unwrap()
            .client_certificate
            .unwrap()
            .subject,
        "CN=kxp-webhooks"
    );
    s.server.shutdown().await;
}

each_backend!(certificates_expiring_soon_show_in_health_and_are_announced_once_each);
on_citus!(certificates_expiring_soon_show_in_health_and_are_announced_once_each);

async fn certificates_expiring_soon_show_in_health_and_are_announced_once_each(db: Database) {
    let pki = Pki::new("Merchant Private CA");
    let in_days = |days: i64| {
        move |p: &mut CertificateParams| {
            p.not_after = time::OffsetDateTime::now_utc() + time::Duration::days(days);
        }
    };
    let server = pki.issue_with(
        "127.0.0.1",
        &["127.0.0.1"],
        ExtendedKeyUsagePurpose::ServerAuth,
        in_days(10),
    );
    let client = pki.issue_with(
        "kxp-webhooks",
        &[],
        ExtendedKeyUsagePurpose::ClientAuth,
        in_days(20),
    );
    let r = receiver(&server, &pki).await;
    let ops = crate::support::Receiver::start(vec![]).await;
    let s = db.sender("0s").await;
    s.api
        .client
        .update_account(&crate::support::typed(json!({"ops_url": ops.url})))
        .await
        .unwrap();
    let tls = json!({"client_certificate": client.cert, "client_key": client.key, "ca_certificates": pki.pem()});
    let (status, created) = s
        .api
        .call("POST", "/v1/endpoints", Some(endpoint_body(&r.url, tls)))
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    deliver(&s.api, 0..3).await;
    // The certificate is recorded by a task of its own beside the attempt.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let endpoint = loop {
        let (_, endpoint) = s
            .api
            .call("GET", &format!("/v1/endpoints/{id}"), None)
            .await;
        if !endpoint["server_certificate"].is_null() {
            break endpoint;
        }
        assert!(std::time::Instant::now() < deadline, "{endpoint}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    assert_eq!(
        endpoint["server_certificate"]["issuer"],
        "CN=Merchant Private CA"
    );
    let health = s
        .api
        .client
        .endpoint_health(&id.as_str().into())
        .await
        .unwrap();
    assert_eq!(
        health.server_certificate.unwrap().issuer,
        "CN=Merchant Private CA"
    );
    let expiring: Vec<(String, i64)> = health
        .expiring_certificates
        .iter()
        .map(|e| (e.certificate.to_string(), e.days_left))
        .collect();
    assert_eq!(
        expiring,
        [("server".to_owned(), 9), ("client".to_owned(), 19)]
    );

    // One notice each, however many deliveries follow; both reach the ops URL.
    deliver(&s.api, 3..6).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while ops.seen().len() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            ops.seen().len()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let notices = s
        .api
        .client
        .notifications(&kxp_api::PageQuery::default())
        .await
        .unwrap();
    let mut kinds: Vec<String> = notices.data.iter().map(|n| n.kind.to_string()).collect();
    kinds.sort();
    assert_eq!(
        kinds,
        [
            "endpoint.certificate_expiring",
            "endpoint.server_certificate_expiring"
        ]
    );
    let bodies: Vec<Value> = ops
        .seen()
        .iter()
        .map(|seen| serde_json::from_slice(&seen.body).unwrap())
        .collect();
    let server_notice = bodies
        .iter()
        .find(|b| b["type"] == "endpoint.server_certificate_expiring")
        .unwrap();
    assert_eq!(server_notice["data"]["certificate"]["days_left"], 9);
    assert_eq!(
        server_notice["data"]["certificate"]["certificate"],
        "server"
    );

    // The console says so on the endpoint's page.
    let b = Browser::of(&s);
    let cookie = b.session(&s.api.client, PortalScope::Manage).await;
    let (account, _) = account_page(&b, &cookie).await;
    let (_, html) = page(&b, &format!("{account}/endpoints/{id}"), &cookie).await;
    assert!(
        html.contains("The endpoint's own TLS certificate expires in 9 days"),
        "{html}"
    );
    assert!(html.contains("The client certificate this endpoint presents expires in 19 days"));
    s.server.shutdown().await;
}

#[tokio::test]
async fn a_certificate_that_expired_since_does_not_stop_other_changes() {
    let pki = Pki::new("Merchant Private CA");
    let soon = pki.issue_with(
        "short-lived",
        &[],
        ExtendedKeyUsagePurpose::ClientAuth,
        |p| {
            p.not_after = time::OffsetDateTime::now_utc() + time::Duration::seconds(2);
        },
    );
    let s = sender("0s").await;
    let tls = json!({"client_certificate": soon.cert, "client_key": soon.key});
    let (status, created) = s
        .api
        .call(
            "POST",
            "/v1/endpoints",
            Some(endpoint_body("https://127.0.0.1:9/hook", tls.clone())),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap();
    tokio::time::sleep(Duration::from_millis(3100)).await;
    let path = format!("/v1/endpoints/{id}");
    let (status, changed) = s
        .api
        .call("PATCH", &path, Some(json!({"headers": {"X-Tenant": "7"}})))
        .await;
    assert_eq!(status, 200, "{changed}");
    assert_eq!(changed["tls"], created["tls"], "tls shows as it was");
    // Sent again, it is checked again.
    let (status, refused) = s.api.call("PATCH", &path, Some(json!({"tls": tls}))).await;
    assert_eq!(status, 422, "{refused}");
    assert!(
        refused["message"].as_str().unwrap().contains("expired"),
        "{refused}"
    );
    s.server.shutdown().await;
}
