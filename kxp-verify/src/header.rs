//! The `t=<ts>,v1=<hex>[,v1=<hex>…]` grammar of ARCHITECTURE.md, parsed without allocating.

use crate::error::{Error, Malformed};
use crate::{MAX_HEADER_LEN, hex};

/// A signature header that follows the grammar. Parsing says nothing about authenticity: that is
/// [`Verifier::verify`](crate::Verifier::verify)'s job, which parses first.
///
/// ```
/// use kxp_verify::SignatureHeader;
///
/// let sig = "0".repeat(64);
/// let header = format!("t=1764464523, v0=legacy, v1={sig}");
/// let parsed = SignatureHeader::parse(&header)?;
/// assert_eq!(parsed.timestamp(), 1764464523);
/// assert_eq!(parsed.signatures().count(), 1);
/// # Ok::<(), kxp_verify::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignatureHeader<'a> {
    raw: &'a [u8],
    timestamp: u64,
    timestamp_digits: &'a [u8],
}

impl<'a> SignatureHeader<'a> {
    /// Parses a header value. An empty value is `missing_header`; every grammar violation is
    /// `malformed_header` with the broken rule in [`Error::malformed_reason`].
    pub fn parse<H: AsRef<[u8]> + ?Sized>(value: &'a H) -> Result<Self, Error> {
        let raw = value.as_ref();
        if raw.is_empty() {
            return Err(Error::MISSING_HEADER);
        }
        if raw.len() > MAX_HEADER_LEN {
            return Err(Error::malformed(Malformed::TooLong));
        }
        if !raw
            .iter()
            .all(|&b| b == b'\t' || (b' '..=b'~').contains(&b))
        {
            return Err(Error::malformed(Malformed::InvalidCharacter));
        }
        let mut timestamp = None;
        let mut has_signature = false;
        for item in items(raw) {
            let (key, value) = item.map_err(Error::malformed)?;
            match key {
                b"t" => {
                    if timestamp.is_some() {
                        return Err(Error::malformed(Malformed::DuplicateTimestamp));
                    }
                    let t = parse_timestamp(value)
                        .ok_or(Error::malformed(Malformed::InvalidTimestamp))?;
                    timestamp = Some((t, value));
                }
                b"v1" => {
                    if !is_hex_64(value) {
                        return Err(Error::malformed(Malformed::InvalidSignature));
                    }
                    has_signature = true;
                }
                // Unknown schemes (v0, v2, …) are ignored so the format can grow.
                _ => {}
            }
        }
        let (timestamp, timestamp_digits) =
            timestamp.ok_or(Error::malformed(Malformed::MissingTimestamp))?;
        if !has_signature {
            return Err(Error::malformed(Malformed::MissingSignature));
        }
        Ok(SignatureHeader {
            raw,
            timestamp,
            timestamp_digits,
        })
    }

    /// The `t` value: Unix seconds when the sender signed.
    pub fn timestamp(&self) -> u64 {
        self.timestamp
    }

    /// The decoded `v1` signatures, in header order.
    pub fn signatures(&self) -> impl Iterator<Item = [u8; 32]> + 'a {
        items(self.raw)
            .filter_map(Result::ok)
            .filter(|(key, _)| *key == b"v1")
            .filter_map(|(_, value)| hex::decode_32(value))
    }

    /// The `t` digits exactly as sent: they, not a re-formatting of the number, are what was
    /// signed.
    pub(crate) fn timestamp_digits(&self) -> &'a [u8] {
        self.timestamp_digits
    }
}

/// Splits into `(key, value)` items; optional spaces and tabs around an item are not part of it.
fn items(raw: &[u8]) -> impl Iterator<Item = Result<(&[u8], &[u8]), Malformed>> {
    raw.split(|&b| b == b',').map(|item| {
        let item = item.trim_ascii();
        if item.is_empty() {
            return Err(Malformed::EmptyItem);
        }
        let mut parts = item.splitn(2, |&b| b == b'=');
        match (parts.next(), parts.next()) {
            (Some([]), Some(_)) => Err(Malformed::EmptyKey),
            (Some(key), Some(value)) => Ok((key, value)),
            _ => Err(Malformed::MissingEquals),
        }
    })
}

fn parse_timestamp(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    // 19 digits never overflow a u64 (its maximum has 20), so `checked_*` only proves it.
    digits.iter().try_fold(0u64, |acc, &d| {
        let d = d
            .is_ascii_digit()
            .then(|| u64::from(d.wrapping_sub(b'0')))?;
        acc.checked_mul(10)?.checked_add(d)
    })
}

fn is_hex_64(value: &[u8]) -> bool {
    value.len() == 64 && value.iter().all(u8::is_ascii_hexdigit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;
    use std::format;

    fn reason(header: &str) -> Option<Malformed> {
        SignatureHeader::parse(header)
            .unwrap_err()
            .malformed_reason()
    }

    const SIG: &str = "133e145e0ef1b91d7033625f56804c13916ea92febf1382aaec40fe7ea4ba1b0";

    #[test]
    fn names_the_broken_rule() {
        assert_eq!(
            reason(&format!("t=1,v1={SIG},")),
            Some(Malformed::EmptyItem)
        );
        assert_eq!(
            reason(&format!("t=1,v1{SIG}")),
            Some(Malformed::MissingEquals)
        );
        assert_eq!(
            reason(&format!("t=1,=x,v1={SIG}")),
            Some(Malformed::EmptyKey)
        );
        assert_eq!(
            reason(&format!("t=1,t=1,v1={SIG}")),
            Some(Malformed::DuplicateTimestamp)
        );
        assert_eq!(
            reason(&format!("t=,v1={SIG}")),
            Some(Malformed::InvalidTimestamp)
        );
        assert_eq!(
            reason(&format!("v1={SIG}")),
            Some(Malformed::MissingTimestamp)
        );
        assert_eq!(reason("t=1,v1=abc"), Some(Malformed::InvalidSignature));
        assert_eq!(reason("t=1,v2=abc"), Some(Malformed::MissingSignature));
        assert_eq!(
            reason(&format!("t=1\n,v1={SIG}")),
            Some(Malformed::InvalidCharacter)
        );
        assert_eq!(reason(&"t".repeat(4097)), Some(Malformed::TooLong));
    }

    #[test]
    fn empty_is_missing_but_blank_is_malformed() {
        assert_eq!(
            SignatureHeader::parse("").unwrap_err().kind(),
            ErrorKind::MissingHeader
        );
        assert_eq!(reason(" "), Some(Malformed::EmptyItem));
    }

    #[test]
    fn nineteen_digits_parse_and_twenty_do_not() {
        assert_eq!(
            parse_timestamp(b"9999999999999999999"),
            Some(9_999_999_999_999_999_999)
        );
        assert_eq!(parse_timestamp(b"18446744073709551615"), None);
        assert_eq!(parse_timestamp(b"0000000000000000001"), Some(1));
    }

    #[test]
    fn keeps_the_timestamp_digits_as_sent() {
        let header = format!("t=00017,v1={SIG}");
        let parsed = SignatureHeader::parse(&header).unwrap();
        assert_eq!(parsed.timestamp(), 17);
        assert_eq!(parsed.timestamp_digits(), b"00017");
    }
}
