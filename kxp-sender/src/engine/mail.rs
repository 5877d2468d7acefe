//! E-mail notifications over SMTP.
//!
//! Operators learn by e-mail what needs a person (an endpoint that keeps failing, deliveries
//! gone to the dead-letter queue) because nobody watches a dashboard all day. A [`Mailer`]
//! sends plain-text UTF-8 messages through one SMTP server named by a URL, in the forms of
//! `lettre`:
//!
//! - `smtp://host:port` — plain text, for a local relay or tests (port 25 by default);
//! - `smtp://host?tls=required` — STARTTLS, refused if the server does not offer it (port 587);
//! - `smtps://host` — TLS from the first byte (port 465);
//! - (`smtp://host?tls=opportunistic` — STARTTLS if offered, else plain text: anyone on the
//!   path can make it plain, so prefer `required`);
//! - any of them with `user:password@` before the host to authenticate (`AUTH PLAIN` or
//!   `LOGIN`). Over plain `smtp://` the password crosses the network in clear: use credentials
//!   there only with a relay on the same machine.
//!
//! TLS certificates are checked against the system's trust store. The password never appears
//! in an error or in `Debug` output: every text that comes from `lettre` or the server is
//! scrubbed before it is kept.
//!
//! Inside the crate (the mailer is not public: [`Config::smtp_url`](crate::Config) configures it):
//!
//! ```text
//! let mailer = Mailer::new("smtps://kxp:secret@smtp.example.com", "kxp <ops@example.com>")?;
//! mailer.send("oncall@example.com", "Endpoint disabled", "ep_123 failed for 3 days.").await?;
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lettre::message::{Mailbox, Message, header};
use lettre::{Address, AsyncSmtpTransport, AsyncTransport, Tokio1Executor};

use crate::store::redact_passwords;

/// How long the mailer waits for the server at each step (connecting, then each reply): a
/// stuck server must not hold up the worker that reports through it.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(10);

/// The longest address [`check_address`] accepts, in bytes: the limit of an SMTP path
/// (RFC 5321 4.5.3.1.3, 256 with the angle brackets), so any accepted address can be sent to.
pub(crate) const MAX_ADDRESS_LEN: usize = 254;

/// Sends e-mail through one SMTP server. Cheap to clone; each message opens a connection of its
/// own, so a server restart between two messages costs nothing.
#[derive(Clone)]
pub(crate) struct Mailer {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
    /// The server URL with its password replaced, for `Debug`.
    shown_url: String,
    /// The password in each form it could take in a text (as written in the URL, and
    /// percent-decoded), to scrub from errors. Never printed.
    secrets: Arc<[String]>,
}

impl fmt::Debug for Mailer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // By hand: the transport holds the credentials, and `from` is the only other field
        // worth seeing.
        f.debug_struct("Mailer")
            .field("url", &self.shown_url)
            .field("from", &self.from.to_string())
            .finish_non_exhaustive()
    }
}

impl Mailer {
    /// A mailer for the server at `smtp_url` (see the [module docs](self) for its forms),
    /// sending as `from`, a mailbox such as `kxp <ops@example.com>` or a bare address.
    ///
    /// Nothing is sent and nothing connects yet: a wrong host or password shows on the first
    /// [`send`](Mailer::send).
    pub(crate) fn new(smtp_url: &str, from: &str) -> Result<Mailer, MailError> {
        let secrets = url_secrets(smtp_url);
        check_url_form(smtp_url, &secrets)?;
        let transport = AsyncSmtpTransport::<Tokio1Executor>::from_url(smtp_url)
            .map_err(|e| {
                let reason = e.to_string();
                // lettre files every URL problem under "Connection error", which misleads here.
                let reason = reason.strip_prefix("Connection error: ").unwrap_or(&reason);
                MailError::Url {
                    reason: scrub(reason, &secrets),
                }
            })?
            .timeout(Some(TIMEOUT))
            .build();
        let from = parse_mailbox(from)?;
        Ok(Mailer {
            transport,
            from,
            shown_url: scrub(smtp_url, &secrets),
            secrets: secrets.into(),
        })
    }

    /// Sends one plain-text message (`text/plain; charset=utf-8`, with `Date` and a
    /// `Message-ID`) to `to`, a mailbox or a bare address. Succeeds once the server has
    /// accepted it for delivery.
    ///
    /// Lines may be any length and in any script: the body is sent as 7-bit text when it is
    /// plain ASCII, else encoded (quoted-printable or base64), so no relay can mangle it.
    pub(crate) async fn send(&self, to: &str, subject: &str, body: &str) -> Result<(), MailError> {
        let recipient = parse_mailbox(to)?;
        let message = Message::builder()
            .from(self.from.clone())
            .to(recipient)
            .subject(one_line(subject))
            .message_id(Some(message_id(&self.from)))
            .header(header::MIME_VERSION_1_0)
            .header(header::ContentType::TEXT_PLAIN)
            .body(body.to_owned())
            // Only an envelope without sender or recipient fails here, and both were just set.
            .map_err(|e| MailError::Address {
                address: to.to_owned(),
                reason: e.to_string(),
            })?;
        self.transport
            .send(message)
            .await
            .map_err(|e| MailError::Send {
                code: e.status().map(u16::from),
                reason: scrub(&e.to_string(), &self.secrets),
            })?;
        Ok(())
    }
}

/// Checks that `address` is a bare e-mail address (`user@example.com`, no display name) that
/// the mailer can send to, so that a bad contact address is refused when it is given, with
/// this error's message, rather than failing silently at the first notification.
pub(crate) fn check_address(address: &str) -> Result<(), MailError> {
    let refuse = |reason: String| MailError::Address {
        address: address.to_owned(),
        reason,
    };
    if address.len() > MAX_ADDRESS_LEN {
        return Err(refuse(format!("longer than {MAX_ADDRESS_LEN} bytes")));
    }
    address
        .parse::<Address>()
        .map(drop)
        .map_err(|e| refuse(e.to_string()))
}

/// Why an e-mail could not be sent, or a mailer not built.
///
/// No variant holds the SMTP password, in any output.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MailError {
    /// The SMTP URL is unusable: not a URL, an unknown scheme or `tls` value, no host.
    #[error("invalid SMTP URL: {reason}")]
    Url {
        /// What is wrong with it.
        reason: String,
    },
    /// An address (the sender's or a recipient's) is not a valid mailbox.
    #[error("invalid e-mail address {address:?}: {reason}")]
    Address {
        /// The address as given.
        address: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The server refused the message, or could not be reached or spoken to in time.
    #[error("cannot send the e-mail: {reason}")]
    Send {
        /// The server's reply code when it answered with a refusal: 4xx is temporary (try
        /// again later), 5xx permanent. `None` when there was no such reply (unreachable,
        /// timed out, TLS failed).
        code: Option<u16>,
        /// What happened, with the server's reply text when there is one.
        reason: String,
    },
}

impl MailError {
    /// A stable name for the error, for logs and API responses: `smtp_url`, `address` or
    /// `smtp_send`.
    pub fn kind(&self) -> &'static str {
        match self {
            MailError::Url { .. } => "smtp_url",
            MailError::Address { .. } => "address",
            MailError::Send { .. } => "smtp_send",
        }
    }
}

/// Refuses, with a message that says what is allowed, the schemes and `tls` values lettre does
/// not know (its own message blames missing TLS features, which is not the cause here). Other
/// problems are left to lettre.
fn check_url_form(smtp_url: &str, secrets: &[String]) -> Result<(), MailError> {
    let Ok(url) = reqwest::Url::parse(smtp_url) else {
        return Ok(());
    };
    if !matches!(url.scheme(), "smtp" | "smtps") {
        return Err(MailError::Url {
            reason: format!("unknown scheme {:?}: use smtp:// or smtps://", url.scheme()),
        });
    }
    match url.query_pairs().find(|(key, _)| key == "tls") {
        Some((_, value)) if !matches!(&*value, "required" | "opportunistic") => {
            let reason = format!("unknown tls value {value:?}: use tls=required");
            Err(MailError::Url {
                reason: scrub(&reason, secrets),
            })
        }
        _ => Ok(()),
    }
}

/// A subject is one line: line breaks and other control characters become spaces, so text
/// from an event reads as one line in every mail client.
fn one_line(subject: &str) -> String {
    subject
        .split(char::is_control)
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

fn parse_mailbox(text: &str) -> Result<Mailbox, MailError> {
    text.parse()
        .map_err(|e: lettre::address::AddressError| MailError::Address {
            address: text.to_owned(),
            reason: e.to_string(),
        })
}

/// `<random@domain of the sender>`: the sender's domain is one the operator controls, where
/// the host name (lettre's default) may be an internal name that spam filters hold against it.
fn message_id(from: &Mailbox) -> String {
    let domain = from.email.domain();
    let domain = if domain.is_ascii() {
        domain
    } else {
        "localhost"
    };
    format!("<{}@{domain}>", uuid::Uuid::new_v4().simple())
}

/// The password of `url`, as written and percent-decoded (lettre authenticates with the
/// decoded form, a server could echo either). Empty when the URL has none or does not parse.
fn url_secrets(url: &str) -> Vec<String> {
    let Some(password) = reqwest::Url::parse(url)
        .ok()
        .and_then(|url| url.password().map(str::to_owned))
    else {
        return Vec::new();
    };
    // A `%` not followed by two hex digits stays as it is; bytes that are not UTF-8 become
    // U+FFFD, as in the text a server would echo.
    let decoded = percent_encoding::percent_decode_str(&password)
        .decode_utf8_lossy()
        .into_owned();
    let mut secrets = vec![password, decoded];
    secrets.retain(|s| !s.is_empty());
    secrets.dedup();
    secrets
}

/// `text` with every URL password and every one of `secrets` replaced by `[redacted]`.
fn scrub(text: &str, secrets: &[String]) -> String {
    let mut text = text.to_owned();
    for secret in secrets {
        text = text.replace(secret.as_str(), "[redacted]");
    }
    redact_passwords(&text)
}

#[cfg(test)]
mod tests;
