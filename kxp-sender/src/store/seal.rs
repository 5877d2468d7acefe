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
mod tests;
