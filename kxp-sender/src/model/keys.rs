//! Signing material as the store keeps it. Each row's text says its format, so an endpoint
//! moving from one format to the other can sign with both during the overlap:
//! - an HMAC secret: for `kxp` its text is the key (64 hex digits); for Standard Webhooks it is
//!   `whsec_<base64 of 32 bytes>` and the key is the decoded bytes. No hex text starts with
//!   `whsec_`.
//! - an Ed25519 private key: the standard base64 of its 32-byte seed, after
//!   [`STANDARD_KEY_PREFIX`] for Standard Webhooks (base64 holds no `:`).
//!
//! A job's list of an endpoint's live material marks keys with [`ED25519_PREFIX`]; neither a
//! secret nor a seed holds a comma or starts with the prefix.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use kxp_api::Format;
use kxp_verify::{PublicKey, Secret, SigningKey};

/// What marks an Ed25519 key in a job's list of signing material.
pub(crate) const ED25519_PREFIX: &str = "ed25519:";

/// What marks an Ed25519 key of the Standard Webhooks format, before its seed. Only rows hold
/// it: the seed is never shown, so this is not the specification's `whsk_` form.
const STANDARD_KEY_PREFIX: &str = "sw:";

/// What signs, in one format. Its `Debug` shows no key.
#[derive(Clone, Debug)]
pub(crate) enum Key {
    /// An HMAC secret: a `v1`.
    Hmac(Secret),
    /// An Ed25519 private key: a `v1a`.
    Ed25519(SigningKey),
}

/// One piece of an endpoint's signing material, opened.
#[derive(Clone, Debug)]
pub(crate) struct Material {
    /// Which headers it signs.
    pub format: Format,
    /// With what.
    pub key: Key,
}

impl Material {
    /// The material a job's list entry names, once opened; `None` for one that does not read
    /// (a row altered by hand).
    pub(crate) fn parse(entry: &str) -> Option<Material> {
        match entry.strip_prefix(ED25519_PREFIX) {
            Some(seed) => Material::of_row("ed25519", seed),
            None => Material::of_row("hmac", entry),
        }
    }

    /// The material of a row of `kind` (`hmac` or `ed25519`) holding `stored`, once opened.
    pub(crate) fn of_row(kind: &str, stored: &str) -> Option<Material> {
        if kind == "ed25519" {
            let (format, seed) = match stored.strip_prefix(STANDARD_KEY_PREFIX) {
                Some(seed) => (Format::StandardWebhooks, seed),
                None => (Format::Kxp, stored),
            };
            let bytes: [u8; 32] = STANDARD.decode(seed).ok()?.try_into().ok()?;
            let key = Key::Ed25519(SigningKey::from_seed(&bytes));
            return Some(Material { format, key });
        }
        if stored.starts_with("whsec_") {
            let key = Key::Hmac(Secret::from_whsec(stored).ok()?);
            Some(Material {
                format: Format::StandardWebhooks,
                key,
            })
        } else {
            let key = Key::Hmac(Secret::new(stored).ok()?);
            Some(Material {
                format: Format::Kxp,
                key,
            })
        }
    }

    /// Its fingerprint ([`kxp_verify::key_fingerprint`]): of the secret's key bytes, or of the
    /// public key's.
    pub(crate) fn fingerprint(&self) -> String {
        match &self.key {
            Key::Hmac(secret) => secret.fingerprint().to_string(),
            Key::Ed25519(key) => key.public_key().fingerprint().to_string(),
        }
    }

    /// Its public key, for an Ed25519 key.
    pub(crate) fn public_key(&self) -> Option<PublicKey> {
        match &self.key {
            Key::Ed25519(key) => Some(key.public_key()),
            Key::Hmac(_) => None,
        }
    }
}

/// A new HMAC secret in `format`'s form, 32 bytes from the OS CSPRNG: what its row stores and
/// the receiver is shown.
pub(crate) fn new_secret(format: &Format) -> String {
    match format {
        Format::StandardWebhooks => kxp_verify::to_whsec(random_32().as_ref()),
        _ => hex::encode(random_32().as_ref()),
    }
}

/// A new Ed25519 private key for `format`, 32 bytes of seed from the OS CSPRNG, as its row
/// stores it.
pub(crate) fn new_key(format: &Format) -> String {
    let seed = STANDARD.encode(random_32().as_ref());
    match format {
        Format::StandardWebhooks => format!("{STANDARD_KEY_PREFIX}{seed}"),
        _ => seed,
    }
}

/// The public key of a new key's row text ([`new_key`]).
pub(crate) fn public_key_of(stored: &str) -> Option<PublicKey> {
    Material::of_row("ed25519", stored)?.public_key()
}

fn random_32() -> zeroize::Zeroizing<[u8; 32]> {
    let mut bytes = zeroize::Zeroizing::new([0u8; 32]);
    // With no OS randomness there is nothing sensible left to do but stop, rather than hand
    // out a predictable secret.
    crate::model::fill_random(bytes.as_mut());
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_format_reads_back_as_itself() {
        for format in [Format::Kxp, Format::StandardWebhooks] {
            let secret = Material::of_row("hmac", &new_secret(&format)).unwrap();
            assert_eq!(secret.format, format);
            assert!(secret.public_key().is_none());
            let stored = new_key(&format);
            let key = Material::parse(&format!("{ED25519_PREFIX}{stored}")).unwrap();
            assert_eq!(key.format, format);
            assert_eq!(key.public_key(), public_key_of(&stored));
        }
    }

    #[test]
    fn a_standard_secret_is_keyed_by_its_decoded_bytes() {
        let whsec = new_secret(&Format::StandardWebhooks);
        let key = STANDARD
            .decode(whsec.strip_prefix("whsec_").unwrap())
            .unwrap();
        assert_eq!(key.len(), 32);
        let material = Material::parse(&whsec).unwrap();
        assert_eq!(
            material.fingerprint(),
            kxp_verify::key_fingerprint(&key).to_string()
        );
        let kxp = new_secret(&Format::Kxp);
        assert_eq!(kxp.len(), 64);
        assert_eq!(
            Material::parse(&kxp).unwrap().fingerprint(),
            kxp_verify::key_fingerprint(kxp.as_bytes()).to_string()
        );
    }

    #[test]
    fn rows_altered_by_hand_do_not_read() {
        for (kind, stored) in [
            ("ed25519", "not base64"),
            ("ed25519", "sw:AAAA"),
            ("hmac", "whsec_not base64"),
            ("hmac", ""),
        ] {
            assert!(Material::of_row(kind, stored).is_none(), "{kind} {stored}");
        }
    }
}
