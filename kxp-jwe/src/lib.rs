//! Payload encryption for kxp webhooks: a sender encrypts each event's `data` to the merchant's
//! public key, so that proxies and logs between the two see only `id`, `type`, `api_version`
//! and `created_at`, and only the merchant's receiver can read the rest.
//!
//! The format is a standard one that merchants' languages already implement: a JWE in compact
//! serialization (RFC 7516) with `alg` `ECDH-ES+A256KW` and `enc` `A256GCM`, to a P-256 or
//! X25519 key. The registered key pins the algorithm and the curve: nothing in a received
//! header chooses them, and decryption refuses `zip`, `jku`, `jwk`, `x5u`, `crit` and
//! ephemeral keys off the key's curve. A sender encrypts, then signs the bytes it sends; a
//! receiver verifies the signature first, then decrypts.
//!
//! - [`EncryptionKey`]: a merchant's public JWK, and [`EncryptionKey::encrypt`].
//! - [`DecryptionKey`]: the private JWK, [`DecryptionKey::decrypt`] and
//!   [`DecryptionKey::generate`] for a new key pair.
//! - [`seal_envelope`] / [`open_envelope`]: the event envelope with `data_jwe` in place of
//!   `data`, and back.
//!
//! ```
//! use kxp_jwe::{Curve, DecryptionKey, EncryptionKey, open_envelope, seal_envelope};
//!
//! // The merchant makes a key pair and registers the public JWK with the sender.
//! let private = DecryptionKey::generate(Curve::X25519, Some("2026-12"));
//! let public = EncryptionKey::from_jwk(&private.public().to_jwk().to_string())?;
//!
//! // The sender seals each attempt's envelope (then signs what it sends).
//! let payload = r#"{"id":"evt_1","type":"payment.succeeded","api_version":"2026-11-01","created_at":"2026-12-01T10:00:00Z","data":{"card":"4242"}}"#;
//! let sent = seal_envelope(&public, payload)?;
//! assert!(sent.contains(r#""data_jwe":"ey"#) && !sent.contains("4242"));
//!
//! // The receiver verifies the signature, then opens it: the envelope as the producer made it.
//! assert_eq!(&open_envelope(&private, sent.as_bytes())?[..], payload.as_bytes());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod envelope;
mod error;
mod jwe;
mod jwk;

pub use envelope::{EnvelopeError, open_envelope, seal_envelope};
pub use error::{JweError, JwkError};
pub use jwk::{Curve, DecryptionKey, EncryptionKey};

/// The key management algorithm: ECDH-ES with an ephemeral key, the content key wrapped with
/// AES-256 key wrap (RFC 7518 §4.6).
pub const ALG: &str = "ECDH-ES+A256KW";

/// The content encryption: AES-256-GCM (RFC 7518 §5.3).
pub const ENC: &str = "A256GCM";
