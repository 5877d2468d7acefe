//! `SignatureHeader::parse` on arbitrary bytes, checked against an independent reading of the
//! grammar in ARCHITECTURE.md ("Signature format").
//!
//! Not panicking is the floor. The parser also decides what reaches the HMAC comparison, so a
//! header it wrongly accepts, or a `v1` it silently drops, is a bug even without a crash: every
//! verdict and every decoded value is compared with `reference`, which is written differently on
//! purpose (string API, `split_once`, `from_str_radix`) so the two cannot share a mistake.

#![no_main]

use kxp_verify::{ErrorKind, MAX_HEADER_LEN, SignatureHeader};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let parsed = SignatureHeader::parse(data);
    match (parsed, reference(data)) {
        (Ok(header), Ok(expected)) => check_accepted(data, header, &expected),
        (Err(error), Err(kind)) => assert_eq!(
            error.kind(),
            kind,
            "refused for the wrong reason ({error}) on {data:?}"
        ),
        (Ok(header), Err(kind)) => {
            panic!("accepted {header:?} although the grammar says {kind}: {data:?}")
        }
        (Err(error), Ok(_)) => panic!("refused a header the grammar accepts ({error}): {data:?}"),
    }
});

fn check_accepted(data: &[u8], header: SignatureHeader<'_>, expected: &Expected) {
    let signatures: Vec<[u8; 32]> = header.signatures().collect();
    // A header with no usable `v1` must never parse: the verifier would then have nothing to
    // compare and the failure would surface later, as a less precise kind.
    assert!(
        !signatures.is_empty(),
        "parsed without a signature: {data:?}"
    );
    assert_eq!(
        header.timestamp(),
        expected.timestamp,
        "timestamp of {data:?}"
    );
    // Order matters too: `signatures()` promises header order, and a sender lists the newest
    // secret first.
    assert_eq!(signatures, expected.signatures, "signatures of {data:?}");

    // Parsing has no hidden state: the same bytes give the same value.
    assert_eq!(SignatureHeader::parse(data), Ok(header));

    // What was parsed, written back in the canonical form (the one `Signer` emits), must parse to
    // the same values: the accessors expose everything verification depends on, so nothing was
    // lost in between. Leading zeros and unknown items disappear, which can only shorten it, so
    // the length limit cannot turn this into a refusal.
    let mut canonical = format!("t={}", header.timestamp());
    for signature in &signatures {
        canonical.push_str(",v1=");
        canonical.push_str(&lower_hex(signature));
    }
    match SignatureHeader::parse(&canonical) {
        Ok(again) => {
            assert_eq!(again.timestamp(), header.timestamp(), "{canonical}");
            assert!(
                again.signatures().eq(signatures.iter().copied()),
                "{canonical}"
            );
        }
        Err(error) => panic!("canonical form {canonical:?} of {data:?} refused: {error}"),
    }
}

/// What an accepted header means, according to the reference reading.
struct Expected {
    timestamp: u64,
    signatures: Vec<[u8; 32]>,
}

/// The grammar of ARCHITECTURE.md. Where it is silent, the crate's documented choices
/// (`kxp_verify::Malformed`) are followed: bytes other than tab and printable ASCII and items
/// with an empty key are malformed.
fn reference(raw: &[u8]) -> Result<Expected, ErrorKind> {
    const MALFORMED: Result<Expected, ErrorKind> = Err(ErrorKind::MalformedHeader);
    if raw.is_empty() {
        return Err(ErrorKind::MissingHeader);
    }
    if raw.len() > MAX_HEADER_LEN {
        return MALFORMED;
    }
    // Any byte outside this set is malformed, which also makes the text ASCII, hence UTF-8.
    if raw
        .iter()
        .any(|&b| b != b'\t' && !(b' '..=b'~').contains(&b))
    {
        return MALFORMED;
    }
    let Ok(text) = std::str::from_utf8(raw) else {
        return MALFORMED;
    };
    let mut timestamp = None;
    let mut signatures = Vec::new();
    for item in text.split(',') {
        // An empty item (`,,`, a stray comma, or only blanks) has no `=`, so it is refused here.
        let Some((key, value)) = item.trim_matches([' ', '\t']).split_once('=') else {
            return MALFORMED;
        };
        match key {
            "" => return MALFORMED,
            "t" => {
                let digits_ok =
                    (1..=19).contains(&value.len()) && value.bytes().all(|b| b.is_ascii_digit());
                if timestamp.is_some() || !digits_ok {
                    return MALFORMED;
                }
                // `u64::from_str` would also take a leading `+`, which the digit check excludes.
                timestamp = value.parse::<u64>().ok();
            }
            "v1" => match decode_hex(value) {
                Some(signature) => signatures.push(signature),
                None => return MALFORMED,
            },
            // Unknown keys (`v0`, `v2`, `T`, …) are ignored, whatever their value.
            _ => {}
        }
    }
    match timestamp {
        Some(timestamp) if !signatures.is_empty() => Ok(Expected {
            timestamp,
            signatures,
        }),
        _ => MALFORMED,
    }
}

fn decode_hex(value: &str) -> Option<[u8; 32]> {
    if value.len() != 64 || !value.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(value.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

fn lower_hex(bytes: &[u8; 32]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
