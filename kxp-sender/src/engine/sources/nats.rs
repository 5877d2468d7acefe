//! A NATS JetStream stream as a source, through async-nats (feature `nats`), read by a durable
//! pull consumer with explicit acknowledgement (created with the source's filter subject and
//! `max_ack_pending` when missing; an existing one is used as it is configured).
//!
//! Each message is acknowledged once stored; held ones get `+WPI` (in progress) each time
//! they are tried again, so JetStream does not hand them to another consumer meanwhile; a
//! message no retry can cure is published with its reason to the source's rejected subject
//! (headers `Kxp-Reject-Reason`, `Kxp-Reject-Detail`, `Kxp-Source-Stream`,
//! `Kxp-Source-Sequence`, and its body as it was), then terminated (`+TERM`: never delivered
//! again); and one the process stops before storing is given back (`-NAK`). A message that
//! carries `Kxp-Reject-Reason` already, a reject consumed again, is only terminated when it is
//! rejected, never published again: so no configuration makes a message go round for ever
//! (and a source whose rejected subject is in its own filter does not even start).
//!
//! A message's key is its `Nats-Msg-Id` header, else the stream's name, creation time and the
//! message's sequence number in it: the same for every redelivery, and never the same for two
//! messages, even across a deletion and re-creation of the stream.
//!
//! The client's own reconnection is not used (one try at most): a lost connection ends the
//! session, and the source connects again with its backoff, so its state and reconnect count
//! say what happened.
//!
//! The URL: `nats://[user:pass@]host:4222?stream=<name>&subject=<subject>&durable=<consumer>&account=<account id>`
//! (or `tls://`), credentials taken out of it for the client (`user:pass@`, or a lone
//! `token@`); `rejected_subject=<subject>` (default `kxp.rejected.<stream>`) must lie outside
//! `subject` ([`Nats::refusal`](Broker::refusal)). No other parameter is taken.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::{AckPolicy, PullConsumer, pull};
use async_nats::jetstream::{self, AckKind};
use async_nats::{ConnectOptions, Event, HeaderMap};
use axum::body::Bytes;
use futures_util::StreamExt;
use tokio::sync::Notify;
use tokio::task::JoinSet;

use super::broker::{
    Boxed, Broker, Claim, Delivery, Grammar, IngestError, LAG_EVERY, Params, Session, Verdict,
    chain, settle_in_flight, stopping,
};
use super::{IngestUrlError, MAX_PREFETCH, SourceStatus};

mod subjects;

/// How long JetStream waits for an acknowledgement before delivering a message again (held
/// messages extend it).
const ACK_WAIT: Duration = Duration::from_secs(30);

/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The header of a rejected message that says why it was rejected; a message that already
/// carries it is never published to the rejected subject again.
const REJECT_REASON: &str = "Kxp-Reject-Reason";

/// A JetStream stream and its durable consumer, as the URL names them.
#[derive(Clone, PartialEq, Eq)]
pub(super) struct Nats {
    /// The server's URL (scheme, host and port; no credentials, no query).
    server: String,
    /// The credentials the URL gave, handed to the client apart: it does not read a URL's user
    /// part.
    auth: NatsAuth,
    /// The stream.
    stream: String,
    /// The consumer's filter subject.
    subject: String,
    /// The durable consumer's name.
    durable: String,
    /// Where rejected messages are published with their reason.
    rejected_subject: String,
}

/// How a NATS source authenticates: `nats://user:pass@host`, `nats://token@host`, or neither.
#[derive(Clone, PartialEq, Eq)]
enum NatsAuth {
    /// No credentials.
    None,
    /// A user and a password.
    UserPassword(String, String),
    /// A token.
    Token(String),
}

impl Broker for Nats {
    fn grammar() -> Grammar {
        Grammar {
            schemes: &["nats", "tls"],
            product: "NATS",
            params: &["stream", "subject", "durable", "rejected_subject"],
        }
    }

    fn parse(url: &reqwest::Url, mut params: Params) -> Result<Nats, IngestUrlError> {
        params.refuse_rest()?;
        let stream = params.require("stream")?;
        let subject = params.require("subject")?;
        let durable = params.require("durable")?;
        if !matches!(url.path(), "" | "/") {
            return Err(IngestUrlError::Invalid {
                name: "path",
                problem: "a NATS URL has no path: stream and subject are parameters".to_owned(),
            });
        }
        if !subjects::is_filter(&subject) {
            return Err(IngestUrlError::Invalid {
                name: "subject",
                problem: "a NATS subject or filter: tokens separated by `.`, none empty; `*` for \
                          any one token, `>` for the rest (last only)"
                    .to_owned(),
            });
        }
        let rejected_subject = params
            .take("rejected_subject")
            .unwrap_or_else(|| format!("kxp.rejected.{stream}"));
        if !subjects::is_literal(&rejected_subject) {
            return Err(IngestUrlError::Invalid {
                name: "rejected_subject",
                problem: "a subject to publish to: tokens separated by `.`, none empty, no `*` \
                          or `>` token"
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
            (user, Some(password)) => NatsAuth::UserPassword(decode(user)?, decode(password)?),
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
        Ok(Nats {
            server: server.as_str().trim_end_matches('/').to_owned(),
            auth,
            stream,
            subject,
            durable,
            rejected_subject,
        })
    }

    fn name(&self) -> String {
        format!("nats:{}/{}", self.stream, self.durable)
    }

    /// A source whose rejected subject is in its own filter would consume each message it
    /// rejects again, reject it again and publish it again, without end. (The filter is never
    /// missing, `subject=` being required, so the stream's own subjects need no look: a reject
    /// outside the filter is never this source's to consume, whichever stream keeps it.)
    fn refusal(&self) -> Option<String> {
        let (subject, rejected) = (&self.subject, &self.rejected_subject);
        subjects::matches(subject, rejected).then(|| {
            format!(
                "the rejected subject {rejected:?} is in the source's own filter {subject:?}: \
                 every rejected message would be consumed and rejected again, forever; set \
                 rejected_subject= to a subject outside the filter"
            )
        })
    }

    fn session<'a>(&'a self, session: &'a Session) -> Boxed<'a, Result<(), IngestError>> {
        Box::pin(self.consume(session))
    }
}

impl Nats {
    /// One connection's consumption, until stopped (`Ok`) or a failure (`Err`).
    async fn consume(&self, session: &Session) -> Result<(), IngestError> {
        let status = &session.status;
        let Nats {
            stream,
            subject,
            durable,
            rejected_subject,
            ..
        } = self;
        let lost = Arc::new(Notify::new());
        let on_event = lost.clone();
        let options = match &self.auth {
            NatsAuth::None => ConnectOptions::new(),
            NatsAuth::UserPassword(user, password) => {
                ConnectOptions::new().user_and_password(user.clone(), password.clone())
            }
            NatsAuth::Token(token) => ConnectOptions::new().token(token.clone()),
        };
        let connecting = options
            // One try: a lost connection ends the session, and the source connects again itself.
            .max_reconnects(1)
            .name(format!(
                "kxp serve {} pid {}",
                session.status.name,
                std::process::id()
            ))
            .connection_timeout(CONNECT_TIMEOUT)
            .event_callback(move |event| {
                let lost = on_event.clone();
                async move {
                    if matches!(event, Event::Disconnected | Event::Closed) {
                        lost.notify_one();
                    }
                }
            })
            .connect(self.server.as_str());
        let mut stop = session.stopped.clone();
        let client = tokio::select! {
            () = stopping(&mut stop) => return Ok(()),
            connected = connecting => connected.map_err(|e| IngestError::Connect(chain(&e)))?,
        };
        let context = jetstream::new(client.clone());
        let found = context.get_stream(stream).await;
        let jet_stream = found.map_err(|e| IngestError::Source {
            what: format!("stream {stream:?}"),
            detail: chain(&e),
        })?;
        let created = jet_stream.cached_info().created.unix_timestamp_nanos();
        let config = pull::Config {
            durable_name: Some(durable.clone()),
            filter_subject: subject.clone(),
            ack_policy: AckPolicy::Explicit,
            ack_wait: ACK_WAIT,
            max_ack_pending: i64::from(session.prefetch),
            ..Default::default()
        };
        let made = jet_stream.get_or_create_consumer(durable, config).await;
        let mut consumer: PullConsumer = made.map_err(|e| IngestError::Source {
            what: format!("consumer {durable:?}"),
            detail: chain(&e),
        })?;
        // An existing consumer is used as it is, so it must be one that cannot lose a message:
        // explicit acks (with `all`, acknowledging one message stored would acknowledge earlier
        // ones not stored yet), this source's subject only, and a bound on messages in flight.
        let found = &consumer.cached_info().config;
        let bound = 1..=i64::from(MAX_PREFETCH);
        if found.ack_policy != AckPolicy::Explicit
            || found.filter_subject != *subject
            || !bound.contains(&found.max_ack_pending)
        {
            return Err(IngestError::Source {
                what: format!("consumer {durable:?}"),
                detail: format!(
                    "exists with another configuration: it needs ack_policy explicit, \
                     filter_subject {subject:?} and max_ack_pending from 1 to {MAX_PREFETCH} (it \
                     has {:?}, {:?}, {}); delete it to let kxp create it, or fix it",
                    found.ack_policy, found.filter_subject, found.max_ack_pending
                ),
            });
        }
        let messages = consumer.messages().await;
        let mut messages = messages.map_err(|e| IngestError::Protocol(chain(&e)))?;
        status.up();
        // Whether a stream keeps the rejects: then each is published through JetStream and its
        // message terminated only once that stream has it; else it goes out on the subject alone.
        let kept = context
            .stream_by_subject(rejected_subject.as_str())
            .await
            .is_ok();
        let origin = Arc::new(Origin {
            client: client.clone(),
            stream: stream.clone(),
            identity: format!("{stream}:{created}"),
            rejected: rejected_subject.clone(),
            kept,
            status: status.clone(),
        });
        let mut tasks = JoinSet::new();
        let mut lag = tokio::time::interval(LAG_EVERY);
        let ended = loop {
            tokio::select! {
                () = stopping(&mut stop) => break Ok(()),
                () = lost.notified() => break Err(IngestError::ConnectionLost(
                    "the connection to the server was lost".to_owned(),
                )),
                next = messages.next() => match next {
                    Some(Ok(delivered)) => {
                        let message = Message { origin: origin.clone(), delivered };
                        tasks.spawn(session.take_in(message));
                    }
                    Some(Err(e)) => break Err(IngestError::ConnectionLost(chain(&e))),
                    None => break Err(IngestError::Cancelled(
                        "the consumer's message stream ended".to_owned(),
                    )),
                },
                _ = lag.tick() => match consumer.info().await {
                    Ok(info) => status.lag(info.num_pending),
                    Err(e) => break Err(IngestError::Source {
                        what: format!("consumer {durable:?}"),
                        detail: chain(&e),
                    }),
                },
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            }
        };
        settle_in_flight(&mut tasks, &ended).await;
        if ended.is_ok() {
            let _ = client.flush().await;
        }
        ended
    }
}

/// What became of a rejected message published to the rejected subject.
enum Told {
    /// A stream captured it (its ack came back).
    Kept,
    /// No stream captures the subject: it went out on the subject alone (to its subscribers,
    /// if any), as the documentation says happens without such a stream.
    NoStream,
    /// A stream that captures it refused it, or the server did not answer.
    Failed(String),
}

/// How long a rejected message that could not be published waits before it is tried again.
const REJECT_RETRY: Duration = Duration::from_secs(5);

impl Origin {
    /// Publishes a rejected message, with its reason, to the rejected subject: through
    /// JetStream when a stream captures the subject, so that it confirms it kept it before the
    /// message is terminated; else on the subject alone.
    async fn tell_rejected(&self, headers: HeaderMap, payload: Bytes) -> Told {
        if self.kept {
            let context = jetstream::new(self.client.clone());
            let published = context
                .publish_with_headers(self.rejected.clone(), headers, payload)
                .await;
            let acked = match published {
                Ok(ack) => ack.await,
                Err(e) => Err(e),
            };
            return match acked {
                Ok(_) => Told::Kept,
                Err(e) => Told::Failed(e.to_string()),
            };
        }
        let sent = self
            .client
            .publish_with_headers(self.rejected.clone(), headers, payload)
            .await;
        match sent {
            Ok(()) => {
                let _ = self.client.flush().await;
                Told::NoStream
            }
            Err(e) => Told::Failed(e.to_string()),
        }
    }
}

/// The message's `x-kxp-account` header, whatever the case of its name (NATS keeps names as
/// written): none, one value, or more than one, which names no one account.
fn account_claim(headers: Option<&HeaderMap>) -> Claim<'_> {
    let mut values = headers
        .into_iter()
        .flat_map(HeaderMap::iter)
        .filter(|(name, _)| AsRef::<str>::as_ref(*name).eq_ignore_ascii_case("x-kxp-account"))
        .flat_map(|(_, values)| values);
    match (values.next(), values.next()) {
        (None, _) => Claim::Absent,
        (Some(value), None) => Claim::Account(value.as_str()),
        (Some(_), Some(_)) => Claim::Unreadable("given more than once"),
    }
}

/// What the messages of one session share.
struct Origin {
    client: async_nats::Client,
    /// The stream, for the rejects' `Kxp-Source-Stream`.
    stream: String,
    /// `<stream>:<creation time>`: with a sequence number, a message's identity.
    identity: String,
    /// The source's rejected subject.
    rejected: String,
    /// Whether a stream captures the rejected subject (looked up when the session began).
    kept: bool,
    /// The source's, for its logs.
    status: Arc<SourceStatus>,
}

/// One message of the stream, and what settling it needs.
struct Message {
    origin: Arc<Origin>,
    delivered: jetstream::Message,
}

impl Message {
    /// The message's sequence number in its stream.
    fn sequence(&self) -> Option<u64> {
        self.delivered.info().map(|info| info.stream_sequence).ok()
    }

    /// The value of its header `name`.
    fn header(&self, name: &str) -> Option<&str> {
        let headers = self.delivered.headers.as_ref();
        headers.and_then(|h| h.get(name)).map(|v| v.as_str())
    }
}

impl Delivery for Message {
    fn broker(&self) -> &'static str {
        "nats"
    }

    fn id(&self) -> Option<&str> {
        self.header("Nats-Msg-Id")
    }

    fn identity(&self) -> String {
        format!(
            "{}:{}",
            self.origin.identity,
            self.sequence().unwrap_or_default()
        )
    }

    fn body(&self) -> &[u8] {
        &self.delivered.payload
    }

    fn account(&self) -> Claim<'_> {
        account_claim(self.delivered.headers.as_ref())
    }

    fn header(&self, name: &str) -> Option<&str> {
        let mut values = self
            .delivered
            .headers
            .iter()
            .flat_map(HeaderMap::iter)
            .filter(|(key, _)| AsRef::<str>::as_ref(*key).eq_ignore_ascii_case(name))
            .flat_map(|(_, values)| values);
        match (values.next(), values.next()) {
            (Some(value), None) => Some(value.as_str()),
            _ => None,
        }
    }

    /// Pushes its ack deadline back (`+WPI`).
    fn hold(&self) -> Boxed<'_, ()> {
        Box::pin(async {
            let _ = self.delivered.ack_with(AckKind::Progress).await;
        })
    }

    async fn settle(self, verdict: Verdict) -> Result<(), IngestError> {
        let (origin, delivered) = (&self.origin, &self.delivered);
        let status = &origin.status;
        let sequence = self.sequence();
        let rejected_before = delivered.headers.as_ref().is_some_and(|headers| {
            headers
                .iter()
                .any(|(name, _)| AsRef::<str>::as_ref(name).eq_ignore_ascii_case(REJECT_REASON))
        });
        let settled = match verdict {
            Verdict::Accepted => delivered.ack().await,
            // A reject consumed again (by a source that reads some rejected subject):
            // published again, it could come back for ever. The stream it was read from holds
            // it, with the reason it was first rejected for.
            Verdict::Rejected { reason, .. } if rejected_before => {
                tracing::warn!(target: "kxp_sender", source = %status.name,
                    reason = reason.as_str(), sequence = sequence.unwrap_or_default(),
                    "broker source: the message was rejected before (it carries \
                     Kxp-Reject-Reason); terminated without publishing it again");
                delivered.ack_with(AckKind::Term).await
            }
            Verdict::Rejected { reason, detail } => {
                let mut headers = HeaderMap::new();
                headers.insert(REJECT_REASON, reason.as_str());
                headers.insert("Kxp-Reject-Detail", detail.as_str());
                headers.insert("Kxp-Source-Stream", origin.stream.as_str());
                let sequence = sequence.map(|n| n.to_string()).unwrap_or_default();
                headers.insert("Kxp-Source-Sequence", sequence.as_str());
                match origin
                    .tell_rejected(headers, delivered.payload.clone())
                    .await
                {
                    Told::Kept | Told::NoStream => delivered.ack_with(AckKind::Term).await,
                    // Not terminated: JetStream hands it over again, and it is rejected again.
                    Told::Failed(e) => {
                        tracing::warn!(target: "kxp_sender", source = %status.name, error = %e,
                            "broker source: a rejected message could not be published to the \
                             rejected subject; it is delivered again later");
                        delivered.ack_with(AckKind::Nak(Some(REJECT_RETRY))).await
                    }
                }
            }
            Verdict::Abandoned => delivered.ack_with(AckKind::Nak(None)).await,
        };
        // JetStream delivers it again after the ack wait; its key makes that harmless.
        settled.map_err(|e| IngestError::Settle(chain(e.as_ref())))
    }
}

#[cfg(test)]
mod tests;
