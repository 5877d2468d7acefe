//! Every way a receiver refuses a request, with the status and JSON body of ARCHITECTURE.md.

use std::fmt;

use kxp_verify::EnvelopeError;

/// Why a request was refused before the handler ran.
///
/// Each variant has a fixed [`status`](Rejection::status) and a stable
/// [`code`](Rejection::code), sent as `{"error":"<code>"}`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rejection {
    /// 401: the signature check failed; the code is the verification kind.
    Signature(kxp_verify::Error),
    /// 413 `payload_too_large`: the body is over the limit; the rest was not read.
    PayloadTooLarge {
        /// The configured limit, in bytes.
        limit: usize,
    },
    /// 400 `body_unreadable`: the body could not be read (the client went away mid-body).
    BodyUnreadable,
    /// 400 `length_required`: an HTTP/1.0 `POST` without `Content-Length`, whose body cannot
    /// be framed (see [`Receiver::unframed`](crate::Receiver::unframed)).
    LengthRequired,
    /// 400 `invalid_json` / `invalid_envelope`: authentic, but not an event.
    Envelope(EnvelopeError),
    /// 400, with the kxp-jwe code (`not_encrypted`, `decryption_failed`, `forbidden_header`,
    /// …): authentic, but its `data_jwe` does not decrypt with the receiver's key, or it has
    /// none (see [`Receiver::decrypt_with`](crate::Receiver::decrypt_with)).
    Decryption(kxp_jwe::EnvelopeError),
    /// 400 `invalid_challenge`: a challenge token that is not 1 to 256 URL-safe characters.
    InvalidChallenge,
    /// 500 `not_verified`: a handler asked for a verified event on a route without the
    /// verification middleware — a wiring mistake, reported instead of silently trusting input.
    NotVerified,
    /// 503 `thin_fetch_failed`: a thin delivery verified, but the full event could not be
    /// fetched from the sender (unreachable, rate limited, refused, or the delivery named no
    /// endpoint): the sender retries the delivery. Says why, never the credential.
    ThinFetchFailed(String),
    /// 502 `thin_unverified`: the full event fetched for a thin delivery did not verify with
    /// the receiver's secrets, or is another event than the notice's: refused, never handled.
    ThinUnverified(String),
}

impl Rejection {
    /// The HTTP status.
    pub fn status(&self) -> u16 {
        match self {
            Rejection::Signature(_) => 401,
            Rejection::PayloadTooLarge { .. } => 413,
            Rejection::BodyUnreadable
            | Rejection::LengthRequired
            | Rejection::Envelope(_)
            | Rejection::Decryption(_)
            | Rejection::InvalidChallenge => 400,
            Rejection::NotVerified => 500,
            Rejection::ThinUnverified(_) => 502,
            Rejection::ThinFetchFailed(_) => 503,
        }
    }

    /// The stable error code of the JSON body.
    pub fn code(&self) -> &'static str {
        match self {
            Rejection::Signature(error) => error.kind().as_str(),
            Rejection::PayloadTooLarge { .. } => "payload_too_large",
            Rejection::BodyUnreadable => "body_unreadable",
            Rejection::LengthRequired => "length_required",
            Rejection::Envelope(error) => error.kind().as_str(),
            Rejection::Decryption(error) => error.code(),
            Rejection::InvalidChallenge => "invalid_challenge",
            Rejection::NotVerified => "not_verified",
            Rejection::ThinFetchFailed(_) => "thin_fetch_failed",
            Rejection::ThinUnverified(_) => "thin_unverified",
        }
    }

    /// `{"error":"<code>"}`. Codes are fixed identifiers, so no escaping is needed.
    pub fn json_body(&self) -> String {
        format!(r#"{{"error":"{}"}}"#, self.code())
    }

    /// The `verification` field of the request log: the signature verdict, or `not_attempted`
    /// when the request was refused before the signature could be checked.
    pub fn verification(&self) -> &'static str {
        match self {
            Rejection::Signature(error) => error.kind().as_str(),
            Rejection::Envelope(_)
            | Rejection::Decryption(_)
            | Rejection::NotVerified
            | Rejection::ThinFetchFailed(_)
            | Rejection::ThinUnverified(_) => "ok",
            Rejection::PayloadTooLarge { .. }
            | Rejection::BodyUnreadable
            | Rejection::LengthRequired
            | Rejection::InvalidChallenge => "not_attempted",
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::Signature(error) => error.fmt(f),
            Rejection::PayloadTooLarge { limit } => write!(f, "payload_too_large: the body is over {limit} bytes"),
            Rejection::BodyUnreadable => f.write_str("body_unreadable: the request body could not be read"),
            Rejection::LengthRequired => {
                f.write_str("length_required: an HTTP/1.0 POST must declare its Content-Length")
            }
            Rejection::Envelope(error) => error.fmt(f),
            Rejection::Decryption(error) => write!(f, "{}: {error}", error.code()),
            Rejection::InvalidChallenge => {
                f.write_str("invalid_challenge: the token must be 1 to 256 of A-Z a-z 0-9 - _")
            }
            Rejection::NotVerified => f.write_str(
                "not_verified: this route reads a verified event but has no verification middleware",
            ),
            Rejection::ThinFetchFailed(why) => {
                write!(f, "thin_fetch_failed: the full event of a thin delivery could not be fetched: {why}")
            }
            Rejection::ThinUnverified(why) => {
                write!(f, "thin_unverified: the full event fetched for a thin delivery was refused: {why}")
            }
        }
    }
}

impl std::error::Error for Rejection {}
