//! Shared inputs and the two hand-made reference verifiers for `benches/verify.rs`.
//!
//! - [`floor_mac`]: the least work any correct verifier of the kxp format must do: one HMAC
//!   pass over `<t>.<body>` from an HMAC state keyed once, ahead of time.
//! - [`naive_verify`]: what a typical hand-written verifier does: re-key the HMAC per request,
//!   hex-encode the MAC into a `String` and compare it with `==`.
//! - [`event_body`]: a realistic JSON body of an exact size. It is a well-formed Stripe event
//!   (so `async-stripe-webhook`, which parses the event, accepts it); every implementation
//!   verifies the same bytes.
//! - [`canonical_fast_path`], [`hand_rolled_verify`]: diagnostics for `verify_parts` and the
//!   `verify_icount` example (what kxp-verify's fixed costs could be).

use std::fmt::Write as _;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// The secret shared by the kxp-format verifiers: 64 hex characters used as bytes, as
/// ARCHITECTURE.md specifies (never hex-decoded).
pub const SECRET: &str = "41ab92590637ac82026ca65266b2898428ea491b1e6d543d7202cf486ea62965";

/// The Stripe API version this SDK was generated for (a different one only adds a warning log
/// line per event, which would be measured too).
pub const STRIPE_API_VERSION: &str = "2026-09-30.endive";

/// The body sizes benchmarked, with their labels.
pub const SIZES: [(usize, &str); 4] = [
    (256, "256B"),
    (1024, "1KiB"),
    (16 * 1024, "16KiB"),
    (1024 * 1024, "1MiB"),
];

/// The HMAC state keyed with [`SECRET`], as a verifier holds it after start-up.
pub fn keyed_hmac() -> Hmac<Sha256> {
    <Hmac<Sha256> as KeyInit>::new_from_slice(SECRET.as_bytes()).expect("HMAC takes any key")
}

/// HMAC-SHA256 over `<t>.<body>` from a pre-keyed state: the floor.
#[inline]
pub fn floor_mac(keyed: &Hmac<Sha256>, t: &[u8], body: &[u8]) -> [u8; 32] {
    let mut mac = keyed.clone();
    mac.update(t);
    mac.update(b".");
    mac.update(body);
    mac.finalize().into_bytes().into()
}

/// A typical hand-written verifier of `t=<ts>,v1=<hex>`: split the header, re-key the HMAC with
/// the secret, hex-encode the MAC into a `String`, compare with `==` (not constant time), check
/// the timestamp tolerance.
pub fn naive_verify(secret: &str, header: &str, body: &[u8], now: u64) -> bool {
    let mut t = None;
    let mut v1 = Vec::new();
    for item in header.split(',') {
        match item.trim().split_once('=') {
            Some(("t", value)) => t = Some(value),
            Some(("v1", value)) => v1.push(value),
            _ => {}
        }
    }
    let Some(t) = t else { return false };
    let Ok(timestamp) = t.parse::<u64>() else {
        return false;
    };
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    mac.update(t.as_bytes());
    mac.update(b".");
    mac.update(body);
    let expected = hex::encode(mac.finalize().into_bytes());
    v1.iter().any(|sig| *sig == expected) && now.abs_diff(timestamp) <= 300
}

/// Whether the header's first `v1` is the given MAC (constant time): a set-up check that the
/// floor computes the same MAC the verifiers check.
pub fn header_carries(header: &str, mac: &[u8; 32]) -> bool {
    header
        .split(',')
        .find_map(|item| item.strip_prefix("v1="))
        .and_then(|hex_sig| hex::decode(hex_sig).ok())
        .is_some_and(|sig| bool::from(sig.as_slice().ct_eq(mac)))
}

/// A Stripe-style event (`invoiceitem.created`, with invoice lines in `data.object`) of exactly
/// `size` bytes of compact ASCII JSON. Sizes below [`MIN_BODY`] are refused.
pub fn event_body(size: usize) -> String {
    assert!(size >= MIN_BODY, "bodies must be at least {MIN_BODY} bytes");
    let head = format!(
        r#"{{"id":"evt_1QkXp2LkdIwHu7","object":"event","api_version":"{STRIPE_API_VERSION}","created":1764464523,"livemode":false,"pending_webhooks":1,"request":null,"type":"invoiceitem.created","data":{{"object":{{"id":"ii_1","lines":["#
    );
    let tail_for = |pad: usize| {
        let memo: String = MEMO.chars().cycle().take(pad).collect();
        format!(r#"],"memo":"{memo}"}}}}}}"#)
    };
    let mut body = head;
    let mut n = 0u32;
    loop {
        let line = format!(
            r#"{}{{"id":"il_{n:08}","amount":{},"currency":"usd","description":"Line item {n} for order ord_{:06}","quantity":{},"metadata":{{"sku":"SKU-{:05}"}}}}"#,
            if n == 0 { "" } else { "," },
            1000 + (n * 37) % 9000,
            n * 7 % 1_000_000,
            1 + n % 5,
            n * 13 % 100_000,
        );
        if body.len() + line.len() + tail_for(0).len() > size {
            break;
        }
        body.push_str(&line);
        n += 1;
    }
    let pad = size - body.len() - tail_for(0).len();
    write!(body, "{}", tail_for(pad)).expect("writing to a String");
    assert_eq!(body.len(), size);
    body
}

/// The smallest body [`event_body`] makes (the envelope with no lines and an empty memo).
pub const MIN_BODY: usize = 234;

const MEMO: &str = "Thank you for your business. Questions? Contact billing@example.com. ";

/// Hex digit values; 0xff marks a non-hex byte.
static HEX: [u8; 256] = {
    let mut table = [0xffu8; 256];
    let mut i = 0;
    while i < 10 {
        table[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        table[b'a' as usize + i] = 10 + i as u8;
        table[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    table
};

/// Diagnostics: a prototype fast path for the canonical header `t=<digits>,v1=<64 hex>` (what
/// kxp's `Signer` emits for one secret): fixed offsets, table hex decode, floor, `ct_eq`,
/// tolerance. `None`: not that shape, so a real verifier would fall back to its general parser.
pub fn canonical_fast_path(
    keyed: &Hmac<Sha256>,
    header: &[u8],
    body: &[u8],
    now: u64,
) -> Option<bool> {
    let rest = header.strip_prefix(b"t=")?;
    if !(69..=87).contains(&rest.len()) {
        return None;
    }
    let (digits, tail) = rest.split_at(rest.len() - 68);
    let sig = tail.strip_prefix(b",v1=")?;
    let mut ts = 0u64;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        ts = ts * 10 + u64::from(d - b'0');
    }
    let mut decoded = [0u8; 32];
    let mut bad = 0u8;
    for (out, pair) in decoded.iter_mut().zip(sig.chunks_exact(2)) {
        let (hi, lo) = (HEX[pair[0] as usize], HEX[pair[1] as usize]);
        bad |= hi | lo;
        *out = (hi << 4) | (lo & 0x0f);
    }
    if bad & 0xf0 != 0 {
        return None;
    }
    let mac = floor_mac(keyed, digits, body);
    Some(bool::from(mac.ct_eq(&decoded)) && now.abs_diff(ts) <= 300)
}

/// Diagnostics: a verifier written by hand without allocating (split, `hex::decode_to_slice`,
/// floor, `ct_eq`, tolerance). Not grammar-complete: only for comparing fixed costs.
pub fn hand_rolled_verify(keyed: &Hmac<Sha256>, header: &str, body: &[u8], now: u64) -> bool {
    let mut t = None;
    let mut ok = false;
    let mut decoded = [[0u8; 32]; 4];
    let mut n = 0;
    for item in header.split(',') {
        match item.trim_ascii().split_once('=') {
            Some(("t", v)) => t = Some(v),
            Some(("v1", v)) if n < 4 => {
                if hex::decode_to_slice(v, &mut decoded[n]).is_err() {
                    return false;
                }
                n += 1;
            }
            _ => {}
        }
    }
    let Some(t) = t else { return false };
    let Ok(ts) = t.parse::<u64>() else {
        return false;
    };
    let mac = floor_mac(keyed, t.as_bytes(), body);
    for sig in &decoded[..n] {
        ok |= bool::from(mac.ct_eq(sig));
    }
    ok && now.abs_diff(ts) <= 300
}

#[cfg(test)]
mod tests {
    use super::*;
    use kxp_verify::{Secret, Signer, Verifier};

    #[test]
    fn bodies_have_the_exact_size_and_are_json() {
        for (size, _) in SIZES {
            let body = event_body(size);
            assert_eq!(body.len(), size);
            assert!(body.is_ascii());
            assert_eq!(body.matches('{').count(), body.matches('}').count());
        }
    }

    #[test]
    fn reference_verifiers_agree_with_kxp() {
        let body = event_body(1024);
        let t = 1_764_464_523;
        let header = Signer::new(Secret::new(SECRET).unwrap())
            .sign(t, body.as_bytes())
            .to_string();
        let verifier = Verifier::new(Secret::new(SECRET).unwrap());
        assert!(verifier.verify(&header, body.as_bytes(), t).is_ok());
        assert!(naive_verify(SECRET, &header, body.as_bytes(), t));
        assert!(!naive_verify(SECRET, &header, b"tampered", t));
        let mac = floor_mac(&keyed_hmac(), t.to_string().as_bytes(), body.as_bytes());
        assert!(header_carries(&header, &mac));
        let keyed = keyed_hmac();
        assert!(hand_rolled_verify(&keyed, &header, body.as_bytes(), t));
        assert_eq!(
            canonical_fast_path(&keyed, header.as_bytes(), body.as_bytes(), t),
            Some(true)
        );
        assert_eq!(
            canonical_fast_path(&keyed, header.as_bytes(), b"tampered", t),
            Some(false)
        );
        let upper = header
            .to_ascii_uppercase()
            .replace("T=", "t=")
            .replace("V1=", "v1=");
        assert_eq!(
            canonical_fast_path(&keyed, upper.as_bytes(), body.as_bytes(), t),
            Some(true)
        );
        let spaced = header.replace(",v1=", ", v1=");
        assert_eq!(
            canonical_fast_path(&keyed, spaced.as_bytes(), body.as_bytes(), t),
            None
        );
    }
}
