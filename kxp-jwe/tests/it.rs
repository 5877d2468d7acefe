//! kxp-jwe against itself (both curves, the refusals, in their order) and against two
//! independent JOSE implementations, jwcrypto (Python) and jose (Node.js): each decrypts what
//! kxp-jwe encrypts, and kxp-jwe decrypts what each encrypts, and refuses what they make with
//! another `alg`, `enc` or `zip`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use kxp_jwe::{Curve, DecryptionKey, EncryptionKey, JweError, JwkError};
use kxp_testkit::interop::Interop;
use serde_json::{Value, json};

const CURVES: [Curve; 2] = [Curve::P256, Curve::X25519];

fn pair(curve: Curve) -> (DecryptionKey, EncryptionKey) {
    let private = DecryptionKey::generate(curve, Some("merchant-1"));
    let public = EncryptionKey::from_jwk(&private.public().to_jwk().to_string()).unwrap();
    (private, public)
}

/// `jwe` with its protected header changed by `edit` (the tag no longer matches, but the
/// header checks come first).
fn with_header(jwe: &str, edit: impl FnOnce(&mut serde_json::Map<String, Value>)) -> String {
    let mut parts: Vec<String> = jwe.split('.').map(str::to_owned).collect();
    let mut header: Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(&parts[0]).unwrap()).unwrap();
    edit(header.as_object_mut().unwrap());
    parts[0] = URL_SAFE_NO_PAD.encode(header.to_string());
    parts.join(".")
}

#[test]
fn each_curve_round_trips_and_the_header_is_pinned() {
    for curve in CURVES {
        let (private, public) = pair(curve);
        let jwe = public.encrypt(b"{\"card\":\"4242\"}").unwrap();
        assert_eq!(jwe.split('.').count(), 5);
        let header: Value = serde_json::from_slice(
            &URL_SAFE_NO_PAD
                .decode(jwe.split('.').next().unwrap())
                .unwrap(),
        )
        .unwrap();
        assert_eq!(header["alg"], "ECDH-ES+A256KW");
        assert_eq!(header["enc"], "A256GCM");
        assert_eq!(header["kid"], "merchant-1");
        assert!(header.get("epk").is_some());
        assert_eq!(&private.decrypt(&jwe).unwrap()[..], b"{\"card\":\"4242\"}");
        assert_ne!(
            jwe,
            public.encrypt(b"{\"card\":\"4242\"}").unwrap(),
            "a fresh ephemeral key and iv each time"
        );
        let again = DecryptionKey::from_jwk(&private.to_jwk()).unwrap();
        assert_eq!(&again.decrypt(&jwe).unwrap()[..], b"{\"card\":\"4242\"}");
    }
}

#[test]
fn refusals_come_in_their_order_with_their_names() {
    let (private, public) = pair(Curve::P256);
    let jwe = public.encrypt(b"{}").unwrap();
    for forbidden in ["zip", "jku", "jwk", "x5u", "crit"] {
        let edited = with_header(&jwe, |h| {
            h.insert(forbidden.into(), json!("x"));
            h.insert("alg".into(), json!("RSA-OAEP"));
        });
        assert_eq!(
            private.decrypt(&edited),
            Err(JweError::ForbiddenHeader(forbidden)),
            "before alg"
        );
    }
    let alg = with_header(&jwe, |h| {
        h.insert("alg".into(), json!("ECDH-ES+A128KW"));
    });
    assert_eq!(private.decrypt(&alg), Err(JweError::UnsupportedAlgorithm));
    let enc = with_header(&jwe, |h| {
        h.insert("enc".into(), json!("A128GCM"));
    });
    assert_eq!(
        private.decrypt(&enc).unwrap_err().code(),
        "unsupported_encryption"
    );
    // An ephemeral key on the other curve, off the curve, or missing.
    let (_, x25519) = pair(Curve::X25519);
    let other_curve = with_header(&jwe, |h| {
        h.insert(
            "epk".into(),
            json!({"kty": "OKP", "crv": "X25519", "x": x25519.to_jwk()["x"]}),
        );
    });
    assert_eq!(
        private.decrypt(&other_curve),
        Err(JweError::InvalidEphemeralKey)
    );
    let off_curve = with_header(&jwe, |h| {
        let epk = h["epk"].as_object_mut().unwrap();
        let mut y = URL_SAFE_NO_PAD.decode(epk["y"].as_str().unwrap()).unwrap();
        y[31] ^= 1;
        epk.insert("y".into(), json!(URL_SAFE_NO_PAD.encode(y)));
    });
    assert_eq!(
        private.decrypt(&off_curve),
        Err(JweError::InvalidEphemeralKey)
    );
    let none = with_header(&jwe, |h| {
        h.remove("epk");
    });
    assert_eq!(private.decrypt(&none), Err(JweError::InvalidEphemeralKey));
    // A header altered within the rules, a tampered ciphertext, another key: all one error.
    let kid = with_header(&jwe, |h| {
        h.insert("kid".into(), json!("someone-else"));
    });
    assert_eq!(private.decrypt(&kid), Err(JweError::DecryptionFailed));
    let mut parts: Vec<String> = jwe.split('.').map(str::to_owned).collect();
    let mut ciphertext = URL_SAFE_NO_PAD.decode(&parts[3]).unwrap();
    ciphertext[0] ^= 1;
    parts[3] = URL_SAFE_NO_PAD.encode(ciphertext);
    assert_eq!(
        private.decrypt(&parts.join(".")),
        Err(JweError::DecryptionFailed)
    );
    let (stranger, _) = pair(Curve::P256);
    assert_eq!(stranger.decrypt(&jwe), Err(JweError::DecryptionFailed));
    // Shapes.
    for malformed in ["", "a.b.c.d", "a.b.c.d.e.f", "!!.b.c.d.e"] {
        assert_eq!(
            private.decrypt(malformed).unwrap_err().code(),
            "malformed",
            "{malformed:?}"
        );
    }
}

#[test]
fn a_small_order_x25519_ephemeral_key_is_refused() {
    let (private, public) = pair(Curve::X25519);
    let jwe = public.encrypt(b"{}").unwrap();
    for u in [[0u8; 32], {
        let mut one = [0u8; 32];
        one[0] = 1;
        one
    }] {
        let edited = with_header(&jwe, |h| {
            h.insert(
                "epk".into(),
                json!({"kty": "OKP", "crv": "X25519", "x": URL_SAFE_NO_PAD.encode(u)}),
            );
        });
        assert_eq!(private.decrypt(&edited), Err(JweError::InvalidEphemeralKey));
    }
}

#[test]
fn jwks_are_checked() {
    let (private, public) = pair(Curve::P256);
    assert_eq!(
        EncryptionKey::from_jwk(&private.to_jwk()),
        Err(JwkError::PrivateKey)
    );
    assert_eq!(
        DecryptionKey::from_jwk(&public.to_jwk().to_string()).unwrap_err(),
        JwkError::NotPrivate
    );
    let mut jwk = public.to_jwk();
    jwk["alg"] = json!("RSA-OAEP-256");
    assert_eq!(
        EncryptionKey::from_jwk(&jwk.to_string()),
        Err(JwkError::UnsupportedAlgorithm)
    );
    let mut jwk = public.to_jwk();
    jwk["use"] = json!("sig");
    assert_eq!(
        EncryptionKey::from_jwk(&jwk.to_string()),
        Err(JwkError::UnsupportedAlgorithm)
    );
    for unsupported in [
        json!({"kty": "RSA", "n": "AQAB", "e": "AQAB"}),
        json!({"kty": "EC", "crv": "P-384", "x": "AA", "y": "AA"}),
        json!({"kty": "OKP", "crv": "Ed25519", "x": "AA"}),
    ] {
        assert_eq!(
            EncryptionKey::from_jwk(&unsupported.to_string()),
            Err(JwkError::UnsupportedKey)
        );
    }
    let mut off = public.to_jwk();
    off["y"] = off["x"].clone();
    assert_eq!(
        EncryptionKey::from_jwk(&off.to_string())
            .unwrap_err()
            .code(),
        "invalid_key"
    );
    let mut short = pair(Curve::X25519).1.to_jwk();
    short["x"] = json!("AAAA");
    assert_eq!(
        EncryptionKey::from_jwk(&short.to_string()),
        Err(JwkError::InvalidKey("x"))
    );
    assert_eq!(EncryptionKey::from_jwk("[1]"), Err(JwkError::InvalidJson));
    // X25519 keys of small order (every shared secret zero) and non-canonical ones.
    let mut one = [0u8; 32];
    one[0] = 1;
    let mut top_bit = [0u8; 32];
    top_bit[31] = 0x80;
    let mut past_prime = [0xff; 32];
    past_prime[0] = 0xee;
    past_prime[31] = 0x7f;
    for u in [[0u8; 32], one, top_bit, past_prime] {
        let jwk = json!({"kty": "OKP", "crv": "X25519", "x": URL_SAFE_NO_PAD.encode(u)});
        assert_eq!(
            EncryptionKey::from_jwk(&jwk.to_string()),
            Err(JwkError::InvalidKey("x")),
            "{u:?}"
        );
    }
    // `d` that is not the public key's.
    let mut mismatched: Value = serde_json::from_str(&private.to_jwk()).unwrap();
    mismatched["d"] =
        serde_json::from_str::<Value>(&pair(Curve::P256).0.to_jwk()).unwrap()["d"].clone();
    assert_eq!(
        DecryptionKey::from_jwk(&mismatched.to_string()).unwrap_err(),
        JwkError::InvalidKey("d")
    );
    assert!(
        !format!("{private:?}").contains(
            serde_json::from_str::<Value>(&private.to_jwk()).unwrap()["d"]
                .as_str()
                .unwrap()
        )
    );
}

fn verdicts(output: &str) -> Vec<(String, String, String)> {
    output
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split('\t').collect();
            (
                fields[0].to_owned(),
                fields[1].to_owned(),
                fields[2].to_owned(),
            )
        })
        .collect()
}

#[test]
fn jwcrypto_and_jose_decrypt_what_kxp_encrypts_and_kxp_what_they_encrypt() {
    let Some(interop) = Interop::find("JWE interop (jwcrypto, jose)") else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("kxp-jwe-interop-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plaintext = "{\"card\":\"4242\",\"note\":\"crème brûlée ✓\"}".as_bytes();

    // kxp → the libraries, both curves; and a stranger's key, refused.
    let mut cases = Vec::new();
    let mut keys = Vec::new();
    for curve in CURVES {
        let (private, public) = pair(curve);
        let private_jwk: Value = serde_json::from_str(&private.to_jwk()).unwrap();
        let (stranger, _) = pair(curve);
        let stranger_jwk: Value = serde_json::from_str(&stranger.to_jwk()).unwrap();
        let jwe = public.encrypt(plaintext).unwrap();
        cases.push(json!({"name": format!("{curve:?}"), "jwk": private_jwk, "jwe": jwe}));
        cases.push(json!({"name": format!("{curve:?}-stranger"), "jwk": stranger_jwk, "jwe": jwe}));
        keys.push((curve, private, public));
    }
    let file = dir.join("decrypt.json");
    std::fs::write(&file, serde_json::to_vec(&cases).unwrap()).unwrap();
    let ok = format!("ok:{}", STANDARD.encode(plaintext));
    let mut seen = 0;
    for output in [
        interop.python("jwe.py", &["decrypt".as_ref(), file.as_os_str()]),
        interop.node("jwe.mjs", &["decrypt".as_ref(), file.as_os_str()]),
    ] {
        for (case, library, verdict) in verdicts(&output) {
            let expected = if case.ends_with("-stranger") {
                "error"
            } else {
                ok.as_str()
            };
            assert_eq!(verdict, expected, "{library} {case}");
            seen += 1;
        }
    }
    assert_eq!(seen, 8, "two libraries, four cases");

    // The libraries → kxp; and what they make with another alg, enc or zip, refused by name.
    let mut cases = Vec::new();
    for (curve, _, public) in &keys {
        let jwk = public.to_jwk();
        let plaintext_b64 = STANDARD.encode(plaintext);
        cases.push(
            json!({"name": format!("{curve:?}"), "jwk": jwk, "plaintext_b64": plaintext_b64}),
        );
        cases.push(json!({"name": format!("{curve:?}-a128kw"), "jwk": jwk, "plaintext_b64": plaintext_b64, "alg": "ECDH-ES+A128KW"}));
        cases.push(json!({"name": format!("{curve:?}-a128gcm"), "jwk": jwk, "plaintext_b64": plaintext_b64, "enc": "A128GCM"}));
    }
    let mut zip_cases = cases.clone();
    if let Some(first) = cases.first() {
        let mut zip = first.clone();
        zip["name"] = json!("zip");
        zip_cases.push(zip.clone());
        zip_cases.last_mut().unwrap()["zip"] = json!("DEF");
    }
    for case in cases.iter_mut().chain(zip_cases.iter_mut()) {
        case["jwk"].as_object_mut().unwrap().remove("alg");
    }
    let python_file = dir.join("encrypt-python.json");
    std::fs::write(&python_file, serde_json::to_vec(&zip_cases).unwrap()).unwrap();
    let node_file = dir.join("encrypt-node.json");
    std::fs::write(&node_file, serde_json::to_vec(&cases).unwrap()).unwrap();
    for (library, output, count) in [
        (
            "jwcrypto",
            interop.python("jwe.py", &["encrypt".as_ref(), python_file.as_os_str()]),
            7,
        ),
        (
            "jose",
            interop.node("jwe.mjs", &["encrypt".as_ref(), node_file.as_os_str()]),
            6,
        ),
    ] {
        let made: std::collections::HashMap<String, String> =
            serde_json::from_str(&output).unwrap();
        assert_eq!(made.len(), count, "{library}");
        for (name, jwe) in &made {
            let curve = if name.starts_with("X25519") {
                Curve::X25519
            } else {
                Curve::P256
            };
            let private = &keys.iter().find(|(c, _, _)| *c == curve).unwrap().1;
            let outcome = private.decrypt(jwe);
            match name.split_once('-').map(|(_, what)| what) {
                None if name == "zip" => {
                    assert_eq!(outcome, Err(JweError::ForbiddenHeader("zip")), "{library}")
                }
                None => assert_eq!(&outcome.unwrap()[..], plaintext, "{library} {name}"),
                Some("a128kw") => assert_eq!(
                    outcome,
                    Err(JweError::UnsupportedAlgorithm),
                    "{library} {name}"
                ),
                Some("a128gcm") => assert_eq!(
                    outcome,
                    Err(JweError::UnsupportedEncryption),
                    "{library} {name}"
                ),
                Some(other) => panic!("{other}"),
            }
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
