//! Verification: parse, then signature, then timestamp, in that order.

use core::time::Duration;

use crate::ed25519::{CheckedSignature, PublicKey};
use crate::error::{ConfigError, Error};
use crate::fingerprint::KeyFingerprint;
use crate::header::{Ed25519Header, SignatureHeader};
use crate::secret::{Keyring, Secret};
use crate::{DEFAULT_TOLERANCE, hex, standard};

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
        let found = match &self.keys {
            Keys::Secrets(secrets) => verify_v1(secrets, header, body)?,
            Keys::PublicKeys(keys) => verify_v1a(keys, header, body)?,
        };
        self.fresh(found, body, now_unix_seconds)
    }

    /// Verifies a Standard Webhooks 1.0 request: its `webhook-id`, `webhook-timestamp` and
    /// `webhook-signature` header values (each empty when the request lacked it) over the raw
    /// `body` bytes, at `now_unix_seconds`. Pure, allocation-free and panic-free like
    /// [`verify`](Verifier::verify), with the same order of checks and the same error kinds,
    /// and the same keys: a verifier with secrets (from [`Secret::from_whsec`]) checks the `v1`
    /// (HMAC-SHA256) items, one with public keys ([`PublicKey::from_whpk`]) the `v1a` (Ed25519)
    /// items, and each ignores the other's items and any other version.
    ///
    /// 1. **Parse**: an empty header is `missing_header`; then `malformed_header` for an id
    ///    that is not visible ASCII without `.`, a timestamp that is not 1 to 19 digits
    ///    without a leading zero, a signature list over [`MAX_HEADER_LEN`](crate::MAX_HEADER_LEN)
    ///    bytes, of more than [`MAX_SIGNATURE_ITEMS`](crate::MAX_SIGNATURE_ITEMS) items, with
    ///    an item that is not `<version>,<value>`, a value of this verifier's version that is
    ///    not the canonical base64 of a MAC or signature, more than
    ///    [`MAX_ED25519_SIGNATURES`](crate::MAX_ED25519_SIGNATURES) `v1a` items, or none of
    ///    this verifier's version.
    /// 2. **Signature** over `<id>.<timestamp>.<body>`: none matches, `signature_mismatch`.
    /// 3. **Timestamp** within the [tolerance](Verifier::tolerance): `timestamp_too_old` or
    ///    `timestamp_in_future` otherwise.
    ///
    /// Once verified, the `webhook-id` is authenticated too: it is the dedup key the sender
    /// keeps across retries.
    ///
    /// ```
    /// use kxp_verify::{ErrorKind, Secret, Verifier};
    ///
    /// // At start-up: the endpoint's secret, as the sender shows it.
    /// let verifier = Verifier::new(Secret::from_whsec("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")?);
    ///
    /// // Per request: the three header values and the raw body, exactly as received.
    /// let (id, timestamp) = ("msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330");
    /// let signature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
    /// let body = br#"{"test": 2432232314}"#;
    /// let verified = verifier.verify_standard(id, timestamp, signature, body, 1614265330)?;
    /// assert_eq!(verified.body(), body);
    ///
    /// let replayed = verifier.verify_standard(id, timestamp, signature, body, 1614265330 + 3600);
    /// assert_eq!(replayed.unwrap_err().kind(), ErrorKind::TimestampTooOld);
    /// let tampered = verifier.verify_standard("msg_2", timestamp, signature, body, 1614265330);
    /// assert_eq!(tampered.unwrap_err().kind(), ErrorKind::SignatureMismatch);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn verify_standard<'b, I, T, S>(
        &self,
        id: &I,
        timestamp: &T,
        signature: &S,
        body: &'b [u8],
        now_unix_seconds: u64,
    ) -> Result<Verified<'b>, Error>
    where
        I: AsRef<[u8]> + ?Sized,
        T: AsRef<[u8]> + ?Sized,
        S: AsRef<[u8]> + ?Sized,
    {
        let (id, timestamp, signature) = (id.as_ref(), timestamp.as_ref(), signature.as_ref());
        let found = match &self.keys {
            Keys::Secrets(secrets) => standard::verify_v1(secrets, id, timestamp, signature, body)?,
            Keys::PublicKeys(keys) => standard::verify_v1a(keys, id, timestamp, signature, body)?,
        };
        self.fresh(found, body, now_unix_seconds)
    }

    /// [`verify_standard`](Verifier::verify_standard), keeping the body: what a server
    /// adapter hands on, like [`verify_owned`](Verifier::verify_owned) for the kxp format.
    ///
    /// ```
    /// use kxp_verify::{Secret, Verifier};
    ///
    /// let verifier = Verifier::new(Secret::from_whsec("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")?);
    /// let body = br#"{"test": 2432232314}"#.to_vec();
    /// let verified = verifier.verify_standard_owned(
    ///     "msg_p5jXN8AQM9LWM0D4loKWxJek",
    ///     "1614265330",
    ///     "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
    ///     body,
    ///     1614265330,
    /// )?;
    /// assert_eq!(verified.timestamp(), 1614265330);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn verify_standard_owned<B, I, T, S>(
        &self,
        id: &I,
        timestamp: &T,
        signature: &S,
        body: B,
        now_unix_seconds: u64,
    ) -> Result<VerifiedBuf<B>, Error>
    where
        B: AsRef<[u8]>,
        I: AsRef<[u8]> + ?Sized,
        T: AsRef<[u8]> + ?Sized,
        S: AsRef<[u8]> + ?Sized,
    {
        let Verified {
            timestamp,
            secret_index,
            key,
            ..
        } = self.verify_standard(id, timestamp, signature, body.as_ref(), now_unix_seconds)?;
        Ok(VerifiedBuf {
            buf: body,
            timestamp,
            secret_index,
            key,
        })
    }

    /// [`verify_standard`](Verifier::verify_standard) at the system clock's current time.
    #[cfg(feature = "std")]
    pub fn verify_standard_now<'b, I, T, S>(
        &self,
        id: &I,
        timestamp: &T,
        signature: &S,
        body: &'b [u8],
    ) -> Result<Verified<'b>, Error>
    where
        I: AsRef<[u8]> + ?Sized,
        T: AsRef<[u8]> + ?Sized,
        S: AsRef<[u8]> + ?Sized,
    {
        self.verify_standard(id, timestamp, signature, body, unix_now())
    }

    /// The last check, shared by both formats: an authentic signature's timestamp must lie
    /// within the tolerance of `now_unix_seconds`.
    #[inline]
    fn fresh<'b>(
        &self,
        found: Match,
        body: &'b [u8],
        now_unix_seconds: u64,
    ) -> Result<Verified<'b>, Error> {
        let Match {
            timestamp,
            secret_index,
            key,
        } = found;
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
            key,
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
            key,
            ..
        } = self.verify(header, body.as_ref(), now_unix_seconds)?;
        Ok(VerifiedBuf {
            buf: body,
            timestamp,
            secret_index,
            key,
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

/// What the signature check found: the signed `t`, and which key matched (its place in the
/// verifier and its fingerprint, kept beside the key since it was configured).
pub(crate) struct Match {
    pub(crate) timestamp: u64,
    pub(crate) secret_index: usize,
    pub(crate) key: KeyFingerprint,
}

/// Parse, then the signature: the `t` of a header whose `v1` matches one of `secrets`, and
/// which secret it was.
#[inline]
fn verify_v1<H: AsRef<[u8]> + ?Sized>(
    secrets: &Keyring<Secret>,
    header: &H,
    body: &[u8],
) -> Result<Match, Error> {
    let header = SignatureHeader::parse(header)?;

    let timestamp_digits = header.timestamp_digits();
    // Every signature is compared with every MAC in constant time; which one matched is
    // only known once a genuine signature did, so the search leaks nothing to a forger.
    // The answer is the first signature in header order that any secret matches, and the
    // first secret that matches it; secret by secret, that is the match at the earliest
    // position, found by the earliest secret.
    let mut matched: Option<(usize, usize, KeyFingerprint)> = None;
    for (index, secret) in secrets.iter().enumerate() {
        let mac = secret.mac(timestamp_digits, body);
        for (position, signature) in header.signature_digits().enumerate() {
            if bool::from(hex::matches(&mac, signature))
                && matched.is_none_or(|(earliest, _, _)| position < earliest)
            {
                matched = Some((position, index, secret.fingerprint()));
            }
        }
    }
    let (_, secret_index, key) = matched.ok_or(Error::SIGNATURE_MISMATCH)?;
    Ok(Match {
        timestamp: header.timestamp(),
        secret_index,
        key,
    })
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
) -> Result<Match, Error> {
    let header = Ed25519Header::parse(header)?;
    let timestamp_digits = header.timestamp_digits();
    header
        .signatures()
        .iter()
        .find_map(|signature| {
            let signature = CheckedSignature::new(signature)?;
            keys.iter()
                .enumerate()
                .find(|(_, key)| key.verifies(timestamp_digits, body, &signature))
        })
        .map(|(secret_index, key)| Match {
            timestamp: header.timestamp(),
            secret_index,
            key: key.fingerprint(),
        })
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
    key: KeyFingerprint,
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

    /// The [fingerprint](crate::key_fingerprint) of the key that verified the body: the secret
    /// (of its string's bytes) or the Ed25519 public key (of its 32 bytes) at
    /// [`secret_index`](Verified::secret_index), the one that matched the first signature in
    /// header order that any key matched.
    ///
    /// A receiver sends it back in `X-Kxp-Verified-Key` on its 2xx, so that the sender learns
    /// which of the keys it signs with during a rotation the receiver actually uses, and can end
    /// the rotation once the receiver has switched to the new one, rather than when a timer runs
    /// out. An index would not do: it counts the receiver's keys, in the receiver's order, which
    /// the sender does not know; the fingerprint names the key itself, and tells nothing about it.
    /// It was computed when the key was configured, so reading it costs nothing per request.
    ///
    /// ```
    /// use kxp_verify::{Signer, Verifier, key_fingerprint};
    ///
    /// let verifier = Verifier::from_secret_list("new,old")?;
    /// // A sender still on the old secret.
    /// let header = Signer::from_secret_list("old")?.sign(1764464523, b"{}").to_string();
    /// let verified = verifier.verify(&header, b"{}", 1764464523)?;
    /// assert_eq!(verified.key_fingerprint(), key_fingerprint(b"old"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn key_fingerprint(&self) -> KeyFingerprint {
        self.key
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
    key: KeyFingerprint,
}

impl<B: AsRef<[u8]>> VerifiedBuf<B> {
    /// The verified body, borrowed as a [`Verified`] again (to [`parse`](Verified::parse) it,
    /// for instance).
    pub fn verified(&self) -> Verified<'_> {
        Verified {
            body: self.buf.as_ref(),
            timestamp: self.timestamp,
            secret_index: self.secret_index,
            key: self.key,
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

    /// The fingerprint of the key that verified the body: see [`Verified::key_fingerprint`].
    pub fn key_fingerprint(&self) -> KeyFingerprint {
        self.key
    }

    /// The buffer, giving up the proof.
    pub fn into_inner(self) -> B {
        self.buf
    }

    /// The verified envelope with its `data_jwe` decrypted with `key` back into `data`
    /// ([`kxp_jwe::open_envelope`]), under the same proof: the signature covered the JWE, and
    /// the JWE authenticates what it decrypts to. Signature first, then decryption, so nothing
    /// unauthenticated is ever decrypted. An envelope without `data_jwe` is refused
    /// ([`kxp_jwe::EnvelopeError::NotEncrypted`]).
    #[cfg(feature = "jwe")]
    pub fn decrypt<C: From<std::vec::Vec<u8>>>(
        &self,
        key: &kxp_jwe::DecryptionKey,
    ) -> Result<VerifiedBuf<C>, kxp_jwe::EnvelopeError> {
        let mut opened = kxp_jwe::open_envelope(key, self.buf.as_ref())?;
        Ok(VerifiedBuf {
            buf: C::from(core::mem::take(&mut *opened)),
            timestamp: self.timestamp,
            secret_index: self.secret_index,
            key: self.key,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::ToOwned;
    use std::format;
    use std::string::ToString;

    use crate::{PublicKey, Secret, Signer, SigningKey, Verifier, key_fingerprint};

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

    /// During a rotation the sender signs with both secrets (`v1=<new>,v1=<old>`): the
    /// fingerprint names the receiver's secret that matched, whichever it holds, and follows the
    /// index (the first signature in header order, by the first secret that matches it).
    #[test]
    fn the_fingerprint_names_the_secret_that_matched() {
        let (new, old) = (
            "41ab92590637ac82026ca65266b2898428ea491b1e6d543d7202cf486ea62965",
            "old-secret",
        );
        let body = b"{}";
        let rotating = Signer::with_secrets([new, old].map(|s| Secret::new(s).unwrap()))
            .unwrap()
            .sign(1000, body)
            .to_string();
        assert_eq!(rotating.matches("v1=").count(), 2, "{rotating}");
        let old_only = Signer::new(Secret::new(old).unwrap())
            .sign(1000, body)
            .to_string();
        // Known independently (Python's hashlib): the first 8 bytes of
        // SHA-256("kxp-key-id\0" + new).
        let new_fingerprint = "af17edef1cfa9c63";
        for (secrets, header, index, expected) in [
            (
                &[new, old][..],
                &rotating,
                0,
                key_fingerprint(new.as_bytes()),
            ),
            (&[old, new], &rotating, 1, key_fingerprint(new.as_bytes())),
            (&[old], &rotating, 0, key_fingerprint(old.as_bytes())),
            (&[new], &rotating, 0, key_fingerprint(new.as_bytes())),
            (&[new, old], &old_only, 1, key_fingerprint(old.as_bytes())),
        ] {
            let verifier =
                Verifier::with_secrets(secrets.iter().map(|s| Secret::new(s).unwrap())).unwrap();
            let verified = verifier.verify(header, body, 1000).unwrap();
            assert_eq!(
                (verified.secret_index(), verified.key_fingerprint()),
                (index, expected),
                "{secrets:?} {header}"
            );
            let owned = verifier.verify_owned(header, body.to_vec(), 1000).unwrap();
            assert_eq!(owned.key_fingerprint(), expected);
            assert_eq!(owned.verified().key_fingerprint(), expected);
        }
        assert_eq!(key_fingerprint(new.as_bytes()).to_string(), new_fingerprint);
        assert_eq!(
            Secret::new(new).unwrap().fingerprint().to_string(),
            new_fingerprint
        );
        // A trimmed list names the trimmed secret: the key is what is trimmed to.
        let verifier = Verifier::from_secret_list(&format!(" {new} , {old} ")).unwrap();
        let verified = verifier.verify(&old_only, body, 1000).unwrap();
        assert_eq!(verified.key_fingerprint(), key_fingerprint(old.as_bytes()));
    }

    /// For Ed25519 the fingerprint is that of the 32 raw public-key bytes, of the first key
    /// that verifies the first `v1a` that any key verifies.
    #[test]
    fn the_fingerprint_names_the_public_key_that_verified() {
        let body = b"{}";
        let (first, second, other) = (
            SigningKey::from_seed(&[1; 32]),
            SigningKey::from_seed(&[2; 32]),
            SigningKey::from_seed(&[3; 32]),
        );
        let item = |key: &SigningKey| {
            let header = key.sign(1000, body).to_string();
            header.split_once(',').unwrap().1.to_owned()
        };
        let verifier =
            Verifier::with_public_keys([first.public_key(), second.public_key()]).unwrap();
        let fingerprint = |key: &SigningKey| key_fingerprint(&key.public_key().to_bytes());
        for (items, index, expected) in [
            ([item(&second), item(&first)], 1, fingerprint(&second)),
            ([item(&first), item(&second)], 0, fingerprint(&first)),
            ([item(&other), item(&second)], 1, fingerprint(&second)),
        ] {
            let header = format!("t=1000,{},{}", items[0], items[1]);
            let verified = verifier.verify(&header, body, 1000).unwrap();
            assert_eq!(
                (verified.secret_index(), verified.key_fingerprint()),
                (index, expected),
                "{header}"
            );
        }
        assert_ne!(fingerprint(&first), fingerprint(&second));
        assert_eq!(
            first.public_key().fingerprint(),
            key_fingerprint(&first.public_key().to_bytes())
        );
        // The same key read back from its bytes has the same fingerprint.
        let reread = PublicKey::from_bytes(&first.public_key().to_bytes()).unwrap();
        assert_eq!(reread.fingerprint(), fingerprint(&first));
    }
}
