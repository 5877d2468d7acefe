//! A NATS JetStream stream as a source, through async-nats, read by a durable pull consumer
//! with explicit acknowledgement (created with the source's filter subject and
//! `max_ack_pending` when missing; an existing one is used as it is configured).
//!
//! Each message is acknowledged once stored; held ones get `+WPI` (in progress) each time
//! they are tried again, so JetStream does not hand them to another consumer meanwhile; a
//! message no retry can cure is published with its reason to the source's rejected subject
//! (headers `Kxp-Reject-Reason`, `Kxp-Reject-Detail`, `Kxp-Source-Stream`,
//! `Kxp-Source-Sequence`, and its body as it was), then terminated (`+TERM`: never delivered
//! again); and one the process stops before storing is given back (`-NAK`). Its key is its
//! `Nats-Msg-Id` header, else the stream's name, creation time and the message's sequence
//! number in it: the same for every redelivery, and never the same for two messages, even
//! across a deletion and re-creation of the stream.
//!
//! The client's own reconnection is not used: a lost connection ends the session, and the
//! source connects again with its backoff, so its state and reconnect count say what
//! happened.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::{AckPolicy, PullConsumer, pull};
use async_nats::jetstream::{self, AckKind};
use async_nats::{ConnectOptions, Event, HeaderMap};
use futures_util::StreamExt;
use tokio::sync::Notify;
use tokio::task::JoinSet;

use super::message::{self, Hold, Message, Verdict};
use super::{Backoff, LAG_EVERY, Run, chain, settle_in_flight, stopping};
use crate::engine::sources::Broker;

/// How long JetStream waits for an acknowledgement before delivering a message again (held
/// messages extend it).
const ACK_WAIT: Duration = Duration::from_secs(30);

/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// One connection's consumption, until `stopped` (`Ok`) or a failure (`Err`, its text).
pub(super) async fn session(run: &Run, backoff: &mut Backoff) -> Result<(), String> {
    let (source, status) = (&run.source, &run.status);
    let Broker::Nats {
        server,
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
    let client = ConnectOptions::new()
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
        .connect(server.as_str())
        .await
        .map_err(|e| chain(&e))?;
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
    let mut messages = consumer.messages().await.map_err(|e| chain(&e))?;
    status.up();
    backoff.reset();
    let identity = Arc::new(format!("{stream}:{created}"));
    let mut tasks = JoinSet::new();
    let mut lag = tokio::time::interval(LAG_EVERY);
    let mut stop = run.stopped.clone();
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
}

impl Settle {
    /// Takes `delivered` in and settles it with the server.
    async fn message(self, delivered: jetstream::Message) {
        let status = &self.run.status;
        let sequence = delivered.info().map(|info| info.stream_sequence).ok();
        let headers = delivered.headers.as_ref();
        let header = |name: &str| headers.and_then(|h| h.get(name)).map(|v| v.as_str());
        let key = message::key(header("Nats-Msg-Id"), "nats", || {
            format!("{}:{}", self.identity, sequence.unwrap_or_default())
        });
        let account = header("x-kxp-account").or_else(|| header("X-Kxp-Account"));
        let message = Message {
            body: &delivered.payload,
            key,
            account,
        };
        let verdict = message::take(&self.run, message, &Held(&delivered)).await;
        let settled = match verdict {
            Verdict::Accepted => delivered.ack().await,
            Verdict::Rejected { reason, detail } => {
                let mut headers = HeaderMap::new();
                headers.insert("Kxp-Reject-Reason", reason.as_str());
                headers.insert("Kxp-Reject-Detail", detail.as_str());
                if let Broker::Nats { stream, .. } = &self.run.source.broker {
                    headers.insert("Kxp-Source-Stream", stream.as_str());
                }
                let sequence = sequence.map(|n| n.to_string()).unwrap_or_default();
                headers.insert("Kxp-Source-Sequence", sequence.as_str());
                let payload = delivered.payload.clone();
                let told = self
                    .client
                    .publish_with_headers(self.rejected.clone(), headers, payload)
                    .await;
                if let Err(e) = told {
                    tracing::warn!(target: "kxp_sender", source = %status.name, error = %e,
                        "broker source: could not publish a rejected message's reason");
                }
                let _ = self.client.flush().await;
                delivered.ack_with(AckKind::Term).await
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
