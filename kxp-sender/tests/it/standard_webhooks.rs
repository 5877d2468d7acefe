//! Standard Webhooks endpoints (`"format": "standard-webhooks"`): deliveries carry exactly
//! `webhook-id` (the event id), `webhook-timestamp` and `webhook-signature` over
//! `<id>.<timestamp>.<body>`, with `whsec_` secrets of 32 bytes and `v1a` items for Ed25519; a
//! kxp-axum receiver in that format verifies them and confirms the key. A change of format by
//! `PATCH` is a rotation: both formats sign until the overlap ends. And the official
//! `standardwebhooks` packages and Svix's SDKs (Python and Node.js) verify what `kxp serve`
//! sends, multi-signature headers included, while kxp-verify verifies what they sign.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::post;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use kxp_api::{EndpointCreated, EndpointPatch, Format, NewEndpoint, RotateSecret, Signing};
use kxp_axum::{Format as ReceiverFormat, Receiver as KxpReceiver, VerifiedEvent, VerifyLayer};
use kxp_testkit::interop::Interop;
use kxp_verify::{PublicKey, Secret, SigningKey, Verifier};
use serde_json::{Value, json};

use crate::support::{Api, Database, Receiver, Seen, typed, verifies, verifies_standard};

const SECS_10: Duration = Duration::from_secs(10);

async fn register(api: &Api, url: &str, signing: &str) -> EndpointCreated {
    let new: NewEndpoint = typed(json!({
        "url": url, "skip_challenge": true, "signing": signing, "format": "standard-webhooks"
    }));
    api.client.create_endpoint(&new).await.unwrap()
}

fn whsec_verifier(whsec: &str) -> Verifier {
    Verifier::new(Secret::from_whsec(whsec).unwrap())
}

fn whpk_verifier(whpk: &str) -> Verifier {
    Verifier::with_public_keys([PublicKey::from_whpk(whpk).unwrap()]).unwrap()
}

/// A `whsec_` secret nobody registered.
fn stranger() -> String {
    kxp_verify::to_whsec(&[0x5a; 32])
}

/// Emits an event and waits for its delivery; the request the receiver saw.
async fn delivered(api: &Api, receiver: &Receiver, data: Value) -> Seen {
    let event = api.emit("payment.succeeded", data).await;
    api.wait_for(&event, "delivered", SECS_10).await;
    let seen = receiver.seen();
    let last = seen.last().unwrap();
    assert_eq!(last.event_id(), event);
    last.clone()
}

/// The `webhook-signature` items of `seen`, by version.
fn items(seen: &Seen) -> Vec<(String, String)> {
    seen.header("webhook-signature")
        .split(' ')
        .map(|item| {
            let (version, value) = item.split_once(',').unwrap();
            (version.to_owned(), value.to_owned())
        })
        .collect()
}

fn versions(seen: &Seen) -> Vec<String> {
    items(seen)
        .into_iter()
        .map(|(version, _)| version)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standard_webhooks_endpoint_sends_exactly_its_headers_and_kxp_axum_verifies_them() {
    let s = crate::support::sender("0s").await;
    let receiver = Receiver::start(vec![]).await;
    let created = register(&s.api, &receiver.url, "both").await;
    assert_eq!(created.endpoint.format, Format::StandardWebhooks);
    let whsec = created.secret.unwrap().expose().to_owned();
    let key = STANDARD
        .decode(whsec.strip_prefix("whsec_").expect("a whsec_ secret"))
        .unwrap();
    assert_eq!(key.len(), 32, "32 random bytes");
    let whpk = created.public_key.unwrap().whpk;

    let seen = delivered(&s.api, &receiver, json!({"amount": 1250})).await;
    assert!(
        seen.headers.get("x-kxp-signature").is_none(),
        "no kxp signature on a standard-webhooks endpoint"
    );
    assert_eq!(seen.header("webhook-id"), seen.event_id());
    let timestamp: u64 = seen.header("webhook-timestamp").parse().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(timestamp.abs_diff(now) < 60, "{timestamp} vs {now}");
    assert_eq!(versions(&seen), ["v1", "v1a"]);
    assert!(verifies_standard(&seen, &whsec_verifier(&whsec)));
    assert!(verifies_standard(&seen, &whpk_verifier(&whpk)));
    assert!(!verifies_standard(&seen, &whsec_verifier(&stranger())));
    // The signed content is `<id>.<timestamp>.<body>`, with the key being the decoded bytes.
    let signer = kxp_verify::Signer::new(Secret::new(&key).unwrap());
    let expected = signer
        .sign_standard(&seen.header("webhook-id"), timestamp, &seen.body)
        .unwrap();
    assert_eq!(format!("v1,{}", items(&seen)[0].1), expected.to_string());

    // A kxp-axum receiver in the Standard Webhooks format verifies it, and names the secret in
    // X-Kxp-Verified-Key by the fingerprint the sender shows.
    let app = Router::new().route(
        "/hook",
        post(|_: VerifiedEvent| async { "ok" }).layer(VerifyLayer::new(
            KxpReceiver::new(whsec_verifier(&whsec)).format(ReceiverFormat::StandardWebhooks),
        )),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let id = created.endpoint.id.clone();
    let patch: EndpointPatch = typed(json!({"url": url, "skip_challenge": true}));
    let updated = s.api.client.update_endpoint(&id, &patch).await.unwrap();
    assert_eq!(updated.rotated, None, "a new URL is no rotation");
    let event = s.api.emit("payment.succeeded", json!({"n": 2})).await;
    s.api.wait_for(&event, "delivered", SECS_10).await;
    let fingerprint = kxp_verify::key_fingerprint(&key).to_string();
    let deadline = Instant::now() + SECS_10;
    loop {
        let details = s.api.client.endpoint(&id).await.unwrap();
        let secret = details
            .secrets
            .iter()
            .find(|secret| secret.kind == Signing::Hmac)
            .unwrap();
        assert_eq!(secret.fingerprint, fingerprint);
        if secret.last_verified_at.is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "the receiver's confirmation");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

each_backend!(a_change_of_format_is_a_rotation_and_both_formats_sign_until_the_overlap_ends);
on_citus!(a_change_of_format_is_a_rotation_and_both_formats_sign_until_the_overlap_ends);

async fn a_change_of_format_is_a_rotation_and_both_formats_sign_until_the_overlap_ends(
    database: Database,
) {
    let s = database.sender("0s").await;
    let receiver = Receiver::start(vec![]).await;
    let (id, kxp_secret) = s.api.endpoint(&receiver.url, json!({})).await;
    let id = id.into();

    let patch: EndpointPatch = typed(json!({"format": "standard-webhooks"}));
    let updated = s.api.client.update_endpoint(&id, &patch).await.unwrap();
    assert_eq!(updated.endpoint.format, Format::StandardWebhooks);
    let rotated = updated
        .rotated
        .expect("a change of format answers the new secret");
    let first = rotated.secret.unwrap().expose().to_owned();
    assert!(first.starts_with("whsec_"), "in the new form");
    assert!(rotated.public_key.is_none(), "an HMAC endpoint has no key");

    // During the overlap each format's headers verify with their own secret.
    let seen = delivered(&s.api, &receiver, json!({"n": 1})).await;
    assert!(verifies(&seen, &kxp_secret), "the kxp receiver goes on");
    assert_eq!(versions(&seen), ["v1"]);
    assert!(verifies_standard(&seen, &whsec_verifier(&first)));
    let details = s.api.client.endpoint(&id).await.unwrap();
    assert_eq!(details.secrets.len(), 2);

    // The same format again changes nothing; an unknown one is refused.
    let again = s.api.client.update_endpoint(&id, &patch).await.unwrap();
    assert_eq!(again.rotated, None);
    let path = format!("/v1/endpoints/{id}");
    let (status, body) = s
        .api
        .call("PATCH", &path, Some(json!({"format": "svix"})))
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"], "invalid_request");
    assert!(
        body["message"].as_str().unwrap().contains("format"),
        "{body}"
    );
    let both = json!({"format": "kxp", "signing": "both"});
    let (status, body) = s.api.call("PATCH", &path, Some(both)).await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("two requests"),
        "{body}"
    );
    let details = s.api.client.endpoint(&id).await.unwrap();
    assert_eq!(details.endpoint.signing, Signing::Hmac, "nothing applied");

    // A rotation in the new format: two `v1` items, each verifying alone.
    let rotated = s
        .api
        .client
        .rotate_secret(&id, &RotateSecret::overlap("24h"))
        .await
        .unwrap();
    let second = rotated.secret.unwrap().expose().to_owned();
    assert!(second.starts_with("whsec_"));
    let seen = delivered(&s.api, &receiver, json!({"n": 2})).await;
    assert_eq!(versions(&seen), ["v1", "v1"]);
    for whsec in [&second, &first] {
        assert!(verifies_standard(&seen, &whsec_verifier(whsec)));
    }
    assert!(verifies(&seen, &kxp_secret), "the kxp secret still signs");

    // Once the old ones are retired, only the Standard Webhooks headers are left.
    let rotated = s
        .api
        .client
        .rotate_secret(&id, &RotateSecret::overlap("0s"))
        .await
        .unwrap();
    let third = rotated.secret.unwrap().expose().to_owned();
    let seen = delivered(&s.api, &receiver, json!({"n": 3})).await;
    assert!(seen.headers.get("x-kxp-signature").is_none());
    assert_eq!(versions(&seen), ["v1"]);
    assert!(verifies_standard(&seen, &whsec_verifier(&third)));
    assert!(!verifies_standard(&seen, &whsec_verifier(&second)));

    // And back: the new secret is a kxp one (64 hex digits), and both sign again.
    let back: EndpointPatch = typed(json!({"format": "kxp"}));
    let updated = s.api.client.update_endpoint(&id, &back).await.unwrap();
    assert_eq!(updated.endpoint.format, Format::Kxp);
    let kxp_again = updated.rotated.unwrap().secret.unwrap().expose().to_owned();
    assert_eq!(kxp_again.len(), 64);
    assert!(kxp_again.bytes().all(|b| b.is_ascii_hexdigit()));
    let seen = delivered(&s.api, &receiver, json!({"n": 4})).await;
    assert!(verifies(&seen, &kxp_again));
    assert!(verifies_standard(&seen, &whsec_verifier(&third)));
    s.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standard_webhooks_ed25519_endpoint_moves_its_key_between_formats() {
    let s = crate::support::sender("0s").await;
    let receiver = Receiver::start(vec![]).await;
    let created = register(&s.api, &receiver.url, "ed25519").await;
    assert!(created.secret.is_none());
    let whpk = created.public_key.unwrap().whpk;
    let seen = delivered(&s.api, &receiver, json!({"n": 1})).await;
    assert_eq!(versions(&seen), ["v1a"]);
    assert!(verifies_standard(&seen, &whpk_verifier(&whpk)));

    // To kxp: a new key signs `v1a=` in X-Kxp-Signature, the old one the webhook-* headers.
    let id = created.endpoint.id;
    let patch: EndpointPatch = typed(json!({"format": "kxp"}));
    let updated = s.api.client.update_endpoint(&id, &patch).await.unwrap();
    let rotated = updated.rotated.unwrap();
    assert!(rotated.secret.is_none());
    let new_key = PublicKey::from_whpk(&rotated.public_key.unwrap().whpk).unwrap();
    let seen = delivered(&s.api, &receiver, json!({"n": 2})).await;
    assert!(verifies_standard(&seen, &whpk_verifier(&whpk)));
    let kxp = Verifier::with_public_keys([new_key]).unwrap();
    assert!(
        kxp.verify_now(&seen.header("x-kxp-signature"), &seen.body)
            .is_ok()
    );
}

/// What each library said of each case: `(case, library)` → `ok` or `error`.
fn verdicts(output: &str) -> HashMap<(String, String), String> {
    output
        .lines()
        .map(|line| {
            let mut fields = line.split('\t').map(str::to_owned);
            let (case, library, verdict) = (
                fields.next().unwrap(),
                fields.next().unwrap(),
                fields.next().unwrap(),
            );
            ((case, library), verdict)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standardwebhooks_and_svix_libraries_verify_what_kxp_sends_and_kxp_what_they_sign() {
    let Some(interop) = Interop::find("Standard Webhooks interop (standardwebhooks, svix)") else {
        return;
    };
    let s = crate::support::sender("0s").await;
    let receiver = Receiver::start(vec![]).await;
    let created = register(&s.api, &receiver.url, "both").await;
    let old = created.secret.unwrap().expose().to_owned();
    let old_key = created.public_key.unwrap().whpk;
    let rotated = s
        .api
        .client
        .rotate_secret(&created.endpoint.id, &RotateSecret::overlap("24h"))
        .await
        .unwrap();
    let new = rotated.secret.unwrap().expose().to_owned();
    let new_key = rotated.public_key.unwrap().whpk;
    let stranger_key = SigningKey::from_seed(&[9; 32]).public_key().to_whpk();

    // kxp → the libraries: two deliveries (one body far from ASCII) with two secrets and two
    // keys each.
    let mut cases = Vec::new();
    let mut expected = Vec::new();
    for (n, data) in [
        json!({"amount": 1250}),
        json!({"note": "crème brûlée ✓ 東京"}),
    ]
    .into_iter()
    .enumerate()
    {
        let seen = delivered(&s.api, &receiver, data).await;
        assert_eq!(versions(&seen), ["v1", "v1", "v1a", "v1a"]);
        let delivery = json!({
            "id": seen.header("webhook-id"),
            "timestamp": seen.header("webhook-timestamp"),
            "signature": seen.header("webhook-signature"),
            "body_b64": STANDARD.encode(&seen.body),
        });
        let mut tampered = seen.body.to_vec();
        tampered.push(b' ');
        let hmac = [
            ("new", &new, &delivery["body_b64"], "ok"),
            ("old", &old, &delivery["body_b64"], "ok"),
            ("stranger", &stranger(), &delivery["body_b64"], "error"),
            (
                "tampered",
                &new,
                &json!(STANDARD.encode(&tampered)),
                "error",
            ),
        ];
        for (what, secret, body, verdict) in hmac {
            let mut case = delivery.clone();
            case["name"] = json!(format!("delivery{n}-{what}"));
            case["secret"] = json!(secret);
            case["body_b64"] = body.clone();
            cases.push(case);
            for library in ["standardwebhooks", "svix"] {
                expected.push((format!("delivery{n}-{what}"), library, verdict));
            }
        }
        let ed25519 = [
            ("new-key", &new_key, "ok"),
            ("old-key", &old_key, "ok"),
            ("stranger-key", &stranger_key, "error"),
        ];
        for (what, whpk, verdict) in ed25519 {
            let mut case = delivery.clone();
            case["name"] = json!(format!("delivery{n}-{what}"));
            case["whpk"] = json!(whpk);
            cases.push(case);
            expected.push((format!("delivery{n}-{what}"), "node:crypto", verdict));
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("verify.json");
    std::fs::write(&file, serde_json::to_vec(&cases).unwrap()).unwrap();
    let python_cases: Vec<&Value> = cases.iter().filter(|c| c.get("whpk").is_none()).collect();
    let python_file = dir.path().join("verify-hmac.json");
    std::fs::write(&python_file, serde_json::to_vec(&python_cases).unwrap()).unwrap();
    let python = verdicts(&interop.python(
        "standard_webhooks.py",
        &["verify".as_ref(), python_file.as_os_str()],
    ));
    let node = verdicts(&interop.node(
        "standard_webhooks.mjs",
        &["verify".as_ref(), file.as_os_str()],
    ));
    for (case, library, verdict) in &expected {
        let key = (case.clone(), (*library).to_owned());
        assert_eq!(
            node.get(&key).map(String::as_str),
            Some(*verdict),
            "Node.js {key:?}"
        );
        if *library != "node:crypto" {
            assert_eq!(
                python.get(&key).map(String::as_str),
                Some(*verdict),
                "Python {key:?}"
            );
        }
    }

    // The libraries → kxp-verify: each signs with one secret, and with both (a rotation's
    // multi-signature header); kxp-verify accepts each secret that signed, and computes the
    // same signatures.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let messages = [("single", vec![&new]), ("rotation", vec![&new, &old])];
    let body = br#"{"type":"payment.succeeded","data":{"note":"caf\u00e9 \u2713"}}"#;
    let sign_cases: Vec<Value> = messages
        .iter()
        .map(|(name, secrets)| {
            json!({
                "name": name, "id": format!("msg_{name}"), "timestamp": now,
                "body_b64": STANDARD.encode(body), "secrets": secrets,
            })
        })
        .collect();
    let file = dir.path().join("sign.json");
    std::fs::write(&file, serde_json::to_vec(&sign_cases).unwrap()).unwrap();
    for (language, output) in [
        (
            "Python",
            interop.python("standard_webhooks.py", &["sign".as_ref(), file.as_os_str()]),
        ),
        (
            "Node.js",
            interop.node(
                "standard_webhooks.mjs",
                &["sign".as_ref(), file.as_os_str()],
            ),
        ),
    ] {
        let signed: HashMap<String, HashMap<String, String>> =
            serde_json::from_str(&output).unwrap();
        assert_eq!(signed.len(), 2, "{language}: {output}");
        for (library, signatures) in &signed {
            for (name, secrets) in &messages {
                let header = &signatures[*name];
                let id = format!("msg_{name}");
                let timestamp = now.to_string();
                for secret in secrets {
                    let verifier = whsec_verifier(secret);
                    assert!(
                        verifier
                            .verify_standard(&id, &timestamp, header, body, now)
                            .is_ok(),
                        "{language} {library} {name}: {header}"
                    );
                }
                let refused = whsec_verifier(&stranger())
                    .verify_standard(&id, &timestamp, header, body, now)
                    .unwrap_err();
                assert_eq!(refused.kind(), kxp_verify::ErrorKind::SignatureMismatch);
                let ours = kxp_verify::Signer::with_secrets(
                    secrets.iter().map(|s| Secret::from_whsec(s).unwrap()),
                )
                .unwrap()
                .sign_standard(&id, now, body)
                .unwrap();
                assert_eq!(&ours.to_string(), header, "{language} {library} {name}");
            }
        }
    }
}
