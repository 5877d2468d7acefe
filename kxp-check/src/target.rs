//! The endpoint under test and how far the checks may go: its URL (refused before any connection
//! or DNS lookup when it is plain HTTP off loopback), its secrets, and the bounds on time and
//! size that make a run finite.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use reqwest::Url;
use reqwest::redirect::Policy;

/// The timeout of the sender's deliveries, so the checks judge what the sender would.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// The sender's default body limit, which a receiver is expected to enforce.
pub const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;

/// Distinct events in the [`Burst`](crate::Check::Burst) check.
pub const DEFAULT_BURST: usize = 20;

/// The event type of every event sent unless another is chosen: `kxp.test.` marks it as a test,
/// so a merchant can keep it out of the books.
pub const DEFAULT_EVENT_TYPE: &str = "kxp.test.payment.succeeded";

/// The longest timeout: with every request bounded by it, a whole run stays within minutes.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(60);

/// The largest burst, so that a typo cannot turn a check into a load test.
pub const MAX_BURST: usize = 200;

/// Secrets at most: the receiver side of kxp holds as many.
pub const MAX_SECRETS: usize = 4;

/// The body limit's range: the test events themselves must fit well under it, and the
/// over-the-limit body is held in memory.
const BODY_LIMITS: std::ops::RangeInclusive<usize> = 1024..=64 * 1024 * 1024;

/// `User-Agent` of every request, so the merchant's logs tell these from real deliveries.
const USER_AGENT: &str = concat!("kxp-webhooks/", env!("CARGO_PKG_VERSION"), " (kxp check)");

/// A signing secret. It is only ever used as an HMAC key: `Debug` hides it, and no error or
/// report quotes it.
#[derive(Clone)]
pub(crate) struct Secret(pub(crate) String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

/// The endpoint to check, and how: built by [`Target::builder`].
///
/// It holds the HTTP client every check uses: no redirects followed, no proxy from the
/// environment, `localhost` pinned to the loopback addresses, and the timeout on every request.
#[derive(Clone)]
pub struct Target {
    url: Url,
    settings: Settings,
    pub(crate) client: reqwest::Client,
}

/// What a [`TargetBuilder`] collects and a [`Target`] keeps.
#[derive(Debug, Clone)]
struct Settings {
    secrets: Vec<Secret>,
    timeout: Duration,
    body_limit: usize,
    challenge: bool,
    burst: usize,
    event_type: String,
}

impl Target {
    /// Starts a target for `url`, with the defaults: [`DEFAULT_TIMEOUT`],
    /// [`DEFAULT_BODY_LIMIT`], no challenge, [`DEFAULT_BURST`], [`DEFAULT_EVENT_TYPE`], and
    /// plain HTTP for loopback addresses only.
    pub fn builder(url: &str) -> TargetBuilder {
        TargetBuilder {
            url: url.to_owned(),
            settings: Settings {
                secrets: Vec::new(),
                timeout: DEFAULT_TIMEOUT,
                body_limit: DEFAULT_BODY_LIMIT,
                challenge: false,
                burst: DEFAULT_BURST,
                event_type: DEFAULT_EVENT_TYPE.to_owned(),
            },
            allow_http: false,
        }
    }

    /// The URL every request goes to.
    pub(crate) fn url(&self) -> &Url {
        &self.url
    }

    /// The secrets, newest first.
    pub(crate) fn secrets(&self) -> &[Secret] {
        &self.settings.secrets
    }

    /// The URL for a report: without user name, password or fragment, which may be credentials.
    pub fn display_url(&self) -> String {
        let mut url = self.url.clone();
        // Both only fail for URLs that cannot have credentials, which then have none to hide.
        let _ = url.set_username("");
        let _ = url.set_password(None);
        url.set_fragment(None);
        url.to_string()
    }

    /// How long each request may take, answer and body included.
    pub fn timeout(&self) -> Duration {
        self.settings.timeout
    }

    /// The body limit the endpoint is expected to enforce, in bytes.
    pub fn body_limit(&self) -> usize {
        self.settings.body_limit
    }

    /// Whether the [`Challenge`](crate::Check::Challenge) check runs.
    pub fn challenge(&self) -> bool {
        self.settings.challenge
    }

    /// How many events the [`Burst`](crate::Check::Burst) check sends.
    pub fn burst(&self) -> usize {
        self.settings.burst
    }

    /// The `type` of every event sent.
    pub fn event_type(&self) -> &str {
        &self.settings.event_type
    }
}

/// The URL without its credentials; the secrets hidden.
impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("url", &self.display_url())
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// The settings of a [`Target`], checked together by [`build`](TargetBuilder::build).
#[must_use]
pub struct TargetBuilder {
    url: String,
    settings: Settings,
    allow_http: bool,
}

/// Without the URL (not yet parsed, so its credentials cannot be cut out); the secrets hidden.
impl fmt::Debug for TargetBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TargetBuilder")
            .field("settings", &self.settings)
            .field("allow_http", &self.allow_http)
            .finish_non_exhaustive()
    }
}

impl TargetBuilder {
    /// Adds a secret the endpoint is configured with; add them newest first. Two secrets make
    /// the [`Rotation`](crate::Check::Rotation) check possible.
    pub fn secret(mut self, secret: impl Into<String>) -> TargetBuilder {
        self.settings.secrets.push(Secret(secret.into()));
        self
    }

    /// How long each request may take, answer and body included (at most [`MAX_TIMEOUT`]).
    pub fn timeout(mut self, timeout: Duration) -> TargetBuilder {
        self.settings.timeout = timeout;
        self
    }

    /// The body limit the endpoint is expected to enforce, in bytes (1 KiB to 64 MiB).
    pub fn body_limit(mut self, bytes: usize) -> TargetBuilder {
        self.settings.body_limit = bytes;
        self
    }

    /// Whether to check the endpoint challenge (off by default: not every endpoint answers it).
    pub fn challenge(mut self, on: bool) -> TargetBuilder {
        self.settings.challenge = on;
        self
    }

    /// How many distinct events the [`Burst`](crate::Check::Burst) check sends (1 to
    /// [`MAX_BURST`]).
    pub fn burst(mut self, events: usize) -> TargetBuilder {
        self.settings.burst = events;
        self
    }

    /// The `type` of every event sent: 1 to 255 printable ASCII characters, no spaces (it
    /// travels in `X-Kxp-Event-Type` too). Prefer one starting with `kxp.test.`.
    pub fn event_type(mut self, event_type: impl Into<String>) -> TargetBuilder {
        self.settings.event_type = event_type.into();
        self
    }

    /// Allows `http://` URLs whose host is not loopback. Off by default: signed requests in
    /// clear text can be read and replayed by anyone on the path.
    pub fn allow_http(mut self, on: bool) -> TargetBuilder {
        self.allow_http = on;
        self
    }

    /// Checks every setting and builds the HTTP client. Nothing is connected or resolved here,
    /// so a refused URL is never reached.
    pub fn build(self) -> Result<Target, TargetError> {
        let url = Url::parse(&self.url).map_err(|e| TargetError::InvalidUrl(e.to_string()))?;
        let localhost = url.host_str() == Some("localhost");
        match url.scheme() {
            "https" => {}
            "http" if self.allow_http || localhost || is_loopback_ip(&url) => {}
            "http" => {
                return Err(TargetError::PlainHttpOffLoopback {
                    host: url.host_str().unwrap_or_default().to_owned(),
                });
            }
            other => return Err(TargetError::UnsupportedScheme(other.to_owned())),
        }
        let settings = self.settings;
        if settings.secrets.is_empty() {
            return Err(TargetError::NoSecret);
        }
        if settings.secrets.len() > MAX_SECRETS {
            return Err(TargetError::TooManySecrets);
        }
        if settings.secrets.iter().any(|s| s.0.is_empty()) {
            return Err(TargetError::EmptySecret);
        }
        if settings.timeout.is_zero() || settings.timeout > MAX_TIMEOUT {
            return Err(TargetError::Timeout);
        }
        if !BODY_LIMITS.contains(&settings.body_limit) {
            return Err(TargetError::BodyLimit);
        }
        if !(1..=MAX_BURST).contains(&settings.burst) {
            return Err(TargetError::Burst);
        }
        let event_type = &settings.event_type;
        if event_type.is_empty()
            || event_type.len() > 255
            || !event_type.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(TargetError::EventType);
        }

        let mut client = reqwest::Client::builder()
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout)
            .redirect(Policy::none())
            .no_proxy()
            .user_agent(USER_AGENT);
        if localhost {
            // Whatever the resolver says, `localhost` means this machine: plain HTTP was allowed
            // for loopback only.
            client = client.resolve_to_addrs(
                "localhost",
                &[
                    SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
                    SocketAddr::from((Ipv6Addr::LOCALHOST, 0)),
                ],
            );
        }
        let client = client
            .build()
            .map_err(|e| TargetError::Client(root_cause(&e)))?;
        Ok(Target {
            url,
            settings,
            client,
        })
    }
}

/// 127.0.0.0/8 or `::1`, written as an address (no lookup).
fn is_loopback_ip(url: &Url) -> bool {
    let host = url.host_str().unwrap_or_default();
    let ip = host.trim_start_matches('[').trim_end_matches(']');
    ip.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The innermost error, which names the actual problem; the outer layers only say which library
/// noticed it.
pub(crate) fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut error = error;
    while let Some(source) = error.source() {
        error = source;
    }
    error.to_string()
}

/// Why a [`TargetBuilder`] was refused. No message quotes a secret or the whole URL (which may
/// hold credentials).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TargetError {
    /// The URL does not parse.
    #[error("not a valid URL: {0}")]
    InvalidUrl(String),
    /// Neither `http` nor `https`.
    #[error("the URL's scheme must be https (or http for loopback), not {0}")]
    UnsupportedScheme(String),
    /// `http://` to a host that is not 127.0.0.0/8, `::1` or `localhost`, without
    /// [`allow_http`](TargetBuilder::allow_http).
    #[error(
        "refusing plain http:// to {host}: signed requests in clear text can be read and \
         replayed; use https, or allow plain HTTP explicitly (http:// is accepted for \
         127.0.0.0/8, ::1 and localhost)"
    )]
    PlainHttpOffLoopback {
        /// The host of the URL.
        host: String,
    },
    /// No secret was given.
    #[error("no secret given: the endpoint's signing secret is needed to sign the test events")]
    NoSecret,
    /// An empty secret.
    #[error("a secret is empty")]
    EmptySecret,
    /// More than [`MAX_SECRETS`].
    #[error("at most {MAX_SECRETS} secrets")]
    TooManySecrets,
    /// Zero, or over [`MAX_TIMEOUT`].
    #[error("the timeout must be over 0 and at most {} s", MAX_TIMEOUT.as_secs())]
    Timeout,
    /// Outside 1 KiB to 64 MiB.
    #[error("the body limit must be 1 KiB to 64 MiB")]
    BodyLimit,
    /// Zero, or over [`MAX_BURST`].
    #[error("the burst must be 1 to {MAX_BURST} events")]
    Burst,
    /// Empty, too long, or not printable ASCII without spaces.
    #[error("the event type must be 1 to 255 printable ASCII characters, no spaces")]
    EventType,
    /// The HTTP client could not be set up (no TLS roots, for instance).
    #[error("cannot set up the HTTP client: {0}")]
    Client(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(url: &str, allow_http: bool) -> Result<Target, TargetError> {
        Target::builder(url)
            .secret("s")
            .allow_http(allow_http)
            .build()
    }

    #[test]
    fn plain_http_is_for_loopback_unless_allowed() {
        for url in [
            "http://127.0.0.1:3000/webhooks",
            "http://127.8.9.10/",
            "http://[::1]:8080/x",
            "http://localhost:3000/",
            "http://LOCALHOST/",
            "https://shop.example/webhooks",
            "https://10.0.0.7/webhooks",
        ] {
            assert!(build(url, false).is_ok(), "{url}");
        }
        for url in [
            "http://shop.example/webhooks",
            "http://10.0.0.7/",
            "http://localhost.shop.example/",
            "http://[::ffff:127.0.0.1]/",
            "http://0.0.0.0/",
        ] {
            assert!(
                matches!(
                    build(url, false),
                    Err(TargetError::PlainHttpOffLoopback { .. })
                ),
                "{url}"
            );
            assert!(build(url, true).is_ok(), "{url} with allow_http");
        }
        assert_eq!(
            build("ftp://shop.example/", true).unwrap_err(),
            TargetError::UnsupportedScheme("ftp".to_owned())
        );
    }

    #[test]
    fn settings_out_of_range_are_refused_and_secrets_stay_hidden() {
        let base = || Target::builder("https://shop.example/webhooks");
        assert_eq!(base().build().unwrap_err(), TargetError::NoSecret);
        assert_eq!(
            base().secret("").build().unwrap_err(),
            TargetError::EmptySecret
        );
        let five = (0..5).fold(base(), |b, i| b.secret(format!("s{i}")));
        assert_eq!(five.build().unwrap_err(), TargetError::TooManySecrets);
        let with = || base().secret("whsec_do_not_print");
        assert_eq!(
            with().timeout(Duration::ZERO).build().unwrap_err(),
            TargetError::Timeout
        );
        assert_eq!(
            with().body_limit(10).build().unwrap_err(),
            TargetError::BodyLimit
        );
        assert_eq!(with().burst(0).build().unwrap_err(), TargetError::Burst);
        assert_eq!(
            with().event_type("a b").build().unwrap_err(),
            TargetError::EventType
        );
        let target = with().build().unwrap();
        assert!(!format!("{target:?}").contains("whsec_do_not_print"));
        let builder =
            Target::builder("https://user:pass@shop.example/").secret("whsec_do_not_print");
        let shown = format!("{builder:?}");
        assert!(
            !shown.contains("whsec_do_not_print") && !shown.contains("pass@"),
            "{shown}"
        );
    }

    #[test]
    fn reports_show_the_url_without_credentials() {
        let target = Target::builder("https://user:pass@shop.example/hook?x=1#frag")
            .secret("s")
            .build()
            .unwrap();
        assert_eq!(target.display_url(), "https://shop.example/hook?x=1");
        assert!(!format!("{target:?}").contains("pass@"));
    }
}
