//! RabbitMQ for tests: a queue of one test's own with its dead-letter queue ([`Rabbit`]).

use std::collections::BTreeMap;
use std::io::Write;
use std::process::Stdio;

use lapin::options::{
    BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions,
    ExchangeDeleteOptions, QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};

use super::{PATIENCE, on_own_runtime, reachable, unavailable, unique};

/// The RabbitMQ broker tests use: the default vhost `/` on 127.0.0.1:5672, as guest.
pub const RABBIT_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// A RabbitMQ queue of one test's own, `kxp-test-<uuid>` on the default vhost, whose rejected
/// messages go (through the fanout exchange `<queue>.dlx`, its `x-dead-letter-exchange`) to the
/// dead-letter queue `<queue>.dlq`. All three are deleted when this value is dropped.
#[must_use = "the queue is deleted as soon as this value is dropped"]
pub struct Rabbit {
    connection: Connection,
    channel: Channel,
    queue: String,
    exchange: String,
    dead_letter_queue: String,
    /// Whether dropping the value still has to delete the queues and the exchange.
    armed: bool,
}

impl std::fmt::Debug for Rabbit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rabbit")
            .field("queue", &self.queue)
            .field("dead_letter_queue", &self.dead_letter_queue)
            .finish_non_exhaustive()
    }
}

/// A message read back from a queue (see [`Rabbit::dead_letters`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmqpMessage {
    /// The body, byte for byte.
    pub body: Vec<u8>,
    /// The `message_id` property, if it has one.
    pub message_id: Option<String>,
    /// The headers: string values as they are, tables (such as each entry of `x-death`) as
    /// `{key: value, …}` and arrays as `[value, …]`.
    pub headers: BTreeMap<String, String>,
}

/// A header value of an AMQP message: AMQP headers are typed, and a consumer may be sent any
/// of these where it expects a string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AmqpHeader<'a> {
    /// A string (a long string, as RabbitMQ's clients send text).
    Text(&'a str),
    /// A signed 64-bit integer.
    Integer(i64),
    /// A byte array (RabbitMQ's own type).
    Bytes(&'a [u8]),
    /// A table of string values.
    Table(&'a [(&'a str, &'a str)]),
}

impl AmqpHeader<'_> {
    fn to_amqp(self) -> AMQPValue {
        match self {
            AmqpHeader::Text(text) => AMQPValue::LongString(text.into()),
            AmqpHeader::Integer(n) => AMQPValue::LongLongInt(n),
            AmqpHeader::Bytes(bytes) => AMQPValue::ByteArray(bytes.to_vec().into()),
            AmqpHeader::Table(entries) => {
                let mut table = FieldTable::default();
                for (name, value) in entries {
                    table.insert((*name).into(), AMQPValue::LongString((*value).into()));
                }
                AMQPValue::FieldTable(table)
            }
        }
    }
}

/// The dead-letter exchange of `queue`.
fn exchange_of(queue: &str) -> String {
    format!("{queue}.dlx")
}

/// The dead-letter queue of `queue`.
fn dead_letter_queue_of(queue: &str) -> String {
    format!("{queue}.dlq")
}

async fn rabbit_connection() -> Result<Connection, lapin::Error> {
    // The name holds no queue name: [`Rabbit::close_kxp_connections`] must never pick this one.
    let properties = ConnectionProperties::default().with_connection_name("kxp-testkit".into());
    Connection::connect(RABBIT_URL, properties).await
}

impl Rabbit {
    /// Connects to [`RABBIT_URL`] and declares a queue `kxp-test-<uuid>` with its dead-letter
    /// exchange and queue; `None` (after the `SKIPPED` line) when nothing listens on
    /// 127.0.0.1:5672 and [`REQUIRE_ENV`](super::REQUIRE_ENV) is not `1`. Panics if the broker
    /// refuses.
    pub async fn connect() -> Option<Rabbit> {
        Rabbit::connect_with_prefix("kxp-test").await
    }

    /// [`Rabbit::connect`] with the queue named `<prefix>-<uuid>`.
    pub async fn connect_with_prefix(prefix: &str) -> Option<Rabbit> {
        let rabbit = Rabbit::connect_undeclared(prefix).await?;
        rabbit.declare().await;
        Some(rabbit)
    }

    /// [`Rabbit::connect_with_prefix`] without declaring anything yet: the queue does not exist
    /// until [`Rabbit::declare`] (for a consumer started before its queue exists).
    pub async fn connect_undeclared(prefix: &str) -> Option<Rabbit> {
        if !reachable("127.0.0.1:5672") {
            return unavailable("RabbitMQ", "nothing listens on 127.0.0.1:5672");
        }
        let connection = match rabbit_connection().await {
            Ok(connection) => connection,
            Err(e) => {
                return unavailable("RabbitMQ", &format!("cannot connect to {RABBIT_URL}: {e}"));
            }
        };
        let channel = connection
            .create_channel()
            .await
            .unwrap_or_else(|e| panic!("RabbitMQ: cannot open a channel: {e}"));
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .unwrap_or_else(|e| panic!("RabbitMQ: cannot enable publisher confirms: {e}"));
        let queue = unique(prefix);
        let exchange = exchange_of(&queue);
        let dead_letter_queue = dead_letter_queue_of(&queue);
        let rabbit = Rabbit {
            connection,
            channel,
            queue,
            exchange,
            dead_letter_queue,
            armed: true,
        };
        Some(rabbit)
    }

    /// Declares the dead-letter exchange, the dead-letter queue and the queue (with its
    /// `x-dead-letter-exchange`); [`Rabbit::connect`] already did. Panics if the broker refuses.
    pub async fn declare(&self) {
        let channel = &self.channel;
        channel
            .exchange_declare(
                self.exchange.as_str().into(),
                ExchangeKind::Fanout,
                ExchangeDeclareOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap_or_else(|e| panic!("RabbitMQ: cannot declare {}: {e}", self.exchange));
        channel
            .queue_declare(
                self.dead_letter_queue.as_str().into(),
                QueueDeclareOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap_or_else(|e| panic!("RabbitMQ: cannot declare {}: {e}", self.dead_letter_queue));
        channel
            .queue_bind(
                self.dead_letter_queue.as_str().into(),
                self.exchange.as_str().into(),
                "".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap_or_else(|e| panic!("RabbitMQ: cannot bind {}: {e}", self.dead_letter_queue));
        let mut arguments = FieldTable::default();
        arguments.insert(
            "x-dead-letter-exchange".into(),
            AMQPValue::LongString(self.exchange.as_str().into()),
        );
        channel
            .queue_declare(
                self.queue.as_str().into(),
                QueueDeclareOptions::default(),
                arguments,
            )
            .await
            .unwrap_or_else(|e| panic!("RabbitMQ: cannot declare {}: {e}", self.queue));
    }

    /// The queue's name, `<prefix>-<uuid>`.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// The dead-letter queue's name, `<queue>.dlq`.
    pub fn dead_letter_queue(&self) -> &str {
        &self.dead_letter_queue
    }

    /// The name `kxp serve` gives a source on this queue: `amqp:/<queue>`.
    pub fn source_name(&self) -> String {
        format!("amqp:/{}", self.queue)
    }

    /// The `--ingest` URL of this queue for `account`:
    /// `amqp://guest:guest@127.0.0.1:5672/%2f?queue=<queue>&account=<account>`. Append
    /// `&account_header=allow` or `&prefetch=N` as needed.
    pub fn ingest_url(&self, account: &str) -> String {
        format!("{RABBIT_URL}?queue={}&account={account}", self.queue)
    }

    /// Publishes `body` to the queue (through the default exchange), with `message_id` when
    /// given, and waits for the broker's confirm. Panics if the broker refuses.
    pub async fn publish(&self, body: &[u8], message_id: Option<&str>) {
        self.publish_with_headers(body, message_id, &[]).await;
    }

    /// [`Rabbit::publish`] with string headers, such as `("x-kxp-account", "acc_…")`.
    pub async fn publish_with_headers(
        &self,
        body: &[u8],
        message_id: Option<&str>,
        headers: &[(&str, &str)],
    ) {
        let typed: Vec<(&str, AmqpHeader<'_>)> = headers
            .iter()
            .map(|(name, value)| (*name, AmqpHeader::Text(value)))
            .collect();
        self.publish_with_typed_headers(body, message_id, &typed)
            .await;
    }

    /// [`Rabbit::publish`] with headers of any of the [`AmqpHeader`] types.
    pub async fn publish_with_typed_headers(
        &self,
        body: &[u8],
        message_id: Option<&str>,
        headers: &[(&str, AmqpHeader<'_>)],
    ) {
        let mut properties = BasicProperties::default();
        if let Some(id) = message_id {
            properties = properties.with_message_id(id.into());
        }
        if !headers.is_empty() {
            let mut table = FieldTable::default();
            for (name, value) in headers {
                table.insert((*name).into(), value.to_amqp());
            }
            properties = properties.with_headers(table);
        }
        let confirm = self
            .channel
            .basic_publish(
                "".into(),
                self.queue.as_str().into(),
                BasicPublishOptions::default(),
                body,
                properties,
            )
            .await
            .unwrap_or_else(|e| panic!("RabbitMQ: cannot publish to {}: {e}", self.queue));
        let confirmation = confirm
            .await
            .unwrap_or_else(|e| panic!("RabbitMQ: no confirm from {}: {e}", self.queue));
        assert!(
            confirmation.is_ack(),
            "RabbitMQ refused a message for {}: {confirmation:?}",
            self.queue
        );
    }

    /// The queue's ready messages (those not delivered to a consumer, or returned to the queue).
    pub async fn ready_count(&self) -> u32 {
        self.message_count(&self.queue).await
    }

    async fn message_count(&self, queue: &str) -> u32 {
        // A passive declare of a queue that is gone closes the channel: one of its own.
        let channel = self.side_channel().await;
        let count = channel
            .queue_declare(
                queue.into(),
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .unwrap_or_else(|e| panic!("RabbitMQ: cannot inspect {queue}: {e}"))
            .message_count();
        let _ = channel.close(200, "OK".into()).await;
        count
    }

    async fn side_channel(&self) -> Channel {
        self.connection
            .create_channel()
            .await
            .unwrap_or_else(|e| panic!("RabbitMQ: cannot open a channel: {e}"))
    }

    /// The queue's ready and unacknowledged messages, `(ready, unacked)`, as `rabbitmqctl
    /// list_queues` reports them (a second or two: it starts an Erlang VM). `(0, 0)` means every
    /// message was consumed and acknowledged.
    pub async fn queue_counts(&self) -> (u64, u64) {
        let out = rabbitmqctl(&[
            "-q",
            "list_queues",
            "--no-table-headers",
            "name",
            "messages_ready",
            "messages_unacknowledged",
        ])
        .await;
        out.lines()
            .find_map(|line| {
                let mut fields = line.split_whitespace();
                (fields.next() == Some(self.queue.as_str())).then(|| {
                    let ready = fields.next().and_then(|v| v.parse().ok());
                    let unacked = fields.next().and_then(|v| v.parse().ok());
                    (ready.unwrap_or(u64::MAX), unacked.unwrap_or(u64::MAX))
                })
            })
            .unwrap_or_else(|| {
                panic!(
                    "rabbitmqctl list_queues does not list {}: {out}",
                    self.queue
                )
            })
    }

    /// The messages in the dead-letter queue, oldest first, left in place: they are fetched
    /// without acknowledging them on a channel of their own, which is then closed, so the broker
    /// puts them back.
    pub async fn dead_letters(&self) -> Vec<AmqpMessage> {
        let channel = self.side_channel().await;
        let mut messages = Vec::new();
        while let Some(message) = channel
            .basic_get(
                self.dead_letter_queue.as_str().into(),
                BasicGetOptions { no_ack: false },
            )
            .await
            .unwrap_or_else(|e| panic!("RabbitMQ: cannot read {}: {e}", self.dead_letter_queue))
        {
            let delivery = message.delivery;
            let properties = &delivery.properties;
            messages.push(AmqpMessage {
                message_id: properties.message_id().as_ref().map(|id| id.to_string()),
                headers: properties
                    .headers()
                    .as_ref()
                    .map(|table| {
                        table
                            .inner()
                            .iter()
                            .map(|(name, value)| (name.to_string(), value_text(value)))
                            .collect()
                    })
                    .unwrap_or_default(),
                body: delivery.data,
            });
        }
        let _ = channel.close(200, "OK".into()).await;
        messages
    }

    /// Closes, from the broker's side, every connection of `kxp serve` consuming this queue (its
    /// `connection_name` client property holds `kxp serve` and the queue's name), as a network
    /// cut or a broker restart would; returns how many were closed. Runs `rabbitmqctl`, so it
    /// must run as root (or as the broker's user) on the broker's machine.
    pub async fn close_kxp_connections(&self) -> usize {
        let out = rabbitmqctl(&[
            "-q",
            "list_connections",
            "--no-table-headers",
            "pid",
            "client_properties",
        ])
        .await;
        let pids: Vec<String> = out
            .lines()
            .filter(|line| line.contains("kxp serve") && line.contains(self.queue.as_str()))
            .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
            .collect();
        for pid in &pids {
            rabbitmqctl(&["-q", "close_connection", pid, "closed by kxp-testkit"]).await;
        }
        pids.len()
    }

    /// The `kxp serve` connections consuming this queue, as `rabbitmqctl list_connections`
    /// shows them (one line each: the pid and the client properties).
    pub async fn kxp_connections(&self) -> Vec<String> {
        let out = rabbitmqctl(&[
            "-q",
            "list_connections",
            "--no-table-headers",
            "pid",
            "client_properties",
        ])
        .await;
        out.lines()
            .filter(|line| line.contains("kxp serve") && line.contains(self.queue.as_str()))
            .map(str::to_owned)
            .collect()
    }

    /// Deletes the queue, the dead-letter queue and the exchange. Panics if that fails.
    pub async fn delete(mut self) {
        self.armed = false;
        let channel = self.side_channel().await;
        if let Err(e) = delete_rabbit(&channel, &self.queue).await {
            panic!("RabbitMQ: cannot delete {}: {e}", self.queue);
        }
        let _ = self.connection.close(200, "OK".into()).await;
    }
}

impl Drop for Rabbit {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // The test's connection may be tied to a runtime that is gone or blocked here: a new
        // connection, on a runtime of its own.
        let queue = self.queue.clone();
        let outcome = on_own_runtime(|| async {
            let connection = rabbit_connection().await.map_err(|e| e.to_string())?;
            let channel = connection
                .create_channel()
                .await
                .map_err(|e| e.to_string())?;
            let deleted = delete_rabbit(&channel, &queue)
                .await
                .map_err(|e| e.to_string());
            let _ = connection.close(200, "OK".into()).await;
            deleted
        });
        if let Err(error) = outcome {
            // Never a panic here: during unwinding a second one aborts the whole test binary.
            let _ = writeln!(
                std::io::stderr(),
                "kxp-testkit: could not delete the RabbitMQ queue {queue}: {error}"
            );
        }
    }
}

async fn delete_rabbit(channel: &Channel, queue: &str) -> Result<(), lapin::Error> {
    for name in [queue.to_owned(), dead_letter_queue_of(queue)] {
        channel
            .queue_delete(name.as_str().into(), QueueDeleteOptions::default())
            .await?;
    }
    channel
        .exchange_delete(
            exchange_of(queue).as_str().into(),
            ExchangeDeleteOptions::default(),
        )
        .await
}

/// A header value as text: strings as they are, tables as `{k: v, …}`, arrays as `[v, …]`,
/// other values in their `Debug` form.
fn value_text(value: &AMQPValue) -> String {
    match value {
        AMQPValue::LongString(s) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        AMQPValue::ShortString(s) => s.to_string(),
        AMQPValue::FieldArray(array) => format!(
            "[{}]",
            array
                .as_slice()
                .iter()
                .map(value_text)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        AMQPValue::FieldTable(table) => format!(
            "{{{}}}",
            table
                .inner()
                .iter()
                .map(|(k, v)| format!("{k}: {}", value_text(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => format!("{other:?}"),
    }
}

/// Runs `rabbitmqctl` with `args`; its stdout. Panics if it cannot run or fails.
async fn rabbitmqctl(args: &[&str]) -> String {
    let out = tokio::time::timeout(
        PATIENCE * 3,
        tokio::process::Command::new("rabbitmqctl")
            .args(args)
            .stdin(Stdio::null())
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("rabbitmqctl {args:?} did not finish"))
    .unwrap_or_else(|e| panic!("cannot run rabbitmqctl {args:?}: {e}"));
    assert!(
        out.status.success(),
        "rabbitmqctl {args:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rabbit_publishes_dead_letters_and_cleans_up() {
        let Some(rabbit) = Rabbit::connect().await else {
            return;
        };
        assert!(rabbit.queue().starts_with("kxp-test-"));
        rabbit.publish(b"one", Some("id-1")).await;
        rabbit.publish(b"two", None).await;
        rabbit
            .publish_with_headers(b"three", None, &[("x-kxp-account", "acc_x")])
            .await;
        assert_eq!(rabbit.ready_count().await, 3);
        assert_eq!(rabbit.queue_counts().await, (3, 0));

        // A consumer's reject (requeue=false) sends a message to the dead-letter queue.
        let channel = rabbit.side_channel().await;
        for _ in 0..3 {
            let message = channel
                .basic_get(rabbit.queue().into(), BasicGetOptions { no_ack: false })
                .await
                .unwrap()
                .unwrap();
            let delivery = message.delivery;
            if delivery.data == b"two" {
                delivery.acker.ack(Default::default()).await.unwrap();
            } else {
                delivery
                    .acker
                    .reject(lapin::options::BasicRejectOptions { requeue: false })
                    .await
                    .unwrap();
            }
        }
        let start = Instant::now();
        let dead = loop {
            let dead = rabbit.dead_letters().await;
            if dead.len() == 2 || start.elapsed() > PATIENCE {
                break dead;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let bodies: Vec<&[u8]> = dead.iter().map(|m| m.body.as_slice()).collect();
        assert_eq!(bodies, [b"one".as_slice(), b"three".as_slice()]);
        assert_eq!(dead[0].message_id.as_deref(), Some("id-1"));
        assert_eq!(dead[1].headers["x-kxp-account"], "acc_x");
        assert!(
            dead[1].headers.contains_key("x-death"),
            "{:?}",
            dead[1].headers
        );
        // Reading them left them there.
        assert_eq!(rabbit.dead_letters().await.len(), 2);
        assert_eq!(rabbit.ready_count().await, 0);
        assert_eq!(rabbit.close_kxp_connections().await, 0);

        // A connection named as `kxp serve` names its own is found and closed by the broker.
        let name = format!("kxp serve {} pid 1", rabbit.source_name());
        let fake = Connection::connect(
            RABBIT_URL,
            ConnectionProperties::default().with_connection_name(name.as_str().into()),
        )
        .await
        .unwrap();
        assert_eq!(rabbit.kxp_connections().await.len(), 1);
        assert_eq!(rabbit.close_kxp_connections().await, 1);
        let start = Instant::now();
        while fake.status().connected() && start.elapsed() < PATIENCE {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            !fake.status().connected(),
            "the broker did not close {name}"
        );
        assert!(rabbit.kxp_connections().await.is_empty());

        let queue = rabbit.queue().to_owned();
        rabbit.delete().await;
        let connection = rabbit_connection().await.unwrap();
        let channel = connection.create_channel().await.unwrap();
        let gone = channel
            .queue_declare(
                queue.as_str().into(),
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await;
        assert!(gone.is_err(), "{queue} is still there");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_undeclared_queue_exists_once_declared() {
        let Some(rabbit) = Rabbit::connect_undeclared("kxp-test").await else {
            return;
        };
        let channel = rabbit.side_channel().await;
        let missing = channel
            .queue_declare(
                rabbit.queue().into(),
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await;
        assert!(missing.is_err(), "{} exists already", rabbit.queue());
        rabbit.declare().await;
        rabbit.publish(b"x", None).await;
        assert_eq!(rabbit.ready_count().await, 1);
        rabbit.delete().await;
        // Deleting what was never declared is no error either.
        let never = Rabbit::connect_undeclared("kxp-test").await.unwrap();
        never.delete().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_rabbit_deletes_its_queue() {
        let Some(rabbit) = Rabbit::connect().await else {
            return;
        };
        let queue = rabbit.queue().to_owned();
        drop(rabbit);
        let connection = rabbit_connection().await.unwrap();
        let channel = connection.create_channel().await.unwrap();
        let gone = channel
            .queue_declare(
                queue.as_str().into(),
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await;
        assert!(gone.is_err(), "{queue} is still there");
    }
}
