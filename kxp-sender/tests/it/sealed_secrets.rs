//! Secrets at rest (`KXP_SECRETS_KEY`): with a key ring, no secret is in the database file in
//! the clear (neither an endpoint's, made at registration or by a rotation, nor the console's
//! one-time display of one, nor an account's ops secret), deliveries still verify, and
//! fingerprints still show. A server refuses to start when a stored secret needs a key its ring lacks, naming the
//! key; a re-seal seals what was stored in the clear and moves secrets to a ring's newest key.

use std::net::SocketAddr;
use std::time::Duration;

use kxp_api::{EndpointId, PortalScope, RotateSecret};
use kxp_sender::{Config, Db, KeyRing};
use kxp_verify::{Verifier, key_fingerprint};
use reqwest::StatusCode;
use serde_json::json;

use crate::console::Browser;
use crate::console_pages::{account_page, page};
use crate::support::{Receiver, Sender, sender_with};

const SECS_10: Duration = Duration::from_secs(10);

/// A ring of the given `<id>:<base64>` keys, newest first.
pub(crate) fn ring(keys: &[&str]) -> KeyRing {
    keys.join(",").parse().unwrap()
}

pub(crate) const K1: &str = "k1:q83vASNFZ4mrze8BI0VniavN7wEjRWeJq83vASNFZ4k=";
const K2: &str = "k2:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// A sender on the SQLite file `url` (kept across restarts) with `keys` as its ring.
async fn sender_on(url: &str, keys: &[&str]) -> Sender {
    let url = url.to_owned();
    let ring = (!keys.is_empty()).then(|| ring(keys));
    sender_with("0s", move |c| {
        c.database_url = url;
        c.secrets_key = ring;
    })
    .await
}

/// The database file's bytes, WAL included: what a dump or a backup of it holds.
pub(crate) fn file_bytes(dir: &std::path::Path) -> Vec<u8> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        all.extend(std::fs::read(entry.unwrap().path()).unwrap());
    }
    all
}

pub(crate) fn holds(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_stored_sealed_and_deliveries_still_verify() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("kxp.db").display());
    let s = sender_on(&url, &[K1]).await;
    let receiver = Receiver::start(vec![]).await;
    let (id, secret) = s.api.endpoint(&receiver.url, json!({})).await;
    let endpoint = EndpointId::from(id.as_str());
    let event = s.api.emit("payment.succeeded", json!({"n": 1})).await;
    s.api.wait_for(&event, "delivered", SECS_10).await;
    let seen = receiver.seen();
    let signature = seen[0].headers["x-kxp-signature"].to_str().unwrap();
    Verifier::from_secret_list(&secret)
        .unwrap()
        .verify_now(signature.as_bytes(), &seen[0].body)
        .expect("signed with the secret the registration showed");
    let details = s.api.client.endpoint(&endpoint).await.unwrap();
    assert_eq!(
        details.secrets[0].fingerprint,
        key_fingerprint(secret.as_bytes()).to_string()
    );

    // A rotation from the console: the new secret is shown once, and stored sealed too.
    let b = Browser::of(&s);
    let cookie = b.session(&s.api.client, PortalScope::Manage).await;
    let (home, csrf) = account_page(&b, &cookie).await;
    let rotated = b
        .post(
            &format!("{home}/endpoints/{id}/rotate"),
            &cookie,
            &[("csrf_token", &csrf)],
        )
        .await;
    assert_eq!(rotated.status(), StatusCode::SEE_OTHER);
    let (_, html) = page(&b, &format!("{home}/endpoints/{id}"), &cookie).await;
    let details = s.api.client.endpoint(&endpoint).await.unwrap();
    let newest = &details.secrets[0].fingerprint;
    let shown = html
        .split(['>', '<'])
        .find(|text| text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()))
        .unwrap_or_else(|| panic!("the new secret on the page: {html}"))
        .to_owned();
    assert_eq!(&key_fingerprint(shown.as_bytes()).to_string(), newest);
    // And one from the API.
    let api_rotated = s
        .api
        .client
        .rotate_secret(&endpoint, &RotateSecret::overlap("1h"))
        .await
        .unwrap();
    let third = api_rotated.secret.as_ref().unwrap().expose().to_owned();
    // The account's ops secret, which signs its operational webhooks, is sealed too.
    let (status, account) = s
        .api
        .call(
            "PATCH",
            "/v1/account",
            Some(json!({"ops_url": receiver.url})),
        )
        .await;
    assert_eq!(status, 200, "{account}");
    let ops = account["ops_secret"].as_str().unwrap().to_owned();

    s.server.shutdown().await;
    let bytes = file_bytes(dir.path());
    for plain in [&secret, &shown, &third, &ops] {
        assert!(
            !holds(&bytes, plain),
            "a secret in the clear in the database file"
        );
    }
    let db = Db::connect(&url).await.unwrap();
    let census = db.sealing_census().await.unwrap();
    assert_eq!(
        census.into_iter().collect::<Vec<_>>(),
        [(Some("k1".to_owned()), 4)]
    );
    db.close().await;
    // Restarted with the same ring, everything opens.
    let s = sender_on(&url, &[K1]).await;
    let event = s.api.emit("payment.succeeded", json!({"n": 2})).await;
    s.api.wait_for(&event, "delivered", SECS_10).await;
    s.server.shutdown().await;
}

/// Starts a server on `url` with `keys`, expecting it to refuse: its error's text.
async fn refused_start(url: &str, keys: &[&str]) -> String {
    let config = Config {
        database_url: url.to_owned(),
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        dev: true,
        api_key: Some("kxp_test_key".to_owned()),
        secrets_key: (!keys.is_empty()).then(|| ring(keys)),
        ..Config::default()
    };
    match kxp_sender::start(config).await {
        Ok(server) => {
            server.shutdown().await;
            panic!("started with {keys:?}");
        }
        Err(e) => e.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_key_stops_the_start_and_a_reseal_moves_secrets_to_the_newest_key() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("kxp.db").display());

    // Written before any ring: in the clear, and a re-seal seals it.
    let s = sender_on(&url, &[]).await;
    let receiver = Receiver::start(vec![]).await;
    let (_, secret) = s.api.endpoint(&receiver.url, json!({})).await;
    s.server.shutdown().await;
    assert!(holds(&file_bytes(dir.path()), &secret));
    let db = Db::connect(&url).await.unwrap();
    assert_eq!(db.reseal(&ring(&[K1])).await.unwrap(), 1);
    assert_eq!(
        db.reseal(&ring(&[K1])).await.unwrap(),
        0,
        "nothing left to move"
    );
    db.close().await;

    // Without the key that sealed it, or with another one only, the server does not start.
    for keys in [&[][..], &[K2][..]] {
        let error = refused_start(&url, keys).await;
        assert!(error.contains("`k1`"), "{keys:?}: {error}");
        assert!(
            !error.contains(&secret) && !error.contains(&K1[3..]),
            "{error}"
        );
    }

    // Rotating the ring's key: the new key in front, a re-seal, then the old key dropped.
    let s = sender_on(&url, &[K2, K1]).await;
    let event = s.api.emit("payment.succeeded", json!({"n": 1})).await;
    s.api.wait_for(&event, "delivered", SECS_10).await;
    s.server.shutdown().await;
    let db = Db::connect(&url).await.unwrap();
    assert_eq!(db.reseal(&ring(&[K2, K1])).await.unwrap(), 1);
    let census = db.sealing_census().await.unwrap();
    assert_eq!(
        census.into_iter().collect::<Vec<_>>(),
        [(Some("k2".to_owned()), 1)]
    );
    db.close().await;
    let s = sender_on(&url, &[K2]).await;
    let event = s.api.emit("payment.succeeded", json!({"n": 2})).await;
    s.api.wait_for(&event, "delivered", SECS_10).await;
    let seen = receiver.seen();
    let last = seen.last().unwrap();
    Verifier::from_secret_list(&secret)
        .unwrap()
        .verify_now(
            last.headers["x-kxp-signature"].to_str().unwrap().as_bytes(),
            &last.body,
        )
        .expect("the same secret, whatever key sealed it");
    assert!(!holds(&file_bytes(dir.path()), &secret));
    s.server.shutdown().await;
}
