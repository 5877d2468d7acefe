//! Why a signature was refused, under the stable names the wire contract uses.

use core::fmt;

/// The stable name of a verification failure.
///
/// These names appear in JSON error bodies (`{"error":"signature_mismatch"}`), in logs and in the
/// shared test vectors, so they never change once published.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// `missing_header`: no signature header, or an empty one.
    MissingHeader,
    /// `malformed_header`: the header does not follow the `t=<ts>,v1=<hex>` grammar.
    MalformedHeader,
    /// `signature_mismatch`: no `v1` matches any configured secret, or no `v1a` verifies with
    /// any configured public key (a forgery, a tampered body or timestamp, or the wrong key).
    SignatureMismatch,
    /// `timestamp_too_old`: authentic, but signed longer ago than the tolerance (a replay, or the
    /// receiver's clock runs fast).
    TimestampTooOld,
    /// `timestamp_in_future`: authentic, but signed further ahead than the tolerance (the sender's
    /// clock runs fast).
    TimestampInFuture,
}

impl ErrorKind {
    /// Every kind, in the order of the table in ARCHITECTURE.md.
    pub const ALL: [ErrorKind; 5] = [
        ErrorKind::MissingHeader,
        ErrorKind::MalformedHeader,
        ErrorKind::SignatureMismatch,
        ErrorKind::TimestampTooOld,
        ErrorKind::TimestampInFuture,
    ];

    /// The stable snake_case name.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorKind::MissingHeader => "missing_header",
            ErrorKind::MalformedHeader => "malformed_header",
            ErrorKind::SignatureMismatch => "signature_mismatch",
            ErrorKind::TimestampTooOld => "timestamp_too_old",
            ErrorKind::TimestampInFuture => "timestamp_in_future",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which rule of the header grammar was broken. It never quotes the header itself, so it is safe
/// to log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Malformed {
    /// Longer than [`MAX_HEADER_LEN`](crate::MAX_HEADER_LEN) bytes.
    TooLong,
    /// A byte outside printable ASCII, space and tab.
    InvalidCharacter,
    /// An empty item: `,,`, a leading or a trailing comma.
    EmptyItem,
    /// An item without `=`.
    MissingEquals,
    /// An item with nothing before its `=`.
    EmptyKey,
    /// A `t` value that is not 1 to 19 ASCII digits.
    InvalidTimestamp,
    /// More than one `t`.
    DuplicateTimestamp,
    /// No `t` at all.
    MissingTimestamp,
    /// A `v1` value that is not exactly 64 hex digits.
    InvalidSignature,
    /// No `v1` at all.
    MissingSignature,
    /// A `v1a` value that is not the canonical padded standard base64 of 64 bytes (checked only
    /// by a verifier with public keys).
    InvalidEd25519Signature,
    /// No `v1a` at all (checked only by a verifier with public keys).
    MissingEd25519Signature,
    /// More than [`MAX_ED25519_SIGNATURES`](crate::MAX_ED25519_SIGNATURES) `v1a` items.
    TooManyEd25519Signatures,
    /// Standard Webhooks: a `webhook-id` that is not visible ASCII without `.` (a `.` would let
    /// the id and the timestamp trade bytes in the signed `<id>.<timestamp>.<body>`).
    InvalidWebhookId,
    /// Standard Webhooks: a `webhook-timestamp` that is not 1 to 19 ASCII digits without a
    /// leading zero.
    InvalidWebhookTimestamp,
    /// Standard Webhooks: a `webhook-signature` with a byte outside visible ASCII and space, or
    /// an empty item (two spaces in a row, a leading or a trailing space).
    InvalidSignatureList,
    /// Standard Webhooks: a `webhook-signature` item without `,`, or with nothing before it.
    MissingComma,
    /// Standard Webhooks: a `v1` value that is not the padded standard base64 of 32 bytes.
    InvalidHmacSignature,
    /// Standard Webhooks: more than [`MAX_SIGNATURE_ITEMS`](crate::MAX_SIGNATURE_ITEMS) items
    /// in `webhook-signature`, whatever their version.
    TooManySignatureItems,
}

impl Malformed {
    const fn explain(self) -> &'static str {
        match self {
            Malformed::TooLong => "the header is longer than 4096 bytes",
            Malformed::InvalidCharacter => {
                "the header contains a byte outside printable ASCII, space and tab"
            }
            Malformed::EmptyItem => "the header has an empty item (`,,` or a stray comma)",
            Malformed::MissingEquals => "an item has no `=`",
            Malformed::EmptyKey => "an item has no key before its `=`",
            Malformed::InvalidTimestamp => "`t` must be 1 to 19 ASCII digits",
            Malformed::DuplicateTimestamp => "`t` appears more than once",
            Malformed::MissingTimestamp => "there is no `t` item",
            Malformed::InvalidSignature => "a `v1` value is not exactly 64 hex digits",
            Malformed::MissingSignature => "there is no `v1` item",
            Malformed::InvalidEd25519Signature => {
                "a `v1a` value is not the padded standard base64 of 64 bytes"
            }
            Malformed::MissingEd25519Signature => "there is no `v1a` item",
            Malformed::TooManyEd25519Signatures => "there are more than 4 `v1a` items",
            Malformed::InvalidWebhookId => {
                "`webhook-id` must be visible ASCII characters other than `.`"
            }
            Malformed::InvalidWebhookTimestamp => {
                "`webhook-timestamp` must be 1 to 19 ASCII digits without a leading zero"
            }
            Malformed::InvalidSignatureList => {
                "`webhook-signature` must be visible ASCII items separated by single spaces"
            }
            Malformed::MissingComma => "a `webhook-signature` item has no `<version>,` prefix",
            Malformed::InvalidHmacSignature => {
                "a `v1` value is not the padded standard base64 of 32 bytes"
            }
            Malformed::TooManySignatureItems => "`webhook-signature` has more than 16 items",
        }
    }
}

/// A refused signature: its [`kind`](Error::kind) is the stable name, its `Display` a one-line
/// explanation for humans. Neither ever contains a secret or a signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Error {
    detail: Detail,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Detail {
    MissingHeader,
    /// `missing_header` for one of the three Standard Webhooks headers, named by it.
    MissingStandardHeader(&'static str),
    Malformed(Malformed),
    SignatureMismatch,
    TooOld {
        age: u64,
        tolerance: u64,
    },
    InFuture {
        ahead: u64,
        tolerance: u64,
    },
}

impl Error {
    pub(crate) const MISSING_HEADER: Error = Error {
        detail: Detail::MissingHeader,
    };
    pub(crate) const SIGNATURE_MISMATCH: Error = Error {
        detail: Detail::SignatureMismatch,
    };

    /// `missing_header`, naming which of the Standard Webhooks headers was absent or empty.
    pub(crate) const fn missing_standard(header: &'static str) -> Error {
        Error {
            detail: Detail::MissingStandardHeader(header),
        }
    }

    pub(crate) const fn malformed(why: Malformed) -> Error {
        Error {
            detail: Detail::Malformed(why),
        }
    }

    pub(crate) const fn too_old(age: u64, tolerance: u64) -> Error {
        Error {
            detail: Detail::TooOld { age, tolerance },
        }
    }

    pub(crate) const fn in_future(ahead: u64, tolerance: u64) -> Error {
        Error {
            detail: Detail::InFuture { ahead, tolerance },
        }
    }

    /// The stable kind, for matching and for the `{"error":"<kind>"}` body.
    pub const fn kind(&self) -> ErrorKind {
        match self.detail {
            Detail::MissingHeader | Detail::MissingStandardHeader(_) => ErrorKind::MissingHeader,
            Detail::Malformed(_) => ErrorKind::MalformedHeader,
            Detail::SignatureMismatch => ErrorKind::SignatureMismatch,
            Detail::TooOld { .. } => ErrorKind::TimestampTooOld,
            Detail::InFuture { .. } => ErrorKind::TimestampInFuture,
        }
    }

    /// The grammar rule a `malformed_header` broke; `None` for the other kinds.
    pub const fn malformed_reason(&self) -> Option<Malformed> {
        match self.detail {
            Detail::Malformed(why) => Some(why),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.detail {
            Detail::MissingHeader => f.write_str("missing_header: no X-Kxp-Signature header"),
            Detail::MissingStandardHeader(header) => {
                write!(f, "missing_header: no {header} header")
            }
            Detail::Malformed(why) => write!(f, "malformed_header: {}", why.explain()),
            Detail::SignatureMismatch => f.write_str(
                "signature_mismatch: no signature matches a configured secret or public key \
                 (wrong secret or key, or the body or timestamp was changed)",
            ),
            Detail::TooOld { age, tolerance } => write!(
                f,
                "timestamp_too_old: signed {age} s ago, more than the {tolerance} s tolerance \
                 (a replay, or a clock is off)"
            ),
            Detail::InFuture { ahead, tolerance } => write!(
                f,
                "timestamp_in_future: signed {ahead} s ahead, more than the {tolerance} s \
                 tolerance (the sender's clock runs fast)"
            ),
        }
    }
}

impl core::error::Error for Error {}

/// A [`Verifier`](crate::Verifier) or [`Signer`](crate::Signer) that cannot be built as asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// No secret was given.
    NoSecrets,
    /// More than [`MAX_SECRETS`](crate::MAX_SECRETS) secrets were given.
    TooManySecrets,
    /// A secret is empty: an HMAC with an empty key authenticates nothing.
    EmptySecret,
    /// A Standard Webhooks secret (`whsec_…`) is not the standard base64 of 1 to 64 bytes.
    InvalidSecret,
    /// No public key was given.
    NoPublicKeys,
    /// More than [`MAX_SECRETS`](crate::MAX_SECRETS) public keys were given.
    TooManyPublicKeys,
    /// A public key is not 32 bytes (or their padded standard base64) that canonically encode a
    /// point of the curve.
    InvalidPublicKey,
    /// A public key is a point of small order: a signature by it can be valid for almost any
    /// message, so it authenticates nothing.
    WeakPublicKey,
}

impl ConfigError {
    /// The count errors of a keyring, which name secrets, renamed for public keys.
    pub(crate) const fn for_public_keys(self) -> ConfigError {
        match self {
            ConfigError::NoSecrets => ConfigError::NoPublicKeys,
            ConfigError::TooManySecrets => ConfigError::TooManyPublicKeys,
            other => other,
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::NoSecrets => f.write_str("no webhook secret configured"),
            ConfigError::TooManySecrets => write!(
                f,
                "more than {} webhook secrets configured at once",
                crate::MAX_SECRETS
            ),
            ConfigError::EmptySecret => f.write_str("a configured webhook secret is empty"),
            ConfigError::InvalidSecret => f.write_str(
                "a configured whsec_ webhook secret is not the standard base64 of 1 to 64 bytes",
            ),
            ConfigError::NoPublicKeys => f.write_str("no webhook public key configured"),
            ConfigError::TooManyPublicKeys => write!(
                f,
                "more than {} webhook public keys configured at once",
                crate::MAX_SECRETS
            ),
            ConfigError::InvalidPublicKey => f.write_str(
                "a configured webhook public key is not the canonical encoding of an Ed25519 point",
            ),
            ConfigError::WeakPublicKey => {
                f.write_str("a configured webhook public key has small order and is refused")
            }
        }
    }
}

impl core::error::Error for ConfigError {}
