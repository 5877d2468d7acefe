//! The `t=<ts>,v1=<hex>[,v1=<hex>…]` grammar of ARCHITECTURE.md, and its `v1a` twin for public
//! keys, parsed without allocating.

use crate::error::{Error, Malformed};
use crate::{MAX_ED25519_SIGNATURES, MAX_HEADER_LEN, base64, ed25519, hex};

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
    timestamp_at: Span,
    /// Where the first `v1` value starts. Almost every header has one `v1` only, so only the
    /// first is remembered: the others are found again by scanning what follows it (see
    /// [`signature_digits`](SignatureHeader::signature_digits)). That keeps this value at 32
    /// bytes: with an array of offsets and the decoded first `v1` it was 184, and copying it out
    /// of `parse` was a measurable share of a verification.
    first_signature_at: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    start: u16,
    len: u8,
}

impl Span {
    /// These bytes of `raw`.
    fn of(self, raw: &[u8]) -> &[u8] {
        let start = usize::from(self.start);
        let end = start.wrapping_add(usize::from(self.len));
        raw.get(start..end).unwrap_or_default()
    }
}

impl<'a> SignatureHeader<'a> {
    /// Parses a header value. An empty value is `missing_header`; every grammar violation is
    /// `malformed_header` with the broken rule in [`Error::malformed_reason`].
    pub fn parse<H: AsRef<[u8]> + ?Sized>(value: &'a H) -> Result<Self, Error> {
        let raw = value.as_ref();
        parse_canonical(raw).map_or_else(|| parse_general(raw), Ok)
    }

    /// The `t` value: Unix seconds when the sender signed.
    pub fn timestamp(&self) -> u64 {
        self.timestamp
    }

    /// The decoded `v1` signatures, in header order.
    pub fn signatures(&self) -> impl Iterator<Item = [u8; 32]> + '_ {
        self.signature_digits().map(hex::decode_32)
    }

    /// The `v1` values as sent (64 hex digits each, either case), in header order.
    pub(crate) fn signature_digits(&self) -> SignatureDigits<'a> {
        let start = usize::from(self.first_signature_at);
        let end = start.wrapping_add(64);
        SignatureDigits {
            first: self.raw.get(start..end).and_then(|d| d.try_into().ok()),
            rest: self.raw.get(end..).unwrap_or_default(),
        }
    }

    /// The `t` digits exactly as sent: they, not a re-formatting of the number, are what was
    /// signed.
    pub(crate) fn timestamp_digits(&self) -> &'a [u8] {
        self.timestamp_at.of(self.raw)
    }
}

/// The `v1` values of a parsed header: the first where parsing found it, the others found again
/// in what follows it. Parsing checked every one of them, so they need no checking again: only
/// finding, as the parser found them (the items with the key `v1`). After the one `v1` of almost
/// every header nothing is left, and that costs one empty search.
pub(crate) struct SignatureDigits<'a> {
    first: Option<&'a [u8; 64]>,
    /// What follows the previous value (or item): blanks, then `,` and more items, or nothing.
    rest: &'a [u8],
}

impl<'a> Iterator for SignatureDigits<'a> {
    type Item = &'a [u8; 64];

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if let Some(first) = self.first.take() {
            return Some(first);
        }
        self.next_after_the_first()
    }
}

impl<'a> SignatureDigits<'a> {
    fn next_after_the_first(&mut self) -> Option<&'a [u8; 64]> {
        loop {
            let comma = self.rest.iter().position(|&b| b == b',')?;
            let items = self.rest.get(comma.wrapping_add(1)..).unwrap_or_default();
            let item_len = items.iter().position(|&b| b == b',').unwrap_or(items.len());
            let (item, rest) = items.split_at_checked(item_len)?;
            self.rest = rest;
            if let Ok((b"v1", _, value)) = split_item(item)
                && let Ok(digits) = value.try_into()
            {
                return Some(digits);
            }
        }
    }
}

/// The whole grammar: any order, optional whitespace, unknown items, several `v1`.
fn parse_general(raw: &[u8]) -> Result<SignatureHeader<'_>, Error> {
    let mut first_signature_at = None;
    let (timestamp, timestamp_at) = parse_items(raw, b"v1", |at, value| {
        if !<&[u8; 64]>::try_from(value).is_ok_and(hex::is_hex_64) {
            return Err(Malformed::InvalidSignature);
        }
        first_signature_at.get_or_insert(at);
        Ok(())
    })?;
    let first_signature_at =
        first_signature_at.ok_or(Error::malformed(Malformed::MissingSignature))?;
    Ok(SignatureHeader {
        raw,
        timestamp,
        timestamp_at,
        first_signature_at,
    })
}

/// The rules every scheme shares: the length and character bounds, `key=value` items, exactly
/// one `t`. Each item whose key is `scheme` goes to `on_signature` with where its value starts;
/// every other key is ignored, so the format can grow (and, to a verifier of one scheme, the
/// other scheme's items are unknown items).
fn parse_items<'a>(
    raw: &'a [u8],
    scheme: &[u8],
    mut on_signature: impl FnMut(u16, &'a [u8]) -> Result<(), Malformed>,
) -> Result<(u64, Span), Error> {
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
    let mut item_start = 0usize;
    for item in raw.split(|&b| b == b',') {
        let (key, value_start, value) = split_item(item).map_err(Error::malformed)?;
        // Offsets fit in u16: the header is at most 4096 bytes.
        let at = item_start.wrapping_add(value_start);
        item_start = item_start.wrapping_add(item.len()).wrapping_add(1);
        if key == b"t" {
            if timestamp.is_some() {
                return Err(Error::malformed(Malformed::DuplicateTimestamp));
            }
            let t = parse_timestamp(value).ok_or(Error::malformed(Malformed::InvalidTimestamp))?;
            let span = Span {
                start: at as u16,
                len: value.len() as u8,
            };
            timestamp = Some((t, span));
        } else if key == scheme {
            on_signature(at as u16, value).map_err(Error::malformed)?;
        }
    }
    timestamp.ok_or(Error::malformed(Malformed::MissingTimestamp))
}

/// A header as a verifier with public keys reads it: the grammar of [`SignatureHeader`] with
/// `v1a` in the place of `v1` (at least one, at most
/// [`MAX_ED25519_SIGNATURES`](crate::MAX_ED25519_SIGNATURES), each the padded standard base64
/// of 64 bytes), and `v1` an unknown item. The signatures are decoded here, since checking the
/// base64 strictly is decoding it.
pub(crate) struct Ed25519Header<'a> {
    raw: &'a [u8],
    timestamp: u64,
    timestamp_at: Span,
    signatures: [[u8; ed25519::SIGNATURE_LEN]; MAX_ED25519_SIGNATURES],
    count: usize,
}

impl<'a> Ed25519Header<'a> {
    /// Parses a header value, with the errors of [`SignatureHeader::parse`] and the `v1a` ones.
    pub(crate) fn parse<H: AsRef<[u8]> + ?Sized>(value: &'a H) -> Result<Self, Error> {
        let raw = value.as_ref();
        let mut signatures = [[0u8; ed25519::SIGNATURE_LEN]; MAX_ED25519_SIGNATURES];
        let mut count = 0usize;
        let (timestamp, timestamp_at) = parse_items(raw, b"v1a", |_, value| {
            let signature = base64::decode(value).ok_or(Malformed::InvalidEd25519Signature)?;
            let slot = signatures
                .get_mut(count)
                .ok_or(Malformed::TooManyEd25519Signatures)?;
            *slot = signature;
            count = count.wrapping_add(1);
            Ok(())
        })?;
        if count == 0 {
            return Err(Error::malformed(Malformed::MissingEd25519Signature));
        }
        Ok(Ed25519Header {
            raw,
            timestamp,
            timestamp_at,
            signatures,
            count,
        })
    }

    /// The `t` value: Unix seconds when the sender signed.
    pub(crate) fn timestamp(&self) -> u64 {
        self.timestamp
    }

    /// The `t` digits exactly as sent.
    pub(crate) fn timestamp_digits(&self) -> &'a [u8] {
        self.timestamp_at.of(self.raw)
    }

    /// The decoded `v1a` signatures, in header order.
    pub(crate) fn signatures(&self) -> &[[u8; ed25519::SIGNATURE_LEN]] {
        self.signatures.get(..self.count).unwrap_or_default()
    }
}

/// The header every kxp sender writes: `t=<digits>` then one or more `,v1=<64 hex>`, nothing
/// else. Checked at fixed positions in one pass, a few instructions a byte; anything else
/// (whitespace, other order, unknown items, or an error) goes to [`parse_general`], which reaches
/// the same verdict on these headers, only slower.
fn parse_canonical(raw: &[u8]) -> Option<SignatureHeader<'_>> {
    if raw.len() > MAX_HEADER_LEN {
        return None;
    }
    let rest = raw.strip_prefix(b"t=")?;
    // Each `,v1=<64 hex>` takes 68 bytes and a timestamp has at most 19 digits, so the length
    // alone says where the digits end: no search for the comma.
    let digit_count = rest.len() % SIGNATURE_ITEM_LEN;
    let (digits, signatures) = rest.split_at_checked(digit_count)?;
    let timestamp = parse_timestamp(digits)?;
    if signatures.is_empty() {
        return None;
    }
    let all_canonical = signatures.chunks_exact(SIGNATURE_ITEM_LEN).all(|item| {
        match item.split_first_chunk::<4>() {
            // One comparison of the four bytes as a word, not four.
            Some((prefix, value)) => {
                u32::from_ne_bytes(*prefix) == u32::from_ne_bytes(*b",v1=")
                    && <&[u8; 64]>::try_from(value).is_ok_and(hex::is_hex_64)
            }
            None => false,
        }
    });
    if !all_canonical {
        return None;
    }
    Some(SignatureHeader {
        raw,
        timestamp,
        timestamp_at: Span {
            start: 2,
            len: u8::try_from(digit_count).ok()?,
        },
        // `t=`, the digits, `,v1=`: at most 25, so the cast cannot truncate.
        first_signature_at: u16::try_from(digit_count.wrapping_add(6)).ok()?,
    })
}

/// `,v1=` and 64 digits.
const SIGNATURE_ITEM_LEN: usize = 68;

/// Splits one comma-separated item into its key, where its value starts (relative to the
/// item), and its value. Spaces and tabs around the item are not part of it.
fn split_item(item: &[u8]) -> Result<(&[u8], usize, &[u8]), Malformed> {
    let is_ows = |b: &&u8| **b == b' ' || **b == b'\t';
    let leading = item.iter().take_while(is_ows).count();
    let trailing = item.iter().rev().take_while(is_ows).count();
    let body = item
        .get(leading..item.len().saturating_sub(trailing))
        .unwrap_or_default();
    if body.is_empty() {
        return Err(Malformed::EmptyItem);
    }
    let equals = body
        .iter()
        .position(|&b| b == b'=')
        .ok_or(Malformed::MissingEquals)?;
    if equals == 0 {
        return Err(Malformed::EmptyKey);
    }
    let key = body.get(..equals).unwrap_or_default();
    let value = body.get(equals.wrapping_add(1)..).unwrap_or_default();
    Ok((key, leading.wrapping_add(equals).wrapping_add(1), value))
}

fn parse_timestamp(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    // The leading digits one at a time, then the rest eight at a time: the 10 of a current
    // timestamp are two steps of the loop and one word.
    let (head, words) = digits.split_at_checked(digits.len() % 8)?;
    // 19 digits never overflow a u64 (its maximum has 20), so plain wrapping arithmetic is exact.
    let mut value = 0u64;
    for &d in head {
        if !d.is_ascii_digit() {
            return None;
        }
        value = value
            .wrapping_mul(10)
            .wrapping_add(u64::from(d.wrapping_sub(b'0')));
    }
    for word in words.chunks_exact(8) {
        value = value
            .wrapping_mul(100_000_000)
            .wrapping_add(eight_digits(word.try_into().ok()?)?);
    }
    Some(value)
}

/// Eight ASCII digits, most significant first, as a number, reading them as one little-endian
/// word (the SWAR method of simdjson's `parse_eight_digits_unrolled`).
fn eight_digits(digits: &[u8; 8]) -> Option<u64> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let word = u64::from_le_bytes(*digits);
    // A byte is a digit when its high nibble is 3 and stays 3 after adding 6 (0x3a..=0x3f
    // become 0x40..). Adding 6 carries into the next byte only from a byte of 0xfa or more,
    // which fails the first test itself.
    let high_nibbles = word & (ONES * 0xf0);
    let high_after_six = (word.wrapping_add(ONES * 0x06) & (ONES * 0xf0)) >> 4;
    if high_nibbles | high_after_six != ONES * 0x33 {
        return None;
    }
    // Each byte its digit; then pairs (10 × the first + the second), quads, and all eight,
    // each step one multiply that adds a shifted copy to itself.
    let digits = word & (ONES * 0x0f);
    let pairs = (digits.wrapping_mul(10 << 8 | 1) >> 8) & 0x00ff_00ff_00ff_00ff;
    let quads = (pairs.wrapping_mul(100 << 16 | 1) >> 16) & 0x0000_ffff_0000_ffff;
    Some(quads.wrapping_mul(10_000 << 32 | 1) >> 32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;
    use std::format;
    use std::string::String;
    use std::vec;

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

    /// Every byte value at every position of eight digits, against `str::parse`.
    #[test]
    fn eight_digits_agrees_with_a_naive_parse_for_every_byte_at_every_position() {
        let base = *b"17644645";
        for position in 0..8 {
            for value in 0..=255u8 {
                let mut digits = base;
                digits[position] = value;
                let naive = core::str::from_utf8(&digits)
                    .ok()
                    .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|s| s.parse::<u64>().ok());
                assert_eq!(eight_digits(&digits), naive, "{value:#04x} at {position}");
            }
        }
        assert_eq!(eight_digits(b"00000000"), Some(0));
        assert_eq!(eight_digits(b"99999999"), Some(99_999_999));
    }

    proptest::proptest! {
        /// Any digit string of any length, and one byte changed anywhere, as `str::parse` says.
        #[test]
        fn timestamps_parse_as_str_parse_does(
            digits in "[0-9]{0,21}",
            at in proptest::prelude::any::<proptest::sample::Index>(),
            byte in proptest::prelude::any::<u8>(),
        ) {
            let naive = |d: &[u8]| {
                core::str::from_utf8(d)
                    .ok()
                    .filter(|s| (1..=19).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|s| s.parse::<u64>().ok())
            };
            proptest::prop_assert_eq!(parse_timestamp(digits.as_bytes()), naive(digits.as_bytes()));
            let mut changed = digits.into_bytes();
            if !changed.is_empty() {
                let i = at.index(changed.len());
                changed[i] = byte;
            }
            proptest::prop_assert_eq!(parse_timestamp(&changed), naive(&changed));
        }
    }

    /// The `v1` values after the first are found again, not remembered: every one, in order,
    /// whatever blanks and other items lie between.
    #[test]
    fn finds_every_v1_after_the_first_whatever_lies_between() {
        let other = "F".repeat(64);
        let header =
            format!("v0=x, t=1 ,v1={SIG}\t, v2=y,v1={other} ,v1 =z, V1=w,\tv1={SIG}  ,v0=");
        let parsed = SignatureHeader::parse(&header).unwrap();
        let found: std::vec::Vec<&[u8; 64]> = parsed.signature_digits().collect();
        let expected: [&[u8]; 3] = [SIG.as_bytes(), other.as_bytes(), SIG.as_bytes()];
        assert!(found.iter().map(|d| &d[..]).eq(expected), "{found:?}");
        let canonical = format!("t=1,v1={SIG},v1={other}");
        let parsed = parse_canonical(canonical.as_bytes()).unwrap();
        assert_eq!(parsed.signature_digits().count(), 2);
        assert_eq!(parsed.signatures().nth(1), Some([0xff; 32]));
    }

    /// Verification copies the parsed header out of `parse`; at 184 bytes that copy cost more
    /// than the checks that fill it.
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn a_parsed_header_stays_small() {
        assert_eq!(core::mem::size_of::<SignatureHeader<'_>>(), 32);
    }

    #[test]
    fn keeps_the_timestamp_digits_as_sent() {
        let header = format!("t=00017,v1={SIG}");
        let parsed = SignatureHeader::parse(&header).unwrap();
        assert_eq!(parsed.timestamp(), 17);
        assert_eq!(parsed.timestamp_digits(), b"00017");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]

        /// The fast path may only ever answer what the full grammar answers.
        #[test]
        fn the_fast_path_agrees_with_the_full_grammar(
            t in "[0-9]{0,21}",
            sigs in proptest::collection::vec("[0-9a-fA-F]{63,65}", 0..4),
            separator in proptest::sample::select(vec![",v1=", ",v1= ", ", v1=", ",V1=", ",v2=", ",,v1="]),
            tail in proptest::sample::select(vec!["", ",", " ", ",v0=x"]),
        ) {
            let header = format!("t={t}{}{tail}", sigs.iter().map(|s| format!("{separator}{s}")).collect::<String>());
            let raw = header.as_bytes();
            if let Some(fast) = parse_canonical(raw) {
                let general = parse_general(raw).unwrap();
                proptest::prop_assert_eq!(fast.timestamp(), general.timestamp());
                proptest::prop_assert_eq!(fast.timestamp_digits(), general.timestamp_digits());
                proptest::prop_assert!(fast.signatures().eq(general.signatures()));
            }
        }
    }

    #[test]
    fn signer_output_takes_the_fast_path() {
        let one = format!("t=1764464523,v1={SIG}");
        let two = format!("t=1764464523,v1={SIG},v1={SIG}");
        for header in [one, two] {
            assert!(parse_canonical(header.as_bytes()).is_some(), "{header}");
        }
        assert!(parse_canonical(format!("v1={SIG},t=1").as_bytes()).is_none());
    }
}
