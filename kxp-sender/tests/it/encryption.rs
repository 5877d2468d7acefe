//! Payload encryption (`"encryption_jwk"`): each attempt sends the envelope with `data`
//! encrypted to the endpoint's key as `data_jwe` (JWE, `ECDH-ES+A256KW`, `A256GCM`), `id`,
//! `type`, `api_version` and `created_at` in the clear, and signs the bytes it sends. A kxp-axum
//! receiver holding the private key hands its handler the event as the producer sent it;
//! jwcrypto and jose decrypt what `kxp serve` sent. A new key applies from the next attempt on,
//! pending deliveries included, and `null` stops encrypting.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::post;
use kxp_api::{EndpointPatch, PortalScope};
use kxp_axum::{DecryptionKey, Receiver as KxpReceiver, VerifiedEvent, VerifyLayer};
use kxp_jwe::{Curve, open_envelope};
use kxp_testkit::interop::Interop;
use kxp_verify::Verifier;
use serde_json::{Value, json};

use crate::console::Browser;
use crate::console_pages::{account_page, page};
use crate::support::{Api, Receiver, Reply, Seen, sender, typed, verifies};

const SECS_10: Duration = Duration::from_secs(10);

fn public_jwk(key: &DecryptionKey) -> Value {
    key.public().to_jwk()
}

/// Emits an event and waits for its delivery; the request the receiver saw and the stored
/// envelope (what the producer's event became at ingestion).
async fn delivered(api: &Api, receiver: &Receiver, data: Value) -> (Seen, String) {
    let event = api.emit("payment.succeeded", data).await;
    api.wait_for(&event, "delivered", SECS_10).await;
    let seen = receiver.seen().last().unwrap().clone();
    let (status, stored) = api.call("GET", &format!("/v1/events/{event}"), None).await;
    assert_eq!(status, 200, "{stored}");
    (seen, serde_json::to_string(&stored).unwrap())
}

fn json_of(seen: &Seen) -> Value {
    serde_json::from_slice(&seen.body).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_attempt_encrypts_data_to_the_endpoints_key_and_signs_what_it_sends() {
    let s = sender("0s").await;
    for curve in [Curve::P256, Curve::X25519] {
        let private = DecryptionKey::generate(curve, Some("merchant-2026-12"));
        let receiver = Receiver::start(vec![]).await;
        let (id, secret) = s
            .api
            .endpoint(
                &receiver.url,
                json!({"encryption_jwk": public_jwk(&private)}),
            )
            .await;
        let details = s.api.client.endpoint(&id.as_str().into()).await.unwrap();
        assert_eq!(
            details.endpoint.encryption_jwk,
            Some(public_jwk(&private)),
            "the normalized key"
        );

        let data = json!({"card": "4242 4242 4242 4242", "note": "crème brûlée ✓"});
        let (seen, _) = delivered(&s.api, &receiver, data.clone()).await;
        let body = json_of(&seen);
        assert!(body.get("data").is_none(), "{body}");
        for clear in ["id", "type", "api_version", "created_at"] {
            assert!(
                body[clear].is_string(),
                "{clear} stays in the clear: {body}"
            );
        }
        let jwe = body["data_jwe"].as_str().unwrap();
        assert_eq!(jwe.split('.').count(), 5, "compact serialization");
        assert!(!String::from_utf8_lossy(&seen.body).contains("4242"));
        assert!(
            verifies(&seen, &secret),
            "the signature covers the bytes sent"
        );
        let opened: Value =
            serde_json::from_slice(&open_envelope(&private, &seen.body).unwrap()).unwrap();
        assert_eq!(opened["data"], data, "{curve:?}");
        assert_eq!(opened["id"], body["id"]);

        // The console says so, on the endpoint's page and on the event's.
        let b = Browser::of(&s);
        let cookie = b.session(&s.api.client, PortalScope::Read).await;
        let (home, _) = account_page(&b, &cookie).await;
        let (_, html) = page(&b, &format!("{home}/endpoints/{id}"), &cookie).await;
        let crv = public_jwk(&private)["crv"].as_str().unwrap().to_owned();
        assert!(
            html.contains(&format!("{crv}, kid merchant-2026-12")),
            "{html}"
        );
        let event = body["id"].as_str().unwrap();
        let (_, html) = page(&b, &format!("{home}/events/{event}"), &cookie).await;
        assert!(html.contains("Encrypted: each attempt sends"), "{html}");
        assert!(
            html.contains("keeps this plaintext until retention"),
            "{html}"
        );
    }
    s.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kxp_axum_receiver_with_the_private_key_hands_the_handler_the_plain_event() {
    let s = sender("0s").await;
    let private = DecryptionKey::generate(Curve::X25519, None);
    let (id, secret) = s
        .api
        .endpoint(
            "http://127.0.0.1:9/hook",
            json!({"encryption_jwk": public_jwk(&private)}),
        )
        .await;
    let handled: Arc<Mutex<Vec<Value>>> = Arc::default();
    let seen = Arc::clone(&handled);
    let receiver = KxpReceiver::new(Verifier::from_secret_list(&secret).unwrap())
        .decrypt_with(private.clone());
    let app = Router::new().route(
        "/hook",
        post(move |event: VerifiedEvent| async move {
            seen.lock().unwrap().push(event.data().clone());
            "ok"
        })
        .layer(VerifyLayer::new(receiver)),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let patch: EndpointPatch = typed(json!({"url": url, "skip_challenge": true}));
    s.api
        .client
        .update_endpoint(&id.as_str().into(), &patch)
        .await
        .unwrap();

    let data = json!({"amount": 1250, "card": "4242"});
    let event = s.api.emit("payment.succeeded", data.clone()).await;
    s.api.wait_for(&event, "delivered", SECS_10).await;
    assert_eq!(*handled.lock().unwrap(), [data]);
    s.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_key_applies_to_pending_deliveries_and_null_stops_encrypting() {
    let s = sender("0s,1s").await;
    let first = DecryptionKey::generate(Curve::P256, Some("first"));
    let second = DecryptionKey::generate(Curve::X25519, Some("second"));
    let receiver = Receiver::start(vec![Reply::Status(503)]).await;
    let (id, secret) = s
        .api
        .endpoint(&receiver.url, json!({"encryption_jwk": public_jwk(&first)}))
        .await;
    let id = id.as_str().into();
    let event = s.api.emit("payment.succeeded", json!({"n": 1})).await;
    let deadline = Instant::now() + SECS_10;
    while receiver.seen().is_empty() {
        assert!(Instant::now() < deadline, "the first attempt");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The first attempt was sealed to the first key; its retry comes after the change.
    let patch: EndpointPatch = typed(json!({"encryption_jwk": public_jwk(&second)}));
    s.api.client.update_endpoint(&id, &patch).await.unwrap();
    s.api.wait_for(&event, "delivered", SECS_10).await;
    let seen = receiver.seen();
    assert_eq!(seen.len(), 2);
    assert!(open_envelope(&first, &seen[0].body).is_ok());
    assert!(
        open_envelope(&second, &seen[1].body).is_ok(),
        "the retry uses the new key"
    );
    assert_eq!(
        open_envelope(&first, &seen[1].body).unwrap_err().code(),
        "invalid_ephemeral_key",
        "a P-256 key cannot read an X25519 JWE"
    );

    // `null`: `data` in the clear again, which a receiver that decrypts refuses by name.
    let patch: EndpointPatch = typed(json!({"encryption_jwk": null}));
    let updated = s.api.client.update_endpoint(&id, &patch).await.unwrap();
    assert_eq!(updated.endpoint.encryption_jwk, None);
    let (seen, stored) = delivered(&s.api, &receiver, json!({"n": 2})).await;
    assert_eq!(json_of(&seen)["data"], json!({"n": 2}));
    assert!(stored.contains("\"n\":2"));
    let decrypting =
        KxpReceiver::new(Verifier::from_secret_list(&secret).unwrap()).decrypt_with(second);
    let refused = decrypting
        .check(
            seen.header("x-kxp-signature").as_bytes(),
            seen.body.to_vec(),
        )
        .unwrap_err();
    assert_eq!((refused.status(), refused.code()), (400, "not_encrypted"));
    s.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_that_cannot_encrypt_are_refused_by_name() {
    let s = sender("0s").await;
    let private = DecryptionKey::generate(Curve::P256, None);
    let private_jwk: Value = serde_json::from_str(&private.to_jwk()).unwrap();
    let cases = [
        (private_jwk, "private_key"),
        (
            json!({"kty": "RSA", "n": "AQAB", "e": "AQAB"}),
            "unsupported_key",
        ),
        (
            json!({"kty": "OKP", "crv": "X25519", "x": "AAAA"}),
            "invalid_key",
        ),
        (
            // 32 zero bytes: a small-order key, to which nothing can be encrypted.
            json!({"kty": "OKP", "crv": "X25519", "x": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}),
            "invalid_key",
        ),
        (
            json!({"kty": "EC", "crv": "P-256", "alg": "ECDH-ES", "x": public_jwk(&private)["x"], "y": public_jwk(&private)["y"]}),
            "unsupported_algorithm",
        ),
        (json!("not an object"), "invalid_json"),
    ];
    for (jwk, code) in cases {
        let body = json!({"url": "http://127.0.0.1:9/hook", "skip_challenge": true, "encryption_jwk": jwk});
        let (status, error) = s.api.call("POST", "/v1/endpoints", Some(body)).await;
        assert_eq!(status, 422, "{error}");
        assert_eq!(error["error"], "invalid_request");
        let message = error["message"].as_str().unwrap();
        assert!(message.contains(code), "{code}: {message}");
        assert!(
            !message.contains(&private_jwk_d(&private)),
            "no key material in errors"
        );
    }
    s.server.shutdown().await;
}

fn private_jwk_d(key: &DecryptionKey) -> String {
    let jwk: Value = serde_json::from_str(&key.to_jwk()).unwrap();
    jwk["d"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwcrypto_and_jose_decrypt_what_kxp_serve_sends() {
    let Some(interop) = Interop::find("JWE interop of kxp serve's deliveries (jwcrypto, jose)")
    else {
        return;
    };
    let s = sender("0s").await;
    let mut cases = Vec::new();
    let mut expected = Vec::new();
    for curve in [Curve::P256, Curve::X25519] {
        let private = DecryptionKey::generate(curve, Some("merchant"));
        let receiver = Receiver::start(vec![]).await;
        s.api
            .endpoint(
                &receiver.url,
                json!({"encryption_jwk": public_jwk(&private)}),
            )
            .await;
        let data = json!({"card": "4242", "curve": format!("{curve:?}")});
        let (seen, _) = delivered(&s.api, &receiver, data.clone()).await;
        let jwe = json_of(&seen)["data_jwe"].as_str().unwrap().to_owned();
        let jwk: Value = serde_json::from_str(&private.to_jwk()).unwrap();
        cases.push(json!({"name": format!("{curve:?}"), "jwk": jwk, "jwe": jwe}));
        expected.push((format!("{curve:?}"), serde_json::to_vec(&data).unwrap()));
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("decrypt.json");
    std::fs::write(&file, serde_json::to_vec(&cases).unwrap()).unwrap();
    for output in [
        interop.python("jwe.py", &["decrypt".as_ref(), file.as_os_str()]),
        interop.node("jwe.mjs", &["decrypt".as_ref(), file.as_os_str()]),
    ] {
        let lines: Vec<&str> = output.lines().collect();
        assert_eq!(lines.len(), expected.len(), "{output}");
        for ((name, data), line) in expected.iter().zip(lines) {
            let fields: Vec<&str> = line.split('\t').collect();
            assert_eq!(fields[0], name);
            use base64::Engine as _;
            let plaintext = fields[2]
                .strip_prefix("ok:")
                .unwrap_or_else(|| panic!("{line}"));
            let plaintext = base64::engine::general_purpose::STANDARD
                .decode(plaintext)
                .unwrap();
            let got: Value = serde_json::from_slice(&plaintext).unwrap();
            let want: Value = serde_json::from_slice(data).unwrap();
            assert_eq!(got, want, "{} {name}", fields[1]);
        }
    }
    s.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_that_no_longer_seals_fails_the_attempt_and_nothing_is_sent_in_the_clear() {
    let s = sender("0s").await;
    let receiver = Receiver::start(vec![]).await;
    let private = DecryptionKey::generate(Curve::P256, None);
    let (id, secret) = s
        .api
        .endpoint(
            &receiver.url,
            json!({"encryption_jwk": public_jwk(&private)}),
        )
        .await;
    // A row altered by hand (the API refuses such a key): a point that is not on the curve.
    let pool = sqlx::SqlitePool::connect(&s.database_url).await.unwrap();
    let mut broken = public_jwk(&private);
    broken["y"] = json!("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA");
    sqlx::query("UPDATE kxp_endpoints SET encryption_jwk = $1 WHERE id = $2")
        .bind(broken.to_string())
        .bind(&id)
        .execute(&pool)
        .await
        .unwrap();

    let event = s
        .api
        .emit("payment.succeeded", json!({"card": "secret"}))
        .await;
    let delivery = s.api.wait_for(&event, "dead", SECS_10).await;
    let attempts = s.api.attempts(delivery["id"].as_str().unwrap()).await;
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    let error = attempts[0]["error"].as_str().unwrap_or_default();
    assert!(error.starts_with("encryption_failed"), "{error}");
    assert_eq!(attempts[0]["status_code"], Value::Null, "nothing was sent");
    assert!(
        receiver.seen().is_empty(),
        "data never goes out in the clear"
    );
    // Nor through the feed: the page cannot be sealed, and says so.
    let (status, body) = crate::feed::signed(&s.api, &id, "", &secret).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (503, Some("store_unavailable")),
        "{body}"
    );
    assert!(!body.to_string().contains("secret\""), "{body}");
    s.server.shutdown().await;
}
