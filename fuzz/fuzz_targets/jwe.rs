//! kxp-jwe's parsers on arbitrary input: a JWE to decrypt (with a P-256 and an X25519 key), an
//! envelope to open, and a JWK to read, public or private. None may panic, and whatever
//! decrypts must decrypt the same way twice.
#![no_main]

use kxp_jwe::{DecryptionKey, EncryptionKey, open_envelope};
use libfuzzer_sys::fuzz_target;

/// Keys for fuzzing only (the seeds of make-jwe-seeds.py are encrypted to them).
const KEYS: [&str; 2] = [
    r#"{"alg":"ECDH-ES+A256KW","crv":"P-256","d":"kVHSLNOUfyvZMNGBEdZNiVuk2OWAMXqckmx2luUGvSQ","kid":"fuzz","kty":"EC","use":"enc","x":"xDgJHJI2elr6Xu7lavUs02H7kMFsV7lya93lYqgiAWE","y":"t6zUnYMRJ_FKbR3-kD_Bhvfl_z7F21nHW_oiBIr7DTY"}"#,
    r#"{"alg":"ECDH-ES+A256KW","crv":"X25519","d":"z09DtewVLz0AJzv2ppi2oaBXccVVRhIqvjheVLIckj0","kid":"fuzz","kty":"OKP","use":"enc","x":"1-Z_YBC3bHUpVRhuVhvoHqx60tnT0LPrhxZgQRXyU0I"}"#,
];

fuzz_target!(|data: &[u8]| {
    let keys = KEYS.map(|jwk| DecryptionKey::from_jwk(jwk).expect("the fuzzing keys read"));
    for key in &keys {
        if let Ok(opened) = open_envelope(key, data) {
            assert_eq!(open_envelope(key, data).ok().as_deref().map(Vec::as_slice), Some(&opened[..]));
        }
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for key in &keys {
        if let Ok(plaintext) = key.decrypt(text) {
            assert_eq!(key.decrypt(text).ok().as_deref().map(Vec::as_slice), Some(&plaintext[..]));
        }
    }
    if let Ok(key) = EncryptionKey::from_jwk(text) {
        let again = EncryptionKey::from_jwk(&key.to_jwk().to_string()).expect("a normalized JWK reads back");
        assert_eq!(again, key);
    }
    if let Ok(key) = DecryptionKey::from_jwk(text) {
        assert!(DecryptionKey::from_jwk(&key.to_jwk()).is_ok());
    }
});
