//! Signatures made here, with an HMAC of this crate's own: a grader that shared the verifier's
//! code would share its bugs. Randomness for ids, tokens and forgeries comes from the OS.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::target::Secret;

/// `t=<t>,v1=<hex>`, one `v1` per secret in order: what the sender puts in `X-Kxp-Signature`.
pub(crate) fn signature<'a>(
    secrets: impl IntoIterator<Item = &'a Secret>,
    t: u64,
    body: &[u8],
) -> String {
    let mut header = format!("t={t}");
    for secret in secrets {
        header.push_str(",v1=");
        header.push_str(&hex::encode(mac(secret.0.as_bytes(), t, body)));
    }
    header
}

/// HMAC-SHA256 keyed with the secret's own bytes over `<t>.<body>`.
fn mac(key: &[u8], t: u64, body: &[u8]) -> [u8; 32] {
    // HMAC takes keys of any length; `Target` refuses empty secrets before this is reached.
    let mut mac = Hmac::<Sha256>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.finalize().into_bytes().into()
}

/// The clock the signatures are made with, Unix seconds.
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `bytes` random bytes from the OS, as lowercase hex.
#[expect(
    clippy::expect_used,
    reason = "the operating system's random number generator failing is a platform fault no caller can handle"
)]
pub(crate) fn random_hex(bytes: usize) -> String {
    let mut buffer = vec![0u8; bytes];
    // With no OS randomness there is no unguessable forgery, token or id to make.
    getrandom::fill(&mut buffer).expect("the operating system's random number generator failed");
    hex::encode(buffer)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whichever secret signed a valid vector, signing with it here gives one of its `v1`s.
    #[test]
    fn every_valid_vector_is_reproduced() {
        let mut reproduced = 0;
        for vector in kxp_testkit::vectors()
            .iter()
            .filter(|v| v.is_ok() && v.has_canonical_timestamp())
        {
            let t = vector.timestamp().unwrap();
            let v1s: Vec<String> = vector
                .v1_values()
                .iter()
                .map(|v| v.to_ascii_lowercase())
                .collect();
            let made: Vec<String> = vector
                .secrets
                .iter()
                .map(|s| hex::encode(mac(s.as_bytes(), t, &vector.body)))
                .collect();
            assert!(
                made.iter().any(|m| v1s.contains(m)),
                "{}: no secret reproduces a v1 of {:?}",
                vector.name,
                vector.header
            );
            reproduced += 1;
        }
        assert!(reproduced >= 10, "only {reproduced} valid vectors");
    }

    #[test]
    fn one_v1_per_secret_in_order() {
        let secrets = [Secret("a".to_owned()), Secret("b".to_owned())];
        let header = signature(&secrets, 17, b"{}");
        let v1: Vec<&str> = header.split(",v1=").skip(1).collect();
        assert!(header.starts_with("t=17,v1="));
        assert_eq!(
            v1,
            [
                hex::encode(mac(b"a", 17, b"{}")),
                hex::encode(mac(b"b", 17, b"{}"))
            ]
        );
        assert_eq!(random_hex(32).len(), 64);
        assert_ne!(random_hex(16), random_hex(16));
    }
}
