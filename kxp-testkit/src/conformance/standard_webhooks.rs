//! A receiver configured for the Standard Webhooks format (`webhook-id`, `webhook-timestamp`,
//! `webhook-signature` over `<id>.<timestamp>.<body>`, a `whsec_` secret), checked over HTTP:
//! what it accepts, what it refuses with which error, and the key it names. The signatures are
//! made here, with the suite's own HMAC, not with the code the receivers verify with.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

use super::client::{client, send};
use super::event_body;

/// The key bytes of the suite's Standard Webhooks secret.
pub const KEY: [u8; 32] = [0x5a; 32];

/// [`KEY`] as the sender shows it, and a receiver is configured with.
pub fn whsec() -> String {
    format!("whsec_{}", STANDARD.encode(KEY))
}

/// `v1,<base64 HMAC-SHA256 over "<id>.<t>.<body>">` with `key`.
pub fn sign(key: &[u8], id: &str, t: u64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key)
        .unwrap_or_else(|_| panic!("an HMAC key cannot be empty"));
    mac.update(format!("{id}.{t}.").as_bytes());
    mac.update(body);
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

/// What a receiver names in `X-Kxp-Verified-Key` for a secret whose key bytes are `key`.
pub fn key_id(key: &[u8]) -> String {
    let digest = Sha256::new()
        .chain_update(b"kxp-key-id\0")
        .chain_update(key)
        .finalize();
    hex::encode(&digest[..8])
}

/// Checks the receiver at `url`, configured with [`whsec`] and the system clock: an event in
/// the format is accepted (alone, and beside another key's signature, as during a rotation)
/// and names [`KEY`]; a tampered body or id, an old timestamp, a missing header, a kxp header
/// instead and a list without a `v1` are refused with the error the format's rules give.
pub async fn check_receiver(url: &str) {
    let http = client();
    let now = super::now(&super::Config::new(""));
    let post = |id: &str, t: String, signature: String, body: String, kxp: Option<String>| {
        let mut request = http
            .post(url)
            .header("content-type", "application/json")
            .body(body);
        for (name, value) in [
            ("webhook-id", id.to_owned()),
            ("webhook-timestamp", t),
            ("webhook-signature", signature),
        ] {
            if !value.is_empty() {
                request = request.header(name, value);
            }
        }
        if let Some(kxp) = kxp {
            request = request.header("x-kxp-signature", kxp);
        }
        send(request)
    };
    let body = |id: &str| event_body(id, 100, "EUR");

    let id = "evt_sw_1";
    let answer = post(
        id,
        now.to_string(),
        sign(&KEY, id, now, body(id).as_bytes()),
        body(id),
        None,
    )
    .await;
    assert_eq!(
        answer.status, 200,
        "a valid Standard Webhooks event: {answer:?}"
    );
    assert_eq!(answer.verified_key.as_deref(), Some(key_id(&KEY).as_str()));

    let id = "evt_sw_2";
    let rotating = format!(
        "{} {}",
        sign(&[0x11; 32], id, now, body(id).as_bytes()),
        sign(&KEY, id, now, body(id).as_bytes())
    );
    let answer = post(id, now.to_string(), rotating, body(id), None).await;
    assert_eq!(
        answer.status, 200,
        "two signatures, one by its key: {answer:?}"
    );
    assert_eq!(answer.verified_key.as_deref(), Some(key_id(&KEY).as_str()));

    let refusals = [
        (
            "a tampered body",
            post(
                id,
                now.to_string(),
                sign(&KEY, id, now, body(id).as_bytes()),
                body("evt_other"),
                None,
            ),
            "signature_mismatch",
        ),
        (
            "a tampered webhook-id",
            post(
                "evt_sw_3",
                now.to_string(),
                sign(&KEY, id, now, body(id).as_bytes()),
                body(id),
                None,
            ),
            "signature_mismatch",
        ),
        (
            "a timestamp 400 s old",
            post(
                id,
                (now - 400).to_string(),
                sign(&KEY, id, now - 400, body(id).as_bytes()),
                body(id),
                None,
            ),
            "timestamp_too_old",
        ),
        (
            "no webhook-id",
            post(
                "",
                now.to_string(),
                sign(&KEY, id, now, body(id).as_bytes()),
                body(id),
                None,
            ),
            "missing_header",
        ),
        (
            "a kxp header only",
            post(
                "",
                String::new(),
                String::new(),
                body(id),
                Some(format!("t={now},v1={}", "0".repeat(64))),
            ),
            "missing_header",
        ),
        (
            "a list with no v1",
            post(
                id,
                now.to_string(),
                format!("v1a,{}", STANDARD.encode([0u8; 64])),
                body(id),
                None,
            ),
            "malformed_header",
        ),
    ];
    for (what, answer, error) in refusals {
        let answer = answer.await;
        assert_eq!(
            answer.pair(),
            (401, format!(r#"{{"error":"{error}"}}"#).as_str()),
            "{what}: {answer:?}"
        );
        assert_eq!(answer.verified_key, None, "{what}: a refusal names no key");
    }
}
