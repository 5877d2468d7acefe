//! Property tests: no input makes the parser or the verifier panic, and whatever the signer
//! emits, the verifier accepts.

use std::time::Duration;

use kxp_verify::{ErrorKind, Secret, SignatureHeader, Signer, SigningKey, Verifier};
use proptest::prelude::*;

fn verifier(secret: &str) -> Verifier {
    Verifier::new(Secret::new(secret).unwrap())
}

/// Header-shaped strings: real items, near-misses and junk, joined by commas with optional
/// whitespace, so the search spends its time near the grammar's edges rather than on noise.
fn header_like() -> impl Strategy<Value = String> {
    let item = prop_oneof![
        "[0-9]{1,21}".prop_map(|t| format!("t={t}")),
        "[0-9a-fA-F]{62,66}".prop_map(|h| format!("v1={h}")),
        "[a-z0-9]{0,3}=[ -~]{0,8}",
        "[ \t]{0,2}",
        "[ -~]{0,12}",
    ];
    proptest::collection::vec((item, "[ \t]{0,1}"), 0..6).prop_map(|items| {
        items
            .into_iter()
            .map(|(item, ws)| format!("{ws}{item}{ws}"))
            .collect::<Vec<_>>()
            .join(",")
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_never_panic(header in proptest::collection::vec(any::<u8>(), 0..300),
                                   body in proptest::collection::vec(any::<u8>(), 0..300),
                                   now in any::<u64>()) {
        let _ = verifier("s").verify(&header, &body, now);
    }

    #[test]
    fn header_like_input_never_panics_and_parses_consistently(header in header_like(), now in any::<u64>()) {
        let result = verifier("s").verify(&header, b"{}", now);
        match SignatureHeader::parse(&header) {
            Ok(parsed) => {
                // A header that parses is judged on its signature, never called malformed.
                prop_assert!(result.unwrap_err().kind() != ErrorKind::MalformedHeader);
                let v1_items = header.split(',').filter(|i| i.trim_matches([' ', '\t']).starts_with("v1=")).count();
                prop_assert_eq!(parsed.signatures().count(), v1_items);
            }
            Err(error) => prop_assert_eq!(result.unwrap_err(), error),
        }
    }

    #[test]
    fn what_the_signer_emits_the_verifier_accepts(
        secrets in proptest::collection::vec("[ -~]{1,80}", 1..=4),
        body in proptest::collection::vec(any::<u8>(), 0..2048),
        t in 0u64..=9_999_999_999_999_999_999,
        skew in -300i64..=300,
    ) {
        let signer = Signer::with_secrets(secrets.iter().map(|s| Secret::new(s).unwrap())).unwrap();
        let header = signer.sign(t, &body).to_string();
        let now = t.saturating_add_signed(skew);
        for (index, secret) in secrets.iter().enumerate() {
            let verified = verifier(secret).verify(&header, &body, now).unwrap();
            prop_assert_eq!(verified.body(), &body[..]);
            prop_assert_eq!(verified.timestamp(), t);
            prop_assert_eq!(verified.secret_index(), 0, "secret {} is the only one configured", index);
        }
        let all = Verifier::with_secrets(secrets.iter().rev().map(|s| Secret::new(s).unwrap())).unwrap();
        prop_assert!(all.verify(&header, &body, now).is_ok());
    }

    #[test]
    fn any_changed_body_byte_is_a_mismatch(
        body in proptest::collection::vec(any::<u8>(), 1..512),
        index in any::<prop::sample::Index>(),
        flip in 1u8..=255,
    ) {
        let header = Signer::new(Secret::new("s").unwrap()).sign(1000, &body).to_string();
        let mut tampered = body.clone();
        tampered[index.index(body.len())] ^= flip;
        let error = verifier("s").verify(&header, &tampered, 1000).unwrap_err();
        prop_assert_eq!(error.kind(), ErrorKind::SignatureMismatch);
    }

    #[test]
    fn the_window_is_inclusive_and_exact(t in 1000u64..u64::MAX / 2, tolerance in 0u64..100_000) {
        let header = Signer::new(Secret::new("s").unwrap()).sign(t, b"").to_string();
        let v = verifier("s").with_tolerance(Duration::from_secs(tolerance));
        prop_assert!(v.verify(&header, b"", t + tolerance).is_ok());
        prop_assert!(v.verify(&header, b"", t.saturating_sub(tolerance)).is_ok());
        prop_assert_eq!(v.verify(&header, b"", t + tolerance + 1).unwrap_err().kind(), ErrorKind::TimestampTooOld);
        if t > tolerance {
            prop_assert_eq!(v.verify(&header, b"", t - tolerance - 1).unwrap_err().kind(), ErrorKind::TimestampInFuture);
        }
    }
}

#[test]
fn timestamps_near_the_ends_of_time_do_not_overflow() {
    let header = Signer::new(Secret::new("s").unwrap())
        .sign(9_999_999_999_999_999_999, b"")
        .to_string();
    let error = verifier("s").verify(&header, b"", 0).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::TimestampInFuture);
    let header = Signer::new(Secret::new("s").unwrap())
        .sign(0, b"")
        .to_string();
    assert_eq!(
        verifier("s")
            .verify(&header, b"", u64::MAX)
            .unwrap_err()
            .kind(),
        ErrorKind::TimestampTooOld
    );
    assert!(verifier("s").verify(&header, b"", 300).is_ok());
}

#[test]
fn debug_output_never_shows_key_material() {
    let secret = Secret::new("super-secret-value").unwrap();
    let signer = Signer::new(secret.clone());
    let verifier = Verifier::new(secret.clone());
    let signed = signer.sign(1, b"body");
    for text in [
        format!("{secret:?}"),
        format!("{signer:?}"),
        format!("{verifier:?}"),
        format!("{signed:?}"),
    ] {
        assert!(!text.contains("super-secret"), "{text}");
        assert!(!text.contains(&signed.to_string()[5..]), "{text}");
    }
    for kind in ErrorKind::ALL {
        assert!(!kind.as_str().is_empty());
    }
}

#[test]
fn timestamps_past_nineteen_digits_are_signed_as_the_largest_one() {
    // Found by fuzzing: a 20-digit `t` would be a header the verifier calls malformed.
    let signer = Signer::new(Secret::new("s").unwrap());
    let header = signer.sign(u64::MAX, b"").to_string();
    assert!(header.starts_with("t=9999999999999999999,"));
    let error = verifier("s")
        .verify(&header, b"", 1_764_464_523)
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::TimestampInFuture);
    assert!(
        verifier("s")
            .verify(&header, b"", Signer::MAX_TIMESTAMP)
            .is_ok()
    );
}

// Ed25519 costs some milliseconds per signature in a debug build: fewer cases.
proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn a_public_key_verifier_never_panics_nor_accepts_random_signatures(
        header in header_like(), v1a in "[A-Za-z0-9+/]{86}==", now in any::<u64>(),
    ) {
        let verifier = Verifier::with_public_keys([SigningKey::from_seed(&[5; 32]).public_key()]).unwrap();
        let with_v1a = format!("{header},v1a={v1a}");
        for header in [header, with_v1a] {
            prop_assert!(verifier.verify(&header, b"{}", now).is_err(), "accepted {}", header);
        }
    }

    #[test]
    fn what_a_signing_key_emits_every_verifier_holding_its_public_key_accepts(
        seeds in proptest::collection::vec(any::<[u8; 32]>(), 1..=4),
        body in proptest::collection::vec(any::<u8>(), 0..2048),
        t in 0u64..=9_999_999_999_999_999_999,
        skew in -300i64..=300,
    ) {
        let keys: Vec<SigningKey> = seeds.iter().map(SigningKey::from_seed).collect();
        let verifier = Verifier::with_public_keys(keys.iter().map(SigningKey::public_key)).unwrap();
        let now = t.saturating_add_signed(skew);
        for (index, key) in keys.iter().enumerate() {
            let header = key.sign(t, &body).to_string();
            let verified = verifier.verify(&header, &body, now).unwrap();
            prop_assert_eq!(verified.timestamp(), t);
            // Equal seeds give equal keys: the first configured one is named.
            prop_assert!(verified.secret_index() <= index);
            prop_assert_eq!(&seeds[verified.secret_index()], &seeds[index]);
        }
    }
}
