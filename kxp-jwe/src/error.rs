//! What can go wrong, as enums with stable snake_case names (`code`), so that a receiver can
//! log and count them without matching on messages. No message holds key material or
//! plaintext.

/// A JWK that is not a key this crate encrypts to or decrypts with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JwkError {
    /// `invalid_json`: not a JSON object.
    #[error("the JWK is not a JSON object")]
    InvalidJson,
    /// `unsupported_key`: not `{"kty": "EC", "crv": "P-256"}` or `{"kty": "OKP", "crv":
    /// "X25519"}`.
    #[error("the JWK is not a P-256 (kty EC) or X25519 (kty OKP) key")]
    UnsupportedKey,
    /// `unsupported_algorithm`: an `alg` other than `ECDH-ES+A256KW`, or a `use` other than
    /// `enc`.
    #[error(
        "the JWK is for another use: its alg must be ECDH-ES+A256KW and its use enc, or absent"
    )]
    UnsupportedAlgorithm,
    /// `invalid_key`: a coordinate that is not base64url of the curve's size, or a point that
    /// is not on the curve.
    #[error("the JWK's `{0}` is not a valid value for its curve")]
    InvalidKey(&'static str),
    /// `private_key`: a public key was expected and the JWK holds `d`, its private part.
    #[error("the JWK holds a private key (`d`): give the public key only")]
    PrivateKey,
    /// `not_private`: a private key was expected and the JWK has no `d`.
    #[error("the JWK has no private part (`d`)")]
    NotPrivate,
}

impl JwkError {
    /// The stable snake_case name.
    pub fn code(&self) -> &'static str {
        match self {
            JwkError::InvalidJson => "invalid_json",
            JwkError::UnsupportedKey => "unsupported_key",
            JwkError::UnsupportedAlgorithm => "unsupported_algorithm",
            JwkError::InvalidKey(_) => "invalid_key",
            JwkError::PrivateKey => "private_key",
            JwkError::NotPrivate => "not_private",
        }
    }
}

/// A JWE this crate will not decrypt, or could not.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JweError {
    /// `malformed`: not five base64url parts, a header that is not a JSON object, or a part of
    /// the wrong size; names the part.
    #[error("the JWE is malformed: {0}")]
    Malformed(&'static str),
    /// `forbidden_header`: the header has a parameter this crate refuses rather than ignores:
    /// `zip` (compression before encryption leaks through lengths), `jku`, `jwk`, `x5u`
    /// (keys named by the sender of the message, not the receiver), or `crit`.
    #[error("the JWE header carries `{0}`, which is refused")]
    ForbiddenHeader(&'static str),
    /// `unsupported_algorithm`: an `alg` other than `ECDH-ES+A256KW`.
    #[error("the JWE's alg is not ECDH-ES+A256KW")]
    UnsupportedAlgorithm,
    /// `unsupported_encryption`: an `enc` other than `A256GCM`.
    #[error("the JWE's enc is not A256GCM")]
    UnsupportedEncryption,
    /// `invalid_ephemeral_key`: `epk` missing, on another curve than the key, off its curve,
    /// or of small order.
    #[error("the JWE's ephemeral key (epk) is missing, on another curve, or invalid")]
    InvalidEphemeralKey,
    /// `decryption_failed`: the key does not unwrap the content key, or the ciphertext, the
    /// header or the tag was altered. One error for both, as neither says more to an attacker.
    #[error("the JWE does not decrypt with this key (another key, or tampered with)")]
    DecryptionFailed,
}

impl JweError {
    /// The stable snake_case name.
    pub fn code(&self) -> &'static str {
        match self {
            JweError::Malformed(_) => "malformed",
            JweError::ForbiddenHeader(_) => "forbidden_header",
            JweError::UnsupportedAlgorithm => "unsupported_algorithm",
            JweError::UnsupportedEncryption => "unsupported_encryption",
            JweError::InvalidEphemeralKey => "invalid_ephemeral_key",
            JweError::DecryptionFailed => "decryption_failed",
        }
    }
}
