//! Broker sources (`kxp serve --ingest <URL>`): what a source's URL says ([`IngestSource`])
//! and what its consumer reports ([`SourceStatus`]) to `/healthz` and `/metrics`. The
//! consumers themselves are the `ingest` layer's; this is what the configuration and the API
//! need of them, so neither depends on a broker's client.
//!
//! The URL forms:
//!
//! - `amqp://user:pass@host:5672/vhost?queue=<name>&account=<account id>` (or `amqps://`):
//!   a RabbitMQ queue (which must exist: the platform owns its topology).
//! - `nats://[user:pass@]host:4222?stream=<name>&subject=<subject>&durable=<consumer>&account=<account id>`
//!   (or `tls://`): a JetStream stream, read through a durable pull consumer (created when
//!   missing).
//!
//! Options on both: `account_header=allow` lets a message's `x-kxp-account` header name any
//! account, and `account_header=allow:<acc>,<acc>` only these or the URL's (without a header,
//! the URL's `account`, which may then be left out); see [`AccountHeader`]. `prefetch=<1..=1000>`
//! (default [`DEFAULT_PREFETCH`]) bounds the messages in flight (AMQP's `basic.qos`,
//! JetStream's `max_ack_pending`). NATS also takes `rejected_subject=<subject>` (default
//! `kxp.rejected.<stream>`), which must lie outside `subject` ([`IngestSource::refusal`]).
//! Other query parameters of an `amqp://` URL (`heartbeat`, `connection_timeout`, …) are
//! passed on to the client.

use std::fmt::{self, Write as _};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use kxp_api::SourceHealth;

use crate::engine::subjects;
use crate::model::AccountId;
use crate::store::redact_passwords;

/// Messages in flight per source unless the URL says `prefetch=`.
pub(crate) const DEFAULT_PREFETCH: u16 = 64;

/// The most messages in flight a source may ask for.
pub(crate) const MAX_PREFETCH: u16 = 1000;

/// The longest `account_header=` value, in bytes.
const MAX_ACCOUNT_HEADER: usize = 8192;

/// One `--ingest` URL, parsed: where to consume and for which account.
#[derive(Clone, PartialEq, Eq)]
pub struct IngestSource {
    /// The URL as given (with its credentials: never shown; see [`IngestSource::redacted`]).
    url: String,
    pub(crate) broker: Broker,
    /// The account of messages that do not name one.
    pub(crate) account: Option<AccountId>,
    /// Which accounts a message's `x-kxp-account` header may name.
    pub(crate) account_header: AccountHeader,
    /// Messages in flight at most.
    pub(crate) prefetch: u16,
}

/// Which accounts a message may name in its `x-kxp-account` header (`account_header=`). The
/// header is a trust boundary: whoever can publish to the source acts for the accounts it
/// lets a message name, as an operator key would.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AccountHeader {
    /// The header is ignored: every message is the URL's account's.
    Ignored,
    /// `allow`: any account.
    Any,
    /// `allow:<acc>,<acc>`: these, and the URL's own account.
    Only(Vec<AccountId>),
}

/// The broker a source reads.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum Broker {
    /// A RabbitMQ queue.
    Amqp {
        /// The URL the client connects with: ours, less this crate's parameters.
        uri: String,
        /// The virtual host, decoded (`/` by default).
        vhost: String,
        /// The queue.
        queue: String,
    },
    /// A JetStream stream through a durable pull consumer.
    Nats {
        /// The server's URL (scheme, host and port; no credentials, no query).
        server: String,
        /// The credentials the URL gave, handed to the client apart: it does not read a URL's
        /// user part.
        auth: NatsAuth,
        /// The stream.
        stream: String,
        /// The consumer's filter subject.
        subject: String,
        /// The durable consumer's name.
        durable: String,
        /// Where rejected messages are published with their reason.
        rejected_subject: String,
    },
}

/// How a NATS source authenticates: `nats://user:pass@host`, `nats://token@host`, or neither.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum NatsAuth {
    /// No credentials.
    None,
    /// A user and a password.
    UserPassword(String, String),
    /// A token.
    Token(String),
}

/// Why an `--ingest` URL was refused. The text names the parameter; it never quotes a
/// password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IngestUrlError {
    /// Not a URL at all.
    #[error("not a URL ({0})")]
    Syntax(String),
    /// A scheme other than `amqp`, `amqps`, `nats` and `tls`.
    #[error("unknown scheme {0:?}: use amqp:// or amqps:// (RabbitMQ), nats:// or tls:// (NATS)")]
    Scheme(String),
    /// A required parameter is missing.
    #[error("the URL needs `{0}=`")]
    Missing(&'static str),
    /// A parameter's value is not acceptable.
    #[error("`{name}`: {problem}")]
    Invalid {
        /// The parameter.
        name: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// A parameter this source does not know (a typo would otherwise be ignored).
    #[error("unknown parameter `{0}`")]
    Unknown(String),
}

impl IngestSource {
    /// The URL with its credentials replaced ([`redact_passwords`]: a lone user part, which
    /// NATS takes for a token, whole), for `--print-config`, `Debug` and errors.
    pub fn redacted(&self) -> String {
        redact_passwords(&self.url)
    }

    /// The source's name in `/healthz`, `/metrics` and logs: `amqp:<vhost>/<queue>` or
    /// `nats:<stream>/<durable>`, no host and no credentials.
    pub fn name(&self) -> String {
        match &self.broker {
            Broker::Amqp { vhost, queue, .. } => {
                let vhost = vhost.strip_prefix('/').unwrap_or(vhost);
                format!("amqp:{vhost}/{queue}")
            }
            Broker::Nats {
                stream, durable, ..
            } => format!("nats:{stream}/{durable}"),
        }
    }
}

impl IngestSource {
    /// Why the source must not start, if it must not: a NATS source whose rejected subject is
    /// in its own filter would consume each message it rejects again, reject it again and
    /// publish it again, without end. (The filter is never missing, `subject=` being required,
    /// so the stream's own subjects need no look: a reject outside the filter is never this
    /// source's to consume, whichever stream keeps it.)
    pub(crate) fn refusal(&self) -> Option<String> {
        match &self.broker {
            Broker::Nats {
                subject,
                rejected_subject,
                ..
            } if subjects::matches(subject, rejected_subject) => Some(format!(
                "the rejected subject {rejected_subject:?} is in the source's own filter \
                 {subject:?}: every rejected message would be consumed and rejected again, \
                 forever; set rejected_subject= to a subject outside the filter"
            )),
            _ => None,
        }
    }
}

impl fmt::Debug for IngestSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl FromStr for IngestSource {
    type Err = IngestUrlError;

    fn from_str(text: &str) -> Result<IngestSource, IngestUrlError> {
        let url = reqwest::Url::parse(text).map_err(|e| IngestUrlError::Syntax(e.to_string()))?;
        let mut params = Params::default();
        let mut passed_on = Vec::new();
        for (name, value) in url.query_pairs() {
            if !params.take(&name, &value)? {
                passed_on.push((name.into_owned(), value.into_owned()));
            }
        }
        let prefetch = match params.prefetch.take() {
            None => DEFAULT_PREFETCH,
            Some(n) => n
                .parse::<u16>()
                .ok()
                .filter(|n| (1..=MAX_PREFETCH).contains(n))
                .ok_or_else(|| IngestUrlError::Invalid {
                    name: "prefetch",
                    problem: format!("a number from 1 to {MAX_PREFETCH}"),
                })?,
        };
        let account_header = match params.account_header.as_deref() {
            None => AccountHeader::Ignored,
            Some("allow") => AccountHeader::Any,
            Some(value) => {
                let refused = || IngestUrlError::Invalid {
                    name: "account_header",
                    problem: "`allow` (any account), or `allow:` and account ids separated by \
                              commas (`allow:acc_…,acc_…`)"
                        .to_owned(),
                };
                let list = value.strip_prefix("allow:").ok_or_else(refused)?;
                let mut ids = list
                    .split(',')
                    .map(|id| account_id(id).ok_or_else(refused))
                    .collect::<Result<Vec<_>, _>>()?;
                ids.sort_by(|a, b| a.as_str().cmp(b.as_str()));
                ids.dedup();
                AccountHeader::Only(ids)
            }
        };
        let account = params
            .account
            .take()
            .map(|id| {
                account_id(&id).ok_or_else(|| IngestUrlError::Invalid {
                    name: "account",
                    problem: "an account id (`acc_…`)".to_owned(),
                })
            })
            .transpose()?;
        if account.is_none() && account_header == AccountHeader::Ignored {
            return Err(IngestUrlError::Missing("account"));
        }
        let broker = match url.scheme() {
            "amqp" | "amqps" => {
                if let Some(name) = params.nats_only() {
                    return Err(IngestUrlError::Unknown(name.to_owned()));
                }
                let queue = params.queue.ok_or(IngestUrlError::Missing("queue"))?;
                let vhost = match url.path() {
                    "" | "/" => "/".to_owned(),
                    path => percent_encoding::percent_decode_str(&path[1..])
                        .decode_utf8()
                        .map_err(|_| IngestUrlError::Invalid {
                            name: "vhost",
                            problem: "not UTF-8".to_owned(),
                        })?
                        .into_owned(),
                };
                let mut uri = url.clone();
                uri.set_query(None);
                // Connecting gives up after 10 s unless the URL says otherwise (the client's
                // own default is to wait for as long as the network does).
                if !passed_on
                    .iter()
                    .any(|(name, _)| name == "connection_timeout")
                {
                    passed_on.push(("connection_timeout".to_owned(), "10000".to_owned()));
                }
                uri.query_pairs_mut().extend_pairs(&passed_on);
                Broker::Amqp {
                    uri: uri.into(),
                    vhost,
                    queue,
                }
            }
            "nats" | "tls" => {
                if let Some((name, _)) = passed_on.first() {
                    return Err(IngestUrlError::Unknown(name.clone()));
                }
                if let Some(name) = params.amqp_only() {
                    return Err(IngestUrlError::Unknown(name.to_owned()));
                }
                let stream = params.stream.ok_or(IngestUrlError::Missing("stream"))?;
                let subject = params.subject.ok_or(IngestUrlError::Missing("subject"))?;
                let durable = params.durable.ok_or(IngestUrlError::Missing("durable"))?;
                if !matches!(url.path(), "" | "/") {
                    return Err(IngestUrlError::Invalid {
                        name: "path",
                        problem: "a NATS URL has no path: stream and subject are parameters"
                            .to_owned(),
                    });
                }
                if !subjects::is_filter(&subject) {
                    return Err(IngestUrlError::Invalid {
                        name: "subject",
                        problem: "a NATS subject or filter: tokens separated by `.`, none empty; \
                                  `*` for any one token, `>` for the rest (last only)"
                            .to_owned(),
                    });
                }
                let rejected_subject = params
                    .rejected_subject
                    .unwrap_or_else(|| format!("kxp.rejected.{stream}"));
                if !subjects::is_literal(&rejected_subject) {
                    return Err(IngestUrlError::Invalid {
                        name: "rejected_subject",
                        problem: "a subject to publish to: tokens separated by `.`, none empty, \
                                  no `*` or `>` token"
                            .to_owned(),
                    });
                }
                let decode = |part: &str| {
                    percent_encoding::percent_decode_str(part)
                        .decode_utf8()
                        .map(|text| text.into_owned())
                        .map_err(|_| IngestUrlError::Invalid {
                            name: "credentials",
                            problem: "not UTF-8".to_owned(),
                        })
                };
                let auth = match (url.username(), url.password()) {
                    ("", None) => NatsAuth::None,
                    (user, Some(password)) => {
                        NatsAuth::UserPassword(decode(user)?, decode(password)?)
                    }
                    (token, None) => NatsAuth::Token(decode(token)?),
                };
                let mut server = url.clone();
                server.set_query(None);
                server.set_path("");
                let cleared = server.set_username("").is_ok() && server.set_password(None).is_ok();
                if !cleared {
                    return Err(IngestUrlError::Invalid {
                        name: "host",
                        problem: "a NATS URL needs a host".to_owned(),
                    });
                }
                Broker::Nats {
                    server: server.as_str().trim_end_matches('/').to_owned(),
                    auth,
                    stream,
                    subject,
                    durable,
                    rejected_subject,
                }
            }
            other => return Err(IngestUrlError::Scheme(other.to_owned())),
        };
        Ok(IngestSource {
            url: text.to_owned(),
            broker,
            account,
            account_header,
            prefetch,
        })
    }
}

/// `id` if it is a well-formed account id (`acc_` and letters and digits).
fn account_id(id: &str) -> Option<AccountId> {
    let well_formed = id
        .strip_prefix("acc_")
        .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_alphanumeric()));
    well_formed.then(|| AccountId::from(id.to_owned()))
}

/// The parameters this crate reads from a source URL.
#[derive(Default)]
struct Params {
    queue: Option<String>,
    stream: Option<String>,
    subject: Option<String>,
    durable: Option<String>,
    rejected_subject: Option<String>,
    account: Option<String>,
    account_header: Option<String>,
    prefetch: Option<String>,
}

impl Params {
    /// Records `name=value` if it is one of ours (false: pass it on); a second one of a
    /// parameter, or an empty value, is refused.
    fn take(&mut self, name: &str, value: &str) -> Result<bool, IngestUrlError> {
        let (slot, name) = match name {
            "queue" => (&mut self.queue, "queue"),
            "stream" => (&mut self.stream, "stream"),
            "subject" => (&mut self.subject, "subject"),
            "durable" => (&mut self.durable, "durable"),
            "rejected_subject" => (&mut self.rejected_subject, "rejected_subject"),
            "account" => (&mut self.account, "account"),
            "account_header" => (&mut self.account_header, "account_header"),
            "prefetch" => (&mut self.prefetch, "prefetch"),
            _ => return Ok(false),
        };
        // An allow-list of accounts is longer than any name: room for about 200 of them.
        let longest = if name == "account_header" {
            MAX_ACCOUNT_HEADER
        } else {
            255
        };
        let problem = if slot.is_some() {
            "given twice".to_owned()
        } else if value.is_empty() {
            "empty".to_owned()
        } else if value.len() > longest || value.chars().any(|c| c.is_control() || c == ' ') {
            format!("at most {longest} characters, no spaces or control characters")
        } else {
            *slot = Some(value.to_owned());
            return Ok(true);
        };
        Err(IngestUrlError::Invalid { name, problem })
    }

    /// A NATS parameter given to an AMQP source.
    fn nats_only(&self) -> Option<&'static str> {
        [
            (self.stream.is_some(), "stream"),
            (self.subject.is_some(), "subject"),
            (self.durable.is_some(), "durable"),
            (self.rejected_subject.is_some(), "rejected_subject"),
        ]
        .into_iter()
        .find_map(|(given, name)| given.then_some(name))
    }

    /// An AMQP parameter given to a NATS source.
    fn amqp_only(&self) -> Option<&'static str> {
        self.queue.is_some().then_some("queue")
    }
}

/// Why a message was rejected to the broker's dead-letter path: stable names, the `reason`
/// label of `kxp_ingest_rejected_total` and the `Kxp-Reject-Reason` of NATS's rejections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RejectReason {
    /// The body is not JSON.
    InvalidJson,
    /// JSON, but not an event (`type` missing, a field of the wrong kind or out of bounds).
    InvalidRequest,
    /// `data` does not fit the schema registered for its type and version.
    SchemaViolation,
    /// `data` is over the server's limit.
    PayloadTooLarge,
    /// The account named (by the URL or the header) does not exist.
    UnknownAccount,
    /// The source has no account and the message names none.
    AccountRequired,
    /// The message names an account outside the source's `account_header=allow:` list.
    AccountNotAllowed,
    /// The message's id was used before with another body.
    IdempotencyKeyReused,
}

impl RejectReason {
    /// Every reason, in the order of the metric's lines.
    pub(crate) const ALL: [RejectReason; 8] = [
        RejectReason::InvalidJson,
        RejectReason::InvalidRequest,
        RejectReason::SchemaViolation,
        RejectReason::PayloadTooLarge,
        RejectReason::UnknownAccount,
        RejectReason::AccountRequired,
        RejectReason::AccountNotAllowed,
        RejectReason::IdempotencyKeyReused,
    ];

    /// The stable name.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RejectReason::InvalidJson => "invalid_json",
            RejectReason::InvalidRequest => "invalid_request",
            RejectReason::SchemaViolation => "schema_violation",
            RejectReason::PayloadTooLarge => "payload_too_large",
            RejectReason::UnknownAccount => "unknown_account",
            RejectReason::AccountRequired => "account_required",
            RejectReason::AccountNotAllowed => "account_not_allowed",
            RejectReason::IdempotencyKeyReused => "idempotency_key_reused",
        }
    }
}

/// Where a source's consumer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SourceState {
    /// Connecting (at start, and again after a failed session).
    Connecting,
    /// Consuming.
    Up,
    /// The last session failed; waiting before connecting again.
    Down,
}

/// What one source's consumer reports; shared with `/healthz` and `/metrics`.
#[derive(Debug)]
pub(crate) struct SourceStatus {
    /// [`IngestSource::name`].
    pub name: String,
    state: Mutex<(SourceState, Option<String>)>,
    /// Messages waiting in the broker; `u64::MAX` until read.
    lag: AtomicU64,
    created: AtomicU64,
    replayed: AtomicU64,
    reconnects: AtomicU64,
    rejected: [AtomicU64; RejectReason::ALL.len()],
}

impl SourceStatus {
    /// A source that has not connected yet.
    pub(crate) fn new(name: String) -> SourceStatus {
        SourceStatus {
            name,
            state: Mutex::new((SourceState::Connecting, None)),
            lag: AtomicU64::new(u64::MAX),
            created: AtomicU64::default(),
            replayed: AtomicU64::default(),
            reconnects: AtomicU64::default(),
            rejected: Default::default(),
        }
    }

    fn set(&self, state: SourceState, error: Option<String>) {
        let mut guard = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        guard.0 = state;
        if error.is_some() || state == SourceState::Up {
            guard.1 = error;
        }
    }

    /// Connecting again after a failed session.
    pub(crate) fn connecting(&self) {
        self.set(SourceState::Connecting, None);
    }

    /// Consuming.
    pub(crate) fn up(&self) {
        self.set(SourceState::Up, None);
    }

    /// The source will not start, for `reason` ([`IngestSource::refusal`]): down for good,
    /// with no reconnect to count.
    pub(crate) fn refused(&self, reason: String) {
        self.set(SourceState::Down, Some(reason));
    }

    /// A session failed with `error` (already through [`redact_passwords`]).
    pub(crate) fn down(&self, error: String) {
        self.reconnects.fetch_add(1, Ordering::Relaxed);
        self.set(SourceState::Down, Some(error));
    }

    /// The broker's count of waiting messages, as just read.
    pub(crate) fn lag(&self, waiting: u64) {
        self.lag.store(waiting.min(u64::MAX - 1), Ordering::Relaxed);
    }

    /// A message became an event (`created`), or was one already (a redelivery).
    pub(crate) fn accepted(&self, created: bool) {
        let counter = if created {
            &self.created
        } else {
            &self.replayed
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A message was rejected to the dead-letter path.
    pub(crate) fn rejected(&self, reason: RejectReason) {
        let at = RejectReason::ALL
            .iter()
            .position(|r| *r == reason)
            .unwrap_or_default();
        self.rejected[at].fetch_add(1, Ordering::Relaxed);
    }

    /// What `/healthz` shows of it.
    pub(crate) fn health(&self) -> SourceHealth {
        let (state, last_error) = self
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let lag = self.lag.load(Ordering::Relaxed);
        SourceHealth {
            name: self.name.clone(),
            state: match state {
                SourceState::Connecting => "connecting",
                SourceState::Up => "up",
                SourceState::Down => "down",
            }
            .to_owned(),
            lag: (lag != u64::MAX).then_some(lag),
            last_error,
        }
    }
}

/// Every source of this process, fixed at start.
#[derive(Debug, Default)]
pub(crate) struct Sources(pub Vec<Arc<SourceStatus>>);

impl Sources {
    /// The `kxp_ingest_*` families of `/metrics` (nothing without sources).
    pub(crate) fn render(&self, out: &mut String) {
        if self.0.is_empty() {
            return;
        }
        let families: [(&str, &str, &str); 5] = [
            (
                "kxp_ingest_messages_total",
                "counter",
                "Broker messages taken in, by source and outcome (created: a new event; replayed: a redelivery of one already stored).",
            ),
            (
                "kxp_ingest_rejected_total",
                "counter",
                "Broker messages rejected to the dead-letter path, by source and reason.",
            ),
            (
                "kxp_ingest_source_up",
                "gauge",
                "1 while the source is consuming, else 0.",
            ),
            (
                "kxp_ingest_source_lag",
                "gauge",
                "Messages waiting in the broker for the source, as last read.",
            ),
            (
                "kxp_ingest_reconnects_total",
                "counter",
                "Sessions of the source that failed (each is followed by a reconnect).",
            ),
        ];
        for (name, kind, help) in families {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for source in &self.0 {
                let label = escape(&source.name);
                let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
                match name {
                    "kxp_ingest_messages_total" => {
                        for (outcome, counter) in
                            [("created", &source.created), ("replayed", &source.replayed)]
                        {
                            let _ = writeln!(
                                out,
                                "{name}{{source=\"{label}\",outcome=\"{outcome}\"}} {}",
                                load(counter)
                            );
                        }
                    }
                    "kxp_ingest_rejected_total" => {
                        for (reason, counter) in RejectReason::ALL.iter().zip(&source.rejected) {
                            let _ = writeln!(
                                out,
                                "{name}{{source=\"{label}\",reason=\"{}\"}} {}",
                                reason.as_str(),
                                load(counter)
                            );
                        }
                    }
                    "kxp_ingest_source_up" => {
                        let health = source.health();
                        let up = u8::from(health.state == "up");
                        let _ = writeln!(out, "{name}{{source=\"{label}\"}} {up}");
                    }
                    "kxp_ingest_source_lag" => {
                        if let Some(lag) = source.health().lag {
                            let _ = writeln!(out, "{name}{{source=\"{label}\"}} {lag}");
                        }
                    }
                    _ => {
                        let _ = writeln!(
                            out,
                            "{name}{{source=\"{label}\"}} {}",
                            load(&source.reconnects)
                        );
                    }
                }
            }
        }
    }
}

/// A Prometheus label value: backslash, quote and newline escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    const ACC: &str = "acc_0123456789abcdef0123456789abcdef";

    fn parse(url: &str) -> Result<IngestSource, IngestUrlError> {
        url.parse()
    }

    #[test]
    fn an_amqp_url_names_its_queue_and_passes_the_clients_own_parameters_on() {
        let source = parse(&format!(
            "amqp://kxp:s3cret@mq:5672/%2fpayments?queue=events&account={ACC}&heartbeat=10&prefetch=8"
        ))
        .unwrap();
        let Broker::Amqp { uri, vhost, queue } = &source.broker else {
            panic!("not AMQP");
        };
        assert_eq!(
            uri,
            "amqp://kxp:s3cret@mq:5672/%2fpayments?heartbeat=10&connection_timeout=10000"
        );
        assert_eq!((vhost.as_str(), queue.as_str()), ("/payments", "events"));
        assert_eq!(source.name(), "amqp:payments/events");
        assert_eq!(source.prefetch, 8);
        assert_eq!(source.account_header, AccountHeader::Ignored);
        assert!(!source.redacted().contains("s3cret"));
        assert!(!format!("{source:?}").contains("s3cret"));
    }

    #[test]
    fn the_default_vhost_is_slash() {
        let source = parse(&format!("amqp://mq?queue=q&account={ACC}")).unwrap();
        assert_eq!(source.name(), "amqp:/q");
        assert_eq!(source.prefetch, DEFAULT_PREFETCH);
    }

    #[test]
    fn a_nats_url_names_stream_subject_and_consumer() {
        let source = parse(&format!(
            "nats://u:p@127.0.0.1:4222?stream=PAY&subject=pay.events&durable=kxp&account={ACC}"
        ))
        .unwrap();
        let Broker::Nats {
            server,
            rejected_subject,
            ..
        } = &source.broker
        else {
            panic!("not NATS");
        };
        assert_eq!(server, "nats://127.0.0.1:4222");
        assert_eq!(rejected_subject, "kxp.rejected.PAY");
        assert_eq!(source.name(), "nats:PAY/kxp");
    }

    #[test]
    fn nats_credentials_are_taken_out_of_the_url_and_never_shown() {
        let with = |userinfo: &str| {
            parse(&format!(
                "nats://{userinfo}@nats:4222?stream=S&subject=s&durable=d&account={ACC}"
            ))
            .unwrap()
        };
        let source = with("kxp:s%40cret");
        let Broker::Nats { server, auth, .. } = &source.broker else {
            panic!("not NATS");
        };
        assert_eq!(server, "nats://nats:4222");
        assert!(*auth == NatsAuth::UserPassword("kxp".to_owned(), "s@cret".to_owned()));
        assert!(!source.redacted().contains("cret"), "{}", source.redacted());
        let token = with("t0ken");
        let Broker::Nats { auth, .. } = &token.broker else {
            panic!("not NATS");
        };
        assert!(*auth == NatsAuth::Token("t0ken".to_owned()));
        assert!(!token.redacted().contains("t0ken"), "{}", token.redacted());
        assert!(!format!("{token:?}").contains("t0ken"));
    }

    #[test]
    fn a_nats_source_whose_rejects_fall_in_its_own_filter_is_refused() {
        let nats = |query: &str| {
            parse(&format!(
                "nats://n:4222?stream=LOOP&durable=d&account={ACC}&{query}"
            ))
            .unwrap()
        };
        for looping in [
            nats("subject=loop.>&rejected_subject=loop.rejected"),
            nats("subject=loop.*&rejected_subject=loop.rejected"),
            nats("subject=loop.rejected&rejected_subject=loop.rejected"),
            // The default, kxp.rejected.<stream>, under a filter on kxp.>.
            nats("subject=kxp.>"),
            nats("subject=>"),
        ] {
            let reason = looping.refusal().expect("refused");
            assert!(reason.contains("rejected subject"), "{reason}");
        }
        for fine in [
            nats("subject=loop.in&rejected_subject=loop.rejected"),
            nats("subject=loop.*.in&rejected_subject=loop.rejected"),
            nats("subject=loop.>&rejected_subject=rejects.loop"),
            nats("subject=payments.events.>"),
        ] {
            assert_eq!(fine.refusal(), None);
        }
        assert_eq!(
            parse(&format!("amqp://mq?queue=q&account={ACC}"))
                .unwrap()
                .refusal(),
            None
        );
    }

    #[test]
    fn nats_subjects_must_be_well_formed() {
        for (query, says) in [
            ("subject=loop..in", "`subject`"),
            ("subject=loop.>.in", "`subject`"),
            (
                "subject=loop.in&rejected_subject=loop.*",
                "`rejected_subject`",
            ),
            (
                "subject=loop.in&rejected_subject=loop.",
                "`rejected_subject`",
            ),
        ] {
            let url = format!("nats://n?stream=S&durable=d&account={ACC}&{query}");
            let error = parse(&url).unwrap_err().to_string();
            assert!(error.starts_with(says), "{url}: {error}");
        }
    }

    #[test]
    fn the_account_may_come_from_the_header_when_allowed() {
        let source = parse("amqp://mq?queue=q&account_header=allow").unwrap();
        assert!(source.account.is_none());
        assert_eq!(source.account_header, AccountHeader::Any);
        assert_eq!(
            parse("amqp://mq?queue=q").unwrap_err(),
            IngestUrlError::Missing("account")
        );
    }

    #[test]
    fn the_header_may_be_limited_to_a_list_of_accounts() {
        let source = parse("amqp://mq?queue=q&account_header=allow:acc_b,acc_a,acc_b").unwrap();
        let ids = |ids: &[&str]| {
            ids.iter()
                .map(|id| AccountId::from((*id).to_owned()))
                .collect()
        };
        assert_eq!(
            source.account_header,
            AccountHeader::Only(ids(&["acc_a", "acc_b"]))
        );
        assert!(source.account.is_none());
        let many = vec![ACC; 200].join(",");
        let source = parse(&format!("amqp://mq?queue=q&account_header=allow:{many}")).unwrap();
        assert_eq!(source.account_header, AccountHeader::Only(ids(&[ACC])));
        for value in [
            "allow:",
            "allow:acc_a,",
            "allow:acc_a,,acc_b",
            "allow:nope",
            "allow:acc_a;acc_b",
            "allowed:acc_a",
            "deny",
        ] {
            let url = format!("amqp://mq?queue=q&account_header={value}");
            let error = parse(&url).unwrap_err().to_string();
            assert!(error.starts_with("`account_header`"), "{url}: {error}");
        }
    }

    #[test]
    fn bad_urls_are_refused_by_name() {
        let cases = [
            ("http://mq?queue=q&account=acc_x", "scheme"),
            (&*format!("amqp://mq?account={ACC}"), "queue="),
            (
                &*format!("amqp://mq?queue=q&account={ACC}&stream=s"),
                "stream",
            ),
            (
                &*format!("nats://n?stream=s&subject=x&account={ACC}"),
                "durable=",
            ),
            (
                &*format!("nats://n?stream=s&subject=x&durable=d&account={ACC}&queu=q"),
                "queu",
            ),
            (
                &*format!("amqp://mq?queue=q&queue=r&account={ACC}"),
                "twice",
            ),
            (
                &*format!("amqp://mq?queue=q&account={ACC}&prefetch=0"),
                "prefetch",
            ),
            ("amqp://mq?queue=q&account=nope", "account"),
            (
                &*format!("amqp://mq?queue=q&account={ACC}&account_header=yes"),
                "allow",
            ),
        ];
        for (url, says) in cases {
            let error = parse(url).unwrap_err().to_string();
            assert!(error.contains(says), "{url}: {error}");
        }
    }

    #[test]
    fn metrics_name_every_reason_of_every_source() {
        let status = Arc::new(SourceStatus::new("amqp:/q".to_owned()));
        status.accepted(true);
        status.rejected(RejectReason::UnknownAccount);
        status.lag(3);
        status.up();
        let mut out = String::new();
        Sources(vec![status]).render(&mut out);
        for line in [
            "kxp_ingest_messages_total{source=\"amqp:/q\",outcome=\"created\"} 1",
            "kxp_ingest_rejected_total{source=\"amqp:/q\",reason=\"unknown_account\"} 1",
            "kxp_ingest_rejected_total{source=\"amqp:/q\",reason=\"invalid_json\"} 0",
            "kxp_ingest_source_up{source=\"amqp:/q\"} 1",
            "kxp_ingest_source_lag{source=\"amqp:/q\"} 3",
            "kxp_ingest_reconnects_total{source=\"amqp:/q\"} 0",
        ] {
            assert!(out.contains(line), "{line} missing from\n{out}");
        }
    }
}
