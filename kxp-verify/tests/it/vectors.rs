//! The shared signature vectors, both ways: every verdict, and every valid signature re-made by
//! the signer.

use kxp_testkit::{check_all, vectors};
use kxp_verify::{Secret, Signer};

use crate::verifier_for;

#[test]
fn every_vector_reaches_its_verdict() {
    check_all(|vector| {
        match verifier_for(vector).verify(&vector.header, &vector.body, vector.now) {
            Ok(_) => "ok".to_owned(),
            Err(error) => error.kind().as_str().to_owned(),
        }
    });
}

#[test]
fn the_signer_reproduces_every_valid_signature() {
    let mut exact_headers = 0;
    for vector in vectors()
        .iter()
        .filter(|v| v.is_ok() && v.has_canonical_timestamp())
    {
        let t = vector.timestamp().unwrap();
        let header_v1: Vec<String> = vector
            .v1_values()
            .iter()
            .map(|v| v.to_ascii_lowercase())
            .collect();
        // Whichever secret the sender used, signing with it must give one of the header's `v1`s.
        let signed: Vec<String> = vector
            .secrets
            .iter()
            .map(|s| {
                Signer::new(Secret::new(s).unwrap())
                    .sign(t, &vector.body)
                    .to_string()
            })
            .collect();
        assert!(
            signed
                .iter()
                .any(|h| header_v1.iter().any(|v1| h.ends_with(&format!(",v1={v1}")))),
            "{}: no configured secret reproduces a v1 of {:?}",
            vector.name,
            vector.header
        );
        if signed.contains(&vector.header) {
            exact_headers += 1;
        }
    }
    // The canonical vectors (one secret, lowercase, `t` first) are byte-for-byte what we emit.
    assert!(
        exact_headers >= 8,
        "only {exact_headers} headers reproduced exactly"
    );
}

#[test]
fn a_multi_secret_header_lists_one_v1_per_secret_in_order() {
    let vector = vectors()
        .into_iter()
        .find(|v| v.name == "valid_receiver_has_two_secrets")
        .unwrap();
    let secrets = || vector.secrets.iter().map(|s| Secret::new(s).unwrap());
    let t = vector.timestamp().unwrap();
    let both = Signer::with_secrets(secrets())
        .unwrap()
        .sign(t, &vector.body)
        .to_string();
    let single: Vec<String> = secrets()
        .map(|s| Signer::new(s).sign(t, &vector.body).to_string())
        .collect();
    let expected = format!(
        "{},v1={}",
        single[0],
        single[1].rsplit("v1=").next().unwrap()
    );
    assert_eq!(both, expected);
    assert!(
        verifier_for(&vector)
            .verify(&both, &vector.body, vector.now)
            .is_ok()
    );
}
