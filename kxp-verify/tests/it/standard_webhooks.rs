//! Standard Webhooks 1.0 (`Verifier::verify_standard`): every vector of
//! testdata/vectors/standard-webhooks.json (signed by the official `standardwebhooks` package),
//! without allocating; the signers reproducing its signatures; and properties: what a signer
//! emits verifies, any changed byte fails, no input panics.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use kxp_verify::{
    ConfigError, ErrorKind, Malformed, PublicKey, Secret, Signer, SigningKey, Verifier,
    key_fingerprint, to_whsec,
};
use proptest::prelude::*;
use serde::Deserialize;
use sha2::Digest;

#[derive(Debug, Deserialize)]
struct File {
    vectors: Vec<Vector>,
}

/// One vector; the file's `about` says what each field means.
#[derive(Debug, Deserialize)]
struct Vector {
    name: String,
    secrets: Vec<String>,
    public_keys: Vec<String>,
    id: String,
    timestamp: String,
    signature: String,
    body_b64: String,
    now: u64,
    tolerance_s: u64,
    expect: String,
    key_index: Option<usize>,
}

impl Vector {
    fn body(&self) -> Vec<u8> {
        STANDARD.decode(&self.body_b64).unwrap()
    }

    /// The raw key bytes the vector's key at `index` stands for: what the fingerprint is of.
    fn key_bytes(&self, index: usize) -> Vec<u8> {
        let (text, prefix) = match self.secrets.get(index) {
            Some(secret) => (secret, "whsec_"),
            None => (&self.public_keys[index], "whpk_"),
        };
        let bare = text.strip_prefix(prefix).unwrap_or(text);
        base64::engine::general_purpose::STANDARD_NO_PAD
            .decode(bare.trim_end_matches('='))
            .unwrap()
    }
}

fn vectors() -> Vec<Vector> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testdata/vectors/standard-webhooks.json"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let file: File = serde_json::from_str(&text).unwrap();
    assert!(file.vectors.len() >= 60, "{} vectors", file.vectors.len());
    file.vectors
}

/// The verifier a vector describes, or the name of the configuration error that refuses it.
fn verifier_for(vector: &Vector) -> Result<Verifier, &'static str> {
    let name = |e: ConfigError| match e {
        ConfigError::InvalidSecret => "invalid_secret",
        ConfigError::EmptySecret => "empty_secret",
        ConfigError::InvalidPublicKey => "invalid_public_key",
        ConfigError::WeakPublicKey => "weak_public_key",
        other => panic!("{}: unexpected {other:?}", vector.name),
    };
    let verifier = if vector.public_keys.is_empty() {
        let secrets: Vec<Secret> = vector
            .secrets
            .iter()
            .map(|s| Secret::from_whsec(s))
            .collect::<Result<_, _>>()
            .map_err(name)?;
        Verifier::with_secrets(secrets).unwrap()
    } else {
        let keys: Vec<PublicKey> = vector
            .public_keys
            .iter()
            .map(|k| PublicKey::from_whpk(k))
            .collect::<Result<_, _>>()
            .map_err(name)?;
        Verifier::with_public_keys(keys).unwrap()
    };
    Ok(verifier.with_tolerance(Duration::from_secs(vector.tolerance_s)))
}

fn verify<'b>(
    verifier: &Verifier,
    vector: &Vector,
    body: &'b [u8],
) -> Result<kxp_verify::Verified<'b>, kxp_verify::Error> {
    verifier.verify_standard(
        &vector.id,
        &vector.timestamp,
        &vector.signature,
        body,
        vector.now,
    )
}

#[test]
fn every_standard_webhooks_vector_reaches_its_verdict() {
    let mut failures = Vec::new();
    for vector in vectors() {
        let body = vector.body();
        let verdict = match verifier_for(&vector) {
            Err(config) => config.to_owned(),
            Ok(verifier) => match verify(&verifier, &vector, &body) {
                Ok(verified) => {
                    let index = vector.key_index.unwrap();
                    assert_eq!(verified.secret_index(), index, "{}", vector.name);
                    assert_eq!(
                        verified.key_fingerprint(),
                        key_fingerprint(&vector.key_bytes(index)),
                        "{}: the fingerprint is of the raw key bytes",
                        vector.name
                    );
                    assert_eq!(verified.body(), &body[..]);
                    assert_eq!(verified.timestamp().to_string(), vector.timestamp);
                    "ok".to_owned()
                }
                Err(error) => error.kind().as_str().to_owned(),
            },
        };
        if verdict != vector.expect {
            failures.push(format!(
                "{}: expected {}, got {verdict}",
                vector.name, vector.expect
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn verify_standard_allocates_nothing() {
    for vector in vectors() {
        let Ok(verifier) = verifier_for(&vector) else {
            continue;
        };
        let body = vector.body();
        let mut verdict = None;
        let info = allocation_counter::measure(|| {
            verdict = Some(verify(&verifier, &vector, &body).is_ok());
        });
        assert_eq!(info.count_total, 0, "{} allocated {info:?}", vector.name);
        assert_eq!(verdict, Some(vector.expect == "ok"), "{}", vector.name);
    }
}

/// HMAC and Ed25519 are deterministic: the signers must write the vectors' valid items byte
/// for byte (the `v1` ones were written by the official Python library).
#[test]
fn the_signers_reproduce_the_vectors() {
    let seed = |i: u8| -> [u8; 32] {
        sha2::Sha256::digest(format!("kxp standard webhooks key {i}")).into()
    };
    let mut reproduced = 0;
    for vector in vectors().iter().filter(|v| v.expect == "ok") {
        let t: u64 = vector.timestamp.parse().unwrap();
        let body = vector.body();
        let mut items: Vec<String> = Vec::new();
        for secret in &vector.secrets {
            let signer = Signer::new(Secret::from_whsec(secret).unwrap());
            items.push(
                signer
                    .sign_standard(&vector.id, t, &body)
                    .unwrap()
                    .to_string(),
            );
        }
        for i in 0..4 {
            let key = SigningKey::from_seed(&seed(i));
            items.push(key.sign_standard(&vector.id, t, &body).unwrap().to_string());
        }
        let sent: Vec<&str> = vector.signature.split(' ').collect();
        assert!(
            items.iter().any(|item| sent.contains(&item.as_str())),
            "{}: no signer reproduces an item of {:?}",
            vector.name,
            vector.signature
        );
        reproduced += 1;
    }
    assert!(reproduced >= 15);
}

/// The official test vector of the Standard Webhooks libraries (their Rust test_sign).
#[test]
fn the_reference_libraries_own_example_signs_alike() {
    let secret = Secret::from_whsec("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD").unwrap();
    let body = br#"{"email":"test@example.com","username":"test_user"}"#;
    let signed = Signer::new(secret)
        .sign_standard("msg_27UH4WbU6Z5A5EzD8u03UvzRbpk", 1649367553, body)
        .unwrap();
    assert_eq!(
        signed.to_string(),
        "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw="
    );
}

/// A rotating sender writes one `v1` per secret, newest first, then its Ed25519 items, each
/// separated by one space: both kinds of verifier accept the joined value.
#[test]
fn a_sender_joins_v1_and_v1a_items_with_one_space() {
    let (new, old) = (
        Secret::new(&[1u8; 24]).unwrap(),
        Secret::new(&[2u8; 24]).unwrap(),
    );
    let key = SigningKey::from_seed(&[3; 32]);
    let hmac = Signer::with_secrets([new.clone(), old.clone()])
        .unwrap()
        .sign_standard("msg_1", 1000, b"{}")
        .unwrap();
    let ed25519 = key.sign_standard("msg_1", 1000, b"{}").unwrap();
    let header = format!("{hmac} {ed25519}");
    assert_eq!(header.split(' ').count(), 3, "{header}");
    for (verifier, index) in [
        (Verifier::new(old), 0),
        (
            Verifier::with_secrets([Secret::new(&[9u8; 24]).unwrap(), new]).unwrap(),
            1,
        ),
        (Verifier::with_public_keys([key.public_key()]).unwrap(), 0),
    ] {
        let verified = verifier
            .verify_standard("msg_1", "1000", &header, b"{}", 1000)
            .unwrap();
        assert_eq!(verified.secret_index(), index, "{verifier:?}");
    }
}

#[test]
fn secret_and_public_key_texts_round_trip() {
    for len in [1usize, 24, 32, 33, 64] {
        let key: Vec<u8> = (0..len).map(|i| i as u8 ^ 0x5a).collect();
        let text = to_whsec(&key);
        assert!(text.starts_with("whsec_"));
        assert_eq!(text["whsec_".len()..], STANDARD.encode(&key));
        let parsed = Secret::from_whsec(&text).unwrap();
        assert_eq!(parsed.fingerprint(), key_fingerprint(&key));
        assert_eq!(format!("{parsed:?}"), "Secret([redacted])");
        let spaced = format!("  {text}\n");
        assert_eq!(
            Secret::from_whsec(&spaced).unwrap().fingerprint(),
            key_fingerprint(&key)
        );
    }
    assert_eq!(
        Secret::from_whsec(&to_whsec(&[0; 65])).unwrap_err(),
        ConfigError::InvalidSecret
    );
    for bad in [
        "whsec_ QUJD",
        "whsec_QU JD",
        "whsec_QUJD=",
        "whsec_QR==",
        "whsec_-_-_",
    ] {
        assert_eq!(
            Secret::from_whsec(bad).unwrap_err(),
            ConfigError::InvalidSecret,
            "{bad}"
        );
    }
    let key = SigningKey::from_seed(&[4; 32]).public_key();
    assert_eq!(PublicKey::from_whpk(&key.to_whpk()).unwrap(), key);
    assert_eq!(
        PublicKey::from_whpk("whpk_AAAA").unwrap_err(),
        ConfigError::InvalidPublicKey
    );
}

#[test]
fn ids_a_verifier_would_refuse_are_not_signed() {
    let signer = Signer::new(Secret::new("s").unwrap());
    let key = SigningKey::from_seed(&[5; 32]);
    for id in ["", "msg.1", "msg 1", "msg\u{e9}", &"m".repeat(4097)] {
        let error = signer.sign_standard(id, 1, b"").unwrap_err();
        assert_eq!(error.kind(), ErrorKind::MalformedHeader, "{id:?}");
        assert!(key.sign_standard(id, 1, b"").is_err(), "{id:?}");
    }
    assert!(signer.sign_standard(&"m".repeat(4096), 1, b"").is_ok());
}

/// The first empty header is named, in the order id, timestamp, signature; the message says
/// which, and the kind is `missing_header` either way.
#[test]
fn a_missing_header_is_named() {
    let verifier = Verifier::new(Secret::new("s").unwrap());
    for (id, t, sig, named) in [
        ("", "", "", "webhook-id"),
        ("m", "", "", "webhook-timestamp"),
        ("m", "1", "", "webhook-signature"),
        ("", "x", "v1,x", "webhook-id"),
    ] {
        let error = verifier.verify_standard(id, t, sig, b"", 1).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::MissingHeader);
        assert_eq!(
            error.to_string(),
            format!("missing_header: no {named} header")
        );
    }
}

#[test]
fn malformed_reasons_are_specific() {
    let verifier = Verifier::new(Secret::new("s").unwrap());
    let ed25519 =
        Verifier::with_public_keys([SigningKey::from_seed(&[6; 32]).public_key()]).unwrap();
    let mac = format!("v1,{}", STANDARD.encode([0u8; 32]));
    let reason = |v: &Verifier, sig: &str| {
        v.verify_standard("m", "1", sig, b"", 1)
            .unwrap_err()
            .malformed_reason()
    };
    assert_eq!(
        reason(&verifier, "v1,AAAA"),
        Some(Malformed::InvalidHmacSignature)
    );
    assert_eq!(
        reason(&verifier, "v1a,AAAA"),
        Some(Malformed::MissingSignature)
    );
    assert_eq!(
        reason(&ed25519, &mac),
        Some(Malformed::MissingEd25519Signature)
    );
    assert_eq!(
        reason(&ed25519, "v1a,AAAA"),
        Some(Malformed::InvalidEd25519Signature)
    );
    let five = vec![format!("v1a,{}", STANDARD.encode([0u8; 64])); 5].join(" ");
    assert_eq!(
        reason(&ed25519, &five),
        Some(Malformed::TooManyEd25519Signatures)
    );
    // A verifier of one scheme does not read the other's values: a bad `v1a` beside a
    // well-formed `v1` is no reason for a verifier with secrets to call the list malformed.
    assert!(reason(&verifier, &format!("v1a,!! {mac}")).is_none());
    assert_eq!(
        reason(&verifier, "v1,AAAA\u{7f}"),
        Some(Malformed::InvalidSignatureList)
    );
}

fn secret_verifier(keys: &[Vec<u8>]) -> Verifier {
    Verifier::with_secrets(keys.iter().map(|k| Secret::new(k).unwrap())).unwrap()
}

/// Strings shaped like a `webhook-signature`: real-looking items, near-misses and junk.
fn signature_like() -> impl Strategy<Value = String> {
    let item = prop_oneof![
        "[A-Za-z0-9+/]{43}=".prop_map(|b| format!("v1,{b}")),
        "[A-Za-z0-9+/]{86}==".prop_map(|b| format!("v1a,{b}")),
        "v[0-9a-z]{0,2},[ -~]{0,8}",
        "[ -~]{0,12}",
    ];
    proptest::collection::vec(item, 0..6).prop_map(|items| items.join(" "))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn arbitrary_headers_never_panic_nor_verify(
        id in proptest::collection::vec(any::<u8>(), 0..40),
        timestamp in "[0-9]{0,21}|[ -~]{0,12}",
        signature in signature_like(),
        raw in proptest::collection::vec(any::<u8>(), 0..200),
        now in any::<u64>(),
    ) {
        let verifier = Verifier::new(Secret::new("s").unwrap());
        let json = b"[]";
        prop_assert!(verifier.verify_standard(&id, &timestamp, &signature, json, now).is_err());
        prop_assert!(verifier.verify_standard(&id, &timestamp, &raw, &raw, now).is_err());
    }

    #[test]
    fn what_the_signer_emits_the_verifier_accepts(
        keys in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..=64), 1..=4),
        id in "[!-~&&[^.]]{1,64}",
        body in proptest::collection::vec(any::<u8>(), 0..1024),
        t in 0u64..=9_999_999_999_999_999_999,
        skew in -300i64..=300,
    ) {
        let signer = Signer::with_secrets(keys.iter().map(|k| Secret::new(k).unwrap())).unwrap();
        let signed = signer.sign_standard(&id, t, &body).unwrap();
        let (header, timestamp) = (signed.to_string(), signed.timestamp().to_string());
        let now = t.saturating_add_signed(skew);
        for (index, key) in keys.iter().enumerate() {
            // Through the whsec_ text, as a receiver would be configured.
            let verifier = Verifier::new(Secret::from_whsec(&to_whsec(key)).unwrap());
            let verified = verifier.verify_standard(&id, &timestamp, &header, &body, now).unwrap();
            prop_assert_eq!(verified.body(), &body[..]);
            prop_assert_eq!(verified.timestamp(), t);
            prop_assert_eq!(verified.key_fingerprint(), key_fingerprint(key), "key {}", index);
        }
        let all = secret_verifier(&keys);
        prop_assert!(all.verify_standard(&id, &timestamp, &header, &body, now).is_ok());
    }

    /// Any byte of the id, the timestamp, the signature or the body changed: never accepted.
    #[test]
    fn any_changed_byte_fails(
        key in proptest::collection::vec(any::<u8>(), 24..=32),
        id in "[!-~&&[^.]]{1,32}",
        body in proptest::collection::vec(any::<u8>(), 1..256),
        part in 0usize..4,
        at in any::<prop::sample::Index>(),
        flip in 1u8..=255,
    ) {
        const NOW: u64 = 1_764_464_523;
        let verifier = secret_verifier(std::slice::from_ref(&key));
        let signer = Signer::new(Secret::new(&key).unwrap());
        let signed = signer.sign_standard(&id, NOW, &body).unwrap();
        let mut fields = [
            id.into_bytes(),
            signed.timestamp().to_string().into_bytes(),
            signed.to_string().into_bytes(),
            body,
        ];
        let verdict = |[id, t, sig, body]: &[Vec<u8>; 4]| {
            let result = verifier.verify_standard(id, t, sig, body, NOW);
            result.map(|_| ()).map_err(|e| e.kind())
        };
        prop_assert_eq!(verdict(&fields), Ok(()));
        let field = &mut fields[part];
        let i = at.index(field.len());
        field[i] ^= flip;
        let result = verdict(&fields);
        prop_assert!(result.is_err());
        if part == 3 {
            prop_assert_eq!(result, Err(ErrorKind::SignatureMismatch));
        }
    }
}

// Ed25519 costs some milliseconds per signature in a debug build: fewer cases.
proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn what_a_signing_key_emits_its_public_key_accepts(
        seeds in proptest::collection::vec(any::<[u8; 32]>(), 1..=4),
        id in "[!-~&&[^.]]{1,64}",
        body in proptest::collection::vec(any::<u8>(), 0..1024),
        t in 0u64..=9_999_999_999_999_999_999,
        flip in any::<prop::sample::Index>(),
    ) {
        let keys: Vec<SigningKey> = seeds.iter().map(SigningKey::from_seed).collect();
        // Through the whpk_ text, as a receiver would be configured.
        let texts = keys.iter().map(|k| k.public_key().to_whpk());
        let public_keys = texts.map(|k| PublicKey::from_whpk(&k).unwrap());
        let verifier = Verifier::with_public_keys(public_keys).unwrap();
        let sign = |k: &SigningKey| k.sign_standard(&id, t, &body).unwrap().to_string();
        let items: Vec<String> = keys.iter().map(sign).collect();
        let header = items.join(" ");
        let timestamp = t.min(Signer::MAX_TIMESTAMP).to_string();
        let verified = verifier.verify_standard(&id, &timestamp, &header, &body, t).unwrap();
        prop_assert_eq!(verified.secret_index(), 0);
        prop_assert_eq!(verified.key_fingerprint(), keys[0].public_key().fingerprint());
        let mut tampered = body.clone();
        tampered.push(0);
        let i = flip.index(tampered.len());
        tampered[i] ^= 0x80;
        let error = verifier.verify_standard(&id, &timestamp, &header, &tampered, t).unwrap_err();
        prop_assert_eq!(error.kind(), ErrorKind::SignatureMismatch);
    }
}
