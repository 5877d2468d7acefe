//! The catch-up itself: when to pull the feed, and how a page is reconciled.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use kxp_dedup::{Claim, EventStatus, Store, StoreError};
use kxp_receiver::Receiver;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::deliver::{Deliver, Request};
use crate::feed::{Answer, Credential, FeedClient, FeedError};
use crate::state::{OrderedBounds, ResetFound, States, Status, Stop};

/// How long a gap in the hints stays open before the feed is asked: a retry of the missing
/// delivery may still be coming (the sender's first retries come at seconds to minutes).
pub const DEFAULT_DELAY: Duration = Duration::from_secs(60);

/// How often every known endpoint's feed is read after its checkpoint, hints or not: this finds
/// a lost *last* event, which leaves no gap behind it, and everything a restored backup lost.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(5 * 60);

/// Items per feed request.
pub const DEFAULT_PAGE_SIZE: u32 = 100;

/// In ordered mode, how far past an event its key still waits on (one the handler did not take)
/// a catch-up reads on for the other keys: a stuck key holds the others back by at most this
/// many events.
pub const ORDERED_LOOKAHEAD: u64 = 1000;

/// In ordered mode, the first wait before an endpoint with events still held is read again
/// (doubling up to [`delay`](CatchUpConfig::delay)): an event held a moment before the sender
/// numbered it is in the feed a moment later.
const FIRST_RETRY: Duration = Duration::from_millis(250);

/// The most endpoints learned from hints (beyond those configured or checkpointed): an unsigned
/// header can name any, so there is a bound.
pub const MAX_LEARNED_ENDPOINTS: usize = 64;

/// What a catch-up is pointed at and how eager it is.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CatchUpConfig {
    /// The sender's base URL (`https://webhooks.platform.example`).
    pub sender_url: String,
    /// What the feed is read with.
    pub credential: Credential,
    /// See [`DEFAULT_DELAY`].
    pub delay: Duration,
    /// See [`DEFAULT_INTERVAL`].
    pub interval: Duration,
    /// See [`DEFAULT_PAGE_SIZE`] (1 to 500).
    pub page_size: u32,
    /// Endpoints to catch up on the timer from the start, before any delivery names them (the
    /// rest are learned from deliveries' `X-Kxp-Endpoint-Id` and the stored checkpoints).
    pub endpoints: Vec<String>,
    /// Ordered mode, with the route's own receiver: see [`CatchUpConfig::ordered`]. `None`:
    /// deliveries go to the handler as they come.
    pub ordered: Option<Receiver>,
    /// Where ordered mode stops holding and answers 503 (see [`OrderedBounds`]).
    pub bounds: OrderedBounds,
}

impl CatchUpConfig {
    /// The defaults, for the sender at `sender_url`.
    pub fn new(sender_url: &str, credential: Credential) -> CatchUpConfig {
        CatchUpConfig {
            sender_url: sender_url.to_owned(),
            credential,
            delay: DEFAULT_DELAY,
            interval: DEFAULT_INTERVAL,
            page_size: DEFAULT_PAGE_SIZE,
            endpoints: Vec::new(),
            ordered: None,
            bounds: OrderedBounds::default(),
        }
    }

    /// With another [`delay`](CatchUpConfig::delay).
    pub fn with_delay(mut self, delay: Duration) -> CatchUpConfig {
        self.delay = delay;
        self
    }

    /// With another [`interval`](CatchUpConfig::interval).
    pub fn with_interval(mut self, interval: Duration) -> CatchUpConfig {
        self.interval = interval;
        self
    }

    /// With another [`page_size`](CatchUpConfig::page_size), kept within 1 to 500.
    pub fn with_page_size(mut self, page_size: u32) -> CatchUpConfig {
        self.page_size = page_size.clamp(1, kxp_api::MAX_FEED_LIMIT);
        self
    }

    /// With other [`bounds`](CatchUpConfig::bounds).
    pub fn with_bounds(mut self, bounds: OrderedBounds) -> CatchUpConfig {
        self.bounds = bounds;
        self
    }

    /// Catches up `endpoint_id` from the start.
    pub fn endpoint(mut self, endpoint_id: &str) -> CatchUpConfig {
        self.endpoints.push(endpoint_id.to_owned());
        self
    }

    /// Ordered mode: the handler gets each endpoint's events **in sequence order per ordering
    /// key** (the producer's `ordering_key`, such as the payment id), so `payment.created`
    /// comes before `payment.succeeded` even when their deliveries cross.
    ///
    /// A delivery is verified with `receiver` (the one the route's verifier uses), held in the
    /// dedup database and answered 200 at once, without calling the handler; the catch-up then
    /// reads the feed, which says with authority which event has which number and key, and
    /// hands the events to the route in that order, from the feed. An event that did not
    /// arrive yet is not waited for: the feed has it as soon as it has a number. An event the
    /// handler does not take holds back the later events of its key (up to
    /// [`ORDERED_LOOKAHEAD`] events), not the others'. Events without a key are in no order.
    ///
    /// **It stops loudly.** Holding answers the sender 200, so the sender cannot see a receiver
    /// that holds but no longer processes: past any of its [bounds](CatchUpConfig::bounds) —
    /// too many events held for an endpoint, the oldest held too long, the feed failing too
    /// long, or the sender [found reset](CatchUp::reset_checkpoint) — ordered mode answers the
    /// endpoint's new deliveries 503 with `Retry-After` ([`Received::Stopped`]), so the sender
    /// retries, notifies the merchant and finally dead-letters, as for any failing endpoint.
    /// Once under every bound it holds and answers 200 again; the catch-up reads what was
    /// refused meanwhile from the feed. [`CatchUp::status`] says where each endpoint stands.
    pub fn ordered(mut self, receiver: Receiver) -> CatchUpConfig {
        self.ordered = Some(receiver);
        self
    }
}

/// What ordered mode made of a delivery ([`CatchUp::receive`]): what the framework's
/// middleware answers.
#[derive(Debug)]
pub enum Received {
    /// Hand the request to the route as it came: ordered mode is off, the request is the
    /// catch-up's own, or it names no endpoint (`X-Kxp-Endpoint-Id`) and more than one is
    /// configured (logged: it is handled at once, in no order).
    PassThrough,
    /// Verified and durably held, or processed before: answer 200 (`{"outcome":"held"}`, or
    /// `duplicate`) with `X-Kxp-Verified-Key` naming `key`.
    Held {
        /// The event id of the verified body.
        event_id: String,
        /// The key that verified it.
        key: kxp_verify::KeyFingerprint,
        /// Processed before: nothing was held.
        duplicate: bool,
    },
    /// The verifier refused it: answer this rejection.
    Rejected(kxp_receiver::Rejection),
    /// The dedup store could not hold it: answer 503 with `Retry-After`, so the sender
    /// delivers it again ([`kxp_dedup::Outcome::StoreUnavailable`]).
    Unavailable,
    /// Verified, but ordered mode stopped holding the endpoint's deliveries (see
    /// [`CatchUpConfig::ordered`]): answer 503 with `Retry-After` and
    /// [`Received::stopped_body`]. Nothing was held; the sender delivers it again.
    Stopped {
        /// The event id of the verified body.
        event_id: String,
        /// Why.
        stop: Stop,
        /// The `Retry-After`, in whole seconds ([`OrderedBounds::retry_after`]).
        retry_after: u64,
    },
}

impl Received {
    /// The response body of a [`Held`](Received::Held): `{"outcome":"held"}` or
    /// `{"outcome":"duplicate"}`.
    pub fn json_body(duplicate: bool) -> &'static str {
        if duplicate {
            r#"{"outcome":"duplicate"}"#
        } else {
            r#"{"outcome":"held"}"#
        }
    }

    /// The response body of a [`Stopped`](Received::Stopped):
    /// `{"outcome":"stopped","reason":"too_many_held"}`, say.
    pub fn stopped_body(stop: Stop) -> String {
        format!(r#"{{"outcome":"stopped","reason":"{}"}}"#, stop.as_str())
    }
}

/// Why a catch-up stopped short.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CatchUpError {
    /// The feed gave no page.
    #[error("{0}")]
    Feed(#[from] FeedError),
    /// The dedup store (checkpoint, records) is unavailable.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// Nothing to deliver recovered events with: no `CatchUpLayer` (or [`CatchUp::deliver_with`])
    /// was set up.
    #[error("no_deliverer: the catch-up has no handler to deliver to")]
    NoDeliverer,
    /// Ordered mode found the sender reset and processes nothing of the endpoint until
    /// [`CatchUp::reset_checkpoint`] (plain catch-up starts again from 0 by itself).
    #[error(
        "reset: the sender's feed has {} at number {}, where this receiver's checkpoint has {} \
         (the feed's latest number is {})",
        .0.found.as_deref().unwrap_or("nothing"), .0.checkpoint,
        .0.expected.as_deref().unwrap_or("an event"), .0.latest
    )]
    Reset(ResetFound),
}

impl CatchUpError {
    /// A stable name, for logs and metrics.
    pub fn code(&self) -> &'static str {
        match self {
            CatchUpError::Feed(e) => e.code(),
            CatchUpError::Store(_) => "store",
            CatchUpError::NoDeliverer => "no_deliverer",
            CatchUpError::Reset(_) => "reset",
        }
    }
}

/// What one catch-up of an endpoint did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// The endpoint's checkpoint afterwards.
    pub checkpoint: u64,
    /// Items dedup had already recorded as processed.
    pub already: u64,
    /// Items handed to the handler, which answered 2xx.
    pub recovered: u64,
    /// Numbers the sender's retention had purged: those events cannot be recovered (logged as
    /// an error; the checkpoint moves past them).
    pub purged: u64,
    /// Why it stopped before the feed's end, when it did: an item the handler did not take
    /// (retried at the next catch-up, from it). In ordered mode the first such item; the
    /// catch-up went on with the other keys.
    pub stopped: Option<String>,
    /// Ordered mode: items not handed over because an earlier event of their key was not
    /// taken (handed over at a later catch-up, in order).
    pub waiting: u64,
    /// Plain catch-up found the sender reset (see [`ResetFound`]) and read the feed again from
    /// its start: dedup skipped what was processed before.
    pub reset: bool,
    /// Items whose event's payload was erased or expired on the sender
    /// ([`FeedItem::gone`](kxp_api::FeedItem::gone)): nothing to hand over. Each counts as
    /// processed (dedup records it done, so ordered mode's key moves on and a copy held
    /// earlier is released).
    pub gone: u64,
}

/// A receiver's catch-up: cheap to clone (one task and state behind it).
///
/// [`observe`](CatchUp::observe) is told each delivery's hints; [`start`](CatchUp::start)
/// runs the task that catches up on gaps and on the timer; [`catch_up`](CatchUp::catch_up)
/// does one endpoint now.
#[derive(Clone)]
pub struct CatchUp {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for CatchUp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CatchUp")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

struct Inner {
    config: CatchUpConfig,
    feed: FeedClient,
    store: Store,
    deliver: OnceLock<Arc<dyn Deliver>>,
    signals: mpsc::Sender<Signal>,
    receiver: Mutex<Option<mpsc::Receiver<Signal>>>,
    /// The value of [`CATCH_UP_HEADER`](crate::CATCH_UP_HEADER) on this catch-up's own
    /// requests: random, so ordered mode can tell them from a delivery that claims to be one.
    mark: String,
    stop: watch::Sender<bool>,
    started: AtomicBool,
    /// One catch-up of an endpoint at a time (the task's, and a direct call's).
    running: tokio::sync::Mutex<()>,
    /// What is known of each endpoint between catch-ups.
    states: States,
}

impl CatchUp {
    /// A catch-up reading the feed `config` names, with the checkpoint and the dedup records in
    /// `store` (the store the handler's dedup uses: reconciling is by its records).
    pub fn new(config: CatchUpConfig, store: Store) -> Result<CatchUp, FeedError> {
        let feed = FeedClient::new(&config.sender_url, config.credential.clone())?;
        let (signals, receiver) = mpsc::channel(1024);
        Ok(CatchUp {
            inner: Arc::new(Inner {
                config,
                feed,
                store,
                deliver: OnceLock::new(),
                signals,
                receiver: Mutex::new(Some(receiver)),
                mark: uuid::Uuid::new_v4().simple().to_string(),
                stop: watch::channel(false).0,
                started: AtomicBool::new(false),
                running: tokio::sync::Mutex::new(()),
                states: States::default(),
            }),
        })
    }

    /// Delivers recovered events with `deliver`; the first one set stays (kxp-axum's layer sets
    /// its route's service). Returns whether this one was taken.
    pub fn deliver_with(&self, deliver: impl Deliver) -> bool {
        self.inner.deliver.set(Arc::new(deliver)).is_ok()
    }

    /// Tells the catch-up that a delivery of `endpoint_id` numbered `sequence` was answered
    /// 2xx. The numbers are unsigned hints: they only decide *when* the feed is read, never
    /// what counts as processed. Never waits: a hint that finds the queue full is dropped
    /// (the timer still comes).
    pub fn observe(&self, endpoint_id: &str, sequence: u64) {
        let _ = self
            .inner
            .signals
            .try_send(Signal::Hint(endpoint_id.to_owned(), sequence));
    }

    /// Whether ordered mode is on ([`CatchUpConfig::ordered`]).
    pub fn is_ordered(&self) -> bool {
        self.inner.config.ordered.is_some()
    }

    /// The receiver ordered mode verifies deliveries with, if it is on: the middleware reads
    /// the body within its limit.
    pub fn ordered_receiver(&self) -> Option<&Receiver> {
        self.inner.config.ordered.as_ref()
    }

    /// Whether `mark`, a request's [`CATCH_UP_HEADER`](crate::CATCH_UP_HEADER), is this
    /// catch-up's own: compared in constant time, since a forged one would let a replayed
    /// delivery past ordered mode's order.
    pub fn is_own(&self, mark: &[u8]) -> bool {
        let own = self.inner.mark.as_bytes();
        own.len() == mark.len() && own.iter().zip(mark).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0
    }

    /// Ordered mode's side of a request (a `POST` to the webhook route): reads each header
    /// with `header` (an empty value for a missing one) and holds a verified delivery (see
    /// [`Received`]). With ordered mode off, [`Received::PassThrough`].
    pub async fn receive<'h>(
        &self,
        header: impl Fn(&str) -> &'h [u8],
        body: bytes::Bytes,
    ) -> Received {
        let Some(receiver) = &self.inner.config.ordered else {
            return Received::PassThrough;
        };
        if self.is_own(header(crate::CATCH_UP_HEADER)) {
            return Received::PassThrough;
        }
        let accepted = match receiver.check_request(&header, body.clone()) {
            Ok(accepted) => accepted,
            Err(rejection) => return Received::Rejected(rejection),
        };
        let event_id = accepted.event_id().to_owned();
        let key = accepted.key_fingerprint();
        let named = std::str::from_utf8(header(kxp_verify::ENDPOINT_ID_HEADER)).unwrap_or("");
        let endpoint_id = match (named, self.inner.config.endpoints.as_slice()) {
            ("", [only]) => only.clone(),
            ("", _) => {
                tracing::warn!(
                    target: "kxp_catchup", event_id,
                    "ordered mode: a delivery without X-Kxp-Endpoint-Id goes to the handler at once, in no order"
                );
                return Received::PassThrough;
            }
            (named, _) => named.to_owned(),
        };
        let store = &self.inner.store;
        let duplicate = match store.record(&event_id).await {
            Ok(record) => record.is_some_and(|r| r.status == EventStatus::Done),
            Err(e) => return unavailable(&event_id, &e),
        };
        if !duplicate {
            let states = &self.inner.states;
            if let Some(stop) = states.refuse(&endpoint_id, &self.inner.config.bounds) {
                tracing::warn!(
                    target: "kxp_catchup", endpoint_id, event_id, reason = stop.as_str(),
                    "ordered mode is stopped: the delivery is answered 503, for the sender to retry"
                );
                // A catch-up may find the way clear again (the feed back, the refused event
                // taken): the sender's retries are what prompt it.
                let _ = self.inner.signals.try_send(Signal::Held(endpoint_id));
                return Received::Stopped {
                    event_id,
                    stop,
                    retry_after: self.inner.config.bounds.retry_after.as_secs(),
                };
            }
            match store.hold(&endpoint_id, &event_id, &body).await {
                Ok(kxp_dedup::InboxPut::Stored) => states.held_one(&endpoint_id),
                Ok(_) => {}
                Err(e) => return unavailable(&event_id, &e),
            }
            let _ = self.inner.signals.try_send(Signal::Held(endpoint_id));
        }
        Received::Held {
            event_id,
            key,
            duplicate,
        }
    }

    /// Starts the task (once; later calls do nothing) on the current Tokio runtime: it catches
    /// up every known endpoint at once and then every [`interval`](CatchUpConfig::interval),
    /// and an endpoint whose hints leave a gap open for [`delay`](CatchUpConfig::delay).
    pub fn start(&self) {
        if self.inner.started.swap(true, Ordering::SeqCst) {
            return;
        }
        let receiver = self
            .inner
            .receiver
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(receiver) = receiver {
            tokio::spawn(run(self.clone(), receiver));
        }
    }

    /// Whether [`start`](CatchUp::start) ran.
    pub fn is_started(&self) -> bool {
        self.inner.started.load(Ordering::SeqCst)
    }

    /// Stops the task after the catch-up under way, if any.
    pub fn stop(&self) {
        self.inner.stop.send_replace(true);
    }

    /// Where each endpoint stands: held events, the feed's failures, resets found, whether
    /// ordered mode is stopped. Export it ([`Status::prometheus`]) and mount it as a health
    /// check ([`Status::is_healthy`], [`Status::json`]).
    pub fn status(&self) -> Status {
        self.inner
            .states
            .snapshot(self.is_ordered(), &self.inner.config.bounds)
    }

    /// The explicit reset after the sender was found reset ([`CatchUpError::Reset`]): sets the
    /// endpoint's checkpoint to `sequence` and lets ordered mode hold and process again.
    ///
    /// 0 reads the endpoint's whole feed again, and dedup skips every event it recorded as
    /// processed: the safe choice when in doubt. After a sender database was restored from a
    /// backup, the events the receiver processed after that backup are no longer in the
    /// sender's feed (unless their producers send them again); the numbers they had are given
    /// to new events, which this reset lets through.
    pub async fn reset_checkpoint(
        &self,
        endpoint_id: &str,
        sequence: u64,
    ) -> Result<(), CatchUpError> {
        let _one = self.inner.running.lock().await;
        self.inner
            .store
            .reset_checkpoint(endpoint_id, sequence)
            .await?;
        self.inner.states.no_reset(endpoint_id);
        tracing::warn!(
            target: "kxp_catchup", endpoint_id, sequence,
            "the catch-up checkpoint was reset"
        );
        let _ = self
            .inner
            .signals
            .try_send(Signal::Held(endpoint_id.to_owned()));
        Ok(())
    }

    /// Catches `endpoint_id` up now: reads the feed after its checkpoint, page by page; hands
    /// every item dedup has not recorded as processed to the handler; and moves the checkpoint
    /// over the contiguous prefix that is processed. An item the handler does not take (not
    /// 2xx) stops it there: the checkpoint stays before it, and the next catch-up starts with
    /// it. In ordered mode it holds back only the later items of its ordering key, and the
    /// catch-up goes on with the others, up to [`ORDERED_LOOKAHEAD`] items past the checkpoint.
    ///
    /// It reads the checkpoint's own item again first: another event at that number, or a feed
    /// that ends before it, means the sender was reset ([`ResetFound`], logged as an error and
    /// counted once). Plain catch-up then starts again from 0 (dedup skips what it processed);
    /// ordered mode stops with [`CatchUpError::Reset`] until [`CatchUp::reset_checkpoint`].
    pub async fn catch_up(&self, endpoint_id: &str) -> Result<Report, CatchUpError> {
        let _one = self.inner.running.lock().await;
        let deliver = self
            .inner
            .deliver
            .get()
            .cloned()
            .ok_or(CatchUpError::NoDeliverer)?;
        let ordered = self.is_ordered();
        let store = &self.inner.store;
        let states = &self.inner.states;
        states.track(endpoint_id);
        let stored = store.checkpoint(endpoint_id).await?;
        let mut report = Report {
            checkpoint: stored.sequence,
            ..Report::default()
        };
        let mut start = stored.sequence;
        // The checkpoint's own number, read again to see it still holds the same event.
        let mut verify = (start > 0).then_some(start);
        let mut cursor = start.saturating_sub(1);
        // The event at `report.checkpoint`, when known.
        let mut at_checkpoint = stored.event_id.clone();
        let mut contiguous = true;
        let mut blocked: HashSet<String> = HashSet::new();
        'pages: loop {
            let answer = self
                .inner
                .feed
                .page(endpoint_id, cursor, self.inner.config.page_size)
                .await;
            let page = match answer {
                Err(e) => {
                    states.feed_failed(endpoint_id, e.code());
                    return Err(e.into());
                }
                Ok(Answer::Purged { earliest }) => {
                    states.feed_ok(endpoint_id);
                    // The checkpoint's own number purged too: nothing left to compare with.
                    if verify.take().is_some() {
                        cursor = start;
                    }
                    let lost = earliest.saturating_sub(cursor.saturating_add(1));
                    tracing::error!(
                        target: "kxp_catchup", endpoint_id, after = cursor, earliest, lost,
                        "the sender's retention purged events this receiver never processed: they cannot be recovered"
                    );
                    report.purged += lost;
                    cursor = earliest.saturating_sub(1);
                    if contiguous {
                        at_checkpoint = None;
                        report.checkpoint = store
                            .advance_checkpoint(endpoint_id, cursor, None)
                            .await?
                            .sequence;
                    }
                    continue;
                }
                Ok(Answer::Page(page)) => {
                    states.feed_ok(endpoint_id);
                    page
                }
            };
            let mut items = page.items.as_slice();
            if let Some(number) = verify.take() {
                let own = items.first().filter(|item| item.sequence == number);
                let found = own.map(|item| item.event_id.as_str());
                let moved = match (found, stored.event_id.as_deref()) {
                    _ if page.latest < number => true,
                    (Some(found), Some(expected)) => found != expected,
                    _ => false,
                };
                if moved {
                    let reset = ResetFound {
                        checkpoint: number,
                        expected: stored.event_id.clone(),
                        found: found.map(str::to_owned),
                        latest: page.latest,
                    };
                    if states.reset_found(endpoint_id, &reset) {
                        tracing::error!(
                            target: "kxp_catchup", endpoint_id, checkpoint = number,
                            expected = reset.expected.as_deref().unwrap_or(""),
                            found = reset.found.as_deref().unwrap_or(""), latest = reset.latest,
                            ordered,
                            "the sender was reset: its feed no longer has this receiver's checkpoint \
                             (a database restored from a backup?)"
                        );
                    }
                    if ordered {
                        return Err(CatchUpError::Reset(reset));
                    }
                    store.reset_checkpoint(endpoint_id, 0).await?;
                    report.reset = true;
                    report.checkpoint = 0;
                    (start, cursor, at_checkpoint) = (0, 0, None);
                    continue 'pages;
                }
                if let Some(item) = own {
                    at_checkpoint.get_or_insert_with(|| item.event_id.to_string());
                    items = items.get(1..).unwrap_or_default();
                }
                cursor = number;
            }
            for item in items {
                if item.sequence != cursor.saturating_add(1) {
                    // The feed answers contiguous numbers; anything else is read again later.
                    report.stopped = Some(format!(
                        "the feed skipped from {cursor} to {}",
                        item.sequence
                    ));
                    break 'pages;
                }
                let key = item.ordering_key.as_deref().filter(|_| ordered);
                let processed = if item.gone().is_some() {
                    let settled = settle_gone(store, item.event_id.as_str()).await?;
                    if settled {
                        report.gone += 1;
                    } else {
                        // Someone holds it right now: its key's later events wait behind it.
                        report.waiting += 1;
                        if let Some(key) = key {
                            blocked.insert(key.to_owned());
                        }
                    }
                    settled
                } else if store
                    .record(item.event_id.as_str())
                    .await?
                    .is_some_and(|r| r.status == EventStatus::Done)
                {
                    report.already += 1;
                    true
                } else if key.is_some_and(|k| blocked.contains(k)) {
                    report.waiting += 1;
                    false
                } else {
                    let request = Request::of(endpoint_id, item, &self.inner.mark);
                    let refused = match deliver.deliver(request).await {
                        Ok(status) if (200..300).contains(&status) => None,
                        Ok(status) => Some(format!(
                            "the handler answered {status} to event {} (number {})",
                            item.event_id, item.sequence
                        )),
                        Err(e) => Some(format!("delivering event {}: {e}", item.event_id)),
                    };
                    match refused {
                        None => {
                            report.recovered += 1;
                            true
                        }
                        Some(why) => {
                            report.stopped.get_or_insert(why);
                            if !ordered {
                                break 'pages;
                            }
                            if let Some(key) = key {
                                blocked.insert(key.to_owned());
                            }
                            false
                        }
                    }
                };
                cursor = item.sequence;
                contiguous &= processed;
                if contiguous {
                    report.checkpoint = cursor;
                    at_checkpoint = Some(item.event_id.to_string());
                }
            }
            if page.items.is_empty()
                || cursor >= page.latest
                || cursor.saturating_sub(report.checkpoint) >= ORDERED_LOOKAHEAD
            {
                break;
            }
        }
        states.no_reset(endpoint_id);
        if report.checkpoint > start || (stored.event_id.is_none() && at_checkpoint.is_some()) {
            report.checkpoint = store
                .advance_checkpoint(endpoint_id, report.checkpoint, at_checkpoint.as_deref())
                .await?
                .sequence;
        }
        if ordered {
            store.release_processed().await?;
            let held = store.held_count(endpoint_id).await?;
            let oldest = store.held_oldest_age(endpoint_id).await?;
            states.held(endpoint_id, held, oldest);
        }
        if report.recovered > 0 || report.gone > 0 || report.stopped.is_some() || report.reset {
            tracing::info!(
                target: "kxp_catchup", endpoint_id, checkpoint = report.checkpoint,
                recovered = report.recovered, already = report.already, waiting = report.waiting,
                gone = report.gone,
                reset = report.reset, stopped = report.stopped.as_deref().unwrap_or(""),
                "caught up"
            );
        }
        Ok(report)
    }
}

/// Records the event of a gone item (its payload erased or expired on the sender) as done in
/// dedup, as if processed: false while another caller holds it (the next catch-up settles it).
pub(crate) async fn settle_gone(store: &Store, event_id: &str) -> Result<bool, StoreError> {
    match store.claim(event_id, GONE_LEASE).await? {
        Claim::Claimed => {
            store.complete(event_id).await?;
            Ok(true)
        }
        Claim::AlreadyDone => Ok(true),
        Claim::InProgress { .. } => Ok(false),
    }
}

/// How long settling a gone item holds its event id: two statements.
const GONE_LEASE: std::time::Duration = std::time::Duration::from_secs(30);

/// What the catch-up's task is told.
enum Signal {
    /// A delivery of the endpoint with this number was answered 2xx.
    Hint(String, u64),
    /// Ordered mode held a delivery of the endpoint: its turn may have come.
    Held(String),
}

/// Logs a store failure of ordered mode's hold: the delivery is answered 503.
fn unavailable(event_id: &str, error: &StoreError) -> Received {
    tracing::warn!(
        target: "kxp_catchup", event_id, error = %error, kind = error.kind(),
        "ordered mode cannot hold a delivery; answered 503"
    );
    Received::Unavailable
}

/// What the task knows of one endpoint: the numbers the hints showed beyond `floor`
/// (everything up to it is seen or checkpointed), when it is to be read from the feed, and in
/// ordered mode how long to wait before reading again while events stay held.
struct Hints {
    floor: u64,
    seen: BTreeSet<u64>,
    due: Option<Instant>,
    retry: Duration,
}

impl Hints {
    fn new(floor: u64) -> Hints {
        Hints {
            floor,
            seen: BTreeSet::new(),
            due: None,
            retry: FIRST_RETRY,
        }
    }

    /// Moves the floor over the contiguous numbers seen; a number still above it is a gap, due
    /// `delay` after it was first noticed.
    fn settle(&mut self, delay: Duration) {
        self.seen.retain(|&n| n > self.floor);
        while self.seen.first() == Some(&(self.floor + 1)) {
            self.floor += 1;
            self.seen.pop_first();
        }
        if self.seen.is_empty() {
            self.due = None;
        } else if self.due.is_none() {
            self.due = Some(Instant::now() + delay);
        }
    }
}

async fn run(catch_up: CatchUp, mut signals: mpsc::Receiver<Signal>) {
    let inner = &catch_up.inner;
    let config = &inner.config;
    let store = &inner.store;
    let mut stop = inner.stop.subscribe();
    let mut known: BTreeSet<String> = config.endpoints.iter().cloned().collect();
    match store.checkpoints().await {
        Ok(rows) => known.extend(rows.into_iter().map(|(id, _)| id)),
        Err(e) => {
            tracing::warn!(target: "kxp_catchup", error = %e, "reading the checkpoints failed")
        }
    }
    if catch_up.is_ordered() {
        // What a stopped process held is taken up at once, with the first sweep.
        match store.held_endpoints().await {
            Ok(ids) => known.extend(ids),
            Err(e) => {
                tracing::warn!(target: "kxp_catchup", error = %e, "reading the held events failed")
            }
        }
    }
    let learned_cap = known.len() + MAX_LEARNED_ENDPOINTS;
    let mut endpoints: HashMap<String, Hints> = HashMap::new();
    let mut sweep = Instant::now();
    while !*stop.borrow() {
        let next = endpoints
            .values()
            .filter_map(|h| h.due)
            .fold(sweep, Instant::min);
        tokio::select! {
            _ = stop.changed() => break,
            signal = signals.recv() => {
                let Some(signal) = signal else { break };
                let endpoint_id = match &signal {
                    Signal::Hint(id, _) | Signal::Held(id) => id.clone(),
                };
                if !known.contains(&endpoint_id) {
                    if known.len() >= learned_cap {
                        continue;
                    }
                    known.insert(endpoint_id.clone());
                }
                let hints = match endpoints.get_mut(&endpoint_id) {
                    Some(hints) => hints,
                    None => {
                        let floor = store
                            .checkpoint(&endpoint_id)
                            .await
                            .map_or(0, |c| c.sequence);
                        endpoints.entry(endpoint_id).or_insert(Hints::new(floor))
                    }
                };
                match signal {
                    Signal::Hint(_, sequence) => {
                        hints.seen.insert(sequence);
                        hints.settle(config.delay);
                    }
                    Signal::Held(_) => hints.due = Some(Instant::now()),
                }
            }
            () = tokio::time::sleep_until(next) => {
                let now = Instant::now();
                let due: Vec<String> = if now >= sweep {
                    sweep = now + config.interval;
                    known.iter().cloned().collect()
                } else {
                    endpoints.iter().filter(|(_, h)| h.due.is_some_and(|d| d <= now)).map(|(id, _)| id.clone()).collect()
                };
                for endpoint_id in due {
                    let checkpoint = match catch_up.catch_up(&endpoint_id).await {
                        Ok(report) => report.checkpoint,
                        Err(e) => {
                            tracing::warn!(target: "kxp_catchup", endpoint_id, error = %e, code = e.code(), "catching up failed; tried again later");
                            0
                        }
                    };
                    let held = if catch_up.is_ordered() {
                        store.held_count(&endpoint_id).await.unwrap_or(1)
                    } else {
                        0
                    };
                    let hints = endpoints.entry(endpoint_id).or_insert(Hints::new(checkpoint));
                    hints.floor = hints.floor.max(checkpoint);
                    // A gap still open after a catch-up (the feed did not have it yet, or the
                    // handler refused): look again after another delay.
                    hints.due = None;
                    hints.settle(config.delay);
                    if held == 0 {
                        hints.retry = FIRST_RETRY;
                    } else {
                        // Held events not processed yet: soon again, then less and less often.
                        let again = Instant::now() + hints.retry;
                        hints.due = Some(hints.due.map_or(again, |d| d.min(again)));
                        hints.retry = (hints.retry * 2).min(config.delay.max(FIRST_RETRY));
                    }
                }
            }
        }
    }
}
