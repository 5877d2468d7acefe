//! Ed25519 keys for `v1a` items: public keys checked once when they are configured, the strict
//! verification of one signature, and a signing key for tests and senders.
//!
//! The rules are `verify_strict`'s (non-canonical `S`, non-canonical encodings of `R` or of the
//! key, and small-order `R` or keys are refused), with one difference of form: the signed message
//! is `<t>.<body>` in two parts, which `verify_strict` cannot take without copying the body into
//! one buffer, and this crate does not allocate. So the checks `verify_strict` adds to the plain
//! verification are made here: the key's when it is configured ([`PublicKey::from_bytes`]), `R`'s
//! once per signature ([`CheckedSignature`]); the plain verification already refuses a
//! non-canonical `S` and, by comparing encodings, a non-canonical `R`. (The `S` check holds as long
//! as nothing in a build turns on ed25519-dalek's `legacy_compatibility` feature, which relaxes
//! it; the `non_canonical_s` vector fails if something does.)

use core::fmt;

use ed25519_dalek::ed25519::signature::{MultipartSigner, MultipartVerifier};
use ed25519_dalek::{Signature, SigningKey as DalekSigningKey, VerifyingKey};

use crate::base64;
use crate::error::{ConfigError, Error};
use crate::fingerprint::{KeyFingerprint, key_fingerprint};
use crate::standard::{self, StandardEd25519SignedHeader};

/// The bytes of a `v1a` signature.
pub(crate) const SIGNATURE_LEN: usize = 64;

/// An Ed25519 public key a [`Verifier`](crate::Verifier) accepts `v1a` signatures by.
///
/// Made only from a key that is safe to verify with: the 32 bytes must be the canonical encoding
/// of a curve point (so one key has one spelling) and the point must not have small order (a
/// small-order key makes a signature valid for almost any message). A bad key is refused here,
/// at start-up, rather than failing every request later.
///
/// ```
/// use kxp_verify::{ConfigError, PublicKey};
///
/// let key = PublicKey::from_base64("11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=")?;
/// assert_eq!(key.to_bytes()[0], 0xd7);
///
/// // The identity point has small order: it would accept forgeries.
/// let mut identity = [0u8; 32];
/// identity[0] = 1;
/// assert_eq!(PublicKey::from_bytes(&identity).unwrap_err(), ConfigError::WeakPublicKey);
/// # Ok::<(), ConfigError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PublicKey {
    key: VerifyingKey,
    /// [`key_fingerprint`] of the 32 bytes, computed with the key (so a verification that names
    /// it hashes nothing). A function of `key`, so the derived equality is still the key's.
    fingerprint: KeyFingerprint,
}

impl PublicKey {
    /// Checks and keeps the 32 raw bytes of a public key.
    pub fn from_bytes(bytes: &[u8; 32]) -> Result<PublicKey, ConfigError> {
        let key = VerifyingKey::from_bytes(bytes).map_err(|_| ConfigError::InvalidPublicKey)?;
        // Decompression accepts some non-canonical spellings (a `y` of `p` or more, a sign bit
        // on `x = 0`); the signed hash covers the spelling, so only the canonical one is kept.
        if key.to_edwards().compress().as_bytes() != bytes {
            return Err(ConfigError::InvalidPublicKey);
        }
        if key.is_weak() {
            return Err(ConfigError::WeakPublicKey);
        }
        Ok(PublicKey::new(key))
    }

    fn new(key: VerifyingKey) -> PublicKey {
        PublicKey {
            key,
            fingerprint: key_fingerprint(key.as_bytes()),
        }
    }

    /// A public key as the sender's API shows it: the padded standard base64 of its 32 bytes
    /// (spaces around it are trimmed, as a hand-written environment variable tends to have them).
    pub fn from_base64(text: &str) -> Result<PublicKey, ConfigError> {
        let bytes =
            base64::decode::<32>(text.trim().as_bytes()).ok_or(ConfigError::InvalidPublicKey)?;
        PublicKey::from_bytes(&bytes)
    }

    /// A public key as Standard Webhooks writes it, `whpk_<padded standard base64 of 32
    /// bytes>`. The prefix may be left out, as the official libraries allow for `whsec_`
    /// secrets; without it this is [`from_base64`](PublicKey::from_base64), so one
    /// configuration value can hold either spelling. The checks are `from_bytes`'s.
    ///
    /// ```
    /// use kxp_verify::PublicKey;
    ///
    /// let key = PublicKey::from_whpk("whpk_11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=")?;
    /// assert_eq!(key, PublicKey::from_base64("11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=")?);
    /// # #[cfg(feature = "alloc")]
    /// assert_eq!(key.to_whpk(), "whpk_11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=");
    /// # Ok::<(), kxp_verify::ConfigError>(())
    /// ```
    pub fn from_whpk(text: &str) -> Result<PublicKey, ConfigError> {
        let text = text.trim();
        PublicKey::from_base64(text.strip_prefix(WHPK_PREFIX).unwrap_or(text))
    }

    /// The Standard Webhooks text of this key, `whpk_<padded standard base64>`, for a sender
    /// to publish; [`from_whpk`](PublicKey::from_whpk) reads it back.
    #[cfg(feature = "alloc")]
    pub fn to_whpk(&self) -> alloc::string::String {
        let mut text = [0u8; base64::encoded_len(32)];
        let text = base64::encode(&self.to_bytes(), &mut text);
        let mut whpk = alloc::string::String::from(WHPK_PREFIX);
        // Base64 digits and `=` are ASCII: each byte is one char.
        whpk.extend(text.iter().map(|&b| char::from(b)));
        whpk
    }

    /// The 32 raw bytes.
    pub fn to_bytes(&self) -> [u8; 32] {
        self.key.to_bytes()
    }

    /// The [`key_fingerprint`] of the 32 raw bytes: what a receiver answers in
    /// `X-Kxp-Verified-Key` when this key verified a request. A public key is no secret, but
    /// the fingerprint is the one short name both sides use for a key, whatever its kind.
    ///
    /// ```
    /// use kxp_verify::{PublicKey, SigningKey, key_fingerprint};
    ///
    /// let key = PublicKey::from_base64("11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=")?;
    /// assert_eq!(key.fingerprint().to_string(), "92f159740ef1b383");
    ///
    /// let key = SigningKey::from_seed(&[7; 32]).public_key();
    /// assert_eq!(key.fingerprint(), key_fingerprint(&key.to_bytes()));
    /// # Ok::<(), kxp_verify::ConfigError>(())
    /// ```
    pub fn fingerprint(&self) -> KeyFingerprint {
        self.fingerprint
    }

    /// Whether `signature` is this key's strict Ed25519 signature over `<t digits>.<body>`.
    pub(crate) fn verifies(
        &self,
        timestamp_digits: &[u8],
        body: &[u8],
        signature: &CheckedSignature,
    ) -> bool {
        self.verifies_parts(&[timestamp_digits, b".", body], signature)
    }

    /// Whether `signature` is this key's strict Ed25519 signature over the concatenation of
    /// `parts` (never copied together).
    pub(crate) fn verifies_parts(&self, parts: &[&[u8]], signature: &CheckedSignature) -> bool {
        self.key
            .multipart_verify(parts, &signature.signature)
            .is_ok()
    }
}

/// What marks a Standard Webhooks public key.
const WHPK_PREFIX: &str = "whpk_";

/// A `v1a` signature whose `R` passed what `verify_strict` adds for it (the key's checks were
/// made when the key was): `R` is a curve point, and not one of small order. Checked once per
/// signature rather than once per signature and key, since it costs a point decompression.
pub(crate) struct CheckedSignature {
    signature: Signature,
}

impl CheckedSignature {
    /// The signature, or `None` if its `R` fails the checks (so it verifies with no key).
    pub(crate) fn new(bytes: &[u8; SIGNATURE_LEN]) -> Option<CheckedSignature> {
        let signature = Signature::from_bytes(bytes);
        let r = VerifyingKey::from_bytes(signature.r_bytes()).ok()?;
        (!r.is_weak()).then_some(CheckedSignature { signature })
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut text = [0u8; base64::encoded_len(32)];
        let text = base64::encode(&self.to_bytes(), &mut text);
        let text = core::str::from_utf8(text).map_err(|_| fmt::Error)?;
        f.debug_tuple("PublicKey").field(&text).finish()
    }
}

/// An Ed25519 private key that writes `v1a` signatures: for tests, and for a sender.
///
/// It is wiped on drop and its `Debug` prints `[redacted]`.
///
/// ```
/// use kxp_verify::{SigningKey, Verifier};
///
/// let key = SigningKey::from_seed(&[7; 32]);
/// let verifier = Verifier::with_public_keys([key.public_key()])?;
/// let header = key.sign(1764464523, b"{}").to_string();
/// assert!(header.starts_with("t=1764464523,v1a="));
/// assert!(verifier.verify(&header, b"{}", 1764464523).is_ok());
/// assert_eq!(format!("{key:?}"), "SigningKey([redacted])");
/// # Ok::<(), kxp_verify::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct SigningKey {
    key: DalekSigningKey,
}

impl SigningKey {
    /// The key of a 32-byte seed (RFC 8032's private key). Make the seed with a CSPRNG.
    pub fn from_seed(seed: &[u8; 32]) -> SigningKey {
        SigningKey {
            key: DalekSigningKey::from_bytes(seed),
        }
    }

    /// The public key receivers verify with.
    pub fn public_key(&self) -> PublicKey {
        PublicKey::new(self.key.verifying_key())
    }

    /// Signs `body` as sent at `timestamp` (Unix seconds, at most
    /// [`Signer::MAX_TIMESTAMP`](crate::Signer::MAX_TIMESTAMP), as for `v1`). The result's
    /// `Display` is the header value `t=<t>,v1a=<base64>`.
    pub fn sign(&self, timestamp: u64, body: &[u8]) -> Ed25519SignedHeader {
        let timestamp = timestamp.min(crate::Signer::MAX_TIMESTAMP);
        let mut digits = [0u8; 20];
        let digits = crate::sign::decimal(timestamp, &mut digits);
        let signature = self.key.multipart_sign(&[digits, b".", body]).to_bytes();
        Ed25519SignedHeader {
            timestamp,
            signature,
        }
    }

    /// Signs `body` for Standard Webhooks: an Ed25519 signature over
    /// `<webhook-id>.<webhook-timestamp>.<body>`, whose `Display` is the `v1a,<base64>` item of
    /// `webhook-signature`. The sender writes `id` and the result's
    /// [`timestamp`](StandardEd25519SignedHeader::timestamp) (clamped as for
    /// [`sign`](SigningKey::sign)) as the other two headers.
    ///
    /// An `id` a verifier would call malformed is refused here rather than signed (empty, or
    /// not visible ASCII without `.`; see
    /// [`Verifier::verify_standard`](crate::Verifier::verify_standard)).
    ///
    /// ```
    /// use kxp_verify::{SigningKey, Verifier};
    ///
    /// let key = SigningKey::from_seed(&[7; 32]);
    /// let signature = key.sign_standard("msg_1", 1764464523, b"{}")?.to_string();
    /// assert!(signature.starts_with("v1a,"));
    /// let verifier = Verifier::with_public_keys([key.public_key()])?;
    /// verifier.verify_standard("msg_1", "1764464523", &signature, b"{}", 1764464523)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn sign_standard<I: AsRef<[u8]> + ?Sized>(
        &self,
        id: &I,
        timestamp: u64,
        body: &[u8],
    ) -> Result<StandardEd25519SignedHeader, Error> {
        let id = id.as_ref();
        standard::check_id(id)?;
        let timestamp = timestamp.min(crate::Signer::MAX_TIMESTAMP);
        let mut digits = [0u8; 20];
        let digits = crate::sign::decimal(timestamp, &mut digits);
        let signature = self
            .key
            .multipart_sign(&[id, b".", digits, b".", body])
            .to_bytes();
        Ok(StandardEd25519SignedHeader::new(timestamp, signature))
    }
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SigningKey([redacted])")
    }
}

/// A header with one `v1a` signature, made by [`SigningKey::sign`]. Its `Display` writes the
/// header value without allocating.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Ed25519SignedHeader {
    timestamp: u64,
    signature: [u8; SIGNATURE_LEN],
}

impl Ed25519SignedHeader {
    /// The `t` value.
    pub fn timestamp(&self) -> u64 {
        self.timestamp
    }

    /// The raw 64-byte signature.
    pub fn signature(&self) -> &[u8; 64] {
        &self.signature
    }
}

impl fmt::Display for Ed25519SignedHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut text = [0u8; base64::encoded_len(SIGNATURE_LEN)];
        let text = base64::encode(&self.signature, &mut text);
        let text = core::str::from_utf8(text).map_err(|_| fmt::Error)?;
        write!(f, "t={},v1a={text}", self.timestamp)
    }
}

impl fmt::Debug for Ed25519SignedHeader {
    // As for `SignedHeader`: printing it would put signatures in logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ed25519SignedHeader")
            .field("timestamp", &self.timestamp)
            .finish_non_exhaustive()
    }
}
