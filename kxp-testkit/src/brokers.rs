//! Message brokers for tests (feature `brokers`): a RabbitMQ queue with a dead-letter queue, a
//! NATS JetStream stream, and a private `nats-server` to stop and start again.
//!
//! [`Rabbit::connect`] and [`Nats::connect`] use the brokers on their standard loopback ports
//! ([`RABBIT_URL`], [`NATS_URL`]). When one is not reachable they return `None` after a loud
//! `SKIPPED (RabbitMQ): …` or `SKIPPED (NATS): …` line on stderr, unless [`REQUIRE_ENV`] is `1`
//! (as in CI), where they panic instead: a required broker that is missing is a failure, not a
//! skip. Every queue, exchange and stream a test gets has a unique name (a prefix and a UUID) and
//! is deleted when the value is dropped, also when the test panics (a best effort, like
//! [`PgDatabase`](crate::db::PgDatabase)).
//!
//! ```no_run
//! # async fn test() {
//! use kxp_testkit::brokers::Rabbit;
//!
//! let Some(rabbit) = Rabbit::connect().await else {
//!     return; // `SKIPPED (RabbitMQ): …` is on stderr.
//! };
//! rabbit.publish(br#"{"type":"a.b","data":{}}"#, Some("msg-1")).await;
//! let url = rabbit.ingest_url("acc_0193a0c4c1e07c2e9f3b7a1d2c4e5f60");
//! // … run `kxp serve --ingest <url>`, then look at rabbit.dead_letters() …
//! rabbit.delete().await;
//! # }
//! ```

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use lapin::options::{
    BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions,
    ExchangeDeleteOptions, QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};

/// When this environment variable is `1`, a broker that cannot be reached fails the test
/// instead of skipping it.
pub const REQUIRE_ENV: &str = "KXP_REQUIRE_BROKERS";

/// The RabbitMQ broker tests use: the default vhost `/` on 127.0.0.1:5672, as guest.
pub const RABBIT_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// The NATS server (with JetStream) tests use.
pub const NATS_URL: &str = "nats://127.0.0.1:4222";

/// How long a broker operation of the helpers may take before the test fails.
const PATIENCE: Duration = Duration::from_secs(20);

/// Whether [`REQUIRE_ENV`] is `1`.
pub fn brokers_required() -> bool {
    std::env::var(REQUIRE_ENV).is_ok_and(|v| v == "1")
}

/// `None` after the `SKIPPED (<what>): <why>` line, or a panic when brokers are required.
///
/// The line goes to the stderr handle itself: libtest captures `eprintln!` of passing tests.
fn unavailable<T>(what: &str, why: &str) -> Option<T> {
    if brokers_required() {
        panic!("{what} is required ({REQUIRE_ENV}=1) but unavailable: {why}");
    }
    let _ = writeln!(std::io::stderr(), "SKIPPED ({what}): {why}");
    None
}

/// Whether something accepts TCP connections at `addr` (within a second).
fn reachable(addr: &str) -> bool {
    addr.parse::<SocketAddr>()
        .is_ok_and(|addr| TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok())
}

/// A unique name: `<prefix>-<uuid>` (hex digits and `-` only after the prefix).
fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

/// Runs `future` on a runtime of its own on a thread of its own: for `Drop`, which cannot await
/// and may run on the single thread of the test's runtime, or while it unwinds.
fn on_own_runtime<F, T>(future: impl FnOnce() -> F + Send) -> Result<T, String>
where
    F: std::future::Future<Output = Result<T, String>>,
    T: Send,
{
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())?;
                runtime.block_on(async {
                    tokio::time::timeout(PATIENCE, future())
                        .await
                        .map_err(|_| "timed out".to_owned())?
                })
            })
            .join()
            .unwrap_or_else(|_| Err("the cleanup thread panicked".to_owned()))
    })
}

// ---------------------------------------------------------------------------------------------
// RabbitMQ
// ---------------------------------------------------------------------------------------------

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
    /// 127.0.0.1:5672 and [`REQUIRE_ENV`] is not `1`. Panics if the broker refuses.
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

// ---------------------------------------------------------------------------------------------
// NATS
// ---------------------------------------------------------------------------------------------

/// A JetStream stream of one test's own, `KXP_TEST_<uuid>` capturing the one subject
/// `kxp.test.<uuid>.events` (or, from [`Nats::connect_capturing_prefix`], every subject under
/// `kxp.test.<uuid>`), deleted when this value is dropped.
#[must_use = "the stream is deleted as soon as this value is dropped"]
pub struct Nats {
    client: async_nats::Client,
    jetstream: async_nats::jetstream::Context,
    url: String,
    stream: String,
    /// `kxp.test.<uuid>`: the test's own part of the subject space.
    prefix: String,
    subject: String,
    /// What the stream captures.
    captured: String,
    /// Whether dropping the value still has to delete the stream.
    armed: bool,
}

impl std::fmt::Debug for Nats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nats")
            .field("url", &self.url)
            .field("stream", &self.stream)
            .field("subject", &self.subject)
            .field("captured", &self.captured)
            .finish_non_exhaustive()
    }
}

/// A message received on a core NATS subscription (see [`Subscription`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NatsMessage {
    /// The subject it was published to.
    pub subject: String,
    /// The body, byte for byte.
    pub body: Vec<u8>,
    /// The headers, by name in lowercase (NATS header names keep their case; these tests do
    /// not care), the first value of each.
    pub headers: BTreeMap<String, String>,
}

impl NatsMessage {
    /// The header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }
}

/// A core NATS subscription (see [`Nats::subscribe`]).
#[derive(Debug)]
pub struct Subscription {
    subscriber: async_nats::Subscriber,
}

impl Subscription {
    /// The next message, or `None` if none arrives within `within`.
    pub async fn next_within(&mut self, within: Duration) -> Option<NatsMessage> {
        let message = tokio::time::timeout(within, self.subscriber.next())
            .await
            .ok()??;
        let headers = message
            .headers
            .as_ref()
            .map(|headers| {
                headers
                    .iter()
                    .filter_map(|(name, values)| {
                        let value = values.first()?;
                        Some((
                            name.to_string().to_ascii_lowercase(),
                            value.as_str().to_owned(),
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default();
        Some(NatsMessage {
            subject: message.subject.to_string(),
            body: message.payload.to_vec(),
            headers,
        })
    }
}

/// A durable consumer's state and settings, from JetStream's consumer info.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerState {
    /// Messages of the stream the consumer has not been delivered yet.
    pub num_pending: u64,
    /// Messages delivered and not acknowledged (or terminated) yet.
    pub num_ack_pending: usize,
    /// Messages delivered more than once and not acknowledged yet.
    pub num_redelivered: usize,
    /// The subject it is filtered on (empty: none).
    pub filter_subject: String,
    /// Whether each message must be acknowledged explicitly.
    pub explicit_ack: bool,
    /// The most messages it lets be pending acknowledgement at once (-1: no limit).
    pub max_ack_pending: i64,
}

async fn nats_client(url: &str) -> Result<async_nats::Client, async_nats::ConnectError> {
    async_nats::ConnectOptions::new()
        .name("kxp-testkit")
        .connection_timeout(Duration::from_secs(5))
        .connect(url)
        .await
}

fn nats_addr(url: &str) -> String {
    let rest = url.strip_prefix("nats://").unwrap_or(url);
    rest.split(['/', '?']).next().unwrap_or(rest).to_owned()
}

impl Nats {
    /// Connects to [`NATS_URL`] and creates a stream `KXP_TEST_<uuid>` on the subject
    /// `kxp.test.<uuid>.events`; `None` (after the `SKIPPED` line) when nothing listens on
    /// 127.0.0.1:4222 and [`REQUIRE_ENV`] is not `1`. Panics if the server refuses.
    pub async fn connect() -> Option<Nats> {
        if !reachable(&nats_addr(NATS_URL)) {
            return unavailable("NATS", "nothing listens on 127.0.0.1:4222");
        }
        Some(Nats::connect_to(NATS_URL).await)
    }

    /// The same on the server at `url` (such as [`NatsServer::url`]); panics if it cannot.
    pub async fn connect_to(url: &str) -> Nats {
        let nats = Nats::connect_undeclared(url).await;
        nats.declare().await;
        nats
    }

    /// [`Nats::connect`] with a stream that captures every subject under [`Nats::prefix`]
    /// (`kxp.test.<uuid>.>`), such as a rejected subject `<prefix>.rejected` beside
    /// [`Nats::subject`]: for sources that could consume their own rejects.
    pub async fn connect_capturing_prefix() -> Option<Nats> {
        if !reachable(&nats_addr(NATS_URL)) {
            return unavailable("NATS", "nothing listens on 127.0.0.1:4222");
        }
        let mut nats = Nats::connect_undeclared(NATS_URL).await;
        nats.captured = format!("{}.>", nats.prefix);
        nats.declare().await;
        Some(nats)
    }

    /// [`Nats::connect_to`] without creating the stream yet: it does not exist until
    /// [`Nats::declare`] (for a consumer started before its stream exists).
    pub async fn connect_undeclared(url: &str) -> Nats {
        let client = nats_client(url)
            .await
            .unwrap_or_else(|e| panic!("NATS: cannot connect to {url}: {e}"));
        let jetstream = async_nats::jetstream::new(client.clone());
        let id = uuid::Uuid::new_v4().simple().to_string();
        let stream = format!("KXP_TEST_{id}");
        let prefix = format!("kxp.test.{id}");
        let subject = format!("{prefix}.events");
        Nats {
            client,
            jetstream,
            url: url.to_owned(),
            stream,
            prefix,
            captured: subject.clone(),
            subject,
            armed: true,
        }
    }

    /// Creates the stream (file storage, on its subject, or its prefix); [`Nats::connect`]
    /// already did. Panics if the server refuses.
    pub async fn declare(&self) {
        self.jetstream
            .create_stream(async_nats::jetstream::stream::Config {
                name: self.stream.clone(),
                subjects: vec![self.captured.clone()],
                ..Default::default()
            })
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "NATS: cannot create the stream {} on {}: {e}",
                    self.stream, self.url
                )
            });
    }

    /// The server's URL, `nats://host:port`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The stream's name.
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// The subject the stream captures (among others, from
    /// [`Nats::connect_capturing_prefix`]), where [`Nats::publish`] publishes.
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// `kxp.test.<uuid>`: every subject of this value's is under it.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The subject `kxp serve` publishes the stream's rejected messages to by default:
    /// `kxp.rejected.<stream>`.
    pub fn rejected_subject(&self) -> String {
        format!("kxp.rejected.{}", self.stream)
    }

    /// The name `kxp serve` gives a source on this stream with this durable consumer:
    /// `nats:<stream>/<durable>`.
    pub fn source_name(&self, durable: &str) -> String {
        format!("nats:{}/{durable}", self.stream)
    }

    /// The `--ingest` URL of this stream for `account`, consumed by the durable consumer
    /// `durable`: `nats://…?stream=…&subject=…&durable=…&account=…`. Append
    /// `&account_header=allow`, `&max_ack_pending=N` or `&rejected_subject=…` as needed.
    pub fn ingest_url(&self, durable: &str, account: &str) -> String {
        format!(
            "{}?stream={}&subject={}&durable={durable}&account={account}",
            self.url, self.stream, self.subject
        )
    }

    /// The client, for anything the helpers do not cover.
    pub fn client(&self) -> &async_nats::Client {
        &self.client
    }

    /// Publishes `body` to [`Nats::subject`] through JetStream, with the header `Nats-Msg-Id`
    /// when `message_id` is given, and waits for the stream's ack; the message's stream
    /// sequence. Panics if the server refuses.
    pub async fn publish(&self, body: &[u8], message_id: Option<&str>) -> u64 {
        let mut headers = Vec::new();
        if let Some(id) = message_id {
            headers.push(("Nats-Msg-Id", id));
        }
        self.publish_with_headers(body, &headers).await
    }

    /// [`Nats::publish`] with these headers (`Nats-Msg-Id` among them or not); a name given
    /// twice is sent with both values.
    pub async fn publish_with_headers(&self, body: &[u8], headers: &[(&str, &str)]) -> u64 {
        let mut map = async_nats::HeaderMap::new();
        for (name, value) in headers {
            map.append(*name, *value);
        }
        let ack = self
            .jetstream
            .publish_with_headers(self.subject.clone(), map, body.to_vec().into())
            .await
            .unwrap_or_else(|e| panic!("NATS: cannot publish to {}: {e}", self.subject))
            .await
            .unwrap_or_else(|e| panic!("NATS: no ack from the stream {}: {e}", self.stream));
        assert!(
            !ack.duplicate,
            "NATS: the stream {} took the message for a duplicate ({headers:?})",
            self.stream
        );
        ack.sequence
    }

    /// Subscribes (core NATS) to `subject`, such as [`Nats::rejected_subject`]; the subscription
    /// is in place on the server when this returns.
    pub async fn subscribe(&self, subject: &str) -> Subscription {
        let subscriber = self
            .client
            .subscribe(subject.to_owned())
            .await
            .unwrap_or_else(|e| panic!("NATS: cannot subscribe to {subject}: {e}"));
        self.client
            .flush()
            .await
            .unwrap_or_else(|e| panic!("NATS: cannot flush: {e}"));
        Subscription { subscriber }
    }

    /// The durable consumer `durable` of the stream; `None` if it does not exist (yet).
    pub async fn consumer_state(&self, durable: &str) -> Option<ConsumerState> {
        let stream = self
            .jetstream
            .get_stream(&self.stream)
            .await
            .unwrap_or_else(|e| panic!("NATS: cannot get the stream {}: {e}", self.stream));
        let info = stream.consumer_info(durable).await.ok()?;
        Some(ConsumerState {
            num_pending: info.num_pending,
            num_ack_pending: info.num_ack_pending,
            num_redelivered: info.num_redelivered,
            filter_subject: info.config.filter_subject.clone(),
            explicit_ack: info.config.ack_policy
                == async_nats::jetstream::consumer::AckPolicy::Explicit,
            max_ack_pending: info.config.max_ack_pending,
        })
    }

    /// The messages the stream holds.
    pub async fn stream_messages(&self) -> u64 {
        let mut stream = self
            .jetstream
            .get_stream(&self.stream)
            .await
            .unwrap_or_else(|e| panic!("NATS: cannot get the stream {}: {e}", self.stream));
        stream
            .info()
            .await
            .unwrap_or_else(|e| panic!("NATS: no info on the stream {}: {e}", self.stream))
            .state
            .messages
    }

    /// Waits until the client is connected to the server again (after [`NatsServer::stop`] and
    /// [`NatsServer::start`]) and JetStream answers; panics after `within`.
    pub async fn wait_connected(&self, within: Duration) {
        let start = Instant::now();
        loop {
            let connected =
                self.client.connection_state() == async_nats::connection::State::Connected;
            if connected && self.jetstream.get_stream(&self.stream).await.is_ok() {
                return;
            }
            assert!(
                start.elapsed() < within,
                "NATS: not connected to {} again within {within:?}",
                self.url
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Deletes the stream. Panics if that fails.
    pub async fn delete(mut self) {
        self.armed = false;
        if let Err(e) = self.jetstream.delete_stream(&self.stream).await {
            panic!("NATS: cannot delete the stream {}: {e}", self.stream);
        }
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (url, stream) = (self.url.clone(), self.stream.clone());
        let outcome = on_own_runtime(|| async {
            let client = nats_client(&url).await.map_err(|e| e.to_string())?;
            async_nats::jetstream::new(client)
                .delete_stream(&stream)
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        });
        if let Err(error) = outcome {
            let _ = writeln!(
                std::io::stderr(),
                "kxp-testkit: could not delete the NATS stream {stream} on {url}: {error}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A private nats-server
// ---------------------------------------------------------------------------------------------

/// A `nats-server` of one test's own, with JetStream, on a free loopback port and a storage
/// directory of its own (deleted with it); [`NatsServer::stop`] and [`NatsServer::start`] take
/// it down and bring it back on the same port with the same storage, streams and consumers
/// kept. Killed when dropped.
#[derive(Debug)]
pub struct NatsServer {
    binary: PathBuf,
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

/// Where the `nats-server` binary is: `$KXP_NATS_SERVER`, `/usr/sbin/nats-server`, or the
/// first `nats-server` on the `PATH`.
fn nats_server_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("KXP_NATS_SERVER") {
        return Some(PathBuf::from(path));
    }
    let candidates = std::iter::once(PathBuf::from("/usr/sbin/nats-server")).chain(
        std::env::var_os("PATH")
            .map(|path| {
                std::env::split_paths(&path)
                    .map(|dir| dir.join("nats-server"))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default(),
    );
    candidates.into_iter().find(|path| path.is_file())
}

impl NatsServer {
    /// Starts a private server; `None` (after a `SKIPPED (NATS server): …` line) when there is
    /// no `nats-server` binary and [`REQUIRE_ENV`] is not `1`. Panics if it does not come up.
    pub fn spawn() -> Option<NatsServer> {
        let Some(binary) = nats_server_binary() else {
            return unavailable("NATS server", "no nats-server binary (set KXP_NATS_SERVER)");
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .unwrap_or_else(|e| panic!("no free loopback port: {e}"))
            .port();
        let dir = tempfile::Builder::new()
            .prefix("kxp-nats-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}"));
        let mut server = NatsServer {
            binary,
            port,
            dir,
            child: None,
        };
        server.start();
        Some(server)
    }

    /// The server's URL, `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's storage directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Whether the server runs (between [`NatsServer::start`] and [`NatsServer::stop`]).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Starts the server again (a no-op if it runs) on the same port and storage, and waits
    /// until it accepts connections. Panics if it does not within 20 s.
    pub fn start(&mut self) {
        if self.child.is_some() {
            return;
        }
        let storage = self.dir.path().join("jetstream");
        let log = self.dir.path().join("nats-server.log");
        let mut child = Command::new(&self.binary)
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(&storage)
            .arg("-l")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.binary.display()));
        let start = Instant::now();
        let addr = format!("127.0.0.1:{}", self.port);
        // A port another process took in the meantime would also accept: the server's INFO
        // line tells them apart, and a server that exited is reported with its log.
        while !says_info(&addr) {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "nats-server exited ({status}) on port {}: {}",
                    self.port,
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            if start.elapsed() > PATIENCE {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "nats-server did not come up on port {} within {PATIENCE:?}",
                    self.port
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.child = Some(child);
    }

    /// Stops the server with SIGTERM and waits until it has exited (a no-op if it does not run).
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let terminated = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .is_ok_and(|status| status.success());
        if !terminated {
            let _ = child.kill();
        }
        let start = Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(_)) => return,
                Ok(None) if start.elapsed() < PATIENCE => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return;
                }
            }
        }
    }
}

/// Whether a NATS server answers at `addr` with its `INFO` line.
fn says_info(addr: &str) -> bool {
    use std::io::Read;
    let Ok(addr) = addr.parse::<SocketAddr>() else {
        return false;
    };
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let mut buf = [0u8; 4];
    stream.read_exact(&mut buf).is_ok() && &buf == b"INFO"
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
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
    async fn undeclared_queues_and_streams_exist_once_declared() {
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

        let Some(nats) = Nats::connect().await else {
            return;
        };
        let later = Nats::connect_undeclared(nats.url()).await;
        assert!(later.jetstream.get_stream(later.stream()).await.is_err());
        later.declare().await;
        later.publish(b"x", None).await;
        assert_eq!(later.stream_messages().await, 1);
        later.delete().await;
        nats.delete().await;
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

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn nats_publishes_subscribes_and_reports_consumers() {
        let Some(nats) = Nats::connect().await else {
            return;
        };
        let mut rejected = nats.subscribe(&nats.rejected_subject()).await;
        let first = nats.publish(b"one", Some("id-1")).await;
        let second = nats.publish(b"two", None).await;
        assert_eq!(second, first + 1);
        assert_eq!(nats.stream_messages().await, 2);
        assert_eq!(nats.consumer_state("nobody").await, None);

        let stream = nats.jetstream.get_stream(nats.stream()).await.unwrap();
        stream
            .create_consumer(async_nats::jetstream::consumer::pull::Config {
                durable_name: Some("durable".into()),
                ..Default::default()
            })
            .await
            .unwrap();
        let state = nats.consumer_state("durable").await.unwrap();
        assert_eq!((state.num_pending, state.num_ack_pending), (2, 0));
        assert!(
            state.explicit_ack && state.filter_subject.is_empty(),
            "{state:?}"
        );

        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Kxp-Reject-Reason", "invalid_json");
        nats.client
            .publish_with_headers(nats.rejected_subject(), headers, "body".into())
            .await
            .unwrap();
        let message = rejected.next_within(PATIENCE).await.unwrap();
        assert_eq!(message.body, b"body");
        assert_eq!(message.header("kxp-reject-reason"), Some("invalid_json"));
        assert!(
            rejected
                .next_within(Duration::from_millis(10))
                .await
                .is_none()
        );

        let name = nats.stream().to_owned();
        let jetstream = nats.jetstream.clone();
        nats.delete().await;
        assert!(jetstream.get_stream(&name).await.is_err());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stream_on_the_prefix_captures_every_subject_under_it() {
        let Some(nats) = Nats::connect_capturing_prefix().await else {
            return;
        };
        assert!(nats.subject().starts_with(&format!("{}.", nats.prefix())));
        nats.publish(b"one", None).await;
        let rejected = format!("{}.rejected", nats.prefix());
        let ack = nats
            .jetstream
            .publish(rejected, "two".into())
            .await
            .unwrap()
            .await
            .unwrap();
        assert_eq!(ack.stream, nats.stream());
        assert_eq!(nats.stream_messages().await, 2);
        nats.delete().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_private_nats_server_keeps_its_streams_across_a_restart() {
        let Some(mut server) = NatsServer::spawn() else {
            return;
        };
        let nats = Nats::connect_to(&server.url()).await;
        nats.publish(b"before", None).await;
        server.stop();
        assert!(!server.is_running());
        assert!(!says_info(&format!("127.0.0.1:{}", server.port())));
        server.start();
        nats.wait_connected(PATIENCE).await;
        nats.publish(b"after", None).await;
        assert_eq!(nats.stream_messages().await, 2);
        nats.delete().await;
    }
}
