//! What a broker's module implements, and what it is given: the contract between a broker
//! (its URL grammar, its sessions, the settlement of its messages) and the rest of the crate.
//!
//! A broker implements [`Broker`] for its parsed URL and [`Delivery`] for one of its messages.
//! A session connects, consumes, hands each message to [`Session::take_in`] (which passes it
//! through the [`Intake`], the ingest layer's acceptance of an event, and then settles it as
//! the [`Verdict`] says), and ends with `Ok` once stopped or with an [`IngestError`]. Nothing
//! here knows a broker's client.

// A build without a broker (no feature `amqp` or `nats`) has the contract and nothing that
// implements it.
#![cfg_attr(
    not(any(feature = "amqp", feature = "nats")),
    expect(dead_code, reason = "no broker in this build")
)]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;

use super::{IngestUrlError, RejectReason, SourceStatus};

/// A future a trait object can return.
pub(crate) type Boxed<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How often a consuming source reads its lag from the broker.
pub(crate) const LAG_EVERY: Duration = Duration::from_secs(5);

/// A broker sources can read: its URL grammar (the functions bounded by `Self: Sized`, used
/// through the registry in `sources.rs`) and its sessions (through `dyn Broker`, which each
/// configured source holds).
pub(crate) trait Broker: Send + Sync + 'static {
    /// The URL schemes, the broker's name for people, and the query parameters its grammar
    /// reads.
    fn grammar() -> Grammar
    where
        Self: Sized;

    /// Parses the URL: `params` holds the parameters of [`Grammar::params`] the URL gives
    /// (checked: none twice, none empty) and the ones no broker reads, which the broker passes
    /// to its client or refuses.
    fn parse(url: &reqwest::Url, params: Params) -> Result<Self, IngestUrlError>
    where
        Self: Sized;

    /// The source's name in `/healthz`, `/metrics` and logs: `<scheme>:<where>`, no host and
    /// no credentials.
    fn name(&self) -> String;

    /// Why the source must not start at all, if it must not (a configuration that would loop).
    fn refusal(&self) -> Option<String> {
        None
    }

    /// One connection's consumption: sets the status `up` once consuming, takes each message
    /// in through [`Session::take_in`], reads the lag every [`LAG_EVERY`], and ends with `Ok`
    /// once `session.stopped` is set (its messages in flight settled) or with the error that
    /// ended it.
    fn session<'a>(&'a self, session: &'a Session) -> Boxed<'a, Result<(), IngestError>>;
}

/// A broker's URL grammar, as the parser of `--ingest` URLs needs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Grammar {
    /// The schemes its URLs use (`amqp`, `amqps`).
    pub(crate) schemes: &'static [&'static str],
    /// Its name for people (`RabbitMQ`), in the error that lists the known schemes.
    pub(crate) product: &'static str,
    /// The query parameters it reads: on another broker's URL each is refused by name.
    pub(crate) params: &'static [&'static str],
}

/// The query parameters of a URL that are the broker's: its own (checked, see
/// [`Broker::parse`]), and the ones no broker reads.
#[derive(Debug, Default)]
pub(crate) struct Params {
    pub(super) own: Vec<(&'static str, String)>,
    /// Parameters no broker reads, in the URL's order: the broker's client may know them.
    pub(crate) rest: Vec<(String, String)>,
}

impl Params {
    /// The value of `name`, if the URL gives it.
    pub(crate) fn take(&mut self, name: &str) -> Option<String> {
        let at = self.own.iter().position(|(given, _)| *given == name)?;
        Some(self.own.swap_remove(at).1)
    }

    /// The value of `name`, which the URL must give.
    pub(crate) fn require(&mut self, name: &'static str) -> Result<String, IngestUrlError> {
        self.take(name).ok_or(IngestUrlError::Missing(name))
    }

    /// Refuses the first parameter no broker reads: for a broker whose client takes none.
    pub(crate) fn refuse_rest(&self) -> Result<(), IngestUrlError> {
        match self.rest.first() {
            Some((name, _)) => Err(IngestUrlError::Unknown(name.clone())),
            None => Ok(()),
        }
    }
}

/// Why a session ended: the stable name ([`IngestError::as_str`]) is the log's `kind`; the
/// text, the broker's words with the causes, is the log's `error` and `/healthz`'s
/// `last_error` once its credentials are removed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum IngestError {
    /// The broker could not be reached, or refused the connection.
    #[error("{0}")]
    Connect(String),
    /// The queue, stream or consumer could not be opened or read: missing, refused, or
    /// configured in a way that could lose messages.
    #[error("{what}: {detail}")]
    Source {
        /// Which one (`queue "payments"`, `consumer "kxp"`).
        what: String,
        /// What the broker said, or what is wrong with it.
        detail: String,
    },
    /// The connection was lost or closed under the session.
    #[error("{0}")]
    ConnectionLost(String),
    /// The broker ended the consumption itself (it cancelled the consumer, ended its stream).
    #[error("{0}")]
    Cancelled(String),
    /// Any other failure of the broker's protocol (opening a channel, setting the prefetch).
    #[error("{0}")]
    Protocol(String),
    /// A message could not be settled (its broker delivers it again).
    #[error("{0}")]
    Settle(String),
}

impl IngestError {
    /// The stable name: `connect`, `source`, `connection_lost`, `cancelled`, `protocol` or
    /// `settle`.
    pub(crate) fn as_str(&self) -> &'static str {
        match self {
            IngestError::Connect(_) => "connect",
            IngestError::Source { .. } => "source",
            IngestError::ConnectionLost(_) => "connection_lost",
            IngestError::Cancelled(_) => "cancelled",
            IngestError::Protocol(_) => "protocol",
            IngestError::Settle(_) => "settle",
        }
    }
}

/// One message a broker handed over, until it is settled.
pub(crate) trait Delivery: Send + Sync + 'static {
    /// The broker, as its messages' derived idempotency keys start (`amqp`, `nats`).
    fn broker(&self) -> &'static str;

    /// The broker's id for the message (`message_id`, `Nats-Msg-Id`), if it has one.
    fn id(&self) -> Option<&str>;

    /// An identity of the message that is the same for every redelivery of it: its key when
    /// it has no id. Asked only then, and only once its length has passed (AMQP's hashes the
    /// body).
    fn identity(&self) -> String;

    /// Its body: what `POST /v1/events` is sent.
    fn body(&self) -> &[u8];

    /// Its `x-kxp-account` header.
    fn account(&self) -> Claim<'_>;

    /// The text of its header `name` (lowercase, matched whatever its case), if it has exactly
    /// one that is a string: how a message carries its producer's `traceparent` and
    /// `tracestate`.
    fn header(&self, name: &str) -> Option<&str>;

    /// Tells the broker the message, held for another try, is still being worked on (JetStream
    /// extends its ack deadline; AMQP has none to extend).
    fn hold(&self) -> Boxed<'_, ()> {
        Box::pin(async {})
    }

    /// Settles the message as `verdict` says: acknowledges it, rejects it to the broker's
    /// dead-letter path, or gives it back.
    fn settle(self, verdict: Verdict) -> impl Future<Output = Result<(), IngestError>> + Send
    where
        Self: Sized;
}

/// What a message's `x-kxp-account` header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claim<'a> {
    /// It has none.
    Absent,
    /// An account id (as a string: not checked yet).
    Account(&'a str),
    /// Something that is not one string: AMQP headers are typed (an integer, a table, bytes…),
    /// and a NATS header may be given twice. Said what it is, for the rejection.
    Unreadable(&'static str),
}

/// What the consumer does with the message.
#[derive(Debug)]
pub(crate) enum Verdict {
    /// Its event is stored (now or before): acknowledge it.
    Accepted,
    /// No retry can cure it: reject it to the dead-letter path.
    Rejected {
        /// Why, by its stable name.
        reason: RejectReason,
        /// Why, for people (bounded, one line).
        detail: String,
    },
    /// The process is stopping before the message could be stored: give it back.
    Abandoned,
}

/// Where a session's messages go: the ingest layer's acceptance of an event.
pub(crate) trait Intake: Send + Sync + 'static {
    /// Takes the message in, holding it (and telling the broker, [`Delivery::hold`]) as long
    /// as the server cannot take it *now*; what becomes of it.
    fn take<'a>(&'a self, delivery: &'a dyn Delivery) -> Boxed<'a, Verdict>;
}

/// What one session of a source is given.
#[derive(Clone)]
pub(crate) struct Session {
    /// Messages in flight at most (the URL's `prefetch=`).
    pub(crate) prefetch: u16,
    /// What the source reports to `/healthz` and `/metrics`.
    pub(crate) status: Arc<SourceStatus>,
    /// Set when the process stops.
    pub(crate) stopped: watch::Receiver<bool>,
    /// Where its messages go.
    pub(crate) intake: Arc<dyn Intake>,
}

impl Session {
    /// Takes `delivery` in and settles it: the task a session spawns for each message.
    pub(crate) fn take_in(
        &self,
        delivery: impl Delivery,
    ) -> impl Future<Output = ()> + Send + 'static {
        let (intake, status) = (self.intake.clone(), self.status.clone());
        async move {
            let verdict = intake.take(&delivery).await;
            if let Err(e) = delivery.settle(verdict).await {
                // The broker delivers it again; its key makes that harmless.
                tracing::debug!(target: "kxp_sender", source = %status.name, error = %e,
                    "broker source: could not settle a message");
            }
        }
    }
}

/// Ends a session's messages in flight. On a stop, each is stored and acknowledged, or given
/// back. After a failure the channel is gone and nothing can be acknowledged any more: they
/// are dropped, and the broker delivers each again (a stored one answers its event then).
pub(crate) async fn settle_in_flight(tasks: &mut JoinSet<()>, ended: &Result<(), IngestError>) {
    match ended {
        Ok(()) => while tasks.join_next().await.is_some() {},
        Err(_) => tasks.shutdown().await,
    }
}

/// Returns once `stopped` is set (or its sender is gone). The flag's read guard is dropped
/// here, so a `select!` arm that awaits after this one fired keeps its future `Send`.
pub(crate) async fn stopping(stopped: &mut watch::Receiver<bool>) {
    let _ = stopped.wait_for(|stop| *stop).await;
}

/// An error's text with its causes, on one line: the brokers' clients nest the useful part.
pub(crate) fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(cause) = next {
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        next = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_error_has_a_stable_name_and_says_what_the_broker_said() {
        let text = || "said".to_owned();
        let source = IngestError::Source {
            what: "queue \"q\"".to_owned(),
            detail: text(),
        };
        assert_eq!(source.to_string(), "queue \"q\": said");
        for (error, name) in [
            (IngestError::Connect(text()), "connect"),
            (source, "source"),
            (IngestError::ConnectionLost(text()), "connection_lost"),
            (IngestError::Cancelled(text()), "cancelled"),
            (IngestError::Protocol(text()), "protocol"),
            (IngestError::Settle(text()), "settle"),
        ] {
            assert_eq!(error.as_str(), name);
        }
    }
}
