//! `Verifier::verify` on an arbitrary (header, body, now), plus a sign-then-verify round trip on
//! every input.
//!
//! Input layout, shared with `make-seeds.py` so the seeds land on real vectors:
//! `now` (u64, little-endian, 8 bytes) | header length (u16, little-endian, 2 bytes) | header |
//! body (the rest). A short input is zero-padded and a length past the end is clamped, so every
//! byte string is a valid input and libFuzzer never wastes runs on rejected ones.

#![no_main]

use std::sync::LazyLock;

use kxp_verify::{ErrorKind, Secret, SignatureHeader, Signer, Verifier};
use libfuzzer_sys::fuzz_target;

/// The secret the shared vectors mostly sign with, so seeds that are valid vectors verify here.
const CURRENT: &str = "41ab92590637ac82026ca65266b2898428ea491b1e6d543d7202cf486ea62965";
/// The previous secret of the `valid_receiver_has_two_secrets` vector.
const PREVIOUS: &str = "174b7b0d8087fdedefbfc2f9ddcad0ea9fa2fb4b6eb619a9482666f16a2e6057";
/// Known to no verifier below but `STRANGER`.
const OTHER: &str = "whsec_fuzz_only_not_a_receiver_secret";

/// The largest timestamp the grammar allows (`t` is 1 to 19 digits).
const MAX_GRAMMAR_TIMESTAMP: u64 = 9_999_999_999_999_999_999;

fn secret(s: &str) -> Secret {
    Secret::new(s).expect("the fixed secrets are not empty")
}

// Built once, as a real receiver does: keying happens in `Verifier::new`, and rebuilding it per
// input would spend the fuzzing time on key setup instead of on `verify`.
static VERIFIER: LazyLock<Verifier> = LazyLock::new(|| {
    Verifier::with_secrets([secret(CURRENT), secret(PREVIOUS)]).expect("two secrets fit")
});
static STRANGER: LazyLock<Verifier> = LazyLock::new(|| Verifier::new(secret(OTHER)));
// Signing with the receiver's *second* secret makes the round trip depend on the search over
// every configured MAC, not just the first.
static SIGNER: LazyLock<Signer> = LazyLock::new(|| Signer::new(secret(PREVIOUS)));
static BY_INDEX: LazyLock<[Signer; 2]> =
    LazyLock::new(|| [Signer::new(secret(CURRENT)), Signer::new(secret(PREVIOUS))]);

struct Input<'a> {
    now: u64,
    header: &'a [u8],
    body: &'a [u8],
}

fn split(data: &[u8]) -> Input<'_> {
    let (now, rest) = take::<8>(data);
    let (len, rest) = take::<2>(rest);
    let len = usize::from(u16::from_le_bytes(len)).min(rest.len());
    let (header, body) = rest.split_at(len);
    Input {
        now: u64::from_le_bytes(now),
        header,
        body,
    }
}

fn take<const N: usize>(data: &[u8]) -> ([u8; N], &[u8]) {
    let n = data.len().min(N);
    let (head, rest) = data.split_at(n);
    let mut out = [0u8; N];
    out[..n].copy_from_slice(head);
    (out, rest)
}

fuzz_target!(|data: &[u8]| {
    let input = split(data);
    check_verdict(&input);
    round_trip(&input);
});

fn check_verdict(input: &Input<'_>) {
    let Input { now, header, body } = *input;
    let tolerance = VERIFIER.tolerance().as_secs();
    let parsed = SignatureHeader::parse(header);
    match VERIFIER.verify(header, body, now) {
        Ok(verified) => {
            let Ok(parsed) = parsed else {
                panic!("verified a header that does not parse: {header:?}");
            };
            // The proof must be about these very bytes, not a copy that could differ.
            assert!(std::ptr::eq(verified.body(), body));
            assert_eq!(verified.timestamp(), parsed.timestamp());
            assert!(
                verified.timestamp().abs_diff(now) <= tolerance,
                "accepted t={} at now={now}",
                verified.timestamp()
            );
            assert!(verified.secret_index() < VERIFIER.secret_count());
            check_not_forged(header, body, &parsed, verified.secret_index());
        }
        Err(error) => match parsed {
            // Parsing comes first, so its error is the whole answer.
            Err(parse_error) => assert_eq!(error, parse_error, "{header:?}"),
            Ok(parsed) => {
                let t = parsed.timestamp();
                match error.kind() {
                    ErrorKind::SignatureMismatch => {}
                    ErrorKind::TimestampTooOld => {
                        assert!(t < now && now - t > tolerance, "too old: t={t} now={now}")
                    }
                    ErrorKind::TimestampInFuture => {
                        assert!(t > now && t - now > tolerance, "in future: t={t} now={now}")
                    }
                    other => panic!("a header that parses was refused as {other}: {header:?}"),
                }
            }
        },
    }
}

/// An accepted header must carry the MAC that the matched secret gives for this body, or the
/// verifier accepted a forgery. `Signer` writes `t` without leading zeros, so the MAC can only
/// be recomputed when the header's digits are written that way too (always, for real senders).
fn check_not_forged(header: &[u8], body: &[u8], parsed: &SignatureHeader<'_>, index: usize) {
    let t = parsed.timestamp();
    let canonical_t = format!("{t}");
    let digits_as_sent = header
        .split(|&b| b == b',')
        .map(<[u8]>::trim_ascii)
        .find_map(|item| item.strip_prefix(b"t="));
    if digits_as_sent != Some(canonical_t.as_bytes()) {
        return;
    }
    let signer = &BY_INDEX[index];
    let expected = signer.sign(t, body);
    let expected = expected
        .signatures()
        .next()
        .expect("a one-secret signer gives one signature");
    assert!(
        parsed.signatures().any(|s| s == *expected),
        "accepted a header without secret {index}'s MAC: {header:?}"
    );
}

fn round_trip(input: &Input<'_>) {
    let Input { now, body, .. } = *input;
    // `Signer::sign` takes any u64, but a timestamp of 20 digits is outside the grammar, so the
    // verifier calls such a header malformed. No clock reaches 10^19 s (year ~3*10^11), so the
    // round trip is checked only where the grammar can express the timestamp.
    if now > MAX_GRAMMAR_TIMESTAMP {
        return;
    }
    let header = SIGNER.sign(now, body).to_string();
    match VERIFIER.verify(&header, body, now) {
        Ok(verified) => {
            assert_eq!(verified.body(), body);
            assert_eq!(verified.timestamp(), now);
            assert_eq!(verified.secret_index(), 1, "signed with the second secret");
        }
        Err(error) => panic!("refused its own signature ({error}): {header}"),
    }
    match STRANGER.verify(&header, body, now) {
        Ok(_) => panic!("a verifier without the secret accepted {header}"),
        Err(error) => assert_eq!(error.kind(), ErrorKind::SignatureMismatch, "{error}"),
    }
    // One flipped bit anywhere in the body must break the signature: the MAC covers every byte.
    if let Some(index) = usize::try_from(now)
        .ok()
        .and_then(|n| n.checked_rem(body.len()))
    {
        let mut tampered = body.to_vec();
        tampered[index] ^= 1 << (now % 8);
        match VERIFIER.verify(&header, &tampered, now) {
            Ok(_) => panic!("accepted a body changed at byte {index}"),
            Err(error) => assert_eq!(error.kind(), ErrorKind::SignatureMismatch, "{error}"),
        }
    }
}
