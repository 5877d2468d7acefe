//! Secrets, held only as the pre-keyed HMAC state they produce.

use core::fmt;

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

use crate::ed25519::PublicKey;
use crate::error::ConfigError;
use crate::fingerprint::{KeyFingerprint, key_fingerprint};
use crate::{MAX_SECRETS, base64};

/// One webhook signing secret.
///
/// The key is the secret string's own bytes, exactly as shown to the merchant; it is never
/// hex-decoded, so `createHmac('sha256', secret)` in any language agrees with it.
///
/// The string itself is not kept: only the HMAC state keyed with it, computed once here so that
/// each message costs one HMAC pass over its bytes and no re-keying. That state is as sensitive
/// as the key, so it is wiped on drop, and `Debug` prints `[redacted]`. Beside it is the
/// secret's [`fingerprint`](Secret::fingerprint), also computed here: once the string is gone it
/// could not be computed later, and a receiver names the secret that verified a request by it.
///
/// ```
/// use kxp_verify::Secret;
///
/// let secret = Secret::new("41ab92590637ac82026ca65266b2898428ea491b1e6d543d7202cf486ea62965")?;
/// assert_eq!(format!("{secret:?}"), "Secret([redacted])");
/// assert_eq!(secret.fingerprint().to_string(), "af17edef1cfa9c63");
/// # Ok::<(), kxp_verify::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct Secret {
    keyed: Hmac<Sha256>,
    fingerprint: KeyFingerprint,
}

impl Secret {
    /// Keys the HMAC with `secret`'s bytes. Empty secrets are refused.
    pub fn new<S: AsRef<[u8]> + ?Sized>(secret: &S) -> Result<Secret, ConfigError> {
        let key = secret.as_ref();
        if key.is_empty() {
            return Err(ConfigError::EmptySecret);
        }
        // HMAC takes keys of any length (long ones are hashed first), so this cannot fail.
        let keyed = Hmac::<Sha256>::new_from_slice(key).map_err(|_| ConfigError::EmptySecret)?;
        Ok(Secret {
            keyed,
            fingerprint: key_fingerprint(key),
        })
    }

    /// A Standard Webhooks secret, `whsec_<standard base64 of the key bytes>`: the HMAC key is
    /// the decoded bytes, not the text (unlike [`Secret::new`], which keys with the string
    /// itself), so the [fingerprint](Secret::fingerprint) is theirs too.
    ///
    /// The official libraries (Python, JavaScript, Rust, 1.x) strip the `whsec_` prefix when it
    /// is there and base64-decode the rest either way, so a secret without the prefix is the
    /// bare base64, never the raw string; this does the same. Spaces around the text are
    /// trimmed; the base64 may lack its padding (the Python library reads it so), but is
    /// otherwise strict: standard alphabet only, nothing inside, the unused bits zero. The key
    /// is 1 to 64 bytes: the specification calls for 24 to 64, the official libraries accept
    /// any length but zero, and a longer one would need a heap to decode into.
    ///
    /// ```
    /// use kxp_verify::{ConfigError, Secret};
    ///
    /// let with = Secret::from_whsec("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")?;
    /// let without = Secret::from_whsec("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")?;
    /// assert_eq!(with.fingerprint(), without.fingerprint());
    /// assert_eq!(Secret::from_whsec("whsec_not base64").unwrap_err(), ConfigError::InvalidSecret);
    /// assert_eq!(Secret::from_whsec("whsec_").unwrap_err(), ConfigError::EmptySecret);
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn from_whsec(text: &str) -> Result<Secret, ConfigError> {
        let text = text.trim();
        let base64 = text.strip_prefix(WHSEC_PREFIX).unwrap_or(text);
        if base64.is_empty() {
            return Err(ConfigError::EmptySecret);
        }
        // Wiped on drop, whatever the outcome: a copy of the key the HMAC state stands for.
        let mut buf = zeroize::Zeroizing::new([0u8; MAX_WHSEC_KEY_LEN]);
        let key = base64::decode_unpadded_or_padded(base64.as_bytes(), &mut *buf)
            .ok_or(ConfigError::InvalidSecret)?;
        Secret::new(key)
    }

    /// The [`key_fingerprint`] of the secret string's bytes (the HMAC key): what a receiver
    /// answers in `X-Kxp-Verified-Key` when this secret verified a request, and what the
    /// sender's console shows for it. It tells which secret without revealing it.
    pub fn fingerprint(&self) -> KeyFingerprint {
        self.fingerprint
    }

    /// The key this secret signs catch-up feed requests with: a [`Secret`] keyed with
    /// HMAC-SHA256(secret, [`FEED_KEY_LABEL`]). A key of its own, so that a feed request's
    /// signature never passes as a webhook's, or a webhook's as a feed request's, though the
    /// receiver holds one secret for both; and a sender that reads the feed key learns nothing
    /// that signs webhooks.
    ///
    /// ```
    /// use kxp_verify::{Secret, Signer, Verifier, feed_message};
    ///
    /// let secret = Secret::new("whsec_test")?;
    /// let message = feed_message("GET", "/v1/endpoints/ep_1/feed?after=7");
    /// let header = Signer::new(secret.feed_key()).sign(1_700_000_000, &message).to_string();
    /// // The sender checks it with the feed key of the endpoint's secret…
    /// let feed = Verifier::new(secret.feed_key());
    /// assert!(feed.verify(&header, &message, 1_700_000_000).is_ok());
    /// // …and it is no webhook signature.
    /// assert!(Verifier::new(secret).verify(&header, &message, 1_700_000_000).is_err());
    /// # Ok::<(), kxp_verify::ConfigError>(())
    /// ```
    pub fn feed_key(&self) -> Secret {
        let key = zeroize::Zeroizing::new(self.mac_of([FEED_KEY_LABEL.as_bytes()]));
        // HMAC pads a key shorter than its 64-byte block with zeros: keying with the padded
        // block is keying with the 32 bytes, with no fallible length check on the way.
        let mut block = zeroize::Zeroizing::new([0u8; 64]);
        for (b, k) in block.iter_mut().zip(key.iter()) {
            *b = *k;
        }
        Secret {
            keyed: Hmac::<Sha256>::new(&(*block).into()),
            fingerprint: key_fingerprint(&*key),
        }
    }

    /// The secret a feed token stands for when items read with it are MACed
    /// ([`FeedItemFields`](crate::FeedItemFields)): keyed with the 64 lowercase hex digits of
    /// the token's SHA-256, that is `Secret::new(hex(sha256(token)))`, whose
    /// [`feed_key`](Secret::feed_key) is the item key. The sender keeps only that hash, so it
    /// can compute the key without the token.
    ///
    /// A MAC under it is only as strong as the token's secrecy (and the sender database's,
    /// which holds the hash): a bearer token crosses the wire with every request, where a
    /// signed request shows nothing of its secret.
    ///
    /// ```
    /// use kxp_verify::Secret;
    ///
    /// // sha256("kxpft_test"), in lowercase hex: what the sender stores for the token.
    /// let hash = "2a680d91f3cff9b36bd33c3bb3704f5b31172413f042adb6ad3932a09781c9f8";
    /// let from_token = Secret::from_feed_token("kxpft_test");
    /// assert_eq!(from_token.fingerprint(), Secret::new(hash)?.fingerprint());
    /// # Ok::<(), kxp_verify::ConfigError>(())
    /// ```
    pub fn from_feed_token(token: &str) -> Secret {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        // 64 hex digits are exactly HMAC's block: keying with them needs no length check.
        let key = zeroize::Zeroizing::new(crate::hex::encode_32(&digest));
        Secret {
            keyed: Hmac::<Sha256>::new(&(*key).into()),
            fingerprint: key_fingerprint(&*key),
        }
    }

    /// HMAC-SHA256 over `<t digits>.<body>`.
    pub(crate) fn mac(&self, timestamp_digits: &[u8], body: &[u8]) -> [u8; 32] {
        self.mac_of([timestamp_digits, b".", body])
    }

    /// HMAC-SHA256 over the concatenation of `parts`, which are never copied together.
    pub(crate) fn mac_of<const N: usize>(&self, parts: [&[u8]; N]) -> [u8; 32] {
        let mut mac = self.keyed.clone();
        for part in parts {
            mac.update(part);
        }
        mac.finalize().into_bytes().into()
    }
}

/// What [`Secret::feed_key`] is derived with: versioned, so that another derivation can come
/// beside it.
pub const FEED_KEY_LABEL: &str = "kxp-feed-v1";

/// What a catch-up feed request's signature covers: `<METHOD> <path and query>`, the method in
/// capitals and the request target exactly as sent (`/v1/endpoints/ep_1/feed?after=7&limit=100`),
/// signed like a webhook body (`t.` + these bytes) with the [`Secret::feed_key`], in the
/// [`FEED_SIGNATURE_HEADER`](crate::FEED_SIGNATURE_HEADER).
#[cfg(feature = "alloc")]
pub fn feed_message(method: &str, path_and_query: &str) -> alloc::vec::Vec<u8> {
    let mut message = alloc::vec::Vec::with_capacity(
        method
            .len()
            .saturating_add(1)
            .saturating_add(path_and_query.len()),
    );
    message.extend_from_slice(method.as_bytes());
    message.push(b' ');
    message.extend_from_slice(path_and_query.as_bytes());
    message
}

/// What a feed request with a body (`PUT /v1/endpoints/{id}/cursor`) signs: the
/// [`feed_message`], a line feed, then the body byte for byte, so that what it commits is as
/// authentic as its target. Without a body it is the [`feed_message`] itself.
#[cfg(feature = "alloc")]
pub fn feed_request_message(
    method: &str,
    path_and_query: &str,
    body: &[u8],
) -> alloc::vec::Vec<u8> {
    let mut message = feed_message(method, path_and_query);
    if !body.is_empty() {
        message.push(b'\n');
        message.extend_from_slice(body);
    }
    message
}

/// What marks a Standard Webhooks secret.
pub(crate) const WHSEC_PREFIX: &str = "whsec_";

/// The longest key [`Secret::from_whsec`] decodes: the Standard Webhooks maximum (512 bits).
const MAX_WHSEC_KEY_LEN: usize = 64;

/// The Standard Webhooks text of a secret's key bytes, `whsec_<padded standard base64>`, for a
/// sender to show the receiver the key it generated; [`Secret::from_whsec`] reads it back.
///
/// A function of the bytes, not a method of [`Secret`]: a `Secret` keeps only the keyed HMAC
/// state, never the key, so that no `Secret` can be printed; the sender that made the key holds
/// the bytes and decides when to show them.
///
/// ```
/// use kxp_verify::{Secret, Signer, Verifier, to_whsec};
///
/// let key = [7u8; 24]; // From a CSPRNG, in a real sender.
/// let text = to_whsec(&key);
/// assert_eq!(text, "whsec_BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcH");
/// assert_eq!(Secret::from_whsec(&text)?.fingerprint(), Secret::new(&key)?.fingerprint());
/// # Ok::<(), kxp_verify::ConfigError>(())
/// ```
#[cfg(feature = "alloc")]
pub fn to_whsec(key: &[u8]) -> alloc::string::String {
    let mut text = alloc::vec![0u8; base64::encoded_len(key.len())];
    base64::encode(key, &mut text);
    let mut whsec = alloc::string::String::from(WHSEC_PREFIX);
    // Base64 digits and `=` are ASCII: each byte is one char.
    whsec.extend(text.iter().map(|&b| char::from(b)));
    whsec
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

/// One to [`MAX_SECRETS`] keys in a fixed order: the secrets shared by
/// [`Verifier`](crate::Verifier) and [`Signer`](crate::Signer), or a verifier's public keys.
#[derive(Clone)]
pub(crate) struct Keyring<K = Secret> {
    slots: [Option<K>; MAX_SECRETS],
}

impl<K> Keyring<K> {
    pub(crate) fn one(key: K) -> Keyring<K> {
        let mut slots: [Option<K>; MAX_SECRETS] = Default::default();
        let [first, ..] = &mut slots;
        *first = Some(key);
        Keyring { slots }
    }

    /// The errors name secrets; [`ConfigError::for_public_keys`] renames them for keys.
    pub(crate) fn many<I: IntoIterator<Item = K>>(keys: I) -> Result<Keyring<K>, ConfigError> {
        let mut slots: [Option<K>; MAX_SECRETS] = Default::default();
        let mut keys = keys.into_iter();
        for slot in &mut slots {
            *slot = keys.next();
        }
        if keys.next().is_some() {
            return Err(ConfigError::TooManySecrets);
        }
        let keyring = Keyring { slots };
        if keyring.len() == 0 {
            return Err(ConfigError::NoSecrets);
        }
        Ok(keyring)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &K> {
        // The keys fill a prefix of the slots (`one` and `many` fill them in order), so the
        // first empty slot ends them: one check past the last key, not one per slot.
        self.slots.iter().map_while(Option::as_ref)
    }

    pub(crate) fn len(&self) -> usize {
        self.iter().count()
    }
}

impl Keyring<Secret> {
    /// Parses `a,b,…` (spaces around each secret are trimmed, as an environment variable
    /// written by hand tends to have them).
    pub(crate) fn from_list(list: &str) -> Result<Keyring, ConfigError> {
        if list.trim().is_empty() {
            return Err(ConfigError::NoSecrets);
        }
        let mut failed = None;
        let keyring = Keyring::many(list.split(',').map_while(|s| match Secret::new(s.trim()) {
            Ok(secret) => Some(secret),
            Err(e) => {
                failed = Some(e);
                None
            }
        }));
        match failed {
            Some(e) => Err(e),
            None => keyring,
        }
    }
}

impl fmt::Debug for Keyring<Secret> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{} secrets, redacted]", self.len())
    }
}

impl fmt::Debug for Keyring<PublicKey> {
    // Public keys are not secret: listing them tells which ones a verifier trusts.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_feed_key_is_the_hmac_of_the_label_keyed_with_the_secret() {
        let derived: [u8; 32] = Hmac::<Sha256>::new_from_slice(b"whsec_test")
            .unwrap()
            .chain_update(FEED_KEY_LABEL)
            .finalize()
            .into_bytes()
            .into();
        let expected: [u8; 32] = Hmac::<Sha256>::new_from_slice(&derived)
            .unwrap()
            .chain_update(b"1700000000.GET /v1/endpoints/ep_1/feed?after=7")
            .finalize()
            .into_bytes()
            .into();
        let key = Secret::new("whsec_test").unwrap().feed_key();
        assert_eq!(
            key.mac(b"1700000000", b"GET /v1/endpoints/ep_1/feed?after=7"),
            expected
        );
        assert_eq!(key.fingerprint(), key_fingerprint(&derived));
        // A fixed vector, for other languages' implementations (docs/signature-format.md).
        assert_eq!(
            crate::hex::encode_32(&expected),
            *b"f7070cca1221d9420b0f94da9139c4ecfb3f7b9d9990bc5a9a8dc09757e5e405"
        );
    }

    #[test]
    fn a_feed_request_with_a_body_signs_the_body_after_a_line_feed() {
        assert_eq!(
            feed_request_message("GET", "/v1/endpoints/ep_1/feed?after=7", b""),
            feed_message("GET", "/v1/endpoints/ep_1/feed?after=7"),
            "without a body, the feed message itself"
        );
        let message =
            feed_request_message("PUT", "/v1/endpoints/ep_1/cursor", b"{\"sequence\":42}");
        assert_eq!(message, b"PUT /v1/endpoints/ep_1/cursor\n{\"sequence\":42}");
        let key = Secret::new("whsec_test").unwrap().feed_key();
        // A fixed vector, for other languages' implementations (docs/signature-format.md).
        assert_eq!(
            crate::hex::encode_32(&key.mac(b"1700000000", &message)),
            *b"95c837849a51e22994ca15fd49abedf83b98c9df0be936ae215d89c89b28f7c8"
        );
    }

    #[test]
    fn a_feed_tokens_secret_is_keyed_with_the_hex_of_its_hash() {
        let hash = "2a680d91f3cff9b36bd33c3bb3704f5b31172413f042adb6ad3932a09781c9f8";
        let from_token = Secret::from_feed_token("kxpft_test");
        let from_hash = Secret::new(hash).unwrap();
        assert_eq!(from_token.mac(b"1", b"body"), from_hash.mac(b"1", b"body"));
        assert_eq!(from_token.fingerprint(), key_fingerprint(hash.as_bytes()));
        assert_eq!(
            from_token.feed_key().mac(b"1", b"body"),
            from_hash.feed_key().mac(b"1", b"body")
        );
        assert_ne!(
            Secret::from_feed_token("kxpft_tesu").fingerprint(),
            from_token.fingerprint()
        );
    }

    #[test]
    fn lists_are_trimmed_and_bounded() {
        assert_eq!(Keyring::from_list(" a , b ").unwrap().len(), 2);
        assert_eq!(Keyring::from_list("a,b,c,d").unwrap().len(), 4);
        assert_eq!(
            Keyring::from_list("a,b,c,d,e").unwrap_err(),
            ConfigError::TooManySecrets
        );
        assert_eq!(Keyring::from_list("").unwrap_err(), ConfigError::NoSecrets);
        assert_eq!(Keyring::from_list(" ").unwrap_err(), ConfigError::NoSecrets);
        assert_eq!(
            Keyring::from_list("a,,b").unwrap_err(),
            ConfigError::EmptySecret
        );
        assert_eq!(
            Keyring::from_list("a,").unwrap_err(),
            ConfigError::EmptySecret
        );
    }

    #[test]
    fn trimmed_secret_signs_like_the_bare_one() {
        let bare = Keyring::from_list("s3cret").unwrap();
        let padded = Keyring::from_list("  s3cret\t").unwrap();
        let mac = |k: &Keyring| k.iter().next().unwrap().mac(b"1", b"body");
        assert_eq!(mac(&bare), mac(&padded));
    }
}
