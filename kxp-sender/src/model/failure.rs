//! Why an attempt failed, as a type: a stable kind and a detail, shown (and stored in
//! `kxp_attempts.error`, `kxp_deliveries.last_error`) as `kind: detail`, exactly the text the
//! sender has always written, so nothing that reads those columns parses it back.

use std::fmt;

/// The stable kind of a failed attempt that got no usable response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureKind {
    /// No answer within the endpoint's timeout.
    Timeout,
    /// The connection could not be made.
    Connect,
    /// The request failed otherwise (TLS, protocol).
    Request,
    /// An address of the host is in a blocked range (the address guard).
    BlockedAddress,
    /// More redirects than an attempt follows.
    TooManyRedirects,
    /// `https` redirected to `http` outside development mode.
    InsecureRedirect,
    /// A redirect to a scheme other than http(s).
    InvalidRedirect,
    /// The endpoint's URL does not parse.
    InvalidUrl,
    /// The endpoint has no usable secret to sign with.
    NoSecret,
    /// A header value could not be built.
    InvalidHeader,
    /// `data` could not be encrypted to the endpoint's key: nothing is sent in the clear.
    EncryptionFailed,
    /// The endpoint's credentials could not be presented: its OAuth2 token endpoint failed or
    /// answered something that is not a token, or the stored credentials do not open. Nothing
    /// is sent without them.
    AuthFailed,
    /// The egress proxy failed (unreachable, `407`, or failing its probe): the request never
    /// reached the endpoint. An attempt that ends so is not counted: the delivery goes back
    /// untried and waits for the proxy.
    ProxyError,
}

impl FailureKind {
    /// The stable snake_case name: the first word of the stored error.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Timeout => "timeout",
            FailureKind::Connect => "connect",
            FailureKind::Request => "request",
            FailureKind::BlockedAddress => "blocked_address",
            FailureKind::TooManyRedirects => "too_many_redirects",
            FailureKind::InsecureRedirect => "insecure_redirect",
            FailureKind::InvalidRedirect => "invalid_redirect",
            FailureKind::InvalidUrl => "invalid_url",
            FailureKind::NoSecret => "no_secret",
            FailureKind::InvalidHeader => "invalid_header",
            FailureKind::EncryptionFailed => "encryption_failed",
            FailureKind::AuthFailed => "auth_failed",
            FailureKind::ProxyError => "proxy_error",
        }
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed attempt without a usable response: its kind and what happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The stable kind.
    pub kind: FailureKind,
    /// The detail (reqwest's error chain, the refused address, …).
    pub detail: String,
}

impl Failure {
    /// A failure of `kind`, saying `detail`.
    pub fn new(kind: FailureKind, detail: impl Into<String>) -> Failure {
        Failure {
            kind,
            detail: detail.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.detail)
    }
}

impl std::error::Error for Failure {}

/// Why an attempt did not deliver, as recorded: a non-2xx response (`http_<status>`) or a
/// failure of its own (`<kind>: <detail>`: a timeout, a refused connection, a blocked address…).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptError {
    /// The endpoint answered with this non-2xx status.
    Http(u16),
    /// No usable response.
    Failed(Failure),
}

impl fmt::Display for AttemptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttemptError::Http(status) => write!(f, "http_{status}"),
            AttemptError::Failed(failure) => failure.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_text_is_kind_then_detail() {
        let failure = Failure::new(FailureKind::Timeout, "no answer within 5000 ms");
        assert_eq!(failure.to_string(), "timeout: no answer within 5000 ms");
        assert_eq!(AttemptError::Http(503).to_string(), "http_503");
        assert_eq!(
            AttemptError::Failed(Failure::new(FailureKind::BlockedAddress, "x")).to_string(),
            "blocked_address: x"
        );
    }
}
