//! `Verifier::verify` with Ed25519 public keys (`v1a` items) on an arbitrary (header, body,
//! now), checked against ed25519-dalek's `verify_strict` over the whole message, plus a
//! sign-then-verify round trip on every input.
//!
//! The input layout is `verify`'s (see fuzz_targets/verify.rs): `now` (u64 LE) | header length
//! (u16 LE) | header | body, so the two targets share their seeds' shape.

#![no_main]

use std::sync::LazyLock;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use kxp_verify::{ErrorKind, MAX_ED25519_SIGNATURES, Secret, SigningKey, Verifier};
use libfuzzer_sys::fuzz_target;

/// The seeds of make-ed25519.py's keys 0 and 1 (SHA-256 of "kxp ed25519 vector key <i>"), so
/// the seeds made from ed25519.json verify here; two keys, so the search over keys is exercised
/// (the round trip signs with the second).
const SEEDS: [[u8; 32]; 2] = [
    hex32("8a715b5eb1c2f473ef719e8c2cf201d31e60471f12bc259531b75e6b567a575c"),
    hex32("3851bcf6deaf44de1ae1c36ef7c7bb81b29454ee04a9eeee3413c26d1539665a"),
];

const fn hex32(text: &str) -> [u8; 32] {
    let digits = text.as_bytes();
    let mut out = [0u8; 32];
    let mut i = 0;
    while i < 32 {
        out[i] = nibble(digits[2 * i]) << 4 | nibble(digits[2 * i + 1]);
        i += 1;
    }
    out
}

const fn nibble(c: u8) -> u8 {
    if c <= b'9' { c - b'0' } else { c - b'a' + 10 }
}

static KEYS: LazyLock<[SigningKey; 2]> = LazyLock::new(|| SEEDS.map(|s| SigningKey::from_seed(&s)));
static VERIFIER: LazyLock<Verifier> = LazyLock::new(|| {
    Verifier::with_public_keys(KEYS.iter().map(SigningKey::public_key)).expect("two keys fit")
});
/// A verifier with a secret, on the same inputs: it must never accept by a `v1a`.
static SECRETS: LazyLock<Verifier> =
    LazyLock::new(|| Verifier::new(Secret::new("fuzz").expect("not empty")));

fn split(data: &[u8]) -> (u64, &[u8], &[u8]) {
    let mut now = [0u8; 8];
    let n = data.len().min(8);
    now[..n].copy_from_slice(&data[..n]);
    let rest = &data[n..];
    let mut len = [0u8; 2];
    let m = rest.len().min(2);
    len[..m].copy_from_slice(&rest[..m]);
    let rest = &rest[m..];
    let len = usize::from(u16::from_le_bytes(len)).min(rest.len());
    let (header, body) = rest.split_at(len);
    (u64::from_le_bytes(now), header, body)
}

fuzz_target!(|data: &[u8]| {
    let (now, header, body) = split(data);
    assert!(
        SECRETS.verify(header, body, now).is_err(),
        "forged a v1: {header:?}"
    );
    match VERIFIER.verify(header, body, now) {
        Ok(verified) => {
            assert!(std::ptr::eq(verified.body(), body));
            assert!(verified.timestamp().abs_diff(now) <= VERIFIER.tolerance().as_secs());
            let key = KEYS[verified.secret_index()].public_key().to_bytes();
            assert!(
                strictly_signed(header, body, &key),
                "accepted a forgery: {header:?}"
            );
        }
        Err(error) => {
            // A signature that verify_strict accepts, in a header that follows the grammar, at
            // a time within the window, must have been accepted.
            if error.kind() == ErrorKind::SignatureMismatch {
                for key in KEYS.iter() {
                    let key = key.public_key().to_bytes();
                    assert!(
                        !strictly_signed(header, body, &key),
                        "refused a valid one: {header:?}"
                    );
                }
            }
        }
    }
    round_trip(now, body);
});

/// Whether one of the header's first `MAX_ED25519_SIGNATURES` `v1a` values is `key`'s strict
/// signature over `<t>.<body>`, found without kxp-verify's parser.
fn strictly_signed(header: &[u8], body: &[u8], key: &[u8; 32]) -> bool {
    let Ok(header) = std::str::from_utf8(header) else {
        return false;
    };
    let items = || header.split(',').map(|i| i.trim_matches([' ', '\t']));
    let Some(t) = items().find_map(|i| i.strip_prefix("t=")) else {
        return false;
    };
    let message = [t.as_bytes(), b".", body].concat();
    let key = ed25519_dalek::VerifyingKey::from_bytes(key).expect("a real key");
    items()
        .filter_map(|i| i.strip_prefix("v1a="))
        .take(MAX_ED25519_SIGNATURES)
        .filter_map(|v| STANDARD.decode(v).ok()?.try_into().ok())
        .any(|s: [u8; 64]| {
            key.verify_strict(&message, &ed25519_dalek::Signature::from_bytes(&s))
                .is_ok()
        })
}

fn round_trip(now: u64, body: &[u8]) {
    if now > kxp_verify::Signer::MAX_TIMESTAMP {
        return;
    }
    let header = KEYS[1].sign(now, body).to_string();
    match VERIFIER.verify(&header, body, now) {
        Ok(verified) => assert_eq!(verified.secret_index(), 1, "signed with the second key"),
        Err(error) => panic!("refused its own signature ({error}): {header}"),
    }
    if let Some(index) = usize::try_from(now)
        .ok()
        .and_then(|n| n.checked_rem(body.len()))
    {
        let mut tampered = body.to_vec();
        tampered[index] ^= 1 << (now % 8);
        let error = VERIFIER
            .verify(&header, &tampered, now)
            .expect_err("a changed body");
        assert_eq!(error.kind(), ErrorKind::SignatureMismatch, "{error}");
    }
}
