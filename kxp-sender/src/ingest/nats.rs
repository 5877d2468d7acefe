//! A NATS JetStream stream as a source, through async-nats, read by a durable pull consumer
//! with explicit acknowledgement (created with the source's filter subject and
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

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::{AckPolicy, PullConsumer, pull};
use async_nats::jetstream::{self, AckKind};
use async_nats::{ConnectOptions, Event, HeaderMap};
use axum::body::Bytes;
use futures_util::StreamExt;
use tokio::sync::Notify;
use tokio::task::JoinSet;

use super::message::{self, Claim, Hold, Message, Verdict};
use super::{Backoff, LAG_EVERY, Run, chain, settle_in_flight, stopping};
use crate::engine::sources::{Broker, MAX_PREFETCH, NatsAuth};

/// How long JetStream waits for an acknowledgement before delivering a message again (held
/// messages extend it).
const ACK_WAIT: Duration = Duration::from_secs(30);

/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The header of a rejected message that says why it was rejected; a message that already
/// carries it is never published to the rejected subject again.
const REJECT_REASON: &str = "Kxp-Reject-Reason";

/// One connection's consumption, until `stopped` (`Ok`) or a failure (`Err`, its text).
pub(super) async fn session(run: &Run, backoff: &mut Backoff) -> Result<(), String> {
    let (source, status) = (&run.source, &run.status);
    let Broker::Nats {
        server,
        auth,
        stream,
        subject,
        durable,
        rejected_subject,
    } = &source.broker
    else {
        return Err("not a NATS source".to_owned());
    };
    let lost = Arc::new(Notify::new());
    let on_event = lost.clone();
    let options = match auth {
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
            status.name,
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
        .connect(server.as_str());
    let mut stop = run.stopped.clone();
    let client = tokio::select! {
        () = stopping(&mut stop) => return Ok(()),
        connected = connecting => connected.map_err(|e| chain(&e))?,
    };
    let context = jetstream::new(client.clone());
    let found = context.get_stream(stream).await;
    let jet_stream = found.map_err(|e| format!("stream {stream:?}: {}", chain(&e)))?;
    let created = jet_stream.cached_info().created.unix_timestamp_nanos();
    let config = pull::Config {
        durable_name: Some(durable.clone()),
        filter_subject: subject.clone(),
        ack_policy: AckPolicy::Explicit,
        ack_wait: ACK_WAIT,
        max_ack_pending: i64::from(source.prefetch),
        ..Default::default()
    };
    let made = jet_stream.get_or_create_consumer(durable, config).await;
    let mut consumer: PullConsumer =
        made.map_err(|e| format!("consumer {durable:?}: {}", chain(&e)))?;
    // An existing consumer is used as it is, so it must be one that cannot lose a message:
    // explicit acks (with `all`, acknowledging one message stored would acknowledge earlier
    // ones not stored yet), this source's subject only, and a bound on messages in flight.
    let found = &consumer.cached_info().config;
    let bound = 1..=i64::from(MAX_PREFETCH);
    if found.ack_policy != AckPolicy::Explicit
        || found.filter_subject != *subject
        || !bound.contains(&found.max_ack_pending)
    {
        return Err(format!(
            "consumer {durable:?} exists with another configuration: it needs ack_policy \
             explicit, filter_subject {subject:?} and max_ack_pending from 1 to {MAX_PREFETCH} \
             (it has {:?}, {:?}, {}); delete it to let kxp create it, or fix it",
            found.ack_policy, found.filter_subject, found.max_ack_pending
        ));
    }
    let mut messages = consumer.messages().await.map_err(|e| chain(&e))?;
    status.up();
    backoff.reset();
    // Whether a stream keeps the rejects: then each is published through JetStream and its
    // message terminated only once that stream has it; else it goes out on the subject alone.
    let kept = context
        .stream_by_subject(rejected_subject.as_str())
        .await
        .is_ok();
    let identity = Arc::new(format!("{stream}:{created}"));
    let mut tasks = JoinSet::new();
    let mut lag = tokio::time::interval(LAG_EVERY);
    let ended = loop {
        tokio::select! {
            () = stopping(&mut stop) => break Ok(()),
            () = lost.notified() => break Err("the connection to the server was lost".to_owned()),
            next = messages.next() => match next {
                Some(Ok(delivered)) => {
                    let settle = Settle {
                        run: run.clone(),
                        client: client.clone(),
                        identity: identity.clone(),
                        rejected: rejected_subject.clone(),
                        kept,
                    };
                    tasks.spawn(settle.message(delivered));
                }
                Some(Err(e)) => break Err(chain(&e)),
                None => break Err("the consumer's message stream ended".to_owned()),
            },
            _ = lag.tick() => match consumer.info().await {
                Ok(info) => status.lag(info.num_pending),
                Err(e) => break Err(format!("consumer {durable:?}: {}", chain(&e))),
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

impl Settle {
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

/// A message held for another try: its ack deadline is pushed back (`+WPI`).
struct Held<'a>(&'a jetstream::Message);

impl Hold for Held<'_> {
    async fn hold(&self) {
        let _ = self.0.ack_with(AckKind::Progress).await;
    }
}

/// What settling one message needs.
struct Settle {
    run: Run,
    client: async_nats::Client,
    /// `<stream>:<creation time>`: with a sequence number, a message's identity.
    identity: Arc<String>,
    /// The source's rejected subject.
    rejected: String,
    /// Whether a stream captures the rejected subject (looked up when the session began).
    kept: bool,
}

impl Settle {
    /// Takes `delivered` in and settles it with the server.
    async fn message(self, delivered: jetstream::Message) {
        let status = &self.run.status;
        let sequence = delivered.info().map(|info| info.stream_sequence).ok();
        let headers = delivered.headers.as_ref();
        let header = |name: &str| headers.and_then(|h| h.get(name)).map(|v| v.as_str());
        let key = || {
            message::key(header("Nats-Msg-Id"), "nats", || {
                format!("{}:{}", self.identity, sequence.unwrap_or_default())
            })
        };
        let account = account_claim(headers);
        let rejected_before = headers.is_some_and(|headers| {
            headers
                .iter()
                .any(|(name, _)| AsRef::<str>::as_ref(name).eq_ignore_ascii_case(REJECT_REASON))
        });
        let message = Message {
            body: &delivered.payload,
            key,
            account,
        };
        let verdict = message::take(&self.run, message, &Held(&delivered)).await;
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
                if let Broker::Nats { stream, .. } = &self.run.source.broker {
                    headers.insert("Kxp-Source-Stream", stream.as_str());
                }
                let sequence = sequence.map(|n| n.to_string()).unwrap_or_default();
                headers.insert("Kxp-Source-Sequence", sequence.as_str());
                match self.tell_rejected(headers, delivered.payload.clone()).await {
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
        if let Err(e) = settled {
            // JetStream delivers it again after the ack wait; its key makes that harmless.
            tracing::debug!(target: "kxp_sender", source = %status.name, error = %e,
                "broker source: could not settle a message");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_account_header_is_found_in_any_case_and_refused_when_given_twice() {
        assert_eq!(account_claim(None), Claim::Absent);
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Msg-Id", "m-1");
        assert_eq!(account_claim(Some(&headers)), Claim::Absent);
        headers.insert("X-KXP-Account", "acc_a");
        assert_eq!(account_claim(Some(&headers)), Claim::Account("acc_a"));
        headers.append("X-KXP-Account", "acc_b");
        assert_eq!(
            account_claim(Some(&headers)),
            Claim::Unreadable("given more than once")
        );
        let mut headers = HeaderMap::new();
        headers.insert("x-kxp-account", "acc_a");
        headers.insert("X-Kxp-Account", "acc_a");
        assert!(matches!(
            account_claim(Some(&headers)),
            Claim::Unreadable(_)
        ));
    }
}
