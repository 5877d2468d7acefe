//! Standard Webhooks 1.0: the grammar of its three headers (`webhook-id`, `webhook-timestamp`,
//! `webhook-signature`), parsed without allocating; the search for a `v1` (HMAC-SHA256) or
//! `v1a` (Ed25519) item that verifies `<id>.<timestamp>.<body>`; and the `webhook-signature`
//! values a sender writes.
//!
//! The keys and the clock are not here: [`Verifier::verify_standard`](crate::Verifier) holds
//! the keys and checks the timestamp window exactly as for the kxp format, and this module only
//! answers which key matched, so both formats keep one order of checks and one vocabulary of
//! errors.

use core::fmt;

use subtle::ConstantTimeEq;

use crate::ed25519::{CheckedSignature, PublicKey, SIGNATURE_LEN};
use crate::error::{Error, Malformed};
use crate::fingerprint::KeyFingerprint;
use crate::secret::{Keyring, Secret};
use crate::verify::Match;
use crate::{
    MAX_ED25519_SIGNATURES, MAX_HEADER_LEN, MAX_SECRETS, MAX_SIGNATURE_ITEMS, WEBHOOK_ID_HEADER,
    WEBHOOK_SIGNATURE_HEADER, WEBHOOK_TIMESTAMP_HEADER, base64,
};

/// The bytes of a `v1` MAC.
const MAC_LEN: usize = 32;

/// Whether `id` may be signed and verified: 1 to [`MAX_HEADER_LEN`] bytes of visible ASCII
/// other than `.`. Without a `.` in the id (the timestamp has none either, being digits) the
/// signed `<id>.<timestamp>.<body>` splits one way only, so no two (id, timestamp, body)
/// triples sign the same bytes.
pub(crate) fn check_id(id: &[u8]) -> Result<(), Error> {
    if id.len() > MAX_HEADER_LEN {
        return Err(Error::malformed(Malformed::TooLong));
    }
    if id.is_empty() || !id.iter().all(|&b| b != b'.' && (b'!'..=b'~').contains(&b)) {
        return Err(Error::malformed(Malformed::InvalidWebhookId));
    }
    Ok(())
}

/// 1 to 19 ASCII digits without a leading zero (`0` itself aside). The official libraries sign
/// the number written back in decimal, not the digits as sent, so a header with a leading zero
/// would be signed over other bytes than it shows: refusing it keeps the two the same.
fn parse_timestamp(digits: &[u8]) -> Result<u64, Error> {
    let invalid = Error::malformed(Malformed::InvalidWebhookTimestamp);
    if digits.is_empty() || digits.len() > 19 || (digits.len() > 1 && digits.first() == Some(&b'0'))
    {
        return Err(invalid);
    }
    // 19 digits never overflow a u64 (its maximum has 20), so wrapping arithmetic is exact.
    digits.iter().try_fold(0u64, |value, &d| {
        if d.is_ascii_digit() {
            Ok(value
                .wrapping_mul(10)
                .wrapping_add(u64::from(d.wrapping_sub(b'0'))))
        } else {
            Err(invalid)
        }
    })
}

/// The three headers once their shared rules hold: the id and the timestamp checked, the
/// signature list bounded and split into `<version>,<value>` items (each handed to the scheme's
/// parser by [`parse`]).
struct Headers<'a> {
    id: &'a [u8],
    timestamp_digits: &'a [u8],
    timestamp: u64,
}

/// Parses the three header values (empty when the request lacked one) in a fixed order: an
/// empty one first (`missing_header`, naming the first of id, timestamp, signature that is
/// empty), then each header's grammar in that order (`malformed_header`). Each item whose
/// version is `scheme` goes to `on_signature` with its value; other versions are ignored, so
/// the list can carry the other scheme's items and future ones.
fn parse<'a>(
    id: &'a [u8],
    timestamp: &'a [u8],
    signature: &'a [u8],
    scheme: &[u8],
    mut on_signature: impl FnMut(&'a [u8]) -> Result<(), Malformed>,
) -> Result<Headers<'a>, Error> {
    for (name, value) in [
        (WEBHOOK_ID_HEADER, id),
        (WEBHOOK_TIMESTAMP_HEADER, timestamp),
        (WEBHOOK_SIGNATURE_HEADER, signature),
    ] {
        if value.is_empty() {
            return Err(Error::missing_standard(name));
        }
    }
    check_id(id)?;
    let parsed_timestamp = parse_timestamp(timestamp)?;
    if signature.len() > MAX_HEADER_LEN {
        return Err(Error::malformed(Malformed::TooLong));
    }
    if !signature.iter().all(|&b| (b' '..=b'~').contains(&b)) {
        return Err(Error::malformed(Malformed::InvalidSignatureList));
    }
    for (index, item) in signature.split(|&b| b == b' ').enumerate() {
        if index >= MAX_SIGNATURE_ITEMS {
            return Err(Error::malformed(Malformed::TooManySignatureItems));
        }
        if item.is_empty() {
            return Err(Error::malformed(Malformed::InvalidSignatureList));
        }
        let comma = item
            .iter()
            .position(|&b| b == b',')
            .filter(|&at| at > 0)
            .ok_or(Error::malformed(Malformed::MissingComma))?;
        let (version, value) = item.split_at_checked(comma).unwrap_or_default();
        if version == scheme {
            on_signature(value.get(1..).unwrap_or_default()).map_err(Error::malformed)?;
        }
    }
    Ok(Headers {
        id,
        timestamp_digits: timestamp,
        timestamp: parsed_timestamp,
    })
}

/// Parse, then the signature: the timestamp of headers whose `v1` matches one of `secrets`,
/// and which secret it was, chosen as for the kxp format's `v1` (the first item in header order
/// that any secret matches, by the first secret that matches it), and found the same way: every
/// MAC compared with every item in constant time, so the search leaks nothing to a forger.
pub(crate) fn verify_v1(
    secrets: &Keyring<Secret>,
    id: &[u8],
    timestamp: &[u8],
    signature: &[u8],
    body: &[u8],
) -> Result<Match, Error> {
    let mut macs = [[0u8; MAC_LEN]; MAX_SIGNATURE_ITEMS];
    let mut count = 0usize;
    let headers = parse(id, timestamp, signature, b"v1", |value| {
        let mac = base64::decode::<MAC_LEN>(value).ok_or(Malformed::InvalidHmacSignature)?;
        // `parse` stops at MAX_SIGNATURE_ITEMS items, so there is always a slot.
        let slot = macs
            .get_mut(count)
            .ok_or(Malformed::TooManySignatureItems)?;
        *slot = mac;
        count = count.wrapping_add(1);
        Ok(())
    })?;
    let sent = macs.get(..count).unwrap_or_default();
    if sent.is_empty() {
        return Err(Error::malformed(Malformed::MissingSignature));
    }
    let mut matched: Option<(usize, usize, KeyFingerprint)> = None;
    for (index, secret) in secrets.iter().enumerate() {
        let mac = secret.mac_of([headers.id, b".", headers.timestamp_digits, b".", body]);
        for (position, candidate) in sent.iter().enumerate() {
            if bool::from(mac.ct_eq(candidate))
                && matched.is_none_or(|(earliest, _, _)| position < earliest)
            {
                matched = Some((position, index, secret.fingerprint()));
            }
        }
    }
    let (_, secret_index, key) = matched.ok_or(Error::SIGNATURE_MISMATCH)?;
    Ok(Match {
        timestamp: headers.timestamp,
        secret_index,
        key,
    })
}

/// Parse, then the signature: the timestamp of headers whose `v1a` verifies by one of `keys`,
/// and which key it was: the first item in header order that any key verifies, by the first
/// key that verifies it, found by stopping there (signatures and public keys are public). At
/// most [`MAX_ED25519_SIGNATURES`] items × [`MAX_SECRETS`] keys are tried.
pub(crate) fn verify_v1a(
    keys: &Keyring<PublicKey>,
    id: &[u8],
    timestamp: &[u8],
    signature: &[u8],
    body: &[u8],
) -> Result<Match, Error> {
    let mut signatures = [[0u8; SIGNATURE_LEN]; MAX_ED25519_SIGNATURES];
    let mut count = 0usize;
    let headers = parse(id, timestamp, signature, b"v1a", |value| {
        let signature = base64::decode(value).ok_or(Malformed::InvalidEd25519Signature)?;
        let slot = signatures
            .get_mut(count)
            .ok_or(Malformed::TooManyEd25519Signatures)?;
        *slot = signature;
        count = count.wrapping_add(1);
        Ok(())
    })?;
    let sent = signatures.get(..count).unwrap_or_default();
    if sent.is_empty() {
        return Err(Error::malformed(Malformed::MissingEd25519Signature));
    }
    let parts = [headers.id, b".", headers.timestamp_digits, b".", body];
    sent.iter()
        .find_map(|signature| {
            let signature = CheckedSignature::new(signature)?;
            keys.iter()
                .enumerate()
                .find(|(_, key)| key.verifies_parts(&parts, &signature))
        })
        .map(|(secret_index, key)| Match {
            timestamp: headers.timestamp,
            secret_index,
            key: key.fingerprint(),
        })
        .ok_or(Error::SIGNATURE_MISMATCH)
}

/// The `v1` items of a `webhook-signature` value, one per secret in the signer's order, made by
/// [`Signer::sign_standard`](crate::Signer::sign_standard). Its `Display` writes the value
/// (`v1,<base64> v1,<base64>…`) without allocating; to send `v1a` items beside them, write
/// both values separated by one space.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct StandardSignedHeader {
    timestamp: u64,
    macs: [[u8; MAC_LEN]; MAX_SECRETS],
    count: usize,
}

impl StandardSignedHeader {
    pub(crate) fn new(
        timestamp: u64,
        macs: [[u8; MAC_LEN]; MAX_SECRETS],
        count: usize,
    ) -> StandardSignedHeader {
        StandardSignedHeader {
            timestamp,
            macs,
            count,
        }
    }

    /// The signed timestamp: what the sender writes in `webhook-timestamp`, in decimal.
    pub fn timestamp(&self) -> u64 {
        self.timestamp
    }

    /// The raw MACs, one per secret, in the signer's order.
    pub fn signatures(&self) -> impl Iterator<Item = &[u8; 32]> {
        self.macs.iter().take(self.count)
    }
}

impl fmt::Display for StandardSignedHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, mac) in self.signatures().enumerate() {
            if index > 0 {
                f.write_str(" ")?;
            }
            let mut text = [0u8; base64::encoded_len(MAC_LEN)];
            let text = base64::encode(mac, &mut text);
            f.write_str("v1,")?;
            f.write_str(core::str::from_utf8(text).map_err(|_| fmt::Error)?)?;
        }
        Ok(())
    }
}

impl fmt::Debug for StandardSignedHeader {
    // As for `SignedHeader`: printing it would put signatures in logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StandardSignedHeader")
            .field("timestamp", &self.timestamp)
            .field("signatures", &self.count)
            .finish_non_exhaustive()
    }
}

/// One `v1a` item of a `webhook-signature` value, made by
/// [`SigningKey::sign_standard`](crate::SigningKey::sign_standard). Its `Display` writes
/// `v1a,<base64>` without allocating; several keys' items (and `v1` items) are joined by one
/// space each, newest key first.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct StandardEd25519SignedHeader {
    timestamp: u64,
    signature: [u8; SIGNATURE_LEN],
}

impl StandardEd25519SignedHeader {
    pub(crate) fn new(timestamp: u64, signature: [u8; SIGNATURE_LEN]) -> Self {
        StandardEd25519SignedHeader {
            timestamp,
            signature,
        }
    }

    /// The signed timestamp: what the sender writes in `webhook-timestamp`, in decimal.
    pub fn timestamp(&self) -> u64 {
        self.timestamp
    }

    /// The raw 64-byte signature.
    pub fn signature(&self) -> &[u8; 64] {
        &self.signature
    }
}

impl fmt::Display for StandardEd25519SignedHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut text = [0u8; base64::encoded_len(SIGNATURE_LEN)];
        let text = base64::encode(&self.signature, &mut text);
        f.write_str("v1a,")?;
        f.write_str(core::str::from_utf8(text).map_err(|_| fmt::Error)?)
    }
}

impl fmt::Debug for StandardEd25519SignedHeader {
    // As for `SignedHeader`: printing it would put signatures in logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StandardEd25519SignedHeader")
            .field("timestamp", &self.timestamp)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(id: &str, timestamp: &str, signature: &str) -> Option<Malformed> {
        parse(
            id.as_bytes(),
            timestamp.as_bytes(),
            signature.as_bytes(),
            b"v1",
            |_| Ok(()),
        )
        .err()
        .and_then(|e| e.malformed_reason())
    }

    #[test]
    fn names_the_broken_rule() {
        let ok = "v1,x";
        assert_eq!(reason("msg_1", "1", ok), None);
        assert_eq!(reason("msg.1", "1", ok), Some(Malformed::InvalidWebhookId));
        assert_eq!(reason("msg 1", "1", ok), Some(Malformed::InvalidWebhookId));
        assert_eq!(
            reason("msg_1", "01", ok),
            Some(Malformed::InvalidWebhookTimestamp)
        );
        assert_eq!(
            reason("msg_1", "1.5", ok),
            Some(Malformed::InvalidWebhookTimestamp)
        );
        assert_eq!(
            reason("msg_1", " 1", ok),
            Some(Malformed::InvalidWebhookTimestamp)
        );
        assert_eq!(
            reason("msg_1", "1", "v1,x  v1,y"),
            Some(Malformed::InvalidSignatureList)
        );
        assert_eq!(
            reason("msg_1", "1", " v1,x"),
            Some(Malformed::InvalidSignatureList)
        );
        assert_eq!(
            reason("msg_1", "1", "v1,x\tv1,y"),
            Some(Malformed::InvalidSignatureList)
        );
        assert_eq!(reason("msg_1", "1", "v1x"), Some(Malformed::MissingComma));
        assert_eq!(reason("msg_1", "1", ",x"), Some(Malformed::MissingComma));
        let seventeen = ["v2,x"; 17].join(" ");
        assert_eq!(
            reason("msg_1", "1", &seventeen),
            Some(Malformed::TooManySignatureItems)
        );
        assert_eq!(reason("msg_1", "1", &seventeen[5..]), None);
        assert_eq!(reason(&"m".repeat(4097), "1", ok), Some(Malformed::TooLong));
    }

    #[test]
    fn timestamps_are_canonical_decimal() {
        assert_eq!(parse_timestamp(b"0"), Ok(0));
        assert_eq!(
            parse_timestamp(b"9999999999999999999"),
            Ok(9_999_999_999_999_999_999)
        );
        for bad in [
            &b""[..],
            b"00",
            b"-1",
            b"+1",
            b"1e9",
            b"18446744073709551615",
        ] {
            assert!(parse_timestamp(bad).is_err(), "{bad:?}");
        }
    }
}
