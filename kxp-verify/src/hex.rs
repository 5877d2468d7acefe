//! Hex for 32-byte MACs, without tables or allocation.
//!
//! The verify path never decodes a signature: [`is_hex_64`] checks the header's digits while
//! parsing (public data), and [`matches`] hex-encodes the computed MAC and compares it with those
//! digits, case-folded, in constant time. Both are plain arithmetic on each byte (or each pair of
//! bytes as a `u16`) over fixed-size arrays, with no branch, table or early exit, which LLVM turns
//! into a few 16-byte vector operations where the target has them, and which costs no more than a
//! byte loop where it does not.

use subtle::ConstantTimeEq;

/// Whether `c` is a hex digit, either case, without a branch: `0`–`9` or, with the case bit
/// set, `a`–`f`.
fn is_hex_digit(c: u8) -> bool {
    (c.wrapping_sub(b'0') < 10) | ((c | 0x20).wrapping_sub(b'a') < 6)
}

/// Whether all 64 bytes are hex digits (either case).
pub(crate) fn is_hex_64(digits: &[u8; 64]) -> bool {
    // `&` over all of them, not `all`: the answer is public, but one pass without a branch per
    // byte is what vectorizes.
    digits.iter().fold(true, |ok, &c| ok & is_hex_digit(c))
}

/// Two hex digits as a `u16`, the first in the low byte (the order they are in memory).
fn pair(digits: &[u8]) -> u16 {
    match digits {
        [hi, lo] => u16::from_le_bytes([*hi, *lo]),
        _ => 0,
    }
}

/// Whether `digits` (64 hex digits, either case, as [`is_hex_64`] accepted) spell `mac`, in
/// constant time: `mac` is encoded in lowercase, the digits are folded to lowercase by setting
/// the case bit (which only digits that passed [`is_hex_64`] may have done to them: it would
/// also turn, say, `0x10` into `'0'`), and the differences are ORed together and tested once.
pub(crate) fn matches(mac: &[u8; 32], digits: &[u8; 64]) -> subtle::Choice {
    let mut difference = 0u16;
    for (&byte, pair_digits) in mac.iter().zip(digits.chunks_exact(2)) {
        let nibbles = u16::from(byte >> 4) | (u16::from(byte & 0x0f) << 8);
        difference |= encode_pair(nibbles) ^ (pair(pair_digits) | 0x2020);
    }
    difference.ct_eq(&0)
}

/// Two nibbles (one in each byte of a `u16`) as two lowercase hex digits, in constant time:
/// `'0' + n`, plus the 39 between `'9' + 1` and `'a'` where `n + 6` carries into bit 4, that is
/// where `n >= 10`. No byte exceeds `'f'`, so nothing carries between the two.
fn encode_pair(nibbles: u16) -> u16 {
    let letters = (nibbles.wrapping_add(0x0606) >> 4) & 0x0101;
    nibbles
        .wrapping_add(0x3030)
        .wrapping_add(letters.wrapping_mul(39))
}

/// Decodes 64 hex digits (either case) that [`is_hex_64`] accepted: a digit's value is its low
/// nibble, plus 9 for a letter (bit 6 set: `a`/`A` is `0x61`/`0x41`, low nibble 1).
pub(crate) fn decode_32(digits: &[u8; 64]) -> [u8; 32] {
    let mut out = [0u8; 32];
    for (byte, pair_digits) in out.iter_mut().zip(digits.chunks_exact(2)) {
        let digits = pair(pair_digits);
        let values = (digits & 0x0f0f).wrapping_add(((digits >> 6) & 0x0101).wrapping_mul(9));
        let [hi, lo] = values.to_le_bytes();
        *byte = (hi << 4) | lo;
    }
    out
}

/// Encodes 32 bytes as 64 lowercase hex digits.
pub(crate) fn encode_32(bytes: &[u8; 32]) -> [u8; 64] {
    let mut out = [0u8; 64];
    for (pair, &byte) in out.chunks_exact_mut(2).zip(bytes) {
        let nibbles = u16::from(byte >> 4) | (u16::from(byte & 0x0f) << 8);
        pair.copy_from_slice(&encode_pair(nibbles).to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The obvious decoder, to check the arithmetic ones against.
    #[allow(clippy::arithmetic_side_effects)]
    fn naive_value(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }

    fn naive_decode(digits: &[u8; 64]) -> Option<[u8; 32]> {
        let mut out = [0u8; 32];
        for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
            *byte = (naive_value(pair[0])? << 4) | naive_value(pair[1])?;
        }
        Some(out)
    }

    fn naive_encode(bytes: &[u8; 32]) -> [u8; 64] {
        let mut out = [0u8; 64];
        for (pair, byte) in out.chunks_exact_mut(2).zip(bytes) {
            pair.copy_from_slice(std::format!("{byte:02x}").as_bytes());
        }
        out
    }

    /// Every byte value at every position of otherwise valid digits (mixed case), checked
    /// against the naive decoder: validity, the decoded value, and the comparison with the
    /// original MAC (equal exactly when the digit means the same nibble).
    #[test]
    fn every_byte_value_at_every_position_agrees_with_the_naive_decoder() {
        let base: [u8; 64] = *b"0123456789abcdefABCDEF0f1e2d3c4b5a69788796a5b4c3d2e1f0FfEeDdCc00";
        let mac = naive_decode(&base).unwrap();
        assert!(is_hex_64(&base));
        for position in 0..64 {
            for value in 0..=255u8 {
                let mut digits = base;
                digits[position] = value;
                let expected = naive_decode(&digits);
                assert_eq!(
                    is_hex_64(&digits),
                    expected.is_some(),
                    "{value:#04x} at {position}"
                );
                let Some(expected) = expected else { continue };
                assert_eq!(decode_32(&digits), expected, "{value:#04x} at {position}");
                assert_eq!(
                    bool::from(matches(&mac, &digits)),
                    expected == mac,
                    "{value:#04x} at {position}"
                );
            }
        }
    }

    /// Every byte value at every position of the MAC, encoded, decoded and compared.
    #[test]
    fn every_mac_byte_value_at_every_position_round_trips() {
        let base: [u8; 32] = core::array::from_fn(|i| (i as u8).wrapping_mul(73));
        for position in 0..32 {
            for value in 0..=255u8 {
                let mut mac = base;
                mac[position] = value;
                let encoded = encode_32(&mac);
                let mut upper = encoded;
                upper.make_ascii_uppercase();
                assert_eq!(encoded, naive_encode(&mac));
                assert_eq!(decode_32(&encoded), mac);
                assert_eq!(decode_32(&upper), mac);
                assert!(bool::from(matches(&mac, &encoded)));
                assert!(bool::from(matches(&mac, &upper)));
                let mut other = mac;
                other[position ^ 1] ^= 1;
                assert!(!bool::from(matches(&other, &encoded)));
            }
        }
    }

    #[test]
    fn a_difference_in_any_byte_or_bit_is_seen() {
        let a = [0x5au8; 32];
        let digits = encode_32(&a);
        assert!(bool::from(matches(&a, &digits)));
        for index in 0..32 {
            for bit in 0..8 {
                let mut b = a;
                b[index] ^= 1 << bit;
                assert!(!bool::from(matches(&b, &digits)), "byte {index} bit {bit}");
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        /// Arbitrary digits and MACs: validity, decoding and comparison as the naive decoder says.
        #[test]
        fn arbitrary_digits_agree_with_the_naive_decoder(
            digits in proptest::array::uniform32(proptest::prelude::any::<[u8; 2]>()),
            hexes in proptest::array::uniform32(proptest::sample::select(b"0123456789abcdefABCDEF".to_vec())),
            mac in proptest::prelude::any::<[u8; 32]>(),
        ) {
            let raw: [u8; 64] = core::array::from_fn(|i| digits[i / 2][i % 2]);
            proptest::prop_assert_eq!(is_hex_64(&raw), naive_decode(&raw).is_some());
            let mut valid = [0u8; 64];
            valid[..32].copy_from_slice(&hexes);
            valid[32..].copy_from_slice(&hexes);
            let decoded = naive_decode(&valid).unwrap();
            proptest::prop_assert_eq!(decode_32(&valid), decoded);
            proptest::prop_assert_eq!(bool::from(matches(&mac, &valid)), mac == decoded);
            proptest::prop_assert!(bool::from(matches(&decoded, &valid)));
        }
    }
}
