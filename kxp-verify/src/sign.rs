//! Producing `t=<ts>,v1=<hex>[,v1=<hex>…]`: one `v1` per secret, in the order given.

use core::fmt;

use crate::error::{ConfigError, Error};
use crate::secret::{Keyring, Secret};
use crate::standard::{self, StandardSignedHeader};
use crate::{MAX_SECRETS, hex};

/// Signs bodies with one or more secrets (newest first during a rotation, so receivers that
/// know only the new one match at the first `v1`).
///
/// ```
/// use kxp_verify::{Secret, Signer, Verifier};
///
/// let signer = Signer::with_secrets([Secret::new("new-secret")?, Secret::new("old-secret")?])?;
/// let header = signer.sign(1764464523, b"{}").to_string();
/// assert!(header.starts_with("t=1764464523,v1="));
/// assert_eq!(header.matches(",v1=").count(), 2);
///
/// // A receiver still on the old secret accepts it during the overlap.
/// let old_receiver = Verifier::new(Secret::new("old-secret")?);
/// assert!(old_receiver.verify(&header, b"{}", 1764464523).is_ok());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Signer {
    keys: Keyring,
}

impl Signer {
    /// The largest `t` the header grammar allows: 19 digits.
    pub const MAX_TIMESTAMP: u64 = 9_999_999_999_999_999_999;

    /// A signer with one secret.
    pub fn new(secret: Secret) -> Signer {
        Signer {
            keys: Keyring::one(secret),
        }
    }

    /// A signer with 1 to [`MAX_SECRETS`] secrets; each produces one `v1`, in this order.
    pub fn with_secrets<I: IntoIterator<Item = Secret>>(secrets: I) -> Result<Signer, ConfigError> {
        Keyring::many(secrets).map(|keys| Signer { keys })
    }

    /// A signer from a comma-separated list of secrets, such as an environment variable's value.
    pub fn from_secret_list(list: &str) -> Result<Signer, ConfigError> {
        Keyring::from_list(list).map(|keys| Signer { keys })
    }

    /// Signs `body` as sent at `timestamp` (Unix seconds). The result's `Display` is the header
    /// value.
    ///
    /// The header's `t` has at most 19 digits, so a timestamp past
    /// [`MAX_TIMESTAMP`](Signer::MAX_TIMESTAMP) (some 300 billion years from now) is written as
    /// that value: the header stays well-formed, and any receiver calls it
    /// `timestamp_in_future`.
    pub fn sign(&self, timestamp: u64, body: &[u8]) -> SignedHeader {
        let timestamp = timestamp.min(Signer::MAX_TIMESTAMP);
        let mut digits = [0u8; 20];
        let digits = decimal(timestamp, &mut digits);
        let mut macs = [[0u8; 32]; MAX_SECRETS];
        for (slot, secret) in macs.iter_mut().zip(self.keys.iter()) {
            *slot = secret.mac(digits, body);
        }
        SignedHeader {
            timestamp,
            macs,
            count: self.keys.len(),
        }
    }

    /// Signs `body` as sent now, by the system clock.
    #[cfg(feature = "std")]
    pub fn sign_now(&self, body: &[u8]) -> SignedHeader {
        self.sign(crate::verify::unix_now(), body)
    }

    /// Signs `body` for Standard Webhooks: one HMAC-SHA256 per secret, in this signer's order
    /// (newest first during a rotation), over `<webhook-id>.<webhook-timestamp>.<body>`. The
    /// result's `Display` is the `webhook-signature` value, `v1,<base64>` items separated by
    /// spaces; the sender writes `id` and the result's
    /// [`timestamp`](StandardSignedHeader::timestamp) (clamped as for [`sign`](Signer::sign))
    /// as the other two headers. Build the secrets with [`Secret::from_whsec`] (or
    /// [`Secret::new`] over the raw key bytes): the key is the decoded bytes.
    ///
    /// An `id` a verifier would call malformed is refused here rather than signed: empty, or
    /// not visible ASCII without `.` (see
    /// [`Verifier::verify_standard`](crate::Verifier::verify_standard)).
    ///
    /// ```
    /// use kxp_verify::{Secret, Signer, Verifier};
    ///
    /// let new = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    /// let old = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    /// let signer = Signer::with_secrets([Secret::from_whsec(new)?, Secret::from_whsec(old)?])?;
    /// let signed = signer.sign_standard("msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", 1674087231, b"{}")?;
    /// let header = signed.to_string();
    /// assert_eq!(header.split(' ').count(), 2);
    ///
    /// // A receiver still on the old secret accepts it during the overlap.
    /// let old_receiver = Verifier::new(Secret::from_whsec(old)?);
    /// let timestamp = signed.timestamp().to_string();
    /// let id = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W";
    /// assert!(old_receiver.verify_standard(id, &timestamp, &header, b"{}", 1674087231).is_ok());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn sign_standard<I: AsRef<[u8]> + ?Sized>(
        &self,
        id: &I,
        timestamp: u64,
        body: &[u8],
    ) -> Result<StandardSignedHeader, Error> {
        let id = id.as_ref();
        standard::check_id(id)?;
        let timestamp = timestamp.min(Signer::MAX_TIMESTAMP);
        let mut digits = [0u8; 20];
        let digits = decimal(timestamp, &mut digits);
        let mut macs = [[0u8; 32]; MAX_SECRETS];
        for (slot, secret) in macs.iter_mut().zip(self.keys.iter()) {
            *slot = secret.mac_of([id, b".", digits, b".", body]);
        }
        Ok(StandardSignedHeader::new(timestamp, macs, self.keys.len()))
    }
}

/// A computed signature header. Its `Display` writes the header value without allocating.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SignedHeader {
    timestamp: u64,
    macs: [[u8; 32]; MAX_SECRETS],
    count: usize,
}

impl SignedHeader {
    /// The `t` value.
    pub fn timestamp(&self) -> u64 {
        self.timestamp
    }

    /// The raw MACs, one per secret, in the signer's order.
    pub fn signatures(&self) -> impl Iterator<Item = &[u8; 32]> {
        self.macs.iter().take(self.count)
    }
}

impl fmt::Display for SignedHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t={}", self.timestamp)?;
        for mac in self.signatures() {
            let digits = hex::encode_32(mac);
            f.write_str(",v1=")?;
            f.write_str(core::str::from_utf8(&digits).map_err(|_| fmt::Error)?)?;
        }
        Ok(())
    }
}

impl fmt::Debug for SignedHeader {
    // The header is sent in clear anyway, but printing it would put signatures in logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SignedHeader")
            .field("timestamp", &self.timestamp)
            .field("signatures", &self.count)
            .finish_non_exhaustive()
    }
}

/// Writes `n` in decimal (no leading zeros) at the end of `buf` and returns those digits.
pub(crate) fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut len = 0usize;
    for slot in buf.iter_mut().rev() {
        // u64::MAX has 20 digits, so the buffer never runs out before `n` does.
        *slot = b'0'.wrapping_add((n % 10) as u8);
        n /= 10;
        len = len.wrapping_add(1);
        if n == 0 {
            break;
        }
    }
    buf.get(buf.len().wrapping_sub(len)..).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::format;

    #[test]
    fn decimal_matches_display_at_the_edges() {
        for n in [0, 1, 9, 10, 1764464523, u64::MAX] {
            let mut buf = [0u8; 20];
            assert_eq!(decimal(n, &mut buf), format!("{n}").as_bytes());
        }
    }
}
