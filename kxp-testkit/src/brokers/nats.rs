//! NATS JetStream for tests: a stream of one test's own ([`Nats`]), subscriptions and consumer
//! state.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};

use futures_util::StreamExt;

use super::{on_own_runtime, reachable, unavailable};

/// The NATS server (with JetStream) tests use.
pub const NATS_URL: &str = "nats://127.0.0.1:4222";

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
    /// 127.0.0.1:4222 and [`REQUIRE_ENV`](super::REQUIRE_ENV) is not `1`. Panics if the server
    /// refuses.
    pub async fn connect() -> Option<Nats> {
        if !reachable(&nats_addr(NATS_URL)) {
            return unavailable("NATS", "nothing listens on 127.0.0.1:4222");
        }
        Some(Nats::connect_to(NATS_URL).await)
    }

    /// The same on the server at `url` (such as [`NatsServer::url`](super::NatsServer::url));
    /// panics if it cannot.
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
    ///
    /// A loaded server (CI, two cores, every broker test at once) now and then answers a
    /// create with `error creating store for stream` (10049) and writes the cause only to its
    /// own log; the name is this value's own, so asking again, a little later, is safe: the
    /// same configuration again is no change.
    pub async fn declare(&self) {
        const ATTEMPTS: u32 = 6;
        let config = async_nats::jetstream::stream::Config {
            name: self.stream.clone(),
            subjects: vec![self.captured.clone()],
            ..Default::default()
        };
        for attempt in 1..=ATTEMPTS {
            let error = match self.jetstream.create_stream(config.clone()).await {
                Ok(_) => return,
                Err(e) => e,
            };
            let transient = matches!(
                error.kind(),
                async_nats::jetstream::context::CreateStreamErrorKind::JetStream(ref e)
                    if e.error_code() == async_nats::jetstream::ErrorCode::STREAM_CREATE
            );
            if !transient || attempt == ATTEMPTS {
                panic!(
                    "NATS: cannot create the stream {} on {} (attempt {attempt} of {ATTEMPTS}; \
                     the server's log says why): {error}",
                    self.stream, self.url
                );
            }
            tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
        }
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

    /// Waits until the client is connected to the server again (after
    /// [`NatsServer::stop`](super::NatsServer::stop) and
    /// [`NatsServer::start`](super::NatsServer::start)) and JetStream answers; panics after
    /// `within`.
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::brokers::PATIENCE;

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
    async fn an_undeclared_stream_exists_once_declared() {
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
}
