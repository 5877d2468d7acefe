//! The sign-in forms' CSRF token, a signed double submit: the page sets a cookie and puts the
//! same token in its form, and the token is `random ‖ HMAC(server key, random)` (hex). The POST
//! is let through only if the form's token equals the cookie *and* its MAC is the server's,
//! both compared in constant time. A value planted as the cookie from a sibling subdomain
//! (which can set cookies for the parent domain) and echoed in a forged form no longer passes
//! unless it is a token this server made.
//!
//! The server key is derived from `KXP_SECRETS_KEY` when one is configured
//! ([`KeyRing::derive`]), so every `kxp serve` process on one database, and a restarted one,
//! accepts the page another served; without it the key is random per process, so a page
//! served by another process (or before a restart) is refused with 403 and works on reload.

use std::fmt;

use hmac::{Hmac, KeyInit, Mac};
use sha2_std::Sha256;
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use super::session::same_secret;
use crate::store::seal::KeyRing;

/// What the key is derived from `KXP_SECRETS_KEY` under ([`KeyRing::derive`]).
const LABEL: &str = "kxp/console-sign-in/v1";

/// Bytes of randomness in a token, and of its MAC.
const PART: usize = 32;

/// The key sign-in tokens are signed with. Its `Debug` shows nothing of it.
pub(crate) struct SignInKey {
    mac: Hmac<Sha256>,
}

impl SignInKey {
    /// The key derived from `ring` (the secrets key), or a random one for this process only.
    #[expect(clippy::expect_used, reason = "HMAC takes a key of any length")]
    pub(crate) fn new(ring: Option<&KeyRing>) -> SignInKey {
        let key = match ring {
            Some(ring) => ring.derive(LABEL),
            None => {
                let mut key = Zeroizing::new([0u8; PART]);
                // The OS generator failing is an unrecoverable platform fault: stop rather
                // than sign with a predictable key.
                crate::model::fill_random(&mut *key);
                key
            }
        };
        SignInKey {
            mac: <Hmac<Sha256> as KeyInit>::new_from_slice(&*key)
                .expect("HMAC takes a key of any length"),
        }
    }

    /// A fresh token: 32 random bytes and their MAC, in hex (128 digits).
    pub(crate) fn token(&self) -> String {
        let mut random = [0u8; PART];
        crate::model::fill_random(&mut random);
        let mac = self.mac_of(&random);
        format!("{}{}", hex::encode(random), hex::encode(mac))
    }

    /// Whether `sent` (the form's token) is the sign-in cookie's value and a token this server
    /// signed. Both are checked in constant time, and both always.
    pub(crate) fn verify(&self, sent: &str, cookie: &str) -> bool {
        let echoed = same_secret(sent, cookie);
        let mut bytes = [0u8; 2 * PART];
        let signed = hex::decode_to_slice(sent, &mut bytes).is_ok() && {
            let (random, mac) = bytes.split_at(PART);
            bool::from(self.mac_of(random).ct_eq(mac))
        };
        echoed & signed
    }

    fn mac_of(&self, random: &[u8]) -> [u8; PART] {
        let mut mac = self.mac.clone();
        mac.update(random);
        mac.finalize().into_bytes().into()
    }
}

impl fmt::Debug for SignInKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SignInKey([redacted])")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_passes_only_with_its_own_cookie_and_this_servers_mac() {
        let key = SignInKey::new(None);
        let token = key.token();
        assert_eq!(token.len(), 128);
        assert!(key.verify(&token, &token));
        assert!(!key.verify(&token, &key.token()), "another cookie");
        assert!(!key.verify(&token, ""), "no cookie");
        // Equal to its cookie but not signed here: planted.
        let planted = "ab".repeat(64);
        assert!(!key.verify(&planted, &planted));
        let other = SignInKey::new(None).token();
        assert!(!key.verify(&other, &other), "another process's random key");
        for bad in ["", "zz", &token[..127]] {
            assert!(!key.verify(bad, bad), "{bad}");
        }
    }

    #[test]
    fn with_a_secrets_key_every_process_signs_alike_and_says_nothing_in_debug() {
        let line = "k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
        let ring = KeyRing::parse(line).unwrap();
        let token = SignInKey::new(Some(&ring)).token();
        let again = SignInKey::new(Some(&KeyRing::parse(line).unwrap()));
        assert!(again.verify(&token, &token));
        let rotated = KeyRing::parse(&format!(
            "k2:Hx4dHBsaGRgXFhUUExIREA8ODQwLCgkIBwYFBAMCAQA=,{line}"
        ))
        .unwrap();
        assert!(!SignInKey::new(Some(&rotated)).verify(&token, &token));
        assert_eq!(format!("{again:?}"), "SignInKey([redacted])");
    }
}
