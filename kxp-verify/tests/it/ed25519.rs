//! The Ed25519 (`v1a`) vectors: every verdict, the same verdicts as ed25519-dalek's
//! `verify_strict` over the whole message, no allocation, and the signing key reproducing the
//! valid signatures.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{Signature, VerifyingKey};
use kxp_testkit::{Vector, check_each, ed25519_vectors};
use kxp_verify::{ConfigError, PublicKey, SigningKey, Verifier};
use sha2::Digest;

use crate::no_alloc::assert_verify_allocates_nothing;
use crate::verifier_for;

/// The verifier a vector describes, or the name of the configuration error that refuses it.
fn ed25519_verifier_for(vector: &Vector) -> Result<Verifier, &'static str> {
    if vector.public_keys.is_empty() {
        return Ok(verifier_for(vector));
    }
    let keys = vector
        .public_keys
        .iter()
        .map(|k| PublicKey::from_base64(k))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| match e {
            ConfigError::InvalidPublicKey => "invalid_public_key",
            ConfigError::WeakPublicKey => "weak_public_key",
            other => panic!("{}: unexpected {other:?}", vector.name),
        })?;
    Ok(Verifier::with_public_keys(keys)
        .unwrap()
        .with_tolerance(std::time::Duration::from_secs(vector.tolerance_s)))
}

fn verdict(vector: &Vector) -> String {
    match ed25519_verifier_for(vector) {
        Ok(verifier) => match verifier.verify(&vector.header, &vector.body, vector.now) {
            Ok(_) => "ok".to_owned(),
            Err(error) => error.kind().as_str().to_owned(),
        },
        Err(config) => config.to_owned(),
    }
}

#[test]
fn every_ed25519_vector_reaches_its_verdict() {
    check_each(&ed25519_vectors(), verdict);
}

/// The `v1a` values of a header that decode to 64 bytes, and the signed message.
fn signatures_and_message(vector: &Vector) -> (Vec<[u8; 64]>, Vec<u8>) {
    let mut t = None;
    let mut signatures = Vec::new();
    for item in vector.header.split(',') {
        let (key, value) = item.trim_matches([' ', '\t']).split_once('=').unwrap();
        match key {
            "t" => t = Some(value.to_owned()),
            "v1a" => signatures.extend(
                STANDARD
                    .decode(value)
                    .ok()
                    .and_then(|b| <[u8; 64]>::try_from(b).ok()),
            ),
            _ => {}
        }
    }
    let message = [t.unwrap().as_bytes(), b".", &vector.body].concat();
    (signatures, message)
}

/// kxp-verify checks `<t>.<body>` in two parts, so it cannot call `verify_strict` itself (that
/// takes one buffer, and the crate does not allocate): here, the whole message in one buffer,
/// `verify_strict` must agree with every verdict on a signature, and plain `verify` must accept
/// some refused cases (or those vectors would not test strictness).
#[test]
fn signature_verdicts_agree_with_verify_strict() {
    let vectors = ed25519_vectors();
    let mut lax_accepts = Vec::new();
    for vector in vectors.iter().filter(|v| !v.public_keys.is_empty()) {
        let expect = vector.expect.as_str();
        if !["ok", "signature_mismatch", "weak_public_key"].contains(&expect) {
            continue;
        }
        let (signatures, message) = signatures_and_message(vector);
        let keys: Vec<VerifyingKey> = vector
            .public_keys
            .iter()
            .filter_map(|k| STANDARD.decode(k).ok()?.try_into().ok())
            .filter_map(|k: [u8; 32]| VerifyingKey::from_bytes(&k).ok())
            // A refused configuration: `verify_strict` must refuse with its weak keys.
            .filter(|k| expect != "weak_public_key" || k.is_weak())
            .collect();
        let pairs = || {
            signatures
                .iter()
                .flat_map(|s| keys.iter().map(move |k| (k, Signature::from_bytes(s))))
        };
        let strict = pairs().any(|(k, s)| k.verify_strict(&message, &s).is_ok());
        assert_eq!(strict, expect == "ok", "{}", vector.name);
        if expect != "ok"
            && pairs().any(|(k, s)| ed25519_dalek::Verifier::verify(k, &message, &s).is_ok())
        {
            lax_accepts.push(vector.name.as_str());
        }
    }
    for name in ["r_is_the_identity", "small_order_public_key"] {
        assert!(lax_accepts.contains(&name), "{name}: {lax_accepts:?}");
    }
}

#[test]
fn verify_with_public_keys_allocates_nothing() {
    for vector in ed25519_vectors() {
        if let Ok(verifier) = ed25519_verifier_for(&vector) {
            assert_verify_allocates_nothing(&vector, &verifier);
        }
    }
}

/// The keys of make-ed25519.py: Ed25519 is deterministic, so the signing key must write the
/// valid single-key header byte for byte.
#[test]
fn the_signing_key_reproduces_the_vectors() {
    let seed =
        |i: u8| -> [u8; 32] { sha2::Sha256::digest(format!("kxp ed25519 vector key {i}")).into() };
    let vectors = ed25519_vectors();
    let single = vectors
        .iter()
        .find(|v| v.name == "valid_single_key")
        .unwrap();
    let key = SigningKey::from_seed(&seed(0));
    assert_eq!(
        STANDARD.encode(key.public_key().to_bytes()),
        single.public_keys[0]
    );
    let t = single.timestamp().unwrap();
    assert_eq!(key.sign(t, &single.body).to_string(), single.header);
    for vector in vectors
        .iter()
        .filter(|v| v.is_ok() && !v.public_keys.is_empty())
    {
        let signed = (0..4)
            .map(|i| {
                SigningKey::from_seed(&seed(i)).sign(vector.timestamp().unwrap(), &vector.body)
            })
            .map(|h| h.to_string().split_once(",v1a=").unwrap().1.to_owned());
        let found = signed.into_iter().any(|s| vector.header.contains(&s));
        assert!(found, "{}: no key reproduces a v1a", vector.name);
    }
}

/// The bound on `v1a` items is per header, not per verifier: four keys and four items are
/// sixteen tries at most, and a fifth item is refused before any.
#[test]
fn a_fifth_v1a_item_is_malformed_whatever_it_holds() {
    let key = SigningKey::from_seed(&[3; 32]);
    let verifier = Verifier::with_public_keys([key.public_key()]).unwrap();
    let header = key.sign(1000, b"{}").to_string();
    let item = header.split_once(',').unwrap().1;
    let four = format!("{header}{}", format!(",{item}").repeat(3));
    assert!(verifier.verify(&four, b"{}", 1000).is_ok());
    let five = format!("{four},{item}");
    let error = verifier.verify(&five, b"{}", 1000).unwrap_err();
    assert_eq!(
        error.malformed_reason(),
        Some(kxp_verify::Malformed::TooManyEd25519Signatures)
    );
}

#[test]
fn public_key_counts_are_bounded_like_secrets() {
    let key = |i| SigningKey::from_seed(&[i; 32]).public_key();
    assert_eq!(
        Verifier::with_public_keys([]).unwrap_err(),
        ConfigError::NoPublicKeys
    );
    assert_eq!(
        Verifier::with_public_keys((0..5).map(key)).unwrap_err(),
        ConfigError::TooManyPublicKeys
    );
    let verifier = Verifier::with_public_keys((0..4).map(key)).unwrap();
    assert_eq!(
        (verifier.public_key_count(), verifier.secret_count()),
        (4, 0)
    );
}
