//! Standard base64 (RFC 4648 §4, `+` and `/`, with `=` padding) for the fixed sizes `v1a` and
//! public keys use, without tables or allocation.
//!
//! Decoding is strict, because a signature with two spellings would make the header malleable:
//! only the one canonical text of `N` bytes is accepted — exact length, the padding present, no
//! whitespace, and the unused low bits of the last digit zero. The values decoded are public
//! (signatures, public keys), so this need not run in constant time.

/// The length of the padded text of `n` bytes.
pub(crate) const fn encoded_len(n: usize) -> usize {
    n.div_ceil(3).saturating_mul(4)
}

/// The value of one base64 digit, or `None` for any other byte (`=` included).
fn digit_value(c: u8) -> Option<u32> {
    let value = match c {
        b'A'..=b'Z' => c.wrapping_sub(b'A'),
        b'a'..=b'z' => c.wrapping_sub(b'a').wrapping_add(26),
        b'0'..=b'9' => c.wrapping_sub(b'0').wrapping_add(52),
        b'+' => 62,
        b'/' => 63,
        _ => return None,
    };
    Some(u32::from(value))
}

/// The digit for the low six bits of `value`.
fn digit(value: u32) -> u8 {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    ALPHABET
        .get((value & 0x3f) as usize)
        .copied()
        .unwrap_or(b'=')
}

/// Decodes the canonical padded text of exactly `N` bytes; anything else is `None`.
pub(crate) fn decode<const N: usize>(text: &[u8]) -> Option<[u8; N]> {
    if text.len() != encoded_len(N) {
        return None;
    }
    let mut out = [0u8; N];
    let mut written = 0usize;
    for quad in text.chunks_exact(4) {
        // How many of this group's three bytes are real: the last group of `N` bytes may have
        // one or two, and then one or two `=`, never elsewhere.
        let wanted = N.saturating_sub(written).min(3);
        let digits = wanted.wrapping_add(1);
        let mut group = 0u32;
        for (i, &c) in quad.iter().enumerate() {
            let value = if i < digits {
                digit_value(c)?
            } else if c == b'=' {
                0
            } else {
                return None;
            };
            group = group << 6 | value;
        }
        let bytes = group.to_be_bytes();
        // The bits past the real bytes must be zero: otherwise one signature has several texts.
        let unused = (3usize.wrapping_sub(wanted)).wrapping_mul(8);
        if group & ((1u32 << unused).wrapping_sub(1)) != 0 {
            return None;
        }
        let real = bytes.get(1..wanted.wrapping_add(1))?;
        out.get_mut(written..written.wrapping_add(wanted))?
            .copy_from_slice(real);
        written = written.wrapping_add(wanted);
    }
    Some(out)
}

/// Decodes the standard base64 of up to `out.len()` bytes, padded or not, into the start of
/// `out`; `None` for anything else. For Standard Webhooks secrets (`whsec_…`), which the
/// official libraries read with or without their padding: the padding is optional, but when
/// present it must be exactly right, and the unused low bits of the last digit must be zero.
pub(crate) fn decode_unpadded_or_padded<'o>(text: &[u8], out: &'o mut [u8]) -> Option<&'o [u8]> {
    let padding = text.iter().rev().take_while(|&&c| c == b'=').count();
    let digits = text.get(..text.len().wrapping_sub(padding))?;
    // Digits past the last full group: 1 is no byte count, and padding must fill the group.
    let partial = digits.len() % 4;
    if partial == 1 || (padding != 0 && partial.wrapping_add(padding) != 4) {
        return None;
    }
    let len = (digits.len() / 4)
        .saturating_mul(3)
        .saturating_add(partial.saturating_sub(1));
    let out = out.get_mut(..len)?;
    let mut written = 0usize;
    for group_digits in digits.chunks(4) {
        let mut group = 0u32;
        for &c in group_digits {
            group = group << 6 | digit_value(c)?;
        }
        // Left-align a short group as if padded with `A`s, then check the bits it left over.
        let missing = 4usize.wrapping_sub(group_digits.len());
        group <<= (missing as u32).wrapping_mul(6);
        let wanted = 3usize.wrapping_sub(missing);
        let unused = (missing as u32).wrapping_mul(8);
        if group & ((1u32 << unused).wrapping_sub(1)) != 0 {
            return None;
        }
        let bytes = group.to_be_bytes();
        out.get_mut(written..written.wrapping_add(wanted))?
            .copy_from_slice(bytes.get(1..wanted.wrapping_add(1))?);
        written = written.wrapping_add(wanted);
    }
    Some(out)
}

/// Encodes `bytes` as padded standard base64 into `out`, which must be
/// [`encoded_len`]`(bytes.len())` long (the caller's array says so).
pub(crate) fn encode<'o>(bytes: &[u8], out: &'o mut [u8]) -> &'o [u8] {
    for (chunk, quad) in bytes.chunks(3).zip(out.chunks_exact_mut(4)) {
        let mut group = [0u8; 4];
        for (slot, &b) in group.iter_mut().skip(1).zip(chunk) {
            *slot = b;
        }
        let group = u32::from_be_bytes(group);
        let digits = chunk.len().wrapping_add(1);
        for (i, c) in quad.iter_mut().enumerate() {
            let shift = 18u32.saturating_sub((i as u32).wrapping_mul(6));
            *c = if i < digits {
                digit(group >> shift)
            } else {
                b'='
            };
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use std::format;
    use std::vec::Vec;

    fn round_trip<const N: usize>(bytes: [u8; N]) {
        let mut buf = [0u8; 128];
        let text = encode(&bytes, &mut buf[..encoded_len(N)]);
        assert_eq!(text, STANDARD.encode(bytes).as_bytes());
        assert_eq!(decode::<N>(text), Some(bytes));
    }

    #[test]
    fn agrees_with_the_base64_crate_at_every_length_mod_three() {
        round_trip([0u8; 64]);
        round_trip([0xffu8; 64]);
        round_trip([0x5au8; 32]);
        round_trip([0xa5u8; 33]);
        round_trip([1u8; 1]);
    }

    #[test]
    fn refuses_every_other_spelling() {
        let text = STANDARD.encode([0x11u8; 64]);
        assert!(decode::<64>(text.as_bytes()).is_some());
        // Padding missing, doubled, or replaced; wrong length; URL-safe alphabet; whitespace.
        assert!(decode::<64>(text.trim_end_matches('=').as_bytes()).is_none());
        assert!(decode::<64>(format!("{text}=").as_bytes()).is_none());
        assert!(decode::<64>(text.replace("==", "A=").as_bytes()).is_none());
        assert!(decode::<64>(&text.as_bytes()[4..]).is_none());
        let urlsafe = base64::engine::general_purpose::URL_SAFE.encode([0xfbu8; 64]);
        assert!(decode::<64>(urlsafe.as_bytes()).is_none());
        assert!(decode::<64>(format!(" {}", &text[1..]).as_bytes()).is_none());
        // The last digit of 64 bytes carries 2 bits and 4 unused ones: here it is `Q`, and `R`
        // differs only in an unused bit, which a lax decoder reads as the same bytes.
        let mut lax = text.clone().into_bytes();
        lax[85] = b'R';
        assert!(decode::<64>(&lax).is_none());
    }

    #[test]
    fn variable_lengths_decode_padded_or_not() {
        for len in 0..=40usize {
            let bytes: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(151)).collect();
            let padded = STANDARD.encode(&bytes);
            let unpadded = padded.trim_end_matches('=');
            let mut out = [0u8; 64];
            for text in [padded.as_str(), unpadded] {
                let decoded = decode_unpadded_or_padded(text.as_bytes(), &mut out);
                assert_eq!(decoded, Some(&bytes[..]), "{text}");
            }
            let mut short = [0u8; 8];
            let fits = decode_unpadded_or_padded(padded.as_bytes(), &mut short).is_some();
            assert_eq!(fits, len <= 8, "{padded}");
        }
        let mut out = [0u8; 64];
        for bad in [
            "A", "AB=", "AB===", "ABC==", "AB=A", "QR==", "QUJ=", " QUJD", "QU-D", "==",
        ] {
            assert_eq!(
                decode_unpadded_or_padded(bad.as_bytes(), &mut out),
                None,
                "{bad}"
            );
        }
    }

    proptest::proptest! {
        /// Any text of up to 60 digits and padding: decoded exactly when the base64 crate
        /// decodes it, with the padding it has or, missing, added.
        #[test]
        fn variable_decoding_agrees_with_the_base64_crate(text in "[A-Za-z0-9+/_-]{0,60}={0,3}") {
            let repadded = match text.trim_end_matches('=').len() % 4 {
                _ if text.ends_with('=') => text.clone(),
                2 => format!("{text}=="),
                3 => format!("{text}="),
                _ => text.clone(),
            };
            let theirs = STANDARD.decode(&repadded).ok();
            let mut out = [0u8; 64];
            let ours = decode_unpadded_or_padded(text.as_bytes(), &mut out).map(<[u8]>::to_vec);
            proptest::prop_assert_eq!(ours, theirs, "{}", text);
        }

        /// Any text of the right length: decoded exactly when the base64 crate (strict by
        /// default: canonical padding, no trailing bits) decodes it to 64 bytes.
        #[test]
        fn decodes_what_the_base64_crate_decodes(text in "[A-Za-z0-9+/=_-]{88}") {
            let theirs = STANDARD.decode(&text).ok().filter(|b| b.len() == 64);
            let ours: Option<Vec<u8>> = decode::<64>(text.as_bytes()).map(|b| b.to_vec());
            proptest::prop_assert_eq!(ours, theirs);
        }
    }
}
