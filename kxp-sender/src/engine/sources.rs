//! Broker sources (`kxp serve --ingest <URL>`): what a source's URL says ([`IngestSource`]),
//! one module per broker behind its Cargo feature, each owning its URL grammar, its sessions
//! and the settlement of its messages ([`broker::Broker`], the contract), and what the
//! consumers report ([`SourceStatus`]) to `/healthz` and `/metrics`. The ingest layer runs the
//! sources and takes their messages in ([`broker::Intake`]); the configuration and the API
//! only see the types here, never a broker's client.
//!
//! The URL forms:
//!
//! - `amqp://user:pass@host:5672/vhost?queue=<name>&account=<account id>` (or `amqps://`,
//!   feature `amqp`): a RabbitMQ queue (which must exist: the platform owns its topology).
//! - `nats://[user:pass@]host:4222?stream=<name>&subject=<subject>&durable=<consumer>&account=<account id>`
//!   (or `tls://`, feature `nats`): a JetStream stream, read through a durable pull consumer
//!   (created when missing).
//!
//! Options on every broker: `account_header=allow` lets a message's `x-kxp-account` header
//! name any account, and `account_header=allow:<acc>,<acc>` only these or the URL's (without a
//! header, the URL's `account`, which may then be left out); see [`AccountHeader`].
//! `prefetch=<1..=1000>` (default [`DEFAULT_PREFETCH`]) bounds the messages in flight (AMQP's
//! `basic.qos`, JetStream's `max_ack_pending`). Each broker's module documents its own
//! parameters; a parameter of another broker is refused by name.
//!
//! Adding a broker is one module here implementing [`broker::Broker`] and
//! [`broker::Delivery`], one line in [`BROKERS`], and one Cargo feature.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::model::AccountId;
use crate::store::redact_passwords;

#[cfg(feature = "amqp")]
mod amqp;
pub(crate) mod broker;
#[cfg(feature = "nats")]
mod nats;
mod status;

use broker::{Broker, Grammar, Params};
pub(crate) use status::{RejectReason, SourceStatus, Sources};

/// Messages in flight per source unless the URL says `prefetch=`.
pub(crate) const DEFAULT_PREFETCH: u16 = 64;

/// The most messages in flight a source may ask for.
pub(crate) const MAX_PREFETCH: u16 = 1000;

/// The longest `account_header=` value, in bytes.
const MAX_ACCOUNT_HEADER: usize = 8192;

/// The longest value of any other parameter, in bytes.
const MAX_PARAM: usize = 255;

/// The parameters every broker's URL takes.
const COMMON_PARAMS: [&str; 3] = ["account", "account_header", "prefetch"];

/// A broker of [`BROKERS`]: its grammar, and its parser behind `dyn`.
struct Entry {
    grammar: fn() -> Grammar,
    parse: Parser,
}

/// A broker's parser, behind `dyn`.
type Parser = fn(&reqwest::Url, Params) -> Result<Arc<dyn Broker>, IngestUrlError>;

impl Entry {
    #[cfg_attr(
        not(any(feature = "amqp", feature = "nats")),
        expect(dead_code, reason = "no broker in this build")
    )]
    const fn of<B: Broker>() -> Entry {
        Entry {
            grammar: B::grammar,
            parse: parse_as::<B>,
        }
    }
}

/// Parses `url` as `B`'s, for a source to hold.
fn parse_as<B: Broker>(
    url: &reqwest::Url,
    params: Params,
) -> Result<Arc<dyn Broker>, IngestUrlError> {
    Ok(Arc::new(B::parse(url, params)?))
}

/// The brokers this build reads, each behind its Cargo feature.
const BROKERS: &[Entry] = &[
    #[cfg(feature = "amqp")]
    Entry::of::<amqp::Amqp>(),
    #[cfg(feature = "nats")]
    Entry::of::<nats::Nats>(),
];

/// The schemes of [`BROKERS`], for the error that refuses another.
fn known_schemes() -> String {
    let known: Vec<String> = BROKERS
        .iter()
        .map(|entry| {
            let grammar = (entry.grammar)();
            let schemes: Vec<String> = grammar.schemes.iter().map(|s| format!("{s}://")).collect();
            format!("{} ({})", schemes.join(" or "), grammar.product)
        })
        .collect();
    if known.is_empty() {
        "this build reads no broker (Cargo features amqp, nats)".to_owned()
    } else {
        format!("use {}", known.join(", "))
    }
}

/// One `--ingest` URL, parsed: where to consume and for which account.
#[derive(Clone)]
pub struct IngestSource {
    /// The URL as given (with its credentials: never shown; see [`IngestSource::redacted`]).
    url: String,
    /// The broker, as its module parsed the URL.
    pub(crate) broker: Arc<dyn Broker>,
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

/// Why an `--ingest` URL was refused. The text names the parameter; it never quotes a
/// password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IngestUrlError {
    /// Not a URL at all.
    #[error("not a URL ({0})")]
    Syntax(String),
    /// A scheme no broker of this build reads.
    #[error("unknown scheme {0:?}: {known}", known = known_schemes())]
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
        self.broker.name()
    }

    /// Why the source must not start, if it must not ([`Broker::refusal`]).
    pub(crate) fn refusal(&self) -> Option<String> {
        self.broker.refusal()
    }
}

impl fmt::Debug for IngestSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

/// Two sources are the same when their URLs are: everything else is parsed from it.
impl PartialEq for IngestSource {
    fn eq(&self, other: &IngestSource) -> bool {
        self.url == other.url
    }
}

impl Eq for IngestSource {}

impl FromStr for IngestSource {
    type Err = IngestUrlError;

    fn from_str(text: &str) -> Result<IngestSource, IngestUrlError> {
        let url = reqwest::Url::parse(text).map_err(|e| IngestUrlError::Syntax(e.to_string()))?;
        let entry = BROKERS
            .iter()
            .find(|entry| (entry.grammar)().schemes.contains(&url.scheme()))
            .ok_or_else(|| IngestUrlError::Scheme(url.scheme().to_owned()))?;
        let (mut common, params) = split(&url, (entry.grammar)().params)?;
        let prefetch = match common.take("prefetch") {
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
        let account_header = match common.take("account_header").as_deref() {
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
        let account = common
            .take("account")
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
        Ok(IngestSource {
            url: text.to_owned(),
            broker: (entry.parse)(&url, params)?,
            account,
            account_header,
            prefetch,
        })
    }
}

/// The URL's query parameters: the ones every broker takes, and the broker's (its `own`, and
/// the ones no broker reads). A parameter of another broker is refused by name.
fn split(url: &reqwest::Url, own: &[&'static str]) -> Result<(Params, Params), IngestUrlError> {
    let mut common = Params::default();
    let mut params = Params::default();
    for (name, value) in url.query_pairs() {
        let (into, name) = if let Some(name) = COMMON_PARAMS.iter().find(|n| **n == name) {
            (&mut common, *name)
        } else if let Some(name) = own.iter().find(|n| **n == name) {
            (&mut params, *name)
        } else if BROKERS
            .iter()
            .any(|other| (other.grammar)().params.contains(&&*name))
        {
            return Err(IngestUrlError::Unknown(name.into_owned()));
        } else {
            params.rest.push((name.into_owned(), value.into_owned()));
            continue;
        };
        check(into, name, &value)?;
        into.own.push((name, value.into_owned()));
    }
    Ok((common, params))
}

/// Refuses a second `name=`, an empty value, or one too long or with spaces or control
/// characters.
fn check(params: &Params, name: &'static str, value: &str) -> Result<(), IngestUrlError> {
    // An allow-list of accounts is longer than any name: room for about 200 of them.
    let longest = if name == "account_header" {
        MAX_ACCOUNT_HEADER
    } else {
        MAX_PARAM
    };
    let problem = if params.own.iter().any(|(given, _)| *given == name) {
        "given twice".to_owned()
    } else if value.is_empty() {
        "empty".to_owned()
    } else if value.len() > longest || value.chars().any(|c| c.is_control() || c == ' ') {
        format!("at most {longest} characters, no spaces or control characters")
    } else {
        return Ok(());
    };
    Err(IngestUrlError::Invalid { name, problem })
}

/// `id` if it is a well-formed account id (`acc_` and letters and digits).
fn account_id(id: &str) -> Option<AccountId> {
    let well_formed = id
        .strip_prefix("acc_")
        .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_alphanumeric()));
    well_formed.then(|| AccountId::from(id.to_owned()))
}

// The grammar every broker shares, shown on AMQP URLs.
#[cfg(all(test, feature = "amqp"))]
mod tests;
