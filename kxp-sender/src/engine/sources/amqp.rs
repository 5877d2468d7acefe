//! A RabbitMQ queue as a source, through lapin (AMQP 0.9.1); feature `amqp`.
//!
//! The URL: `amqp://user:pass@host:5672/vhost?queue=<name>&account=<account id>` (or
//! `amqps://`); the vhost is the path, percent-encoded (`/` by default), and the parameters no
//! broker reads (`heartbeat`, `connection_timeout`, …) are passed on to the client.
//!
//! The queue must exist (a passive declare checks it, and reads the lag every
//! [`LAG_EVERY`]); `basic.qos` bounds the unacknowledged messages to the
//! source's prefetch. Each message is acknowledged once stored, rejected without requeue (so
//! the queue's dead-letter exchange, if it has one, receives it) when no retry can cure it,
//! and given back (`basic.nack` with requeue) when the process stops before storing it. Its
//! key is its `message_id`, else a hash of the vhost, the queue and its body: AMQP gives a
//! message no other identity that survives a redelivery, so two messages without ids and with
//! the same body on one queue are one event.

use std::sync::Arc;

use futures_util::StreamExt;
use lapin::message::Delivery as LapinDelivery;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions, BasicRejectOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Connection, ConnectionProperties};
use tokio::task::JoinSet;

use super::broker::{
    Boxed, Broker, Claim, Delivery, Grammar, IngestError, LAG_EVERY, Params, Session, Verdict,
    chain, settle_in_flight, stopping,
};
use super::{IngestUrlError, SourceStatus};
use crate::model::sha256_hex;

/// A RabbitMQ queue, as its URL names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Amqp {
    /// The URL the client connects with: ours, less this crate's parameters.
    uri: String,
    /// The virtual host, decoded (`/` by default).
    vhost: String,
    /// The queue.
    queue: String,
}

impl Broker for Amqp {
    fn grammar() -> Grammar {
        Grammar {
            schemes: &["amqp", "amqps"],
            product: "RabbitMQ",
            params: &["queue"],
        }
    }

    fn parse(url: &reqwest::Url, mut params: Params) -> Result<Amqp, IngestUrlError> {
        let queue = params.require("queue")?;
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
        let mut passed_on = params.rest;
        // Connecting gives up after 10 s unless the URL says otherwise (the client's own
        // default is to wait for as long as the network does).
        if !passed_on
            .iter()
            .any(|(name, _)| name == "connection_timeout")
        {
            passed_on.push(("connection_timeout".to_owned(), "10000".to_owned()));
        }
        uri.query_pairs_mut().extend_pairs(&passed_on);
        Ok(Amqp {
            uri: uri.into(),
            vhost,
            queue,
        })
    }

    fn name(&self) -> String {
        let vhost = self.vhost.strip_prefix('/').unwrap_or(&self.vhost);
        format!("amqp:{vhost}/{}", self.queue)
    }

    fn session<'a>(&'a self, session: &'a Session) -> Boxed<'a, Result<(), IngestError>> {
        Box::pin(self.consume(session))
    }
}

impl Amqp {
    /// One connection's consumption, until stopped (`Ok`) or a failure (`Err`).
    async fn consume(&self, session: &Session) -> Result<(), IngestError> {
        let name = format!(
            "kxp serve {} pid {}",
            session.status.name,
            std::process::id()
        );
        let properties = ConnectionProperties::default().with_connection_name(name.into());
        let mut stop = session.stopped.clone();
        let connection = tokio::select! {
            () = stopping(&mut stop) => return Ok(()),
            connected = Connection::connect(&self.uri, properties) => {
                connected.map_err(|e| IngestError::Connect(chain(&e)))?
            }
        };
        let consumed = self.on(session, &connection).await;
        if consumed.is_ok() {
            let _ = connection.close(200, "kxp serve is stopping".into()).await;
        }
        consumed
    }

    /// Consumes the queue on `connection`.
    async fn on(&self, session: &Session, connection: &Connection) -> Result<(), IngestError> {
        let status = &session.status;
        let failed = |e: lapin::Error| IngestError::Protocol(chain(&e));
        let channel = connection.create_channel().await.map_err(failed)?;
        channel
            .basic_qos(session.prefetch, BasicQosOptions::default())
            .await
            .map_err(failed)?;
        // The lag is read on a channel of its own: a failed declare closes the channel it ran on.
        let probe = connection.create_channel().await.map_err(failed)?;
        read_lag(&probe, &self.queue, status).await?;
        let tag = format!(
            "kxp-{}-{}",
            std::process::id(),
            crate::model::random_hex_32()
        );
        let mut consumer = channel
            .basic_consume(
                self.queue.as_str().into(),
                tag.as_str().into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(failed)?;
        status.up();
        let origin = Arc::new((self.vhost.clone(), self.queue.clone()));
        let mut tasks = JoinSet::new();
        let mut lag = tokio::time::interval(LAG_EVERY);
        let mut stop = session.stopped.clone();
        let ended = loop {
            tokio::select! {
                () = stopping(&mut stop) => break Ok(()),
                next = consumer.next() => match next {
                    Some(Ok(delivery)) => {
                        let message = Message { origin: origin.clone(), delivery };
                        tasks.spawn(session.take_in(message));
                    }
                    Some(Err(e)) => break Err(IngestError::ConnectionLost(chain(&e))),
                    None => break Err(IngestError::Cancelled(
                        "the broker cancelled the consumer".to_owned(),
                    )),
                },
                _ = lag.tick() => {
                    if let Err(e) = read_lag(&probe, &self.queue, status).await {
                        break Err(e);
                    }
                }
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            }
        };
        settle_in_flight(&mut tasks, &ended).await;
        if ended.is_ok() {
            for open in [&probe, &channel] {
                let _ = open.close(200, "kxp serve is stopping".into()).await;
            }
        }
        ended
    }
}

/// Reads the queue's ready messages into the status (and checks the queue still exists).
async fn read_lag(probe: &Channel, queue: &str, status: &SourceStatus) -> Result<(), IngestError> {
    let declared = probe
        .queue_declare(
            queue.into(),
            QueueDeclareOptions::default().passive(),
            FieldTable::default(),
        )
        .await
        .map_err(|e| IngestError::Source {
            what: format!("queue {queue:?}"),
            detail: chain(&e),
        })?;
    status.lag(u64::from(declared.message_count()));
    Ok(())
}

/// One delivery of the queue, with the vhost and the queue it came from (its identity).
struct Message {
    origin: Arc<(String, String)>,
    delivery: LapinDelivery,
}

impl Delivery for Message {
    fn broker(&self) -> &'static str {
        "amqp"
    }

    fn id(&self) -> Option<&str> {
        let id = self.delivery.properties.message_id().as_ref();
        id.map(|id| id.as_str())
    }

    fn identity(&self) -> String {
        let (vhost, queue) = &*self.origin;
        let data = &self.delivery.data;
        let mut identity = Vec::with_capacity(vhost.len() + queue.len() + data.len() + 2);
        for part in [vhost.as_bytes(), queue.as_bytes(), data] {
            identity.extend_from_slice(part);
            identity.push(0);
        }
        sha256_hex(&identity)
    }

    fn body(&self) -> &[u8] {
        &self.delivery.data
    }

    fn account(&self) -> Claim<'_> {
        let header = self
            .delivery
            .properties
            .headers()
            .as_ref()
            .and_then(|headers| headers.inner().get("x-kxp-account"));
        match header {
            None => Claim::Absent,
            Some(AMQPValue::LongString(text)) => match std::str::from_utf8(text.as_bytes()) {
                Ok(text) => Claim::Account(text),
                Err(_) => Claim::Unreadable("a string that is not UTF-8"),
            },
            Some(AMQPValue::ShortString(text)) => Claim::Account(text.as_str()),
            Some(other) => Claim::Unreadable(kind(other)),
        }
    }

    fn header(&self, name: &str) -> Option<&str> {
        let headers = self.delivery.properties.headers().as_ref()?;
        let (_, value) = headers
            .inner()
            .iter()
            .find(|(key, _)| key.as_str().eq_ignore_ascii_case(name))?;
        match value {
            AMQPValue::LongString(text) => std::str::from_utf8(text.as_bytes()).ok(),
            AMQPValue::ShortString(text) => Some(text.as_str()),
            _ => None,
        }
    }

    async fn settle(self, verdict: Verdict) -> Result<(), IngestError> {
        let delivery = self.delivery;
        let settled = match verdict {
            Verdict::Accepted => delivery.ack(BasicAckOptions::default()).await,
            Verdict::Rejected { .. } => {
                delivery.reject(BasicRejectOptions { requeue: false }).await
            }
            Verdict::Abandoned => {
                let requeue = BasicNackOptions {
                    requeue: true,
                    multiple: false,
                };
                delivery.nack(requeue).await
            }
        };
        // `Ok(false)`, an acker used before or poisoned, is no error of ours: as before the
        // split, only the client's errors are reported.
        settled
            .map(|_| ())
            .map_err(|e| IngestError::Settle(chain(&e)))
    }
}

/// What a header value that is not a string is, for a rejection's detail.
fn kind(value: &AMQPValue) -> &'static str {
    match value {
        AMQPValue::ShortString(_) | AMQPValue::LongString(_) => "a string",
        AMQPValue::Boolean(_) => "a boolean",
        AMQPValue::ShortShortInt(_)
        | AMQPValue::ShortShortUInt(_)
        | AMQPValue::ShortInt(_)
        | AMQPValue::ShortUInt(_)
        | AMQPValue::LongInt(_)
        | AMQPValue::LongUInt(_)
        | AMQPValue::LongLongInt(_) => "an integer",
        AMQPValue::Float(_) | AMQPValue::Double(_) | AMQPValue::DecimalValue(_) => "a number",
        AMQPValue::FieldArray(_) => "an array",
        AMQPValue::Timestamp(_) => "a timestamp",
        AMQPValue::FieldTable(_) => "a table",
        AMQPValue::ByteArray(_) => "a byte array",
        AMQPValue::Void => "void",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::sources::{IngestSource, split};

    const ACC: &str = "acc_0123456789abcdef0123456789abcdef";

    /// The queue `url` names.
    fn amqp(url: &str) -> Amqp {
        let url = reqwest::Url::parse(url).unwrap();
        let (_, params) = split(&url, Amqp::grammar().params).unwrap();
        Amqp::parse(&url, params).unwrap()
    }

    #[test]
    fn an_amqp_url_names_its_queue_and_passes_the_clients_own_parameters_on() {
        let url = format!(
            "amqp://kxp:s3cret@mq:5672/%2fpayments?queue=events&account={ACC}&heartbeat=10&prefetch=8"
        );
        let Amqp { uri, vhost, queue } = amqp(&url);
        assert_eq!(
            uri,
            "amqp://kxp:s3cret@mq:5672/%2fpayments?heartbeat=10&connection_timeout=10000"
        );
        assert_eq!((vhost.as_str(), queue.as_str()), ("/payments", "events"));
        let source: IngestSource = url.parse().unwrap();
        assert_eq!(source.name(), "amqp:payments/events");
        assert_eq!(source.prefetch, 8);
        assert!(!source.redacted().contains("s3cret"));
        assert!(!format!("{source:?}").contains("s3cret"));
    }

    #[test]
    fn the_default_vhost_is_slash() {
        let source: IngestSource = format!("amqp://mq?queue=q&account={ACC}").parse().unwrap();
        assert_eq!(source.name(), "amqp:/q");
        assert_eq!(source.refusal(), None);
    }
}
