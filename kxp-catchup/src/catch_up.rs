//! The catch-up itself: when to pull the feed, and how a page is reconciled.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use kxp_dedup::{EventStatus, Store, StoreError};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::deliver::{Deliver, Request};
use crate::feed::{Answer, Credential, FeedClient, FeedError};

/// How long a gap in the hints stays open before the feed is asked: a retry of the missing
/// delivery may still be coming (the sender's first retries come at seconds to minutes).
pub const DEFAULT_DELAY: Duration = Duration::from_secs(60);

/// How often every known endpoint's feed is read after its checkpoint, hints or not: this finds
/// a lost *last* event, which leaves no gap behind it, and everything a restored backup lost.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(5 * 60);

/// Items per feed request.
pub const DEFAULT_PAGE_SIZE: u32 = 100;

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

    /// Catches up `endpoint_id` from the start.
    pub fn endpoint(mut self, endpoint_id: &str) -> CatchUpConfig {
        self.endpoints.push(endpoint_id.to_owned());
        self
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
}

impl CatchUpError {
    /// A stable name, for logs and metrics.
    pub fn code(&self) -> &'static str {
        match self {
            CatchUpError::Feed(e) => e.code(),
            CatchUpError::Store(_) => "store",
            CatchUpError::NoDeliverer => "no_deliverer",
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
    /// (retried at the next catch-up, from it).
    pub stopped: Option<String>,
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
    hints: mpsc::Sender<(String, u64)>,
    receiver: Mutex<Option<mpsc::Receiver<(String, u64)>>>,
    stop: watch::Sender<bool>,
    started: AtomicBool,
    /// One catch-up of an endpoint at a time (the task's, and a direct call's).
    running: tokio::sync::Mutex<()>,
}

impl CatchUp {
    /// A catch-up reading the feed `config` names, with the checkpoint and the dedup records in
    /// `store` (the store the handler's dedup uses: reconciling is by its records).
    pub fn new(config: CatchUpConfig, store: Store) -> Result<CatchUp, FeedError> {
        let feed = FeedClient::new(&config.sender_url, config.credential.clone())?;
        let (hints, receiver) = mpsc::channel(1024);
        Ok(CatchUp {
            inner: Arc::new(Inner {
                config,
                feed,
                store,
                deliver: OnceLock::new(),
                hints,
                receiver: Mutex::new(Some(receiver)),
                stop: watch::channel(false).0,
                started: AtomicBool::new(false),
                running: tokio::sync::Mutex::new(()),
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
            .hints
            .try_send((endpoint_id.to_owned(), sequence));
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

    /// Catches `endpoint_id` up now: reads the feed after its checkpoint, page by page; hands
    /// every item dedup has not recorded as processed to the handler; and moves the checkpoint
    /// over the contiguous prefix that is processed. An item the handler does not take (not
    /// 2xx) stops it there: the checkpoint stays before it, and the next catch-up starts with
    /// it.
    pub async fn catch_up(&self, endpoint_id: &str) -> Result<Report, CatchUpError> {
        let _one = self.inner.running.lock().await;
        let deliver = self
            .inner
            .deliver
            .get()
            .cloned()
            .ok_or(CatchUpError::NoDeliverer)?;
        let store = &self.inner.store;
        let mut report = Report {
            checkpoint: store.checkpoint(endpoint_id).await?,
            ..Report::default()
        };
        loop {
            let page = match self
                .inner
                .feed
                .page(endpoint_id, report.checkpoint, self.inner.config.page_size)
                .await?
            {
                Answer::Purged { earliest } => {
                    let lost = earliest.saturating_sub(report.checkpoint.saturating_add(1));
                    tracing::error!(
                        target: "kxp_catchup", endpoint_id, after = report.checkpoint, earliest, lost,
                        "the sender's retention purged events this receiver never processed: they cannot be recovered"
                    );
                    report.purged += lost;
                    report.checkpoint = store
                        .advance_checkpoint(endpoint_id, earliest.saturating_sub(1))
                        .await?;
                    continue;
                }
                Answer::Page(page) => page,
            };
            let mut last = report.checkpoint;
            for item in &page.items {
                if item.sequence != last.saturating_add(1) {
                    // The feed answers contiguous numbers; anything else is read again later.
                    report.stopped =
                        Some(format!("the feed skipped from {last} to {}", item.sequence));
                    break;
                }
                let done = store
                    .record(item.event_id.as_str())
                    .await?
                    .is_some_and(|r| r.status == EventStatus::Done);
                if done {
                    report.already += 1;
                } else {
                    match deliver.deliver(Request::of(endpoint_id, item)).await {
                        Ok(status) if (200..300).contains(&status) => report.recovered += 1,
                        Ok(status) => {
                            report.stopped = Some(format!(
                                "the handler answered {status} to event {} (number {})",
                                item.event_id, item.sequence
                            ));
                            break;
                        }
                        Err(e) => {
                            report.stopped =
                                Some(format!("delivering event {}: {e}", item.event_id));
                            break;
                        }
                    }
                }
                last = item.sequence;
            }
            if last > report.checkpoint {
                report.checkpoint = store.advance_checkpoint(endpoint_id, last).await?;
            }
            if report.stopped.is_some() || page.items.is_empty() || last >= page.latest {
                break;
            }
        }
        if report.recovered > 0 || report.stopped.is_some() {
            tracing::info!(
                target: "kxp_catchup", endpoint_id, checkpoint = report.checkpoint,
                recovered = report.recovered, already = report.already,
                stopped = report.stopped.as_deref().unwrap_or(""),
                "caught up"
            );
        }
        Ok(report)
    }
}

/// What the hints say of one endpoint: the numbers seen beyond `floor` (everything up to it is
/// seen or checkpointed), and when its open gap is to be closed from the feed.
struct Hints {
    floor: u64,
    seen: BTreeSet<u64>,
    due: Option<Instant>,
}

impl Hints {
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

async fn run(catch_up: CatchUp, mut hints: mpsc::Receiver<(String, u64)>) {
    let inner = &catch_up.inner;
    let config = &inner.config;
    let mut stop = inner.stop.subscribe();
    let mut known: BTreeSet<String> = config.endpoints.iter().cloned().collect();
    match inner.store.checkpoints().await {
        Ok(rows) => known.extend(rows.into_iter().map(|(id, _)| id)),
        Err(e) => {
            tracing::warn!(target: "kxp_catchup", error = %e, "reading the checkpoints failed")
        }
    }
    let learned_cap = known.len() + MAX_LEARNED_ENDPOINTS;
    let mut gaps: HashMap<String, Hints> = HashMap::new();
    let mut sweep = Instant::now();
    while !*stop.borrow() {
        let next = gaps
            .values()
            .filter_map(|h| h.due)
            .fold(sweep, Instant::min);
        tokio::select! {
            _ = stop.changed() => break,
            hint = hints.recv() => {
                let Some((endpoint_id, sequence)) = hint else { break };
                if !known.contains(&endpoint_id) {
                    if known.len() >= learned_cap {
                        continue;
                    }
                    known.insert(endpoint_id.clone());
                }
                let hints = match gaps.get_mut(&endpoint_id) {
                    Some(hints) => hints,
                    None => {
                        let floor = inner.store.checkpoint(&endpoint_id).await.unwrap_or(0);
                        gaps.entry(endpoint_id).or_insert(Hints { floor, seen: BTreeSet::new(), due: None })
                    }
                };
                hints.seen.insert(sequence);
                hints.settle(config.delay);
            }
            () = tokio::time::sleep_until(next) => {
                let now = Instant::now();
                let due: Vec<String> = if now >= sweep {
                    sweep = now + config.interval;
                    known.iter().cloned().collect()
                } else {
                    gaps.iter().filter(|(_, h)| h.due.is_some_and(|d| d <= now)).map(|(id, _)| id.clone()).collect()
                };
                for endpoint_id in due {
                    let checkpoint = match catch_up.catch_up(&endpoint_id).await {
                        Ok(report) => Some(report.checkpoint),
                        Err(e) => {
                            tracing::warn!(target: "kxp_catchup", endpoint_id, error = %e, code = e.code(), "catching up failed; tried again later");
                            None
                        }
                    };
                    if let Some(hints) = gaps.get_mut(&endpoint_id) {
                        hints.floor = hints.floor.max(checkpoint.unwrap_or(0));
                        // Still open after a catch-up (the feed did not have it yet, or the
                        // handler refused): look again after another delay.
                        hints.due = None;
                        hints.settle(config.delay);
                    }
                }
            }
        }
    }
}
