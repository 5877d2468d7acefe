//! A key's fingerprint: which key signed or verified, told without telling the key.

use core::fmt;

use sha2::{Digest, Sha256};

/// The first 8 bytes of SHA-256 over `"kxp-key-id\0"` followed by a key's bytes, shown as 16
/// lowercase hex digits: what the sender's console shows for the secrets that signed an
/// attempt, so a merchant can tell which of their secrets to expect. The prefix keeps it from
/// being the hash of the key alone (which other systems might publish), and 8 bytes are enough
/// to tell an endpoint's few live keys apart while revealing nothing usable about them.
///
/// ```
/// let secret = "41ab92590637ac82026ca65266b2898428ea491b1e6d543d7202cf486ea62965";
/// assert_eq!(kxp_verify::key_fingerprint(secret.as_bytes()).to_string(), "af17edef1cfa9c63");
/// ```
pub fn key_fingerprint(key: &[u8]) -> KeyFingerprint {
    let mut hash = Sha256::new();
    hash.update(b"kxp-key-id\0");
    hash.update(key);
    let digest = hash.finalize();
    let mut first = [0u8; 8];
    for (byte, digested) in first.iter_mut().zip(digest.iter()) {
        *byte = *digested;
    }
    KeyFingerprint(first)
}

/// A [`key_fingerprint`]: `Display` writes its 16 hex digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyFingerprint(pub [u8; 8]);

impl fmt::Display for KeyFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}
