//! Ed25519 signing (`"signing": "ed25519"` or `"both"`): the sender keeps the private key, the
//! merchant gets the public key (in the registration's answer, at
//! `GET /v1/endpoints/{id}/public-key`, and unauthenticated as a JWKS at `/jwks/{id}`), and
//! deliveries carry `v1a` items that a kxp-axum receiver holding only the public key verifies,
//! and that OpenSSL verifies with the PEM. Keys rotate like secrets, both signing during the
//! overlap; an HMAC endpoint moves to Ed25519 through `both` by `PATCH`.

use std::time::Duration;

use axum::Router;
use axum::routing::post;
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use kxp_api::{EndpointCreated, EndpointId, NewEndpoint, RotateSecret, Signing};
use kxp_axum::{Receiver as KxpReceiver, VerifiedEvent, VerifyLayer};
use kxp_verify::{PublicKey, Verifier};
use serde_json::{Value, json};

use crate::support::{Api, Receiver, sender};

const SECS_10: Duration = Duration::from_secs(10);

async fn register(api: &Api, url: &str, signing: &str) -> EndpointCreated {
    let new: NewEndpoint =
        serde_json::from_value(json!({"url": url, "skip_challenge": true, "signing": signing}))
            .unwrap();
    api.client.create_endpoint(&new).await.unwrap()
}

/// A kxp-axum receiver that verifies with `keys` only; its URL.
async fn public_key_receiver(keys: &[PublicKey]) -> String {
    let verifier = Verifier::with_public_keys(keys.iter().copied()).unwrap();
    let app = Router::new().route(
        "/hook",
        post(|_: VerifiedEvent| async { "ok" }).layer(VerifyLayer::new(KxpReceiver::new(verifier))),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

/// `GET path` without any credential: status, `Cache-Control`, body.
async fn anonymous(api: &Api, path: &str) -> (u16, Option<String>, Value) {
    let response = reqwest::get(format!("{}{path}", api.base)).await.unwrap();
    let status = response.status().as_u16();
    let cache = response
        .headers()
        .get("cache-control")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, cache, response.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ed25519_endpoint_is_verified_with_the_public_key_alone() {
    let s = sender("0s").await;
    // The public key is known only once the endpoint exists: register, then start the receiver
    // and point the endpoint at it.
    let created = register(&s.api, "http://127.0.0.1:9/hook", "ed25519").await;
    assert_eq!(created.endpoint.signing, Signing::Ed25519);
    assert!(
        created.secret.is_none(),
        "no shared secret for an Ed25519 endpoint"
    );
    let forms = created.public_key.expect("the public key");
    let id = created.endpoint.id.clone();

    // The JWKS, without credentials, cacheable; the same key as the registration's answer.
    let (status, cache, set) = anonymous(&s.api, &format!("/jwks/{id}")).await;
    assert_eq!(status, 200, "{set}");
    assert_eq!(cache.as_deref(), Some("public, max-age=300"));
    let jwk = &set["keys"][0];
    assert_eq!(set["keys"].as_array().unwrap().len(), 1, "{set}");
    assert_eq!(
        (jwk["kty"].as_str(), jwk["crv"].as_str()),
        (Some("OKP"), Some("Ed25519"))
    );
    let x = URL_SAFE_NO_PAD.decode(jwk["x"].as_str().unwrap()).unwrap();
    let raw = STANDARD.decode(&forms.public_key).unwrap();
    assert_eq!(x, raw);
    let key = PublicKey::from_base64(&forms.public_key).unwrap();
    assert_eq!(jwk["kid"], key.fingerprint().to_string());
    assert_eq!(forms.whpk, format!("whpk_{}", forms.public_key));
    assert_eq!(
        PublicKey::from_whpk(&forms.whpk).unwrap().to_bytes(),
        key.to_bytes()
    );
    let keys = s.api.client.public_key(&id).await.unwrap();
    assert_eq!(keys.newest, forms);
    assert_eq!(keys.previous, None);
    let (status, _, _) = anonymous(&s.api, &format!("/v1/endpoints/{id}/public-key")).await;
    assert_eq!(status, 401, "the API route needs the account's key");

    let url = public_key_receiver(&[key]).await;
    let (status, body) = s
        .api
        .call(
            "PATCH",
            &format!("/v1/endpoints/{id}"),
            Some(json!({"url": url, "skip_challenge": true})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let event = s.api.emit("payment.succeeded", json!({"n": 1})).await;
    s.api.wait_for(&event, "delivered", SECS_10).await;
    let details = s.api.client.endpoint(&id).await.unwrap();
    assert_eq!(details.secrets.len(), 1);
    assert_eq!(details.secrets[0].kind, Signing::Ed25519);
    assert_eq!(
        details.secrets[0].fingerprint,
        key.fingerprint().to_string()
    );
    let deadline = std::time::Instant::now() + SECS_10;
    while s.api.client.endpoint(&id).await.unwrap().secrets[0]
        .last_verified_at
        .is_none()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the receiver's confirmation"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    s.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_signs_with_the_secret_and_the_key_and_openssl_reads_the_pem() {
    let s = sender("0s").await;
    let receiver = Receiver::start(vec![]).await;
    let created = register(&s.api, &receiver.url, "both").await;
    let secret = created.secret.as_ref().unwrap().expose().to_owned();
    let forms = created.public_key.unwrap();
    let key = PublicKey::from_base64(&forms.public_key).unwrap();
    let event = s.api.emit("payment.succeeded", json!({"n": 1})).await;
    s.api.wait_for(&event, "delivered", SECS_10).await;
    let seen = receiver.seen();
    let header = seen[0].headers["x-kxp-signature"]
        .to_str()
        .unwrap()
        .to_owned();
    let body = seen[0].body.clone();
    assert_eq!(header.matches(",v1=").count(), 1, "{header}");
    assert_eq!(header.matches(",v1a=").count(), 1, "{header}");
    // A receiver holding the secret and one holding the public key both verify it.
    Verifier::from_secret_list(&secret)
        .unwrap()
        .verify_now(header.as_bytes(), &body)
        .unwrap();
    Verifier::with_public_keys([key])
        .unwrap()
        .verify_now(header.as_bytes(), &body)
        .unwrap();

    // OpenSSL, an independent implementation, verifies the v1a with the PEM.
    let Ok(out) = std::process::Command::new("openssl")
        .arg("version")
        .output()
    else {
        eprintln!("*** SKIPPED (openssl): not installed; the PEM was not checked by OpenSSL ***");
        s.server.shutdown().await;
        return;
    };
    assert!(out.status.success());
    let dir = tempfile::tempdir().unwrap();
    let t = header
        .split(',')
        .find_map(|item| item.strip_prefix("t="))
        .unwrap();
    let v1a = header
        .split(',')
        .find_map(|item| item.strip_prefix("v1a="))
        .unwrap();
    let mut message = format!("{t}.").into_bytes();
    message.extend_from_slice(&body);
    std::fs::write(dir.path().join("key.pem"), &forms.pem).unwrap();
    std::fs::write(dir.path().join("message"), &message).unwrap();
    std::fs::write(dir.path().join("sig"), STANDARD.decode(v1a).unwrap()).unwrap();
    let verify = |message: &str| {
        std::process::Command::new("openssl")
            .current_dir(dir.path())
            .args([
                "pkeyutl", "-verify", "-pubin", "-inkey", "key.pem", "-rawin",
            ])
            .args(["-in", message, "-sigfile", "sig"])
            .output()
            .unwrap()
    };
    let out = verify("message");
    assert!(
        out.status.success(),
        "openssl: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    message.push(b' ');
    std::fs::write(dir.path().join("tampered"), &message).unwrap();
    assert!(
        !verify("tampered").status.success(),
        "a tampered body fails in OpenSSL too"
    );
    s.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_rotate_with_an_overlap_during_which_both_sign() {
    let s = sender("0s").await;
    let receiver = Receiver::start(vec![]).await;
    let created = register(&s.api, &receiver.url, "ed25519").await;
    let id: EndpointId = created.endpoint.id.clone();
    let old = PublicKey::from_base64(&created.public_key.unwrap().public_key).unwrap();
    let rotated = s
        .api
        .client
        .rotate_secret(&id, &RotateSecret::overlap("1h"))
        .await
        .unwrap();
    assert!(rotated.secret.is_none());
    let new = PublicKey::from_base64(&rotated.public_key.unwrap().public_key).unwrap();
    assert_ne!(new.to_bytes(), old.to_bytes());
    let keys = s.api.client.public_key(&id).await.unwrap();
    assert_eq!(keys.newest.public_key, STANDARD.encode(new.to_bytes()));
    assert_eq!(
        keys.previous.unwrap().public_key,
        STANDARD.encode(old.to_bytes())
    );
    let (_, _, set) = anonymous(&s.api, &format!("/jwks/{id}")).await;
    let kids: Vec<&str> = set["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kid"].as_str().unwrap())
        .collect();
    let expected = [new.fingerprint().to_string(), old.fingerprint().to_string()];
    assert_eq!(kids, expected, "newest first");

    let event = s.api.emit("payment.succeeded", json!({"n": 1})).await;
    s.api.wait_for(&event, "delivered", SECS_10).await;
    let seen = receiver.seen();
    let header = seen[0].headers["x-kxp-signature"].to_str().unwrap();
    assert_eq!(header.matches(",v1a=").count(), 2, "{header}");
    assert!(!header.contains(",v1="), "{header}");
    for key in [&old, &new] {
        Verifier::with_public_keys([*key])
            .unwrap()
            .verify_now(header.as_bytes(), &seen[0].body)
            .expect("either key verifies during the overlap");
    }

    // An overlap of zero ends the old key now.
    s.api
        .client
        .rotate_secret(&id, &RotateSecret::overlap("0s"))
        .await
        .unwrap();
    let (_, _, set) = anonymous(&s.api, &format!("/jwks/{id}")).await;
    assert_eq!(set["keys"].as_array().unwrap().len(), 1, "{set}");
    s.server.shutdown().await;
}

#[tokio::test]
async fn an_hmac_endpoint_has_no_public_key() {
    let s = sender("0s").await;
    let created = register(&s.api, "http://127.0.0.1:9/hook", "hmac").await;
    assert!(created.secret.is_some() && created.public_key.is_none());
    let id = created.endpoint.id;
    let (status, body) = s
        .api
        .call("GET", &format!("/v1/endpoints/{id}/public-key"), None)
        .await;
    assert_eq!(status, 404, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("HMAC only"),
        "{body}"
    );
    for path in [format!("/jwks/{id}"), "/jwks/ep_unknown".to_owned()] {
        let (status, _, body) = anonymous(&s.api, &path).await;
        assert_eq!(status, 404, "{path}: {body}");
    }
    let (status, body) = s
        .api
        .call(
            "POST",
            "/v1/endpoints",
            Some(
                json!({"url": "http://127.0.0.1:9/hook", "skip_challenge": true, "signing": "rsa"}),
            ),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    s.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_key_ring_the_private_key_is_stored_sealed_and_still_signs() {
    let ring: kxp_sender::KeyRing = "k1:q83vASNFZ4mrze8BI0VniavN7wEjRWeJq83vASNFZ4k="
        .parse()
        .unwrap();
    let s = crate::support::sender_with("0s", move |c| c.secrets_key = Some(ring)).await;
    let receiver = Receiver::start(vec![]).await;
    let created = register(&s.api, &receiver.url, "both").await;
    let key = PublicKey::from_base64(&created.public_key.unwrap().public_key).unwrap();
    let event = s.api.emit("payment.succeeded", json!({"n": 1})).await;
    s.api.wait_for(&event, "delivered", SECS_10).await;
    let seen = receiver.seen();
    let header = seen[0].headers["x-kxp-signature"].to_str().unwrap();
    Verifier::with_public_keys([key])
        .unwrap()
        .verify_now(header.as_bytes(), &seen[0].body)
        .expect("signed with the sealed key, opened");
    let census = s.server.db().sealing_census().await.unwrap();
    let census: Vec<_> = census.into_iter().collect();
    assert_eq!(
        census,
        [(Some("k1".to_owned()), 2)],
        "the secret and the key, sealed"
    );
    s.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hmac_endpoint_moves_to_ed25519_through_both() {
    let s = sender("0s").await;
    let receiver = Receiver::start(vec![]).await;
    let created = register(&s.api, &receiver.url, "hmac").await;
    let id = created.endpoint.id;
    let patch = |signing: &str| {
        let (api, path) = (s.api.clone(), format!("/v1/endpoints/{id}"));
        let body = json!({"signing": signing});
        async move { api.call("PATCH", &path, Some(body)).await }
    };
    let deliver = |n: u64| {
        let api = s.api.clone();
        async move {
            let event = api.emit("payment.succeeded", json!({"n": n})).await;
            api.wait_for(&event, "delivered", SECS_10).await;
        }
    };
    let last_header = || {
        let seen = receiver.seen();
        let last = seen.last().unwrap();
        last.headers["x-kxp-signature"].to_str().unwrap().to_owned()
    };

    // hmac → both: a key is made, and both sign.
    let (status, body) = patch("both").await;
    assert_eq!(
        (status, body["signing"].as_str()),
        (200, Some("both")),
        "{body}"
    );
    let key = s.api.client.public_key(&id).await.unwrap().newest;
    let key = PublicKey::from_base64(&key.public_key).unwrap();
    deliver(1).await;
    let header = last_header();
    assert!(
        header.contains(",v1=") && header.contains(",v1a="),
        "{header}"
    );

    // both → ed25519: the shared secret stops signing at once.
    let (status, body) = patch("ed25519").await;
    assert_eq!(status, 200, "{body}");
    deliver(2).await;
    let header = last_header();
    assert!(
        !header.contains(",v1=") && header.contains(",v1a="),
        "{header}"
    );
    let seen = receiver.seen();
    Verifier::with_public_keys([key])
        .unwrap()
        .verify_now(header.as_bytes(), &seen.last().unwrap().body)
        .expect("the same key signs on");
    let details = s.api.client.endpoint(&id).await.unwrap();
    let kinds: Vec<Signing> = details.secrets.iter().map(|s| s.kind.clone()).collect();
    assert_eq!(kinds, [Signing::Ed25519]);

    // Back to a shared secret would need one shown once: refused.
    let (status, body) = patch("hmac").await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("register a new endpoint"),
        "{body}"
    );
    let (status, body) = patch("rsa").await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        s.api.client.endpoint(&id).await.unwrap().endpoint.signing,
        Signing::Ed25519
    );
    s.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_on_the_new_public_key_confirms_a_rotation_of_both() {
    let s = sender("0s").await;
    let created = register(&s.api, "http://127.0.0.1:9/hook", "both").await;
    let id = created.endpoint.id;
    let rotation = RotateSecret::overlap("1h")
        .when_confirmed()
        .confirmations(2);
    let rotated = s.api.client.rotate_secret(&id, &rotation).await.unwrap();
    let new = PublicKey::from_base64(&rotated.public_key.unwrap().public_key).unwrap();
    // The merchant's receiver verifies v1a with the new key only.
    let url = public_key_receiver(&[new]).await;
    let (status, body) = s
        .api
        .call(
            "PATCH",
            &format!("/v1/endpoints/{id}"),
            Some(json!({"url": url, "skip_challenge": true})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let event = s.api.emit("payment.succeeded", json!({"n": 1})).await;
    s.api.wait_for(&event, "delivered", SECS_10).await;
    let deadline = std::time::Instant::now() + SECS_10;
    loop {
        let rotation = s.api.client.endpoint(&id).await.unwrap().rotation.unwrap();
        if rotation.confirmations == 1 {
            assert_eq!(rotation.receiver, kxp_api::ReceiverKey::New, "{rotation:?}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{rotation:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let event = s.api.emit("payment.succeeded", json!({"n": 2})).await;
    s.api.wait_for(&event, "delivered", SECS_10).await;
    let deadline = std::time::Instant::now() + SECS_10;
    loop {
        let details = s.api.client.endpoint(&id).await.unwrap();
        if details.rotation.is_none() {
            // The new secret and the new key: the old pair stopped signing.
            assert_eq!(details.secrets.len(), 2, "{details:?}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{details:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    s.server.shutdown().await;
}
