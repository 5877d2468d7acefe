//! Verification: parse, then signature, then timestamp, in that order.

use core::time::Duration;

use crate::ed25519::{CheckedSignature, PublicKey};
use crate::error::{ConfigError, Error};
use crate::header::{Ed25519Header, SignatureHeader};
use crate::secret::{Keyring, Secret};
use crate::{DEFAULT_TOLERANCE, hex};

/// Checks signature headers against one or more secrets.
///
/// Build it once at start-up (keying the HMAC is done here, not per request) and share it.
/// [`verify`](Verifier::verify) is pure: the caller passes the clock, so tests and embedded
/// targets need no time source. It allocates nothing and never panics.
///
/// The order of checks is fixed: a header that does not parse is `malformed_header`; then a
/// signature must match, so a forgery always reads `signature_mismatch`; only an authentic
/// request can be `timestamp_too_old` or `timestamp_in_future`.
///
/// ```
/// use kxp_verify::{ErrorKind, Secret, Signer, Verifier};
///
/// let secret = "41ab92590637ac82026ca65266b2898428ea491b1e6d543d7202cf486ea62965";
/// let verifier = Verifier::new(Secret::new(secret)?);
/// let body = br#"{"id":"evt_1","type":"payment.succeeded"}"#;
/// let header = Signer::new(Secret::new(secret)?).sign(1764464523, body).to_string();
///
/// let verified = verifier.verify(&header, body, 1764464523 + 60)?;
/// assert_eq!(verified.body(), body);
///
/// let replayed = verifier.verify(&header, body, 1764464523 + 3600).unwrap_err();
/// assert_eq!(replayed.kind(), ErrorKind::TimestampTooOld);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Verifier {
    keys: Keys,
    tolerance: u64,
}

/// What a verifier checks: `v1` items with secrets, or `v1a` items with public keys, never
/// both. A receiver that moved to public keys must stop accepting the shared secret, or whoever
/// holds the secret could still forge; a verifier of both would keep that door open.
#[derive(Debug, Clone)]
enum Keys {
    Secrets(Keyring<Secret>),
    PublicKeys(Keyring<PublicKey>),
}

impl Verifier {
    /// A verifier for one secret, with the default five-minute tolerance.
    pub fn new(secret: Secret) -> Verifier {
        Verifier {
            keys: Keys::Secrets(Keyring::one(secret)),
            tolerance: DEFAULT_TOLERANCE.as_secs(),
        }
    }

    /// A verifier that accepts a signature by any of 1 to [`MAX_SECRETS`](crate::MAX_SECRETS) secrets, for
    /// rotating without downtime.
    pub fn with_secrets<I: IntoIterator<Item = Secret>>(
        secrets: I,
    ) -> Result<Verifier, ConfigError> {
        Keyring::many(secrets).map(|keys| Verifier {
            keys: Keys::Secrets(keys),
            tolerance: DEFAULT_TOLERANCE.as_secs(),
        })
    }

    /// A verifier from a comma-separated list of secrets (spaces around each are trimmed), the
    /// form of the `KXP_WEBHOOK_SECRET` environment variable.
    pub fn from_secret_list(list: &str) -> Result<Verifier, ConfigError> {
        Keyring::from_list(list).map(|keys| Verifier {
            keys: Keys::Secrets(keys),
            tolerance: DEFAULT_TOLERANCE.as_secs(),
        })
    }

    /// A verifier of Ed25519 `v1a` signatures by any of 1 to [`MAX_SECRETS`](crate::MAX_SECRETS)
    /// public keys (newest first during a rotation, as for secrets), with the default tolerance.
    ///
    /// It checks `v1a` items only: a header's `v1` items are unknown items to it, so a sender
    /// that signs both ways during a migration is verified by its Ed25519 signature alone, and a
    /// header with no `v1a` is `malformed_header`. The keys were checked when they were made
    /// ([`PublicKey::from_bytes`]).
    ///
    /// ```
    /// use kxp_verify::{ErrorKind, SigningKey, Verifier};
    ///
    /// let (new, old) = (SigningKey::from_seed(&[1; 32]), SigningKey::from_seed(&[2; 32]));
    /// let verifier = Verifier::with_public_keys([new.public_key(), old.public_key()])?;
    /// let header = old.sign(1764464523, b"{}").to_string();
    /// assert_eq!(verifier.verify(&header, b"{}", 1764464523)?.secret_index(), 1);
    ///
    /// let tampered = verifier.verify(&header, b"{ }", 1764464523).unwrap_err();
    /// assert_eq!(tampered.kind(), ErrorKind::SignatureMismatch);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_public_keys<I: IntoIterator<Item = PublicKey>>(
        keys: I,
    ) -> Result<Verifier, ConfigError> {
        Keyring::many(keys)
            .map(|keys| Verifier {
                keys: Keys::PublicKeys(keys),
                tolerance: DEFAULT_TOLERANCE.as_secs(),
            })
            .map_err(ConfigError::for_public_keys)
    }

    /// Sets how far, either way, a timestamp may be from `now` (whole seconds).
    #[must_use]
    pub fn with_tolerance(mut self, tolerance: Duration) -> Verifier {
        self.tolerance = tolerance.as_secs();
        self
    }

    /// The configured tolerance.
    pub fn tolerance(&self) -> Duration {
        Duration::from_secs(self.tolerance)
    }

    /// How many secrets this verifier accepts (0 for a verifier with public keys).
    pub fn secret_count(&self) -> usize {
        match &self.keys {
            Keys::Secrets(secrets) => secrets.len(),
            Keys::PublicKeys(_) => 0,
        }
    }

    /// How many public keys this verifier accepts (0 for a verifier with secrets).
    pub fn public_key_count(&self) -> usize {
        match &self.keys {
            Keys::Secrets(_) => 0,
            Keys::PublicKeys(keys) => keys.len(),
        }
    }

    /// Verifies `header` (the `X-Kxp-Signature` value; empty when the request had none) over
    /// the raw `body` bytes, at `now_unix_seconds`.
    pub fn verify<'b, H: AsRef<[u8]> + ?Sized>(
        &self,
        header: &H,
        body: &'b [u8],
        now_unix_seconds: u64,
    ) -> Result<Verified<'b>, Error> {
        let (timestamp, secret_index) = match &self.keys {
            Keys::Secrets(secrets) => verify_v1(secrets, header, body)?,
            Keys::PublicKeys(keys) => verify_v1a(keys, header, body)?,
        };

        if timestamp < now_unix_seconds.saturating_sub(self.tolerance) {
            return Err(Error::too_old(
                now_unix_seconds.saturating_sub(timestamp),
                self.tolerance,
            ));
        }
        if timestamp > now_unix_seconds.saturating_add(self.tolerance) {
            return Err(Error::in_future(
                timestamp.saturating_sub(now_unix_seconds),
                self.tolerance,
            ));
        }
        Ok(Verified {
            body,
            timestamp,
            secret_index,
        })
    }

    /// [`verify`](Verifier::verify) a body held in an owned buffer, keeping the buffer with the
    /// proof.
    ///
    /// ```
    /// use kxp_verify::{Secret, Signer, Verifier};
    ///
    /// let body: Vec<u8> = b"{}".to_vec();
    /// let header = Signer::new(Secret::new("s")?).sign(1000, &body).to_string();
    /// let verifier = Verifier::new(Secret::new("s")?);
    /// let verified = verifier.verify_owned(&header, body, 1000)?;
    /// assert_eq!(verified.body(), b"{}");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn verify_owned<B: AsRef<[u8]>, H: AsRef<[u8]> + ?Sized>(
        &self,
        header: &H,
        body: B,
        now_unix_seconds: u64,
    ) -> Result<VerifiedBuf<B>, Error> {
        let Verified {
            timestamp,
            secret_index,
            ..
        } = self.verify(header, body.as_ref(), now_unix_seconds)?;
        Ok(VerifiedBuf {
            buf: body,
            timestamp,
            secret_index,
        })
    }

    /// [`verify`](Verifier::verify) at the system clock's current time.
    #[cfg(feature = "std")]
    pub fn verify_now<'b, H: AsRef<[u8]> + ?Sized>(
        &self,
        header: &H,
        body: &'b [u8],
    ) -> Result<Verified<'b>, Error> {
        self.verify(header, body, unix_now())
    }
}

/// Parse, then the signature: the `t` of a header whose `v1` matches one of `secrets`, and
/// which secret it was.
#[inline]
fn verify_v1<H: AsRef<[u8]> + ?Sized>(
    secrets: &Keyring<Secret>,
    header: &H,
    body: &[u8],
) -> Result<(u64, usize), Error> {
    let header = SignatureHeader::parse(header)?;

    let timestamp_digits = header.timestamp_digits();
    // Every signature is compared with every MAC in constant time; which one matched is
    // only known once a genuine signature did, so the search leaks nothing to a forger.
    // The answer is the first signature in header order that any secret matches, and the
    // first secret that matches it; secret by secret, that is the match at the earliest
    // position, found by the earliest secret.
    let mut matched: Option<(usize, usize)> = None;
    for (index, secret) in secrets.iter().enumerate() {
        let mac = secret.mac(timestamp_digits, body);
        for (position, signature) in header.signature_digits().enumerate() {
            if bool::from(hex::matches(&mac, signature))
                && matched.is_none_or(|(earliest, _)| position < earliest)
            {
                matched = Some((position, index));
            }
        }
    }
    let matched = matched.map(|(_, index)| index);
    let secret_index = matched.ok_or(Error::SIGNATURE_MISMATCH)?;
    Ok((header.timestamp(), secret_index))
}

/// Parse, then the signature: the `t` of a header whose `v1a` verifies by one of `keys`, and
/// which key it was.
///
/// The same answer as for `v1` (the first signature in header order that any key verifies,
/// by the first key that verifies it), but found by stopping at it: signatures and public keys
/// are public, so there is nothing for the order of the search to leak, and each try costs a
/// scalar multiplication. At most [`MAX_ED25519_SIGNATURES`](crate::MAX_ED25519_SIGNATURES)
/// signatures × [`MAX_SECRETS`](crate::MAX_SECRETS) keys are tried, whatever the header.
fn verify_v1a<H: AsRef<[u8]> + ?Sized>(
    keys: &Keyring<PublicKey>,
    header: &H,
    body: &[u8],
) -> Result<(u64, usize), Error> {
    let header = Ed25519Header::parse(header)?;
    let timestamp_digits = header.timestamp_digits();
    header
        .signatures()
        .iter()
        .find_map(|signature| {
            let signature = CheckedSignature::new(signature)?;
            keys.iter()
                .position(|key| key.verifies(timestamp_digits, body, &signature))
        })
        .map(|index| (header.timestamp(), index))
        .ok_or(Error::SIGNATURE_MISMATCH)
}

/// The system clock in Unix seconds; a clock set before 1970 reads as 0.
#[cfg(feature = "std")]
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A body whose signature checked out. Only [`Verifier::verify`] makes one, so holding a
/// `Verified` proves the bytes are authentic and fresh; with the `serde` feature it is also the
/// only way to parse the [`Event`](crate::Event) envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verified<'b> {
    body: &'b [u8],
    timestamp: u64,
    secret_index: usize,
}

impl<'b> Verified<'b> {
    /// The verified raw body.
    pub fn body(&self) -> &'b [u8] {
        self.body
    }

    /// The signed `t` value (Unix seconds).
    pub fn timestamp(&self) -> u64 {
        self.timestamp
    }

    /// Which configured secret (or public key, for a verifier with public keys) matched, 0 for
    /// the first. During a rotation, a match on an old one tells you which senders have not
    /// switched yet.
    pub fn secret_index(&self) -> usize {
        self.secret_index
    }
}

/// A [`Verified`] body that owns its buffer (`Vec<u8>`, `bytes::Bytes`, …), so it can outlive
/// the request (in a request extension, across an `.await`). Made only by
/// [`Verifier::verify_owned`], so it carries the same proof.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedBuf<B> {
    buf: B,
    timestamp: u64,
    secret_index: usize,
}

impl<B: AsRef<[u8]>> VerifiedBuf<B> {
    /// The verified body, borrowed as a [`Verified`] again (to [`parse`](Verified::parse) it,
    /// for instance).
    pub fn verified(&self) -> Verified<'_> {
        Verified {
            body: self.buf.as_ref(),
            timestamp: self.timestamp,
            secret_index: self.secret_index,
        }
    }

    /// The verified raw body.
    pub fn body(&self) -> &[u8] {
        self.buf.as_ref()
    }

    /// The buffer itself (a `bytes::Bytes`, say), still under the proof.
    pub fn get_ref(&self) -> &B {
        &self.buf
    }

    /// The signed `t` value (Unix seconds).
    pub fn timestamp(&self) -> u64 {
        self.timestamp
    }

    /// Which configured secret or public key matched (0 for the first).
    pub fn secret_index(&self) -> usize {
        self.secret_index
    }

    /// The buffer, giving up the proof.
    pub fn into_inner(self) -> B {
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::ToOwned;
    use std::format;
    use std::string::ToString;

    use crate::{Secret, Signer, Verifier};

    /// With several secrets and several signatures, the answer is the first signature in
    /// header order that any secret matches, and the first secret that matches it (the order
    /// of the search changed; this answer did not).
    #[test]
    fn the_first_matching_signature_names_the_secret() {
        let body = b"{}";
        let sign = |secret: &str| {
            let header = Signer::new(Secret::new(secret).unwrap())
                .sign(1000, body)
                .to_string();
            header.rsplit_once("v1=").unwrap().1.to_owned()
        };
        let (a, b) = (sign("a"), sign("b"));
        let verifier =
            Verifier::with_secrets(["a", "b", "c"].map(|s| Secret::new(s).unwrap())).unwrap();
        for (signatures, expected) in [([&b, &a], 1), ([&a, &b], 0), ([&b, &b], 1), ([&a, &a], 0)] {
            let header = format!("t=1000,v1={},v1={}", signatures[0], signatures[1]);
            let verified = verifier.verify(&header, body, 1000).unwrap();
            assert_eq!(verified.secret_index(), expected, "{header}");
            let spaced = format!("t=1000, v1={} ,v0=x, v1={}", signatures[0], signatures[1]);
            let verified = verifier.verify(&spaced, body, 1000).unwrap();
            assert_eq!(verified.secret_index(), expected, "{spaced}");
        }
        let forged = format!("t=1000,v1={}", "0".repeat(64));
        assert!(verifier.verify(&forged, body, 1000).is_err());
    }
}
