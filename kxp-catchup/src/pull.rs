//! A pull endpoint's receiver: it long-polls the endpoint's feed, verifies each item as a
//! delivery, runs the handler through dedup, and commits the cursor over what it processed.

use std::future::Future;
use std::time::Duration;

use kxp_dedup::{Outcome, Store, Tx};
use kxp_receiver::{Receiver, Rejection};
use kxp_verify::{Event, Secret, Verifier};
use serde::de::DeserializeOwned;

use crate::catch_up::settle_gone;
use crate::feed::{Answer, Committed, Credential, FeedClient, FeedError};

/// How long a long poll waits for the first item, in seconds, unless told otherwise.
pub const DEFAULT_PULL_WAIT: u32 = 30;

/// How long the claim of an event lasts while [`PullConsumer::run`]'s handler runs (renewed
/// while it does).
const LEASE: Duration = Duration::from_secs(60);

/// The longest [`PullConsumer::run_until`] waits after a failure before reading again.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// One event of a pull endpoint's feed, verified as a delivery would be, then parsed (its
/// `data` as a `T`).
#[derive(Debug, Clone)]
pub struct Pulled<T = serde_json::Value> {
    /// Its number in the endpoint's sequence.
    pub sequence: u64,
    /// The ordering key it was ingested with, if any (read from the authenticated feed).
    pub ordering_key: Option<String>,
    /// The event.
    pub event: Event<T>,
}

/// Why a poll of [`PullConsumer`] stopped before its page's end. Never holds the secret.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PullError {
    /// The feed did not answer as it should (unreachable, refused credential, forged page…).
    #[error(transparent)]
    Feed(#[from] FeedError),
    /// An item's body did not verify with its signature headers, or is no event (or its `data`
    /// is not the handler's type): the page is refused from that item on, and nothing past it
    /// is committed. The next poll reads it again, signed anew: a signature that had only grown
    /// stale (a slow handler before it) passes then; anything else stops the consumer there
    /// until it is fixed (a handler that reads the event, or the cursor committed past it).
    #[error("rejected: item {sequence} did not verify: {code}")]
    Rejected {
        /// The item.
        sequence: u64,
        /// The receiver's code for why (`signature_mismatch`, `invalid_envelope`, …).
        code: &'static str,
    },
    /// The handler failed on the item (or dedup could not record it): it is read and tried
    /// again at the next poll, and nothing past it is committed.
    #[error("handler: item {sequence} ({event_id}) was not processed: {outcome}")]
    Handler {
        /// The item.
        sequence: u64,
        /// Its event.
        event_id: String,
        /// What dedup said (`failed`, `in_progress`, `store_unavailable`).
        outcome: &'static str,
    },
}

impl PullError {
    /// A stable name, for logs and metrics.
    pub fn code(&self) -> &'static str {
        match self {
            PullError::Feed(e) => e.code(),
            PullError::Rejected { .. } => "rejected",
            PullError::Handler { .. } => "handler",
        }
    }
}

/// What one poll did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Polled {
    /// Items the handler processed.
    pub processed: u64,
    /// Items dedup had recorded as processed already (skipped).
    pub duplicates: u64,
    /// The cursor after the poll.
    pub cursor: u64,
    /// Numbers retention purged before they were read (lost to this receiver; the sender
    /// notified the platform before it purged them).
    pub purged: u64,
    /// Items whose event's payload was erased or expired on the sender
    /// ([`FeedItem::gone`](kxp_api::FeedItem::gone)): not handed to the handler, recorded done
    /// in dedup, and committed past.
    pub gone: u64,
}

/// The receiver of a pull endpoint: `kxp serve` sends it nothing; it reads the endpoint's feed
/// with the endpoint's own secret, long-polling, verifies each item exactly as a delivery (the
/// same [`Receiver`]), runs the handler once per event id (kxp-dedup), and commits the cursor
/// over the contiguous prefix it processed. After a crash it resumes at the committed cursor;
/// what it processed after that and before the crash is skipped by dedup, so each event is
/// processed once.
///
/// ```no_run
/// # async fn fulfil(_: &kxp_verify::Event) -> Result<(), std::io::Error> { Ok(()) }
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use kxp_catchup::PullConsumer;
/// use kxp_dedup::Store;
/// use kxp_verify::Secret;
///
/// let store = Store::connect("sqlite://webhooks.db").await?;
/// let secret = Secret::new(&std::env::var("KXP_WEBHOOK_SECRET")?)?;
/// let consumer = PullConsumer::new(
///     "https://webhooks.platform.example",
///     "ep_0193a0c4c1e07c2e9f3b7a1d2c4e5f61",
///     secret,
///     store,
/// )?;
/// // Until Ctrl-C: each event once, in sequence order.
/// consumer
///     .run_until(|pulled| async move { fulfil(&pulled.event).await }, async {
///         let _ = tokio::signal::ctrl_c().await;
///     })
///     .await;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct PullConsumer {
    feed: FeedClient,
    endpoint_id: String,
    receiver: Receiver,
    store: Store,
    wait: u32,
    page_size: u32,
}

impl PullConsumer {
    /// The consumer of the pull endpoint `endpoint_id` at the sender `sender_url` (`https://`,
    /// or `http://` to this machine: [`FeedClient::new`]), reading with `secret`'s feed key
    /// and verifying items with `secret` (the `kxp` format), recording in `store`.
    pub fn new(
        sender_url: &str,
        endpoint_id: &str,
        secret: Secret,
        store: Store,
    ) -> Result<PullConsumer, FeedError> {
        let receiver = Receiver::new(Verifier::new(secret.clone()));
        Ok(PullConsumer {
            feed: FeedClient::new(sender_url, Credential::Secret(secret))?,
            endpoint_id: endpoint_id.to_owned(),
            receiver,
            store,
            wait: DEFAULT_PULL_WAIT,
            page_size: crate::DEFAULT_PAGE_SIZE,
        })
    }

    /// Verifies items with `receiver` instead (its format, tolerance, decryption keys).
    pub fn with_receiver(mut self, receiver: Receiver) -> PullConsumer {
        self.receiver = receiver;
        self
    }

    /// Long-polls for at most `seconds` (0 to 60; default [`DEFAULT_PULL_WAIT`]).
    pub fn with_wait(mut self, seconds: u32) -> PullConsumer {
        self.wait = seconds.min(kxp_api::MAX_FEED_WAIT);
        self
    }

    /// Reads at most `items` a page (1 to 500).
    pub fn with_page_size(mut self, items: u32) -> PullConsumer {
        self.page_size = items.clamp(1, kxp_api::MAX_FEED_LIMIT);
        self
    }

    /// One poll with a claim/complete handler ([`kxp_dedup::process`]): reads the page after
    /// the committed cursor (waiting for its first item), hands each item, in order, to
    /// `handler` unless dedup has it processed already, and commits the cursor over what was
    /// processed. Stops at the first item that does not verify or that the handler fails.
    pub async fn poll<T, F, Fut, E>(&self, handler: F) -> Result<Polled, PullError>
    where
        T: DeserializeOwned,
        F: FnMut(Pulled<T>) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: std::fmt::Display,
    {
        self.poll_with(&mut Claimed(handler)).await
    }

    /// [`PullConsumer::poll`] with a handler that runs in the dedup transaction
    /// ([`kxp_dedup::process_in_transaction`]): its effect and the event's mark commit
    /// together, so an event is processed exactly once even when the process is killed
    /// midway.
    pub async fn poll_in_transaction<T, F, Fut, E>(&self, handler: F) -> Result<Polled, PullError>
    where
        T: DeserializeOwned,
        F: FnMut(Pulled<T>, Tx) -> Fut,
        Fut: Future<Output = Result<Tx, E>>,
        E: std::fmt::Display,
    {
        self.poll_with(&mut InTransaction(handler)).await
    }

    /// Polls with `handler` ([`PullConsumer::poll`]) until `stop` completes; a failure is
    /// logged and the poll tried again after a backoff (1 s, doubling to 30 s).
    pub async fn run_until<T, F, Fut, E>(&self, handler: F, stop: impl Future<Output = ()>)
    where
        T: DeserializeOwned,
        F: FnMut(Pulled<T>) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: std::fmt::Display,
    {
        self.run_with(&mut Claimed(handler), stop).await;
    }

    /// [`PullConsumer::run_until`] with a handler in the dedup transaction
    /// ([`PullConsumer::poll_in_transaction`]).
    pub async fn run_in_transaction_until<T, F, Fut, E>(
        &self,
        handler: F,
        stop: impl Future<Output = ()>,
    ) where
        T: DeserializeOwned,
        F: FnMut(Pulled<T>, Tx) -> Fut,
        Fut: Future<Output = Result<Tx, E>>,
        E: std::fmt::Display,
    {
        self.run_with(&mut InTransaction(handler), stop).await;
    }

    async fn run_with<T: DeserializeOwned>(
        &self,
        handler: &mut impl Handle<T>,
        stop: impl Future<Output = ()>,
    ) {
        tokio::pin!(stop);
        let mut backoff = Duration::from_secs(1);
        loop {
            let polled = tokio::select! {
                polled = self.poll_with(handler) => polled,
                () = &mut stop => return,
            };
            let pause = self.after(polled, &mut backoff);
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = &mut stop => return,
            }
        }
    }

    /// How long to pause after a poll: not at all after a success (the next poll waits at the
    /// sender), the backoff after a failure (logged), which doubles up to [`MAX_BACKOFF`].
    fn after(&self, polled: Result<Polled, PullError>, backoff: &mut Duration) -> Duration {
        match polled {
            Ok(_) => {
                *backoff = Duration::from_secs(1);
                Duration::ZERO
            }
            Err(error) => {
                tracing::warn!(
                    endpoint_id = %self.endpoint_id, error = %error, kind = error.code(),
                    "kxp-catchup: a poll of the pull endpoint's feed failed; retrying"
                );
                let pause = match &error {
                    PullError::Feed(FeedError::RateLimited(after)) => *after,
                    _ => *backoff,
                };
                *backoff = (*backoff * 2).min(MAX_BACKOFF);
                pause
            }
        }
    }

    /// One poll, each verified item handed to `handler` through dedup.
    async fn poll_with<T: DeserializeOwned>(
        &self,
        handler: &mut impl Handle<T>,
    ) -> Result<Polled, PullError> {
        // The cursor is read each poll, not kept: another reader (or an operator) may have
        // moved it, and the page's MAC is over the `after` it was asked with.
        let cursor = self.feed.cursor(&self.endpoint_id).await?.sequence;
        let mut polled = Polled {
            cursor,
            ..Polled::default()
        };
        let page = match self
            .feed
            .page_waiting(&self.endpoint_id, cursor, self.page_size, self.wait)
            .await?
        {
            Answer::Page(page) => page,
            Answer::Purged { earliest } => {
                let last_purged = earliest.saturating_sub(1);
                tracing::error!(
                    endpoint_id = %self.endpoint_id, from = cursor + 1, to = last_purged,
                    "kxp-catchup: retention purged events this pull endpoint never read; moving past them"
                );
                self.feed.commit(&self.endpoint_id, last_purged).await?;
                polled.purged = last_purged - cursor;
                polled.cursor = last_purged;
                return Ok(polled);
            }
        };
        let mut stopped = None;
        for item in page.items {
            if item.gone().is_some() {
                let outcome = match settle_gone(&self.store, item.event_id.as_str()).await {
                    Ok(true) => {
                        polled.gone += 1;
                        polled.cursor = item.sequence;
                        continue;
                    }
                    Ok(false) => "in_progress",
                    Err(_) => "store_unavailable",
                };
                stopped = Some(PullError::Handler {
                    sequence: item.sequence,
                    event_id: item.event_id.to_string(),
                    outcome,
                });
                break;
            }
            let header = |name: &str| item.headers.get(name).map_or(&b""[..], |v| v.as_bytes());
            let accepted = match self
                .receiver
                .check_request(header, item.body.as_bytes().to_vec())
            {
                Ok(accepted) => accepted,
                Err(rejection) => {
                    stopped = Some(rejected(item.sequence, &rejection));
                    break;
                }
            };
            let event = match accepted.verified().verified().parse() {
                Ok(event) => event,
                Err(_) => {
                    stopped = Some(PullError::Rejected {
                        sequence: item.sequence,
                        code: "invalid_envelope",
                    });
                    break;
                }
            };
            let event_id = accepted.event_id().to_owned();
            let pulled = Pulled {
                sequence: item.sequence,
                ordering_key: item.ordering_key,
                event,
            };
            match handler.handle(&self.store, pulled).await {
                Outcome::Processed => polled.processed += 1,
                Outcome::Duplicate => polled.duplicates += 1,
                outcome => {
                    stopped = Some(PullError::Handler {
                        sequence: item.sequence,
                        event_id,
                        outcome: outcome_code(&outcome),
                    });
                    break;
                }
            }
            polled.cursor = item.sequence;
        }
        if polled.cursor > cursor
            && self.feed.commit(&self.endpoint_id, polled.cursor).await? == Committed::Behind
        {
            tracing::info!(
                endpoint_id = %self.endpoint_id,
                "kxp-catchup: another reader committed past this one's page"
            );
        }
        match stopped {
            Some(error) => Err(error),
            None => Ok(polled),
        }
    }
}

fn rejected(sequence: u64, rejection: &Rejection) -> PullError {
    PullError::Rejected {
        sequence,
        code: rejection.code(),
    }
}

fn outcome_code(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Processed => "processed",
        Outcome::Duplicate => "duplicate",
        Outcome::InProgress { .. } => "in_progress",
        Outcome::Failed => "failed",
        Outcome::StoreUnavailable { .. } => "store_unavailable",
    }
}

/// A handler run through dedup: what [`PullConsumer`]'s polls call per item.
trait Handle<T> {
    /// Runs the handler on `pulled` unless dedup has its event processed; dedup's outcome.
    fn handle(&mut self, store: &Store, pulled: Pulled<T>) -> impl Future<Output = Outcome>;
}

/// A claim/complete handler ([`kxp_dedup::process`]).
struct Claimed<F>(F);

impl<T, F, Fut, E> Handle<T> for Claimed<F>
where
    F: FnMut(Pulled<T>) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    async fn handle(&mut self, store: &Store, pulled: Pulled<T>) -> Outcome {
        let event_id = pulled.event.id().to_owned();
        let run = (self.0)(pulled);
        kxp_dedup::process(store, &event_id, LEASE, || run).await
    }
}

/// A handler in the dedup transaction ([`kxp_dedup::process_in_transaction`]).
struct InTransaction<F>(F);

impl<T, F, Fut, E> Handle<T> for InTransaction<F>
where
    F: FnMut(Pulled<T>, Tx) -> Fut,
    Fut: Future<Output = Result<Tx, E>>,
    E: std::fmt::Display,
{
    async fn handle(&mut self, store: &Store, pulled: Pulled<T>) -> Outcome {
        let event_id = pulled.event.id().to_owned();
        kxp_dedup::process_in_transaction(store, &event_id, |tx| (self.0)(pulled, tx)).await
    }
}
