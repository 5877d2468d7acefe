//! `Verifier::verify_standard` (Standard Webhooks 1.0) on arbitrary (id, timestamp, signature,
//! body, now), with secrets (`v1`) and with public keys (`v1a`): an accepted request must carry
//! the matched key's signature (the HMAC recomputed by the signer, the Ed25519 one checked by
//! ed25519-dalek's `verify_strict`), a refused one with a valid Ed25519 signature is a bug, and
//! every input also makes a sign-then-verify round trip and a tampered-body check.
//!
//! Input layout, shared with `make-seeds.py`: `now` (u64 LE) | id length (u16 LE) | timestamp
//! length (u16 LE) | signature length (u16 LE) | id | timestamp | signature | body (the rest).
//! Short inputs are zero-padded and lengths past the end clamped, so every byte string is a
//! valid input.

#![no_main]

use std::sync::LazyLock;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use kxp_verify::{ErrorKind, MAX_ED25519_SIGNATURES, Secret, Signer, SigningKey, Verifier};
use libfuzzer_sys::fuzz_target;

/// The secrets of make-standard-webhooks.py's first two keys (24 and 32 bytes), so the seeds
/// made from standard-webhooks.json verify here.
const WHSECS: [&str; 2] = [
    "whsec_3xVIus5wjKoSpTyYMffn0C8Y7uNd3DCr",
    "whsec_p1qDfsijw1wMCi6FrS+zQYMmRx1gpNqExtPxjA4TeKE=",
];

fn secret(i: usize) -> Secret {
    Secret::from_whsec(WHSECS[i]).expect("a valid whsec")
}

/// The seeds of make-standard-webhooks.py's Ed25519 keys 0 and 1 (SHA-256 of "kxp standard
/// webhooks key <i>"), so the `v1a` seeds verify here; two keys, so the search over keys is
/// exercised (the round trip signs with the second).
const SEEDS: [[u8; 32]; 2] = [
    hex32("bfb705690b090066711dbd06c660cb1775cf57528a24daee0240939b1bff65a1"),
    hex32("599acdcdc99e48d49eb5fcf5b1fbc2edb2adb10b60b50eaa8ba00030af6e2e3a"),
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
static SECRETS: LazyLock<Verifier> =
    LazyLock::new(|| Verifier::with_secrets([secret(0), secret(1)]).expect("two secrets fit"));
static PUBLIC_KEYS: LazyLock<Verifier> = LazyLock::new(|| {
    Verifier::with_public_keys(KEYS.iter().map(SigningKey::public_key)).expect("two keys fit")
});
static BY_INDEX: LazyLock<[Signer; 2]> =
    LazyLock::new(|| [Signer::new(secret(0)), Signer::new(secret(1))]);

struct Input<'a> {
    now: u64,
    id: &'a [u8],
    timestamp: &'a [u8],
    signature: &'a [u8],
    body: &'a [u8],
}

fn take<const N: usize>(data: &[u8]) -> ([u8; N], &[u8]) {
    let n = data.len().min(N);
    let (head, rest) = data.split_at(n);
    let mut out = [0u8; N];
    out[..n].copy_from_slice(head);
    (out, rest)
}

fn field(data: &[u8], len: [u8; 2]) -> (&[u8], &[u8]) {
    data.split_at(usize::from(u16::from_le_bytes(len)).min(data.len()))
}

fn split(data: &[u8]) -> Input<'_> {
    let (now, rest) = take::<8>(data);
    let (id_len, rest) = take::<2>(rest);
    let (timestamp_len, rest) = take::<2>(rest);
    let (signature_len, rest) = take::<2>(rest);
    let (id, rest) = field(rest, id_len);
    let (timestamp, rest) = field(rest, timestamp_len);
    let (signature, body) = field(rest, signature_len);
    Input {
        now: u64::from_le_bytes(now),
        id,
        timestamp,
        signature,
        body,
    }
}

fuzz_target!(|data: &[u8]| {
    let input = split(data);
    check_secrets(&input);
    check_public_keys(&input);
    round_trip(&input);
});

fn verify(verifier: &Verifier, input: &Input<'_>) -> Result<(usize, u64), kxp_verify::Error> {
    let Input {
        now,
        id,
        timestamp,
        signature,
        body,
    } = *input;
    let verified = verifier.verify_standard(id, timestamp, signature, body, now)?;
    // The proof must be about these very bytes, fresh, and of the timestamp as sent.
    assert!(std::ptr::eq(verified.body(), body));
    assert!(verified.timestamp().abs_diff(now) <= verifier.tolerance().as_secs());
    assert_eq!(verified.timestamp().to_string().as_bytes(), timestamp);
    Ok((verified.secret_index(), verified.timestamp()))
}

fn check_secrets(input: &Input<'_>) {
    match verify(&SECRETS, input) {
        Ok((index, t)) => {
            let expected = BY_INDEX[index]
                .sign_standard(input.id, t, input.body)
                .expect("an accepted id can be signed")
                .to_string();
            assert!(
                input
                    .signature
                    .split(|&b| b == b' ')
                    .any(|item| item == expected.as_bytes()),
                "accepted a list without secret {index}'s item: {:?}",
                input.signature
            );
        }
        Err(error) => assert_ne!(error.kind().as_str(), "", "{error}"),
    }
}

fn check_public_keys(input: &Input<'_>) {
    match verify(&PUBLIC_KEYS, input) {
        Ok((index, _)) => {
            let key = KEYS[index].public_key().to_bytes();
            assert!(
                strictly_signed(input, &key),
                "accepted a forgery: {:?}",
                input.signature
            );
        }
        Err(error) => {
            // A signature verify_strict accepts, in headers that follow the grammar, within
            // the window, must have been accepted.
            if error.kind() == ErrorKind::SignatureMismatch {
                for key in KEYS.iter() {
                    let key = key.public_key().to_bytes();
                    assert!(
                        !strictly_signed(input, &key),
                        "refused a valid one: {:?}",
                        input.signature
                    );
                }
            }
        }
    }
}

/// Whether one of the first `MAX_ED25519_SIGNATURES` `v1a` items is `key`'s strict signature
/// over `<id>.<timestamp>.<body>`, found without kxp-verify's parser.
fn strictly_signed(input: &Input<'_>, key: &[u8; 32]) -> bool {
    let Ok(list) = std::str::from_utf8(input.signature) else {
        return false;
    };
    let message = [input.id, b".", input.timestamp, b".", input.body].concat();
    let key = ed25519_dalek::VerifyingKey::from_bytes(key).expect("a real key");
    list.split(' ')
        .filter_map(|item| item.strip_prefix("v1a,"))
        .take(MAX_ED25519_SIGNATURES)
        .filter_map(|v| STANDARD.decode(v).ok()?.try_into().ok())
        .any(|s: [u8; 64]| {
            key.verify_strict(&message, &ed25519_dalek::Signature::from_bytes(&s))
                .is_ok()
        })
}

fn round_trip(input: &Input<'_>) {
    let Input { now, id, body, .. } = *input;
    if now > Signer::MAX_TIMESTAMP {
        return;
    }
    // The signers refuse exactly the ids the verifiers call malformed.
    let Ok(hmac) = BY_INDEX[1].sign_standard(id, now, body) else {
        assert!(KEYS[1].sign_standard(id, now, body).is_err());
        return;
    };
    let ed25519 = KEYS[1].sign_standard(id, now, body).expect("the same id");
    let list = format!("{hmac} {ed25519}");
    let timestamp = now.to_string();
    for (verifier, name) in [(&*SECRETS, "secrets"), (&*PUBLIC_KEYS, "public keys")] {
        match verifier.verify_standard(id, &timestamp, &list, body, now) {
            Ok(verified) => assert_eq!(verified.secret_index(), 1, "{name}"),
            Err(error) => panic!("{name} refused their own signature ({error}): {list}"),
        }
        if let Some(index) = usize::try_from(now)
            .ok()
            .and_then(|n| n.checked_rem(body.len()))
        {
            let mut tampered = body.to_vec();
            tampered[index] ^= 1 << (now % 8);
            let error = verifier
                .verify_standard(id, &timestamp, &list, &tampered, now)
                .expect_err("a changed body");
            assert_eq!(
                error.kind(),
                ErrorKind::SignatureMismatch,
                "{name}: {error}"
            );
        }
    }
}
