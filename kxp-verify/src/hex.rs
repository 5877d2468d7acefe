//! Lowercase hex for 32-byte MACs, without tables or allocation.

/// Decodes exactly 64 hex digits (either case); anything else is `None`.
pub(crate) fn decode_32(digits: &[u8]) -> Option<[u8; 32]> {
    if digits.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        let mut pair = pair.iter().map(|&c| nibble(c));
        let (Some(Some(hi)), Some(Some(lo))) = (pair.next(), pair.next()) else {
            return None;
        };
        *byte = (hi << 4) | lo;
    }
    Some(out)
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

fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c.wrapping_sub(b'0')),
        b'a'..=b'f' => Some(c.wrapping_sub(b'a').wrapping_add(10)),
        b'A'..=b'F' => Some(c.wrapping_sub(b'A').wrapping_add(10)),
        _ => None,
    }
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
