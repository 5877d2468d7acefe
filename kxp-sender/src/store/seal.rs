//! Secrets at rest: endpoint signing secrets and Ed25519 private keys sealed under the server's
//! key-encryption key (KEK), `KXP_SECRETS_KEY`, so that a database dump or a backup alone
//! reveals none of them.
//!
//! No database, no environment and no clock here: the store seals what it writes and opens what
//! it reads with the [`KeyRing`] built once at start from the configuration, and a re-seal pass
//! asks [`KeyRing::needs_reseal`] which rows to rewrite.
//!
//! # The stored form
//!
//! `kxps1.<key-id>.<base64url without padding of nonce ‖ ciphertext ‖ tag>`: XChaCha20-Poly1305
//! with a random 24-byte nonce from the operating system (random nonces of that size never
//! collide in practice, so no counter has to be kept across processes) and the caller's
//! *context* as associated data. The context names the row and the purpose (for example
//! `kxp/endpoint-secret/<endpoint id>`), so a sealed value copied onto another row fails to open
//! instead of signing for the wrong endpoint. The text holds no comma, so the claim's
//! comma-joined list of an endpoint's secrets still splits.
//!
//! Any other value is legacy plaintext ([`Stored::Plain`]): rows written before a key was
//! configured, and every row of a server that runs without one. Hex and base64 never contain
//! `.`, so no plaintext secret or key can be taken for a sealed one.
//!
//! # Rotation of the KEK
//!
//! The ring lists keys newest first; the first seals, every listed one opens. To rotate, put a
//! new key in front, restart, run the re-seal pass (which rewrites every row that
//! [`KeyRing::needs_reseal`]), then drop the old key.

use std::fmt;
use std::str::FromStr;

use base64::Engine as _;
use base64::alphabet;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, URL_SAFE_NO_PAD};
use base64::engine::{DecodePaddingMode, general_purpose::STANDARD};
use chacha20poly1305::aead::{AeadInOut, KeyInit};
use chacha20poly1305::{Tag, XChaCha20Poly1305, XNonce};
use hmac::{Hmac, Mac};
use sha2_std::Sha256;
use zeroize::Zeroizing;

/// The environment variable that holds the key ring, for the configuration and the docs.
pub const SECRETS_KEY_ENV: &str = "KXP_SECRETS_KEY";

/// What every sealed value starts with: the format's version, so a later format can be told
/// apart and both read during a migration.
pub(crate) const SEALED_PREFIX: &str = "kxps1.";

/// The length of a key-encryption key, in bytes (XChaCha20-Poly1305's key).
pub(crate) const KEY_LEN: usize = 32;

/// The longest key id: short, because it is repeated in every sealed value.
pub(crate) const MAX_KEY_ID_LEN: usize = 16;

const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;

/// Keys in `KXP_SECRETS_KEY`: standard base64, padded or not (`openssl rand -base64 32` pads;
/// people trim the `=`).
const KEY_BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// The server's key-encryption keys, newest first: the newest seals, every one opens.
///
/// Built once at start from `KXP_SECRETS_KEY` ([`KeyRing::parse`]). The keys are wiped from
/// memory when the ring is dropped, and `Debug` shows the key ids only.
#[derive(Clone)]
pub struct KeyRing {
    /// The key that seals (and opens).
    newest: RingKey,
    /// Keys that only open: those being rotated out. Never the newest's id.
    older: Vec<RingKey>,
    /// HMAC-SHA256 keyed with the newest key over [`DERIVATION_LABEL`]: what
    /// [`KeyRing::derive`] keys its HMAC with. A one-way function of the key, so the key
    /// itself is still held by its cipher only.
    derivation: Zeroizing<[u8; KEY_LEN]>,
}

/// What the newest key is HMAC'd over to make [`KeyRing`]'s derivation key.
const DERIVATION_LABEL: &[u8] = b"kxp/secrets-key/derive/v1";

/// One key of the ring. The cipher holds the only copy of the key bytes and wipes them on drop
/// (chacha20poly1305's `zeroize` feature).
#[derive(Clone)]
struct RingKey {
    id: String,
    cipher: XChaCha20Poly1305,
}

/// Why `KXP_SECRETS_KEY` was refused. It names entries by position (1 = the first) and by key
/// id, never by their key material, so it is safe to print and log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyRingError {
    /// `empty`: no key at all (an empty or blank value).
    #[error(
        "{SECRETS_KEY_ENV} is empty: give one or more keys, newest first, each \
         <key-id>:<base64 of 32 random bytes> (`kxp secrets-key generate` makes one)"
    )]
    Empty,
    /// `empty_entry`: nothing between two commas, or a leading or trailing comma.
    #[error("{SECRETS_KEY_ENV}: entry {position} is empty (a stray comma?)")]
    EmptyEntry {
        /// Which entry, counting from 1.
        position: usize,
    },
    /// `missing_key_id`: an entry without `:`, such as a bare base64 key.
    #[error("{SECRETS_KEY_ENV}: entry {position} has no key id: write it <key-id>:<base64 key>")]
    MissingKeyId {
        /// Which entry, counting from 1.
        position: usize,
    },
    /// `invalid_key_id`: a key id that is not 1–16 characters of `a-z`, `0-9` and `-`. The id
    /// is not quoted: what stands before the `:` of a mangled entry could be key material.
    #[error(
        "{SECRETS_KEY_ENV}: the key id of entry {position} is not 1 to 16 characters \
         of a-z, 0-9 and -"
    )]
    InvalidKeyId {
        /// Which entry, counting from 1.
        position: usize,
    },
    /// `duplicate_key_id`: two entries with one id, so a sealed value could not tell which key
    /// opens it.
    #[error("{SECRETS_KEY_ENV}: key id `{id}` is listed twice")]
    DuplicateKeyId {
        /// The repeated id.
        id: String,
    },
    /// `invalid_base64`: the key is not standard base64.
    #[error("{SECRETS_KEY_ENV}: the key of `{id}` is not base64")]
    InvalidBase64 {
        /// The entry's key id.
        id: String,
    },
    /// `wrong_key_length`: the key does not decode to exactly 32 bytes.
    #[error("{SECRETS_KEY_ENV}: the key of `{id}` is {bytes} bytes, not {KEY_LEN}")]
    WrongKeyLength {
        /// The entry's key id.
        id: String,
        /// How many bytes it decodes to.
        bytes: usize,
    },
}

impl KeyRingError {
    /// The stable snake_case name, for logs and tests.
    pub const fn as_str(&self) -> &'static str {
        match self {
            KeyRingError::Empty => "empty",
            KeyRingError::EmptyEntry { .. } => "empty_entry",
            KeyRingError::MissingKeyId { .. } => "missing_key_id",
            KeyRingError::InvalidKeyId { .. } => "invalid_key_id",
            KeyRingError::DuplicateKeyId { .. } => "duplicate_key_id",
            KeyRingError::InvalidBase64 { .. } => "invalid_base64",
            KeyRingError::WrongKeyLength { .. } => "wrong_key_length",
        }
    }
}

/// Why a stored value could not be opened. Key ids are not secret and are named, so the message
/// says which key the server needs; nothing quotes the value or its plaintext.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// `not_sealed`: [`KeyRing::open`] was given legacy plaintext; `open_stored` reads both.
    #[error("the stored value is plaintext, not sealed")]
    NotSealed,
    /// `malformed`: starts with `kxps1.` but is not `kxps1.<key-id>.<base64url>` of at least a
    /// nonce and a tag (truncated or mangled).
    #[error("the stored value is not a well-formed sealed value (truncated or corrupted)")]
    Malformed,
    /// `no_key_configured`: a sealed value met by a server that has no `KXP_SECRETS_KEY`.
    #[error(
        "the stored value is sealed under key `{key_id}`, but no {SECRETS_KEY_ENV} is \
         configured: set it to a key ring that holds `{key_id}`"
    )]
    NoKeyConfigured {
        /// The id of the key that sealed it.
        key_id: String,
    },
    /// `unknown_key`: sealed under a key id the ring does not hold (dropped too early, or the
    /// wrong ring).
    #[error(
        "the stored value is sealed under key `{key_id}`, which {SECRETS_KEY_ENV} does not \
         hold: list that key again (after the newest) until a re-seal has moved every value"
    )]
    UnknownKey {
        /// The id of the key that sealed it.
        key_id: String,
    },
    /// `authentication_failed`: the value was altered or corrupted, copied from another row
    /// (another context), or the key listed under its id is not the one that sealed it.
    #[error(
        "the stored value sealed under key `{key_id}` failed authentication: altered, \
         copied from another row, or `{key_id}` in {SECRETS_KEY_ENV} is not the key that sealed it"
    )]
    AuthenticationFailed {
        /// The id of the key the value names.
        key_id: String,
    },
}

impl OpenError {
    /// The stable snake_case name, for logs and tests.
    pub const fn as_str(&self) -> &'static str {
        match self {
            OpenError::NotSealed => "not_sealed",
            OpenError::Malformed => "malformed",
            OpenError::NoKeyConfigured { .. } => "no_key_configured",
            OpenError::UnknownKey { .. } => "unknown_key",
            OpenError::AuthenticationFailed { .. } => "authentication_failed",
        }
    }
}

/// A stored value, told apart by its prefix, so each caller decides what plaintext means to it.
///
/// `Debug` never shows a plaintext value, only a sealed value's key id.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stored<'a> {
    /// Legacy plaintext: written before a key was configured, or by a server without one.
    Plain(&'a str),
    /// A value that starts with [`SEALED_PREFIX`] (well-formed or not: opening tells).
    Sealed(&'a str),
}

impl<'a> Stored<'a> {
    /// Which kind `stored` is, by its prefix alone.
    pub(crate) fn of(stored: &'a str) -> Stored<'a> {
        if stored.starts_with(SEALED_PREFIX) {
            Stored::Sealed(stored)
        } else {
            Stored::Plain(stored)
        }
    }

    /// The id of the key a sealed value names, if it names a valid one; `None` for plaintext.
    pub(crate) fn key_id(&self) -> Option<&'a str> {
        match *self {
            Stored::Plain(_) => None,
            Stored::Sealed(sealed) => split_sealed(sealed).ok().map(|(id, _)| id),
        }
    }
}

impl fmt::Debug for Stored<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stored::Plain(_) => f.write_str("Plain([redacted])"),
            Stored::Sealed(_) => match self.key_id() {
                Some(id) => write!(f, "Sealed({id})"),
                None => f.write_str("Sealed(malformed)"),
            },
        }
    }
}

impl KeyRing {
    /// Parses `KXP_SECRETS_KEY`: comma-separated `<key-id>:<base64 of 32 bytes>`, newest first.
    /// Spaces around entries are ignored (values pasted from a file end in a newline). Every
    /// error names entries by position or key id, never by their key material.
    pub fn parse(value: &str) -> Result<KeyRing, KeyRingError> {
        if value.trim().is_empty() {
            return Err(KeyRingError::Empty);
        }
        let mut keys: Vec<RingKey> = Vec::new();
        let mut derivation = None;
        for (index, entry) in value.split(',').enumerate() {
            let position = index + 1;
            let entry = entry.trim();
            if entry.is_empty() {
                return Err(KeyRingError::EmptyEntry { position });
            }
            let Some((id, encoded)) = entry.split_once(':') else {
                return Err(KeyRingError::MissingKeyId { position });
            };
            if !valid_key_id(id) {
                return Err(KeyRingError::InvalidKeyId { position });
            }
            if keys.iter().any(|key| key.id == id) {
                return Err(KeyRingError::DuplicateKeyId { id: id.to_owned() });
            }
            // Reserved up front so decoding never reallocates: the only heap copy of the key
            // is this buffer, wiped (all of its capacity) when it drops.
            let mut bytes = Zeroizing::new(Vec::with_capacity(encoded.len() / 4 * 3 + 3));
            KEY_BASE64
                .decode_vec(encoded, &mut bytes)
                .map_err(|_| KeyRingError::InvalidBase64 { id: id.to_owned() })?;
            let wrong_length = || KeyRingError::WrongKeyLength {
                id: id.to_owned(),
                bytes: bytes.len(),
            };
            if bytes.len() != KEY_LEN {
                return Err(wrong_length());
            }
            let cipher = XChaCha20Poly1305::new_from_slice(&bytes).map_err(|_| wrong_length())?;
            if keys.is_empty() {
                derivation = Some(Zeroizing::new(hmac_sha256(&bytes, &[DERIVATION_LABEL])));
            }
            keys.push(RingKey {
                id: id.to_owned(),
                cipher,
            });
        }
        let mut keys = keys.into_iter();
        let newest = keys.next().ok_or(KeyRingError::Empty)?;
        let derivation = derivation.ok_or(KeyRingError::Empty)?;
        Ok(KeyRing {
            newest,
            older: keys.collect(),
            derivation,
        })
    }

    /// A 32-byte key for another purpose than sealing, named by `label` (say
    /// `kxp/console-sign-in/v1`): the same from every process with the same newest key, and
    /// unrelated to the key and to other labels' keys (HMAC-SHA256 as a PRF, as HKDF's expand
    /// step). A new newest key derives new keys.
    pub fn derive(&self, label: &str) -> Zeroizing<[u8; KEY_LEN]> {
        Zeroizing::new(hmac_sha256(&*self.derivation, &[label.as_bytes()]))
    }

    /// The id of the key that seals: what a re-seal moves every value to.
    pub fn sealing_key_id(&self) -> &str {
        &self.newest.id
    }

    /// Every key id, newest first: for `/healthz`, logs and the re-seal pass's report.
    pub fn key_ids(&self) -> impl Iterator<Item = &str> {
        std::iter::once(&self.newest)
            .chain(&self.older)
            .map(|key| key.id.as_str())
    }

    /// Seals `plaintext` under the newest key, bound to `context` (what the value belongs to:
    /// the purpose and the row's id), as `kxps1.<key-id>.<base64url>`.
    #[expect(
        clippy::expect_used,
        reason = "refused only beyond 256 GiB of plaintext, which no secret or key comes near"
    )]
    pub fn seal(&self, plaintext: &[u8], context: &[u8]) -> String {
        let mut nonce = [0u8; NONCE_LEN];
        // The OS generator failing is an unrecoverable platform fault; a repeated nonce would
        // be worse than stopping.
        crate::model::fill_random(&mut nonce);
        // Reserved up front so nothing reallocates: the plaintext copied here is encrypted in
        // place, and no stray copy of it is left on the heap.
        let mut sealed = Vec::with_capacity(NONCE_LEN + plaintext.len() + TAG_LEN);
        sealed.extend_from_slice(&nonce);
        sealed.extend_from_slice(plaintext);
        let tag = self
            .newest
            .cipher
            .encrypt_inout_detached(
                &XNonce::from(nonce),
                context,
                (&mut sealed[NONCE_LEN..]).into(),
            )
            .expect("XChaCha20-Poly1305 refused a secret-sized plaintext");
        sealed.extend_from_slice(&tag);
        format!(
            "{SEALED_PREFIX}{}.{}",
            self.newest.id,
            URL_SAFE_NO_PAD.encode(&sealed)
        )
    }

    /// Opens a sealed value with whichever key of the ring its id names, checking that it was
    /// sealed with the same `context`. Plaintext is refused ([`OpenError::NotSealed`]); use
    /// `open_stored` where legacy plaintext rows are acceptable.
    pub fn open(&self, stored: &str, context: &[u8]) -> Result<Zeroizing<Vec<u8>>, OpenError> {
        let Stored::Sealed(sealed) = Stored::of(stored) else {
            return Err(OpenError::NotSealed);
        };
        // Decoded before the key is looked up, so `UnknownKey` always means a well-formed value.
        let (key_id, mut bytes) = decode_sealed(sealed)?;
        let key = self.key(key_id).ok_or_else(|| OpenError::UnknownKey {
            key_id: key_id.to_owned(),
        })?;
        let end = bytes.len() - TAG_LEN;
        let (head, tag) = bytes.split_at_mut(end);
        let tag = Tag::try_from(&*tag).map_err(|_| OpenError::Malformed)?;
        let (nonce, ciphertext) = head.split_at_mut(NONCE_LEN);
        let nonce = XNonce::try_from(&*nonce).map_err(|_| OpenError::Malformed)?;
        key.cipher
            .decrypt_inout_detached(&nonce, context, ciphertext.into(), &tag)
            .map_err(|_| OpenError::AuthenticationFailed {
                key_id: key_id.to_owned(),
            })?;
        // The plaintext moves to the front of the same buffer, which is wiped whole on drop.
        bytes.copy_within(NONCE_LEN..end, 0);
        bytes.truncate(end - NONCE_LEN);
        Ok(bytes)
    }

    /// Whether the re-seal pass should rewrite `stored`: plaintext, or not sealed under the
    /// newest key (an older key of the ring, an unknown id, or malformed, which the pass then
    /// reports when it cannot open it).
    pub fn needs_reseal(&self, stored: &str) -> bool {
        Stored::of(stored).key_id() != Some(self.sealing_key_id())
    }

    /// What the re-seal pass writes back: `Some` value sealed under the newest key when
    /// [`needs_reseal`](KeyRing::needs_reseal), `None` when the row is already current.
    /// Plaintext is sealed as it is; a sealed value is opened (with `context`) first.
    pub fn reseal(&self, stored: &str, context: &[u8]) -> Result<Option<String>, OpenError> {
        if !self.needs_reseal(stored) {
            return Ok(None);
        }
        let plaintext = open_stored(Some(self), stored, context)?;
        Ok(Some(self.seal(&plaintext, context)))
    }

    fn key(&self, id: &str) -> Option<&RingKey> {
        std::iter::once(&self.newest)
            .chain(&self.older)
            .find(|key| key.id == id)
    }
}

impl FromStr for KeyRing {
    type Err = KeyRingError;

    /// As [`KeyRing::parse`], for clap's value parser.
    fn from_str(value: &str) -> Result<KeyRing, KeyRingError> {
        KeyRing::parse(value)
    }
}

impl fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyRing")
            .field("key_ids", &self.key_ids().collect::<Vec<_>>())
            .finish()
    }
}

/// HMAC-SHA256 keyed with `key` over the concatenation of `parts`.
#[expect(
    clippy::expect_used,
    reason = "HMAC takes a key of any length: 32 bytes here, always"
)]
fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes a key of any length");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

/// Reads a stored value whatever the server's configuration: plaintext as it is (rows from
/// before a key was configured, or a server without one), a sealed value with the ring, and a
/// sealed value without a ring is refused with the key id it needs
/// ([`OpenError::NoKeyConfigured`]) rather than used as if it were the secret.
pub(crate) fn open_stored(
    ring: Option<&KeyRing>,
    stored: &str,
    context: &[u8],
) -> Result<Zeroizing<Vec<u8>>, OpenError> {
    match (Stored::of(stored), ring) {
        (Stored::Plain(plain), _) => Ok(Zeroizing::new(plain.as_bytes().to_vec())),
        (Stored::Sealed(_), Some(ring)) => ring.open(stored, context),
        (Stored::Sealed(sealed), None) => {
            let (key_id, _) = decode_sealed(sealed)?;
            Err(OpenError::NoKeyConfigured {
                key_id: key_id.to_owned(),
            })
        }
    }
}

/// What to write for a new secret or key: sealed under the ring's newest key when a ring is
/// configured, else the plaintext as it is (which a later re-seal seals).
pub(crate) fn to_stored(
    ring: Option<&KeyRing>,
    plaintext: &str,
    context: &[u8],
) -> Zeroizing<String> {
    Zeroizing::new(match ring {
        Some(ring) => ring.seal(plaintext.as_bytes(), context),
        None => plaintext.to_owned(),
    })
}

/// A fresh `KXP_SECRETS_KEY` entry for `kxp secrets-key generate`: `<id>:<base64 of 32 bytes
/// from the OS CSPRNG>`. The id is `k<YYYYMMDD>-<4 random hex digits>` (UTC), so an operator
/// sees when a key was made and two keys made the same day still differ.
pub fn generate_key_line() -> Zeroizing<String> {
    let mut random = Zeroizing::new([0u8; KEY_LEN + 2]);
    crate::model::fill_random(&mut *random);
    key_line(time::OffsetDateTime::now_utc().date(), &random)
}

/// The entry for `date` and `random` (the key, then two bytes for the id).
#[expect(
    clippy::expect_used,
    reason = "32 bytes are always 44 base64 characters"
)]
fn key_line(date: time::Date, random: &[u8; KEY_LEN + 2]) -> Zeroizing<String> {
    let (key, suffix) = random.split_at(KEY_LEN);
    let id = format!(
        "k{:04}{:02}{:02}-{}",
        date.year(),
        u8::from(date.month()),
        date.day(),
        hex::encode(suffix)
    );
    // Encoded into a buffer of the exact size and pushed into a string reserved for the whole
    // line, so no reallocation leaves a copy of the key behind.
    let mut encoded = Zeroizing::new([0u8; 44]);
    let written = STANDARD
        .encode_slice(key, &mut *encoded)
        .expect("32 bytes are 44 base64 characters");
    let mut line = Zeroizing::new(String::with_capacity(id.len() + 1 + written));
    line.push_str(&id);
    line.push(':');
    for &byte in &encoded[..written] {
        line.push(char::from(byte));
    }
    line
}

/// 1–16 characters of `a-z`, `0-9` and `-`: never `.` (the sealed form's separator), `,` or `:`
/// (the ring's).
fn valid_key_id(id: &str) -> bool {
    (1..=MAX_KEY_ID_LEN).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// `kxps1.<key-id>.<body>` into the key id and the (still encoded) body.
fn split_sealed(sealed: &str) -> Result<(&str, &str), OpenError> {
    let rest = sealed
        .strip_prefix(SEALED_PREFIX)
        .ok_or(OpenError::Malformed)?;
    let (key_id, body) = rest.split_once('.').ok_or(OpenError::Malformed)?;
    if !valid_key_id(key_id) || body.is_empty() {
        return Err(OpenError::Malformed);
    }
    Ok((key_id, body))
}

/// A sealed value's key id and decoded body (nonce, ciphertext, tag), checked to be long
/// enough for a nonce and a tag. The buffer is wiped on drop: opening decrypts in it.
fn decode_sealed(sealed: &str) -> Result<(&str, Zeroizing<Vec<u8>>), OpenError> {
    let (key_id, body) = split_sealed(sealed)?;
    let bytes = Zeroizing::new(
        URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|_| OpenError::Malformed)?,
    );
    if bytes.len() < NONCE_LEN + TAG_LEN {
        return Err(OpenError::Malformed);
    }
    Ok((key_id, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Fixed keys, so the tests can assert their base64 never reaches a message.
    const OLD: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    const NEW: &str = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";
    const CONTEXT: &[u8] = b"kxp/endpoint-secret/ep_1";

    fn ring(value: &str) -> KeyRing {
        KeyRing::parse(value).unwrap()
    }

    fn old_ring() -> KeyRing {
        ring(&format!("k1:{OLD}"))
    }

    fn parse_err(value: &str) -> KeyRingError {
        KeyRing::parse(value).unwrap_err()
    }

    /// The decoded body of a sealed value, changed by `change`, encoded back.
    fn with_body(sealed: &str, change: impl FnOnce(&mut Vec<u8>)) -> String {
        let (id, body) = split_sealed(sealed).unwrap();
        let mut bytes = URL_SAFE_NO_PAD.decode(body).unwrap();
        change(&mut bytes);
        format!("{SEALED_PREFIX}{id}.{}", URL_SAFE_NO_PAD.encode(&bytes))
    }

    #[test]
    fn derived_keys_follow_the_newest_key_and_differ_by_label() {
        let label = "kxp/test/v1";
        let key = old_ring().derive(label);
        assert_eq!(
            *key,
            *old_ring().derive(label),
            "the same from every process"
        );
        assert_ne!(*key, *old_ring().derive("kxp/other/v1"));
        assert_ne!(
            &key[..],
            &KEY_BASE64.decode(OLD).unwrap()[..],
            "not the key itself"
        );
        // An older key does not count: the newest derives.
        let rotated = ring(&format!("k2:{NEW},k1:{OLD}"));
        assert_ne!(*key, *rotated.derive(label));
        assert_eq!(*key, *ring(&format!("k1:{OLD},k2:{NEW}")).derive(label));
    }

    #[test]
    fn sealed_values_open_to_the_plaintext() {
        let ring = old_ring();
        for plaintext in [&b""[..], b"s", &[0xff; 64], b"whsec_0123456789abcdef"] {
            let sealed = ring.seal(plaintext, CONTEXT);
            assert_eq!(*ring.open(&sealed, CONTEXT).unwrap(), plaintext);
            assert_eq!(
                *open_stored(Some(&ring), &sealed, CONTEXT).unwrap(),
                plaintext
            );
        }
    }

    #[test]
    fn the_stored_form_is_versioned_names_its_key_and_never_repeats() {
        let ring = old_ring();
        let a = ring.seal(b"secret", CONTEXT);
        let b = ring.seal(b"secret", CONTEXT);
        assert_ne!(a, b, "a fresh nonce each time");
        let body = a.strip_prefix("kxps1.k1.").unwrap();
        let decoded = URL_SAFE_NO_PAD.decode(body).unwrap();
        assert_eq!(decoded.len(), NONCE_LEN + b"secret".len() + TAG_LEN);
        assert!(!a.contains(',') && !a.contains('='), "{a}");
        assert!(!a.contains("secret"));
        assert_eq!(Stored::of(&a).key_id(), Some("k1"));
        assert_eq!(format!("{:?}", Stored::of(&a)), "Sealed(k1)");
    }

    #[test]
    fn a_value_copied_to_another_row_is_refused() {
        let ring = old_ring();
        let sealed = ring.seal(b"secret", CONTEXT);
        let err = ring.open(&sealed, b"kxp/endpoint-secret/ep_2").unwrap_err();
        assert_eq!(err.as_str(), "authentication_failed");
        assert!(ring.open(&sealed, b"").is_err());
    }

    #[test]
    fn any_altered_byte_is_refused() {
        let ring = old_ring();
        let sealed = ring.seal(b"secret", CONTEXT);
        for at in 0..NONCE_LEN + 6 + TAG_LEN {
            let tampered = with_body(&sealed, |bytes| bytes[at] ^= 0x01);
            assert_eq!(
                ring.open(&tampered, CONTEXT),
                Err(OpenError::AuthenticationFailed {
                    key_id: "k1".into()
                }),
                "byte {at}"
            );
        }
        // A tag cut short, or bytes added, fail too.
        let longer = with_body(&sealed, |bytes| bytes.push(0));
        assert_eq!(
            ring.open(&longer, CONTEXT).unwrap_err().as_str(),
            "authentication_failed"
        );
        let shorter = with_body(&sealed, |bytes| bytes.truncate(NONCE_LEN + TAG_LEN - 1));
        assert_eq!(ring.open(&shorter, CONTEXT), Err(OpenError::Malformed));
    }

    #[test]
    fn malformed_sealed_values_are_refused_without_a_key_lookup() {
        let ring = old_ring();
        let body = URL_SAFE_NO_PAD.encode([0u8; NONCE_LEN + TAG_LEN]);
        for bad in [
            "kxps1.".to_owned(),
            "kxps1.k1".to_owned(),
            "kxps1.k1.".to_owned(),
            format!("kxps1..{body}"),
            format!("kxps1.K1.{body}"),
            format!("kxps1.k1.{body}="),
            format!("kxps1.k1.{body}!"),
            format!("kxps1.nope.{}", URL_SAFE_NO_PAD.encode([0u8; 8])),
        ] {
            assert_eq!(ring.open(&bad, CONTEXT), Err(OpenError::Malformed), "{bad}");
            assert_eq!(
                open_stored(None, &bad, CONTEXT).unwrap_err().as_str(),
                "malformed"
            );
        }
    }

    #[test]
    fn an_unknown_key_id_is_named() {
        let sealed = ring(&format!("k2:{NEW}")).seal(b"secret", CONTEXT);
        let err = old_ring().open(&sealed, CONTEXT).unwrap_err();
        assert_eq!(
            err,
            OpenError::UnknownKey {
                key_id: "k2".into()
            }
        );
        assert!(err.to_string().contains("`k2`"), "{err}");
    }

    #[test]
    fn a_server_without_a_key_names_the_key_a_sealed_value_needs() {
        let sealed = old_ring().seal(b"secret", CONTEXT);
        let err = open_stored(None, &sealed, CONTEXT).unwrap_err();
        assert_eq!(
            err,
            OpenError::NoKeyConfigured {
                key_id: "k1".into()
            }
        );
        assert!(err.to_string().contains("KXP_SECRETS_KEY"), "{err}");
        assert!(err.to_string().contains("`k1`"), "{err}");
    }

    #[test]
    fn legacy_plaintext_passes_through_and_is_resealed() {
        let ring = old_ring();
        let plain = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        assert_eq!(
            *open_stored(None, plain, CONTEXT).unwrap(),
            plain.as_bytes()
        );
        assert_eq!(
            *open_stored(Some(&ring), plain, CONTEXT).unwrap(),
            plain.as_bytes()
        );
        assert_eq!(ring.open(plain, CONTEXT), Err(OpenError::NotSealed));
        assert_eq!(Stored::of(plain), Stored::Plain(plain));
        assert_eq!(Stored::of(plain).key_id(), None);
        assert_eq!(format!("{:?}", Stored::of(plain)), "Plain([redacted])");
        assert!(ring.needs_reseal(plain));
        let resealed = ring.reseal(plain, CONTEXT).unwrap().unwrap();
        assert!(!ring.needs_reseal(&resealed));
        assert_eq!(*ring.open(&resealed, CONTEXT).unwrap(), plain.as_bytes());
        assert_eq!(*to_stored(None, plain, CONTEXT), plain);
        let stored = to_stored(Some(&ring), plain, CONTEXT);
        assert_eq!(*ring.open(&stored, CONTEXT).unwrap(), plain.as_bytes());
    }

    #[test]
    fn rotation_opens_with_the_old_key_and_reseals_under_the_new() {
        let sealed = old_ring().seal(b"secret", CONTEXT);
        let both = ring(&format!("k2:{NEW}, k1:{OLD}"));
        assert_eq!(both.sealing_key_id(), "k2");
        assert_eq!(both.key_ids().collect::<Vec<_>>(), ["k2", "k1"]);
        assert_eq!(*both.open(&sealed, CONTEXT).unwrap(), b"secret");
        assert!(both.needs_reseal(&sealed));
        let resealed = both.reseal(&sealed, CONTEXT).unwrap().unwrap();
        assert_eq!(Stored::of(&resealed).key_id(), Some("k2"));
        assert!(!both.needs_reseal(&resealed));
        assert_eq!(both.reseal(&resealed, CONTEXT), Ok(None));
        // The old key can now go.
        let new_only = ring(&format!("k2:{NEW}"));
        assert_eq!(*new_only.open(&resealed, CONTEXT).unwrap(), b"secret");
        assert_eq!(
            new_only.open(&sealed, CONTEXT).unwrap_err().as_str(),
            "unknown_key"
        );
        // A re-seal needs the value's context: a copied row stays refused.
        assert!(both.reseal(&sealed, b"kxp/endpoint-secret/ep_2").is_err());
    }

    #[test]
    fn a_different_key_under_a_known_id_fails_authentication() {
        let sealed = old_ring().seal(b"secret", CONTEXT);
        let impostor = ring(&format!("k1:{NEW}"));
        assert_eq!(
            impostor.open(&sealed, CONTEXT).unwrap_err().as_str(),
            "authentication_failed"
        );
    }

    #[test]
    fn key_rings_parse_with_spaces_and_with_or_without_padding() {
        let unpadded = OLD.trim_end_matches('=');
        let ring = ring(&format!(" k-2026:{NEW} ,\n a1:{unpadded}\n"));
        assert_eq!(ring.key_ids().collect::<Vec<_>>(), ["k-2026", "a1"]);
        assert_eq!(
            format!("{ring:?}"),
            r#"KeyRing { key_ids: ["k-2026", "a1"] }"#
        );
        let sixteen = "a".repeat(16);
        assert!(KeyRing::parse(&format!("{sixteen}:{OLD}")).is_ok());
        assert!(format!("{sixteen}:{OLD}").parse::<KeyRing>().is_ok());
    }

    #[test]
    fn bad_key_rings_are_refused_by_name() {
        let short = STANDARD.encode([7u8; 16]);
        let long = STANDARD.encode([7u8; 33]);
        let cases = [
            (String::new(), "empty"),
            (" \n".to_owned(), "empty"),
            (format!("k1:{OLD},"), "empty_entry"),
            (format!(",k1:{OLD}"), "empty_entry"),
            (format!("k2:{NEW},,k1:{OLD}"), "empty_entry"),
            (OLD.to_owned(), "missing_key_id"),
            (format!(":{OLD}"), "invalid_key_id"),
            (format!("K1:{OLD}"), "invalid_key_id"),
            (format!("k.1:{OLD}"), "invalid_key_id"),
            (format!("{}:{OLD}", "a".repeat(17)), "invalid_key_id"),
            (format!("k1:{NEW},k1:{OLD}"), "duplicate_key_id"),
            ("k1:not base64!".to_owned(), "invalid_base64"),
            (
                format!("k1:{}", URL_SAFE_NO_PAD.encode([0xfb; 32])),
                "invalid_base64",
            ),
            ("k1:".to_owned(), "wrong_key_length"),
            (format!("k1:{short}"), "wrong_key_length"),
            (format!("k1:{long}"), "wrong_key_length"),
        ];
        for (value, name) in cases {
            assert_eq!(parse_err(&value).as_str(), name, "{value:?}");
        }
        assert_eq!(
            parse_err(&format!("k1:{short}")),
            KeyRingError::WrongKeyLength {
                id: "k1".into(),
                bytes: 16
            }
        );
        assert_eq!(
            parse_err(&format!("k2:{NEW},k1:{OLD},")),
            KeyRingError::EmptyEntry { position: 3 }
        );
    }

    #[test]
    fn no_message_or_debug_output_shows_key_material() {
        let ring = ring(&format!("k2:{NEW},k1:{OLD}"));
        let sealed = ring.seal(b"the plaintext", CONTEXT);
        let mut shown = vec![format!("{ring:?}"), format!("{:?}", ring.clone())];
        for value in [
            format!("{OLD}:{NEW}"),
            format!("{NEW}:"),
            format!("k1:{NEW},{OLD}"),
            format!("k1:{NEW},k1:{OLD}"),
            format!("k1:{}x", &NEW[..43]),
            format!("k1:{}", &NEW[..20]),
        ] {
            let err = parse_err(&value);
            shown.push(err.to_string());
            shown.push(format!("{err:?}"));
        }
        for err in [
            old_ring()
                .open(&with_body(&sealed, |b| b[30] ^= 1), CONTEXT)
                .unwrap_err(),
            open_stored(None, &sealed, CONTEXT).unwrap_err(),
            KeyRing::parse(&format!("k9:{OLD}"))
                .unwrap()
                .open(&sealed, CONTEXT)
                .unwrap_err(),
        ] {
            shown.push(err.to_string());
            shown.push(format!("{err:?}"));
        }
        let unpadded = [OLD, NEW].map(|key| key.trim_end_matches('=').to_owned());
        for text in &shown {
            for key in &unpadded {
                assert!(!text.contains(&key[..20]), "{text}");
            }
            assert!(!text.contains("the plaintext"), "{text}");
        }
    }

    #[test]
    fn generated_key_lines_parse_and_differ() {
        let a = generate_key_line();
        let b = generate_key_line();
        assert_ne!(*a, *b);
        let ring = KeyRing::parse(&a).unwrap();
        let id = ring.sealing_key_id();
        assert_eq!(id.len(), 14, "{id}");
        assert!(id.starts_with("k20") && id.as_bytes()[9] == b'-', "{id}");
        let both = KeyRing::parse(&format!("{},{}", *b, *a)).unwrap();
        let sealed = ring.seal(b"secret", CONTEXT);
        assert_eq!(*both.open(&sealed, CONTEXT).unwrap(), b"secret");
    }

    #[test]
    fn key_lines_name_the_day_they_were_made() {
        let date = time::Date::from_calendar_date(2026, time::Month::March, 7).unwrap();
        let mut random = [0u8; KEY_LEN + 2];
        random[KEY_LEN..].copy_from_slice(&[0xab, 0x01]);
        assert_eq!(
            *key_line(date, &random),
            format!("k20260307-ab01:{}", STANDARD.encode([0u8; 32]))
        );
    }

    #[test]
    fn random_plaintexts_and_contexts_round_trip() {
        // proptest is not a dev-dependency of this crate: a loop over OS-random inputs instead.
        let ring = ring(&format!("k2:{NEW},k1:{OLD}"));
        for round in 0..200 {
            let mut input = [0u8; 96];
            getrandom::fill(&mut input).unwrap();
            let (plaintext, context) = input.split_at(usize::from(input[0]) % 64 + round % 2);
            let sealed = ring.seal(plaintext, context);
            assert_eq!(*ring.open(&sealed, context).unwrap(), plaintext);
            assert!(ring.open(&sealed, &[context, b"x"].concat()).is_err());
        }
    }
}
