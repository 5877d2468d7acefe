//! A RabbitMQ queue as a source, through lapin (AMQP 0.9.1).
//!
//! The queue must exist (a passive declare checks it, and reads the lag every
//! [`LAG_EVERY`](super::LAG_EVERY)); `basic.qos` bounds the unacknowledged messages to the
//! source's prefetch. Each message is acknowledged once stored, rejected without requeue (so
//! the queue's dead-letter exchange, if it has one, receives it) when no retry can cure it,
//! and given back (`basic.nack` with requeue) when the process stops before storing it. Its
//! key is its `message_id`, else a hash of the vhost, the queue and its body: AMQP gives a
//! message no other identity that survives a redelivery, so two messages without ids and with
//! the same body on one queue are one event.

use futures_util::StreamExt;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions, BasicRejectOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Connection, ConnectionProperties};
use tokio::task::JoinSet;

use super::message::{self, Claim, Message, Verdict};
use super::{Backoff, LAG_EVERY, Run, chain, settle_in_flight, stopping};
use crate::engine::sources::{Broker, SourceStatus};
use crate::model::sha256_hex;

/// One connection's consumption, until `stopped` (`Ok`) or a failure (`Err`, its text).
pub(super) async fn session(run: &Run, backoff: &mut Backoff) -> Result<(), String> {
    let Broker::Amqp { uri, vhost, queue } = &run.source.broker else {
        return Err("not an AMQP source".to_owned());
    };
    let name = format!("kxp serve {} pid {}", run.status.name, std::process::id());
    let properties = ConnectionProperties::default().with_connection_name(name.into());
    let mut stop = run.stopped.clone();
    let connection = tokio::select! {
        () = stopping(&mut stop) => return Ok(()),
        connected = Connection::connect(uri, properties) => connected.map_err(|e| chain(&e))?,
    };
    let consumed = consume(run, backoff, &connection, vhost, queue).await;
    if consumed.is_ok() {
        let _ = connection.close(200, "kxp serve is stopping".into()).await;
    }
    consumed
}

async fn consume(
    run: &Run,
    backoff: &mut Backoff,
    connection: &Connection,
    vhost: &str,
    queue: &str,
) -> Result<(), String> {
    let status = &run.status;
    let failed = |e: lapin::Error| chain(&e);
    let channel = connection.create_channel().await.map_err(failed)?;
    channel
        .basic_qos(run.source.prefetch, BasicQosOptions::default())
        .await
        .map_err(failed)?;
    // The lag is read on a channel of its own: a failed declare closes the channel it ran on.
    let probe = connection.create_channel().await.map_err(failed)?;
    read_lag(&probe, queue, status).await?;
    let tag = format!(
        "kxp-{}-{}",
        std::process::id(),
        crate::model::random_hex_32()
    );
    let mut consumer = channel
        .basic_consume(
            queue.into(),
            tag.as_str().into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .map_err(failed)?;
    status.up();
    backoff.reset();
    let mut tasks = JoinSet::new();
    let mut lag = tokio::time::interval(LAG_EVERY);
    let mut stop = run.stopped.clone();
    let ended = loop {
        tokio::select! {
            () = stopping(&mut stop) => break Ok(()),
            next = consumer.next() => match next {
                Some(Ok(delivery)) => {
                    let (run, vhost, queue) = (run.clone(), vhost.to_owned(), queue.to_owned());
                    tasks.spawn(async move { settle(&run, &vhost, &queue, delivery).await });
                }
                Some(Err(e)) => break Err(failed(e)),
                None => break Err("the broker cancelled the consumer".to_owned()),
            },
            _ = lag.tick() => {
                if let Err(e) = read_lag(&probe, queue, status).await {
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

/// Reads the queue's ready messages into the status (and checks the queue still exists).
async fn read_lag(probe: &Channel, queue: &str, status: &SourceStatus) -> Result<(), String> {
    let declared = probe
        .queue_declare(
            queue.into(),
            QueueDeclareOptions::default().passive(),
            FieldTable::default(),
        )
        .await
        .map_err(|e| format!("queue {queue:?}: {}", chain(&e)))?;
    status.lag(u64::from(declared.message_count()));
    Ok(())
}

/// Takes one delivery in and settles it with the broker.
async fn settle(run: &Run, vhost: &str, queue: &str, delivery: Delivery) {
    let id = delivery
        .properties
        .message_id()
        .as_ref()
        .map(|id| id.as_str());
    let key = || {
        message::key(id, "amqp", || {
            let mut identity =
                Vec::with_capacity(vhost.len() + queue.len() + delivery.data.len() + 2);
            for part in [vhost.as_bytes(), queue.as_bytes(), &delivery.data] {
                identity.extend_from_slice(part);
                identity.push(0);
            }
            sha256_hex(&identity)
        })
    };
    let header = delivery
        .properties
        .headers()
        .as_ref()
        .and_then(|headers| headers.inner().get("x-kxp-account"));
    let account = match header {
        None => Claim::Absent,
        Some(AMQPValue::LongString(text)) => match std::str::from_utf8(text.as_bytes()) {
            Ok(text) => Claim::Account(text),
            Err(_) => Claim::Unreadable("a string that is not UTF-8"),
        },
        Some(AMQPValue::ShortString(text)) => Claim::Account(text.as_str()),
        Some(other) => Claim::Unreadable(kind(other)),
    };
    let message = Message {
        body: &delivery.data,
        key,
        account,
    };
    let verdict = message::take(run, message, &()).await;
    let settled = match verdict {
        Verdict::Accepted => delivery.ack(BasicAckOptions::default()).await,
        Verdict::Rejected { .. } => delivery.reject(BasicRejectOptions { requeue: false }).await,
        Verdict::Abandoned => {
            let requeue = BasicNackOptions {
                requeue: true,
                multiple: false,
            };
            delivery.nack(requeue).await
        }
    };
    if let Err(e) = settled {
        // The broker delivers it again; its key makes that harmless.
        tracing::debug!(target: "kxp_sender", source = %run.status.name, error = %e,
            "broker source: could not settle a message");
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
