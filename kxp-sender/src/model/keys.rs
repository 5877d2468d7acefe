//! Signing material as the store keeps it: an HMAC secret (its text is the key), or an Ed25519
//! private key (the standard base64 of its 32-byte seed). A job's list of an endpoint's live
//! material marks keys with [`ED25519_PREFIX`]; a secret is hex and a seed base64, so neither
//! holds a comma or starts with the prefix.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use kxp_verify::SigningKey;

/// What marks an Ed25519 key in a job's list of signing material.
pub const ED25519_PREFIX: &str = "ed25519:";

/// One piece of an endpoint's signing material, opened.
pub enum Material {
    /// An HMAC secret: a `v1`.
    Hmac(String),
    /// An Ed25519 private key: a `v1a`.
    Ed25519(SigningKey),
}

impl Material {
    /// The material a job's list entry names, once opened; `None` for a key whose seed is not
    /// 32 bytes of base64 (a row altered by hand).
    pub fn parse(entry: &str) -> Option<Material> {
        match entry.strip_prefix(ED25519_PREFIX) {
            Some(seed) => signing_key(seed).map(Material::Ed25519),
            None => Some(Material::Hmac(entry.to_owned())),
        }
    }

    /// Its fingerprint ([`kxp_verify::key_fingerprint`]): of the secret's bytes, or of the
    /// public key's.
    pub fn fingerprint(&self) -> String {
        match self {
            Material::Hmac(secret) => kxp_verify::key_fingerprint(secret.as_bytes()).to_string(),
            Material::Ed25519(key) => key.public_key().fingerprint().to_string(),
        }
    }
}

/// The key of a seed as rows store it.
pub fn signing_key(seed: &str) -> Option<SigningKey> {
    let bytes: [u8; 32] = STANDARD.decode(seed).ok()?.try_into().ok()?;
    Some(SigningKey::from_seed(&bytes))
}

/// A new Ed25519 private key's seed, 32 bytes from the OS CSPRNG, as rows store it.
pub fn new_seed() -> String {
    let mut seed = zeroize::Zeroizing::new([0u8; 32]);
    // As for secrets: with no OS randomness there is nothing sensible left to do.
    getrandom::fill(seed.as_mut()).expect("the operating system's random number generator failed");
    STANDARD.encode(seed.as_ref())
}
