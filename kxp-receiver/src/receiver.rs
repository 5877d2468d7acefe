//! The configured checks: body limit, signature, envelope.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use kxp_jwe::DecryptionKey;
use kxp_verify::{ConfigError, KeyFingerprint, VerifiedBuf, Verifier};

use crate::format::Format;
use crate::rejection::Rejection;

/// The default body limit: 1 MiB, far above any real event, low enough that a flood of large
/// bodies cannot exhaust memory.
pub const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;

/// A receiver's configuration: the secrets (in a [`Verifier`]), the body limit and the clock.
///
/// Cheap to clone (the state is shared), so an adapter keeps one per route.
#[derive(Clone)]
pub struct Receiver {
    inner: Arc<Inner>,
}

#[derive(Clone)]
struct Inner {
    verifier: Verifier,
    decryption: Vec<DecryptionKey>,
    format: Format,
    body_limit: usize,
    clock: Arc<dyn Fn() -> u64 + Send + Sync>,
}

impl Receiver {
    /// A receiver with the default body limit and the system clock.
    pub fn new(verifier: Verifier) -> Receiver {
        Receiver {
            inner: Arc::new(Inner {
                verifier,
                decryption: Vec::new(),
                format: Format::Kxp,
                body_limit: DEFAULT_BODY_LIMIT,
                clock: Arc::new(system_clock),
            }),
        }
    }

    /// A receiver whose secrets are the comma-separated list in the environment variable `var`
    /// (conventionally `KXP_WEBHOOK_SECRET`), so rotating is a matter of setting `new,old`.
    pub fn from_env(var: &str) -> Result<Receiver, FromEnvError> {
        let list = std::env::var(var).map_err(|_| FromEnvError::Missing(var.to_owned()))?;
        let verifier =
            Verifier::from_secret_list(&list).map_err(|error| FromEnvError::Invalid {
                var: var.to_owned(),
                error,
            })?;
        Ok(Receiver::new(verifier))
    }

    /// Sets the largest body accepted, in bytes; larger ones are answered 413 unread.
    #[must_use]
    pub fn body_limit(self, bytes: usize) -> Receiver {
        self.rebuild(|inner| inner.body_limit = bytes)
    }

    /// Sets the signature format the sender uses for this endpoint (default [`Format::Kxp`]).
    #[must_use]
    pub fn format(self, format: Format) -> Receiver {
        self.rebuild(|inner| inner.format = format)
    }

    /// Decrypts every event with `key` once its signature verified, so the handler gets `data`
    /// as the producer sent it: for an endpoint registered with the public half as its
    /// `encryption_jwk`. An event without `data_jwe` is then refused (400 `not_encrypted`),
    /// and one that does not decrypt too (400 `decryption_failed`): the sender retries it, so
    /// a key fixed in time loses nothing.
    ///
    /// Called again, it adds a key: while the endpoint's key changes, give the new one and the
    /// old one, and each event is decrypted with whichever it was made to (tried in the order
    /// given).
    #[must_use]
    pub fn decrypt_with(self, key: DecryptionKey) -> Receiver {
        self.rebuild(|inner| inner.decryption.push(key))
    }

    /// The signature format it verifies.
    pub fn wire_format(&self) -> Format {
        self.inner.format
    }

    /// Sets the timestamp tolerance (default five minutes).
    #[must_use]
    pub fn tolerance(self, tolerance: Duration) -> Receiver {
        self.rebuild(|inner| inner.verifier = inner.verifier.clone().with_tolerance(tolerance))
    }

    /// Replaces the clock (Unix seconds): tests pin time with it.
    #[must_use]
    pub fn clock(self, clock: impl Fn() -> u64 + Send + Sync + 'static) -> Receiver {
        self.rebuild(|inner| inner.clock = Arc::new(clock))
    }

    /// The body limit in bytes.
    pub fn limit(&self) -> usize {
        self.inner.body_limit
    }

    /// Whether a declared `Content-Length` is already over the limit, so the body need not be
    /// read at all.
    pub fn too_large(&self, content_length: Option<u64>) -> Option<Rejection> {
        let limit = self.inner.body_limit;
        let over = content_length.is_some_and(|len| len > u64::try_from(limit).unwrap_or(u64::MAX));
        over.then_some(Rejection::PayloadTooLarge { limit })
    }

    /// Whether a request's body cannot be framed, so nothing it carries can be verified: an
    /// HTTP/1.0 `POST` without `Content-Length` (RFC 1945 §7.2.2 requires one). HTTP/1.0 has no
    /// chunked encoding, so hyper (under axum) reads such a body as empty, and the signature of
    /// the body that was sent would fail as `signature_mismatch`, sending the sender to check
    /// its secret; actix-http refuses the request with 400 before any middleware runs. Both
    /// adapters ask this first, so both answer 400 (ARCHITECTURE.md's "body not usable").
    pub fn unframed(&self, http_1_0: bool, post: bool, content_length: bool) -> Option<Rejection> {
        (http_1_0 && post && !content_length).then_some(Rejection::LengthRequired)
    }

    /// Verifies `header` (empty when absent) over `body`, then checks the envelope so the
    /// handler is only reached with a usable event id.
    pub fn check<B: AsRef<[u8]> + From<Vec<u8>>>(
        &self,
        header: &[u8],
        body: B,
    ) -> Result<Accepted<B>, Rejection> {
        let now = (self.inner.clock)();
        let verified = self
            .inner
            .verifier
            .verify_owned(header, body, now)
            .map_err(Rejection::Signature)?;
        self.accept(verified)
    }

    /// The envelope of a verified body (decrypted first, with a decryption key), checked.
    fn accept<B: AsRef<[u8]> + From<Vec<u8>>>(
        &self,
        verified: VerifiedBuf<B>,
    ) -> Result<Accepted<B>, Rejection> {
        let verified = match self.inner.decryption.as_slice() {
            [] => verified,
            // A thin notice carries no `data` to decrypt: the event fetched for it does.
            _ if verified.verified().envelope().is_ok_and(|e| e.is_thin()) => verified,
            keys => decrypt(&verified, keys).map_err(Rejection::Decryption)?,
        };
        // The envelope borrowed, not parsed into an `Event`: the id is all that is kept, and
        // its one copy is shared by the adapter's log line and the handler's extractor.
        let envelope = verified
            .verified()
            .envelope()
            .map_err(Rejection::Envelope)?;
        let event_id = Arc::from(envelope.id());
        Ok(Accepted { verified, event_id })
    }

    /// Verifies a request in the receiver's [`Format`], reading each header it needs with
    /// `header` (which answers an empty value for a missing one), then checks the envelope as
    /// [`check`](Receiver::check) does.
    ///
    /// ```
    /// use kxp_receiver::{Format, Receiver};
    /// use kxp_verify::{Secret, Signer, Verifier};
    ///
    /// let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    /// let receiver = Receiver::new(Verifier::new(Secret::from_whsec(secret)?))
    ///     .format(Format::StandardWebhooks)
    ///     .clock(|| 1764464523);
    /// let body = br#"{"id":"evt_1","type":"payment.succeeded","api_version":"2026-11-01",
    ///                "created_at":"2026-11-30T01:02:03Z","data":{}}"#.to_vec();
    /// let signer = Signer::new(Secret::from_whsec(secret)?);
    /// let signature = signer.sign_standard("evt_1", 1764464523, &body)?.to_string();
    /// let headers = [
    ///     ("webhook-id", "evt_1"),
    ///     ("webhook-timestamp", "1764464523"),
    ///     ("webhook-signature", signature.as_str()),
    /// ];
    /// let header = |name: &str| {
    ///     headers.iter().find(|(n, _)| *n == name).map_or(&b""[..], |(_, v)| v.as_bytes())
    /// };
    /// assert_eq!(receiver.check_request(header, body)?.event_id(), "evt_1");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn check_request<'h, B: AsRef<[u8]> + From<Vec<u8>>>(
        &self,
        header: impl Fn(&str) -> &'h [u8],
        body: B,
    ) -> Result<Accepted<B>, Rejection> {
        match self.inner.format {
            Format::Kxp => self.check(header(kxp_verify::SIGNATURE_HEADER), body),
            Format::StandardWebhooks => {
                let now = (self.inner.clock)();
                let verified = self
                    .inner
                    .verifier
                    .verify_standard_owned(
                        header(kxp_verify::WEBHOOK_ID_HEADER),
                        header(kxp_verify::WEBHOOK_TIMESTAMP_HEADER),
                        header(kxp_verify::WEBHOOK_SIGNATURE_HEADER),
                        body,
                        now,
                    )
                    .map_err(Rejection::Signature)?;
                self.accept(verified)
            }
        }
    }

    fn rebuild(self, change: impl FnOnce(&mut Inner)) -> Receiver {
        let mut inner = Arc::unwrap_or_clone(self.inner);
        change(&mut inner);
        Receiver {
            inner: Arc::new(inner),
        }
    }
}

impl fmt::Debug for Receiver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Receiver")
            .field("verifier", &self.inner.verifier)
            .field("format", &self.inner.format)
            .field("decryption_keys", &self.inner.decryption.len())
            .field("body_limit", &self.inner.body_limit)
            .finish_non_exhaustive()
    }
}

/// `verified` decrypted with the first of `keys` that opens it. Only a JWE made to another key
/// moves on to the next one; anything else about it is refused at once, by the first key. When
/// none opens it, a key of its curve says why (`decryption_failed`) rather than one of the
/// other curve (`invalid_ephemeral_key`).
fn decrypt<B: AsRef<[u8]>, C: From<Vec<u8>>>(
    verified: &VerifiedBuf<B>,
    keys: &[DecryptionKey],
) -> Result<VerifiedBuf<C>, kxp_jwe::EnvelopeError> {
    use kxp_jwe::{EnvelopeError, JweError};
    let mut refused = None;
    for key in keys {
        match verified.decrypt(key) {
            Err(e @ EnvelopeError::Jwe(JweError::DecryptionFailed)) => refused = Some(e),
            Err(e @ EnvelopeError::Jwe(JweError::InvalidEphemeralKey)) => {
                refused.get_or_insert(e);
            }
            other => return other,
        }
    }
    Err(refused.unwrap_or(EnvelopeError::Jwe(JweError::DecryptionFailed)))
}

fn system_clock() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A request that passed every check: the verified body and the event id read from it.
#[derive(Debug, Clone)]
pub struct Accepted<B> {
    verified: VerifiedBuf<B>,
    event_id: Arc<str>,
}

impl<B: AsRef<[u8]>> Accepted<B> {
    /// The event id from the verified body: the dedup key.
    pub fn event_id(&self) -> &str {
        &self.event_id
    }

    /// The verified body.
    pub fn verified(&self) -> &VerifiedBuf<B> {
        &self.verified
    }

    /// The fingerprint of the secret or key that verified the request, for the 2xx's
    /// [`X-Kxp-Verified-Key`](crate::VERIFIED_KEY_HEADER) (see
    /// [`verified_key_value`](crate::verified_key_value)).
    pub fn key_fingerprint(&self) -> KeyFingerprint {
        self.verified.key_fingerprint()
    }

    /// Both parts, by value. The id is shared (an [`Arc`]), so an adapter keeps it for its log
    /// line and hands it to the handler without copying it.
    pub fn into_parts(self) -> (VerifiedBuf<B>, Arc<str>) {
        (self.verified, self.event_id)
    }
}

/// The secrets could not be read from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FromEnvError {
    /// The variable is not set (or not Unicode).
    Missing(String),
    /// The variable's list of secrets is unusable.
    Invalid {
        /// The variable's name.
        var: String,
        /// What is wrong with the list (never the secrets themselves).
        error: ConfigError,
    },
}

impl fmt::Display for FromEnvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FromEnvError::Missing(var) => write!(
                f,
                "{var} is not set: it must hold the webhook secret(s), comma-separated"
            ),
            FromEnvError::Invalid { var, error } => write!(f, "{var}: {error}"),
        }
    }
}

impl std::error::Error for FromEnvError {}

#[cfg(test)]
mod tests {
    use kxp_jwe::Curve;
    use kxp_verify::{Secret, Signer, Verifier};

    use super::{DecryptionKey, Receiver, Rejection};

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    fn check(receiver: &Receiver, body: &str) -> Result<String, Rejection> {
        let signature = Signer::new(Secret::new(SECRET).unwrap())
            .sign(1_764_464_523, body.as_bytes())
            .to_string();
        receiver
            .check(signature.as_bytes(), body.as_bytes().to_vec())
            .map(|accepted| accepted.event_id().to_owned())
    }

    #[test]
    fn a_receiver_that_decrypts_takes_a_thin_notice_and_still_refuses_clear_data() {
        let receiver = Receiver::new(Verifier::new(Secret::new(SECRET).unwrap()))
            .clock(|| 1_764_464_523)
            .decrypt_with(DecryptionKey::generate(Curve::P256, None));
        let thin = r#"{"id":"evt_1","type":"t","api_version":"v","created_at":"c","thin":true}"#;
        assert_eq!(check(&receiver, thin).unwrap(), "evt_1");
        let clear = r#"{"id":"evt_2","type":"t","api_version":"v","created_at":"c","data":{"card":"4242"}}"#;
        assert_eq!(check(&receiver, clear).unwrap_err().code(), "not_encrypted");
    }
}
