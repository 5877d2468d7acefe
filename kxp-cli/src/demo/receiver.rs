//! The demo's receiver: a real kxp-axum app whose handlers process through kxp-dedup on
//! SQLite, made unreliable on purpose.
//!
//! - For [`NOT_LISTENING_FOR`] its port is bound but not listening: connections are refused.
//! - Until [`STARTING_UNTIL`] it answers every request 503, as a service still starting up.
//! - Then the payments route is flaky, per [`plan`]: some 500s before processing, some slow
//!   answers, and some acknowledgements lost *after* processing (a 500, or a 200 that comes
//!   after the sender's timeout). The sender retries those events although they were
//!   processed, and dedup answers the retry `duplicate` without running the handler again.
//! - A few payments ([`rejected`]) are *rejected*: the shop's handler answers them 500 on
//!   every try (a bug that only their data hits) until [`FlakyReceiver::accept_rejected`].
//!   They are few and far between, so the endpoint's other deliveries keep succeeding and its
//!   circuit stays closed: their schedule runs out, they go dead, and the demo replays them
//!   once the shop is fixed.
//!   Payments outside the run ([`Script::flaky_below`] and up, `--keep-running`) are answered
//!   without faults, apart from those the demo rejects on purpose ([`FlakyReceiver::reject`]).
//! - The refunds route answers 500 to everything until [`FlakyReceiver::fix_refunds`]: its
//!   circuit opens and its deliveries wait, held, until the demo fixes it.
//! - `/webhooks/ops` is the merchant's on-call hook: it verifies the sender's operational
//!   webhooks with the account's ops secret and records each notice once.
//!
//! The handlers' side effect is one row per processing in a ledger table written in the same
//! transaction as the dedup mark (`process_in_transaction`). The table has no unique
//! constraint, so processing an event twice would show as two rows: it is the evidence the
//! demo's verdict reads.

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use http::StatusCode;
use kxp_axum::dedup::{self, Handled, Outcome, Store, Tx};
use kxp_axum::{VerifiedEvent, VerifyLayer};
use kxp_verify::Verifier;
use serde::Deserialize;
use tokio::net::TcpSocket;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How long the port refuses connections.
pub(super) const NOT_LISTENING_FOR: Duration = Duration::from_millis(1200);

/// Until when (from the start) every request is answered 503.
///
/// With the demo's schedule the 7th try of a delivery comes at least 3 s after its first
/// (4 s − 25 % jitter), so every event has three tries or more left once the receiver is up,
/// and [`plan`] injects at most [`MAX_FAULTS_PER_EVENT`] faults per event: the flaky endpoint
/// never makes a delivery dead.
pub(super) const STARTING_UNTIL: Duration = Duration::from_millis(2800);

/// The endpoints' per-attempt timeout (the sender gives up on an answer after this).
pub(super) const ENDPOINT_TIMEOUT: Duration = Duration::from_millis(1000);

/// Faults are injected only into the first this-many flaky-phase requests of an event.
pub(super) const MAX_FAULTS_PER_EVENT: u32 = 2;

/// Where the receiver is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// The port is closed: connection refused.
    NotListening,
    /// Listening, answering 503.
    Starting,
    /// Answering, unreliably.
    Flaky,
}

impl Phase {
    /// The phase `elapsed` after the start.
    pub(super) fn at(elapsed: Duration) -> Phase {
        if elapsed < NOT_LISTENING_FOR {
            Phase::NotListening
        } else if elapsed < STARTING_UNTIL {
            Phase::Starting
        } else {
            Phase::Flaky
        }
    }

    /// A few words for the progress display.
    pub(super) fn describe(self) -> &'static str {
        match self {
            Phase::NotListening => "down (connection refused)",
            Phase::Starting => "starting (503)",
            Phase::Flaky => "flaky",
        }
    }
}

/// What the flaky payments route does wrong with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fault {
    /// Answer 500 without processing.
    Fail,
    /// Process, then answer 500: the acknowledgement is lost.
    DropAck,
    /// Process, then answer only after the sender's timeout.
    LateAck,
}

/// How the payments route answers one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Plan {
    /// Wait this long before anything else (well under the timeout).
    pub delay: Duration,
    /// The fault to inject, if any.
    pub fault: Option<Fault>,
}

/// The plan for the `nth` (0-based) flaky-phase request carrying the event with sequence number
/// `seq`: a pure function of the seed, so `--seed` repeats the pattern whatever the timing.
///
/// About 15 % of requests are slow (150–600 ms); about 24 % of the first two requests of an
/// event get a fault (14 % a plain 500, 10 % a lost acknowledgement); later requests never do.
/// Event 0 always loses its first acknowledgement, so even a short run shows dedup at work.
pub(super) fn plan(seed: u64, seq: u64, nth: u32) -> Plan {
    let base = mix(seed ^ mix(seq ^ mix(u64::from(nth))));
    let delay = if unit(mix(base ^ 1)) < 0.15 {
        Duration::from_millis(150 + mix(base ^ 2) % 450)
    } else {
        Duration::ZERO
    };
    let fault = if nth >= MAX_FAULTS_PER_EVENT {
        None
    } else if seq == 0 && nth == 0 {
        Some(Fault::DropAck)
    } else {
        match unit(mix(base ^ 3)) {
            r if r < 0.14 => Some(Fault::Fail),
            r if r < 0.20 => Some(Fault::DropAck),
            r if r < 0.24 => Some(Fault::LateAck),
            _ => None,
        }
    };
    Plan { delay, fault }
}

/// The payments [`rejected`] may pick: each with this chance, in order, up to [`MAX_REJECTED`].
pub(super) const REJECTED_SHARE: f64 = 0.05;

/// At most this many payments are rejected. The outage's hold releases them together, so their
/// tries come in step; at the end of a run, with no other delivery succeeding in between, the
/// tries of three in step still make fewer failures in a row than open the circuit.
pub(super) const MAX_REJECTED: usize = 3;

/// The payments the shop rejects on every try until it is fixed, among the events with a
/// sequence number below `window` (the demo keeps the window clear of the run's end, so the
/// rejected deliveries' retries are spread among other deliveries' successes): event 1 (so even
/// a short run shows the dead-letter path), then payments picked with [`REJECTED_SHARE`] each,
/// a pure function of the seed, up to [`MAX_REJECTED`] in all. Never event 0: it is the first
/// probe after the outage, and a probe that can only fail would keep the circuit open.
pub(super) fn rejected(seed: u64, window: u64) -> BTreeSet<u64> {
    let payment = |seq: u64| seq % 10 != 9;
    (1..window.max(2))
        .filter(|&seq| payment(seq))
        .filter(|&seq| seq == 1 || unit(mix(seed ^ mix(seq ^ 0x5EED_D00D))) < REJECTED_SHARE)
        .take(MAX_REJECTED)
        .collect()
}

/// SplitMix64's finalizer: a well-mixed 64-bit hash.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A uniform draw in `0.0..1.0` from 53 bits of `x`.
fn unit(x: u64) -> f64 {
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// What the receiver saw and answered, counted as it happens.
#[derive(Debug, Default)]
struct Counters {
    requests: AtomicU64,
    unavailable: AtomicU64,
    injected: AtomicU64,
    acks_lost: AtomicU64,
    broken: AtomicU64,
    rejected: AtomicU64,
    processed: AtomicU64,
    duplicates: AtomicU64,
}

/// A copy of the counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Counts {
    /// Requests that reached the receiver (every answer below, and every 200).
    pub requests: u64,
    /// 503s while starting.
    pub unavailable: u64,
    /// 500s before processing, on the flaky route.
    pub injected: u64,
    /// Events processed whose answer was then lost (500 or too late).
    pub acks_lost: u64,
    /// 500s of the refunds route before its fix.
    pub broken: u64,
    /// 500s to rejected payments.
    pub rejected: u64,
    /// Handler runs that committed (dedup `processed`).
    pub processed: u64,
    /// Deliveries of already-processed events, answered 200 without running the handler.
    pub duplicates: u64,
}

struct Shared {
    store: Store,
    seed: u64,
    /// Payments with a sequence number from this on are answered without faults.
    flaky_below: u64,
    started: Instant,
    refunds_fixed: AtomicBool,
    /// The sequence numbers of the payments answered 500 on every try, until accepted.
    rejecting: Mutex<BTreeSet<u64>>,
    counters: Counters,
    /// Why the serving task ended early, if it did.
    failure: Mutex<Option<String>>,
    /// Per event id, how many of its requests reached the flaky route.
    flaky_requests: Mutex<HashMap<String, u32>>,
    /// The operational notices received, each once.
    notices: Mutex<Vec<Notice>>,
}

/// An operational webhook the sender sent about one of the demo's endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Notice {
    /// The notice's event id.
    pub id: String,
    /// `endpoint.circuit_opened` or `endpoint.disabled`.
    pub kind: String,
    /// The endpoint it is about.
    pub endpoint_id: String,
}

/// The part of an operational notice's `data` the demo reads.
#[derive(Debug, Deserialize)]
struct NoticeData {
    endpoint_id: String,
}

/// The part of an event's `data` the handlers read.
#[derive(Debug, Deserialize)]
struct Order {
    seq: u64,
    amount: i64,
}

/// The secrets the receiver verifies with: one per endpoint, and the account's ops secret.
pub(super) struct Secrets<'a> {
    /// The payments endpoint's.
    pub payments: &'a str,
    /// The refunds endpoint's.
    pub refunds: &'a str,
    /// The account's, for operational webhooks.
    pub ops: &'a str,
}

/// How the receiver misbehaves, decided before it starts.
pub(super) struct Script {
    /// The seed of the flaky pattern ([`plan`]).
    pub seed: u64,
    /// The run's events: payments from this sequence number on are never flaky.
    pub flaky_below: u64,
    /// The payments rejected on every try until [`FlakyReceiver::accept_rejected`].
    pub rejected: BTreeSet<u64>,
}

/// The port, bound but not listening yet.
pub(super) struct Reserved {
    socket: TcpSocket,
    addr: SocketAddr,
}

impl Reserved {
    /// Binds a free port on 127.0.0.1 without listening: connections to it are refused, and
    /// no other process can take it meanwhile.
    pub(super) fn new() -> Result<Reserved, String> {
        let socket =
            TcpSocket::new_v4().map_err(|e| format!("cannot open the receiver's socket: {e}"))?;
        socket
            .bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .map_err(|e| format!("cannot bind the receiver's port: {e}"))?;
        let addr = socket
            .local_addr()
            .map_err(|e| format!("cannot read the receiver's port: {e}"))?;
        Ok(Reserved { socket, addr })
    }

    /// The address.
    pub(super) fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// The running receiver.
pub(super) struct FlakyReceiver {
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    task: JoinHandle<Result<(), String>>,
}

impl FlakyReceiver {
    /// Opens the dedup store and the ledger at `database_url`, and serves the two routes (and
    /// the merchant's operational webhook route) on `reserved` once [`NOT_LISTENING_FOR`] has
    /// passed. The phases count from the return.
    pub(super) async fn start(
        reserved: Reserved,
        database_url: &str,
        script: Script,
        secrets: Secrets<'_>,
    ) -> Result<FlakyReceiver, String> {
        let store = Store::connect(database_url)
            .await
            .map_err(|e| format!("cannot open the receiver's dedup store: {e}"))?;
        let pool = store
            .sqlite_pool()
            .ok_or("the receiver's store is not SQLite")?;
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS demo_ledger (
                 row_id     INTEGER PRIMARY KEY AUTOINCREMENT,
                 event_id   TEXT NOT NULL,
                 event_type TEXT NOT NULL,
                 amount     INTEGER NOT NULL
             )",
        )
        .execute(pool)
        .await
        .map_err(|e| format!("cannot create the receiver's ledger: {e}"))?;

        let verify = |secret: &str| {
            Verifier::from_secret_list(secret)
                .map(|v| VerifyLayer::new(kxp_axum::Receiver::new(v)))
                .map_err(|e| format!("the endpoint secret does not load: {e}"))
        };
        let shared = Arc::new(Shared {
            store,
            seed: script.seed,
            flaky_below: script.flaky_below,
            started: Instant::now(),
            refunds_fixed: AtomicBool::new(false),
            rejecting: Mutex::new(script.rejected),
            counters: Counters::default(),
            failure: Mutex::new(None),
            flaky_requests: Mutex::new(HashMap::new()),
            notices: Mutex::new(Vec::new()),
        });
        let app = Router::new()
            .route(
                "/webhooks/payments",
                post(payments).layer(verify(secrets.payments)?),
            )
            .route(
                "/webhooks/refunds",
                post(refunds).layer(verify(secrets.refunds)?),
            )
            .route("/webhooks/ops", post(ops).layer(verify(secrets.ops)?))
            .layer(middleware::from_fn_with_state(shared.clone(), front_door))
            .with_state(shared.clone());

        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(serve(reserved, app, shared.clone(), stopped));
        Ok(FlakyReceiver { shared, stop, task })
    }

    /// The operational notices received so far, in order.
    pub(super) fn notices(&self) -> Vec<Notice> {
        lock(&self.shared.notices).clone()
    }

    /// When the phases started.
    pub(super) fn started(&self) -> Instant {
        self.shared.started
    }

    /// The counters now.
    pub(super) fn counts(&self) -> Counts {
        let c = &self.shared.counters;
        let get = |n: &AtomicU64| n.load(Ordering::Relaxed);
        Counts {
            requests: get(&c.requests),
            unavailable: get(&c.unavailable),
            injected: get(&c.injected),
            acks_lost: get(&c.acks_lost),
            broken: get(&c.broken),
            rejected: get(&c.rejected),
            processed: get(&c.processed),
            duplicates: get(&c.duplicates),
        }
    }

    /// Repairs the refunds route: from now on it processes like the payments route, without
    /// faults.
    pub(super) fn fix_refunds(&self) {
        self.shared.refunds_fixed.store(true, Ordering::Relaxed);
    }

    /// Rejects the payments with these sequence numbers on every try from now on, until
    /// [`accept_rejected`](Self::accept_rejected).
    pub(super) fn reject(&self, seqs: impl IntoIterator<Item = u64>) {
        lock(&self.shared.rejecting).extend(seqs);
    }

    /// Repairs the shop's handler: the payments it rejected are accepted from now on (their
    /// replays go through). Returns how many were rejected.
    pub(super) fn accept_rejected(&self) -> usize {
        std::mem::take(&mut *lock(&self.shared.rejecting)).len()
    }

    /// Why the receiver stopped serving, if it did before [`stop`](Self::stop) (it only does
    /// on an error).
    pub(super) fn failure(&self) -> Option<String> {
        if !self.task.is_finished() {
            return None;
        }
        Some(
            lock(&self.shared.failure)
                .clone()
                .unwrap_or_else(|| "the receiver stopped unexpectedly".to_owned()),
        )
    }

    /// Every event id in the ledger, with how many times its handler's effect was committed.
    pub(super) async fn ledger(&self) -> Result<Vec<(String, u64)>, String> {
        let pool = self
            .shared
            .store
            .sqlite_pool()
            .ok_or("the receiver's store is not SQLite")?;
        let rows: Vec<(String, i64)> =
            sqlx::query_as("SELECT event_id, COUNT(*) FROM demo_ledger GROUP BY event_id")
                .fetch_all(pool)
                .await
                .map_err(|e| format!("cannot read the receiver's ledger: {e}"))?;
        Ok(rows
            .into_iter()
            .map(|(id, n)| (id, u64::try_from(n).unwrap_or(0)))
            .collect())
    }

    /// Stops serving (answers in progress get a second to finish) and closes the store; returns
    /// the serving task's error, if it had one.
    pub(super) async fn stop(self) -> Result<(), String> {
        let _ = self.stop.send(true);
        let mut task = self.task;
        let result = match tokio::time::timeout(Duration::from_secs(2), &mut task).await {
            Ok(Ok(result)) => result,
            Ok(Err(e)) => Err(format!("the receiver task failed: {e}")),
            Err(_) => {
                task.abort();
                Ok(())
            }
        };
        self.shared.store.close().await;
        result
    }
}

/// Listens once [`NOT_LISTENING_FOR`] has passed, and serves until `stopped`.
async fn serve(
    reserved: Reserved,
    app: Router,
    shared: Arc<Shared>,
    mut stopped: watch::Receiver<bool>,
) -> Result<(), String> {
    let listen_at = tokio::time::Instant::from_std(shared.started + NOT_LISTENING_FOR);
    tokio::select! {
        () = tokio::time::sleep_until(listen_at) => {}
        _ = stopped.wait_for(|stop| *stop) => return Ok(()),
    }
    let served = match reserved.socket.listen(1024) {
        Ok(listener) => axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            })
            .await
            .map_err(|e| format!("the receiver stopped: {e}")),
        Err(e) => Err(format!(
            "the receiver cannot listen on {}: {e}",
            reserved.addr
        )),
    };
    if let Err(e) = &served {
        *lock(&shared.failure) = Some(e.clone());
    }
    served
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// In front of both routes: counts requests, and answers 503 while "starting up".
async fn front_door(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    bump(&shared.counters.requests);
    if Phase::at(shared.started.elapsed()) != Phase::Flaky {
        bump(&shared.counters.unavailable);
        return (StatusCode::SERVICE_UNAVAILABLE, "starting up").into_response();
    }
    next.run(request).await
}

/// The flaky route.
async fn payments(State(shared): State<Arc<Shared>>, event: VerifiedEvent<Order>) -> Response {
    let nth = {
        let mut seen = lock(&shared.flaky_requests);
        let count = seen.entry(event.id().to_owned()).or_insert(0);
        *count += 1;
        *count - 1
    };
    let seq = event.data().seq;
    if lock(&shared.rejecting).contains(&seq) {
        bump(&shared.counters.rejected);
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            "the shop's handler rejects this payment: a bug its data hits, nothing was processed",
        )
            .into_response();
    }
    if seq >= shared.flaky_below {
        return process(&shared, &event).await.into_response();
    }
    let plan = plan(shared.seed, seq, nth);
    if !plan.delay.is_zero() {
        tokio::time::sleep(plan.delay).await;
    }
    if plan.fault == Some(Fault::Fail) {
        bump(&shared.counters.injected);
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            "injected failure: nothing was processed",
        )
            .into_response();
    }
    let handled = process(&shared, &event).await;
    if handled.0 == Outcome::Processed {
        match plan.fault {
            Some(Fault::DropAck) => {
                bump(&shared.counters.acks_lost);
                return (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "injected failure after processing: the acknowledgement is lost",
                )
                    .into_response();
            }
            Some(Fault::LateAck) => {
                bump(&shared.counters.acks_lost);
                tokio::time::sleep(ENDPOINT_TIMEOUT + Duration::from_millis(300)).await;
            }
            Some(Fault::Fail) | None => {}
        }
    }
    handled.into_response()
}

/// The broken route, until it is fixed.
async fn refunds(State(shared): State<Arc<Shared>>, event: VerifiedEvent<Order>) -> Response {
    if !shared.refunds_fixed.load(Ordering::Relaxed) {
        bump(&shared.counters.broken);
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            "the refunds handler has a bug: every request fails until it is fixed",
        )
            .into_response();
    }
    process(&shared, &event).await.into_response()
}

/// The merchant's operational webhook: verified with the account's ops secret like any
/// delivery, and recorded once per notice (a retried notice has the same id).
async fn ops(State(shared): State<Arc<Shared>>, event: VerifiedEvent<NoticeData>) -> StatusCode {
    let mut notices = lock(&shared.notices);
    if !notices.iter().any(|n| n.id == event.id()) {
        notices.push(Notice {
            id: event.id().to_owned(),
            kind: event.event_type().to_owned(),
            endpoint_id: event.data().endpoint_id.clone(),
        });
    }
    StatusCode::OK
}

/// Exactly once: the ledger row and the dedup mark commit together.
async fn process(shared: &Shared, event: &VerifiedEvent<Order>) -> Handled {
    let (id, kind, amount) = (
        event.id().to_owned(),
        event.event_type().to_owned(),
        event.data().amount,
    );
    let handled =
        dedup::process_in_transaction(&shared.store, event, |tx| record(tx, id, kind, amount))
            .await;
    match handled.0 {
        Outcome::Processed => bump(&shared.counters.processed),
        Outcome::Duplicate => bump(&shared.counters.duplicates),
        _ => {}
    }
    handled
}

/// The handler's side effect: one ledger row, in the dedup transaction.
async fn record(mut tx: Tx, id: String, kind: String, amount: i64) -> Result<Tx, String> {
    let conn = tx.sqlite().ok_or("the ledger is on SQLite")?;
    sqlx::query("INSERT INTO demo_ledger (event_id, event_type, amount) VALUES (?1, ?2, ?3)")
        .bind(id)
        .bind(kind)
        .bind(amount)
        .execute(&mut *conn)
        .await
        .map_err(|e| e.to_string())?;
    Ok(tx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_follow_the_clock() {
        assert_eq!(Phase::at(Duration::ZERO), Phase::NotListening);
        assert_eq!(Phase::at(NOT_LISTENING_FOR), Phase::Starting);
        assert_eq!(Phase::at(STARTING_UNTIL), Phase::Flaky);
    }

    #[test]
    fn plans_are_reproducible_and_never_fault_after_the_cap() {
        for seq in 0..2000 {
            for nth in 0..5 {
                assert_eq!(plan(7, seq, nth), plan(7, seq, nth));
                let p = plan(7, seq, nth);
                assert!(p.delay < ENDPOINT_TIMEOUT, "{p:?}");
                if nth >= MAX_FAULTS_PER_EVENT {
                    assert_eq!(p.fault, None, "seq {seq} nth {nth}");
                }
            }
        }
        assert_eq!(plan(1, 0, 0).fault, Some(Fault::DropAck));
        assert_ne!(
            (0..50).map(|s| plan(1, s, 0)).collect::<Vec<_>>(),
            (0..50).map(|s| plan(2, s, 0)).collect::<Vec<_>>(),
            "the seed changes the pattern"
        );
    }

    #[test]
    fn a_few_payments_are_rejected_early_in_the_run_and_never_the_first_probe() {
        assert_eq!(rejected(7, 0), BTreeSet::from([1]));
        assert_eq!(rejected(7, 100), rejected(7, 100));
        for seed in 0..200 {
            let picked = rejected(seed, 100);
            assert!(picked.contains(&1) && !picked.contains(&0), "{picked:?}");
            assert!(picked.len() <= MAX_REJECTED, "{picked:?}");
            assert!(picked.iter().all(|seq| seq % 10 != 9 && *seq < 100));
        }
        let full = (0..200).filter(|s| rejected(*s, 100).len() == MAX_REJECTED);
        assert!(
            full.count() > 100,
            "a window of 100 mostly has enough candidates"
        );
        assert_ne!(
            rejected(1, 1000),
            rejected(2, 1000),
            "the seed changes the pick"
        );
    }

    #[test]
    fn fault_rates_are_about_as_documented() {
        let n = 20_000;
        let firsts: Vec<Plan> = (1..=n).map(|seq| plan(42, seq, 0)).collect();
        let share =
            |f: &dyn Fn(&Plan) -> bool| firsts.iter().filter(|p| f(p)).count() as f64 / n as f64;
        let fail = share(&|p| p.fault == Some(Fault::Fail));
        let lost = share(&|p| matches!(p.fault, Some(Fault::DropAck | Fault::LateAck)));
        let slow = share(&|p| !p.delay.is_zero());
        assert!((0.12..0.16).contains(&fail), "{fail}");
        assert!((0.08..0.12).contains(&lost), "{lost}");
        assert!((0.13..0.17).contains(&slow), "{slow}");
    }
}
