//! The receiver's confirmation of which key verified a request: `X-Kxp-Verified-Key`.
//!
//! A rotation used to end when the sender's timer ran out, whether or not the merchant had
//! deployed the new secret. A receiver that names, on each answer, the key that verified the
//! request lets the sender end it once the receiver has switched. The name is the key's
//! [fingerprint](kxp_verify::key_fingerprint), which tells the key apart from the endpoint's
//! other keys and nothing else about it.

use kxp_verify::KeyFingerprint;

pub use kxp_verify::VERIFIED_KEY_HEADER;

/// The `X-Kxp-Verified-Key` value of an answer with `status` to a request verified by the key
/// of fingerprint `key`: its 16 hex digits, on a 2xx only.
///
/// Not on any other status: a 4xx or 5xx tells the sender to try again, so the delivery does not
/// count as one the receiver took with that key. And a request that was not verified (a refusal,
/// a challenge) has no key to name, so an adapter only ever calls this with the fingerprint of
/// an [`Accepted`](crate::Accepted) request.
///
/// ```
/// use kxp_receiver::verified_key_value;
/// use kxp_verify::key_fingerprint;
///
/// let key = key_fingerprint(b"41ab92590637ac82026ca65266b2898428ea491b1e6d543d7202cf486ea62965");
/// assert_eq!(verified_key_value(200, key).as_deref(), Some("af17edef1cfa9c63"));
/// assert_eq!(verified_key_value(500, key), None);
/// assert_eq!(verified_key_value(409, key), None);
/// ```
pub fn verified_key_value(status: u16, key: KeyFingerprint) -> Option<String> {
    (200..=299).contains(&status).then(|| key.to_string())
}
