//! Lowercase hex for 32-byte MACs, without tables or allocation.

/// Each byte's value as a hex digit, or `INVALID`: one lookup per digit instead of three range
/// comparisons, on the verify hot path.
// Evaluated at compile time: an index out of range would fail the build, not a request.
#[allow(clippy::indexing_slicing, clippy::arithmetic_side_effects)]
const NIBBLES: [u8; 256] = {
    let mut table = [INVALID; 256];
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
const INVALID: u8 = 0xff;

fn nibble(c: u8) -> u8 {
    NIBBLES.get(usize::from(c)).copied().unwrap_or(INVALID)
}

/// Whether `digits` is exactly 64 hex digits (either case).
pub(crate) fn is_hex_64(digits: &[u8]) -> bool {
    digits.len() == 64 && digits.iter().all(|&c| nibble(c) != INVALID)
}

/// Decodes exactly 64 hex digits (either case); anything else is `None`.
pub(crate) fn decode_32(digits: &[u8]) -> Option<[u8; 32]> {
    if digits.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    let mut bad = 0u8;
    for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        let [hi, lo] = pair else { return None };
        let (hi, lo) = (nibble(*hi), nibble(*lo));
        // INVALID has its high bit set; no digit does. One check at the end, not 64 branches.
        bad |= hi | lo;
        *byte = (hi << 4) | (lo & 0x0f);
    }
    (bad & 0x80 == 0).then_some(out)
}

/// Encodes 32 bytes as 64 lowercase hex digits.
pub(crate) fn encode_32(bytes: &[u8; 32]) -> [u8; 64] {
    let mut out = [0u8; 64];
    for (pair, &byte) in out.chunks_exact_mut(2).zip(bytes) {
        for (slot, n) in pair.iter_mut().zip([byte >> 4, byte & 0x0f]) {
            *slot = digit(n);
        }
    }
    out
}

fn digit(n: u8) -> u8 {
    if n < 10 {
        b'0'.wrapping_add(n)
    } else {
        b'a'.wrapping_add(n.wrapping_sub(10))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_byte_value() {
        let mut bytes = [0u8; 32];
        for start in (0u8..=255).step_by(32) {
            for (i, b) in bytes.iter_mut().enumerate() {
                *b = start.wrapping_add(i as u8);
            }
            let encoded = encode_32(&bytes);
            assert!(
                encoded
                    .iter()
                    .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
            );
            assert_eq!(decode_32(&encoded), Some(bytes));
            assert_eq!(decode_32(&encoded.to_ascii_uppercase()), Some(bytes));
        }
    }

    #[test]
    fn refuses_wrong_length_and_non_hex() {
        assert_eq!(decode_32(&[b'0'; 63]), None);
        assert_eq!(decode_32(&[b'0'; 65]), None);
        let mut digits = [b'0'; 64];
        digits[17] = b'g';
        assert_eq!(decode_32(&digits), None);
    }
}
