//! What the sender knows of its egress proxy: up until something shows otherwise (an attempt
//! that could not reach it, a `407`, a failed probe), down until a probe or a tunnel succeeds.
//! The delivery loop claims nothing while it is down; `/healthz` and `/metrics` show it.

use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kxp_api::{EgressProxyHealth, Timestamp};
use tokio::sync::Notify;

/// How long a probe's result stands for the failures that ask for one: many endpoints refused
/// at once make one probe, not one each.
const PROBE_STANDS: Duration = Duration::from_secs(5);

/// How recent a tunnel must be to show that the proxy takes the credentials, when there is no
/// probe target to ask.
const TUNNELLED_LATELY: Duration = Duration::from_secs(60);

#[derive(Debug)]
pub(crate) struct Health {
    up: AtomicBool,
    errors: AtomicU64,
    state: Mutex<State>,
    back: Notify,
    /// Held while a probe runs: one at a time.
    probing: tokio::sync::Mutex<()>,
}

#[derive(Debug, Default)]
struct State {
    /// Why it is down, or why it last was.
    last_error: Option<String>,
    /// When it last went up or down (Unix ms); `None` while it has never failed.
    since_ms: Option<i64>,
    last_probe: Option<(Instant, Result<(), String>)>,
    /// When a tunnel last opened.
    last_tunnel: Option<Instant>,
    /// Down because the proxy refused the credentials (a `407` with nothing to say otherwise).
    credentials_refused: bool,
}

impl Default for Health {
    fn default() -> Health {
        Health {
            up: AtomicBool::new(true),
            errors: AtomicU64::new(0),
            state: Mutex::new(State::default()),
            back: Notify::new(),
            probing: tokio::sync::Mutex::new(()),
        }
    }
}

impl Health {
    /// Whether deliveries should go out now.
    pub(crate) fn is_up(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }

    /// The proxy failed (`detail` says how, never with its password): counted, and down from
    /// now on until it succeeds again.
    pub(crate) fn failed(&self, detail: &str) {
        self.fail(detail, false);
    }

    /// The proxy answered `407` and nothing shows the credentials work: [`Self::failed`], until
    /// a tunnel opens (a connection to the proxy proves nothing here).
    pub(crate) fn refused_credentials(&self, detail: &str) {
        self.fail(detail, true);
    }

    fn fail(&self, detail: &str, credentials: bool) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut state = self.lock();
        state.last_error = Some(detail.to_owned());
        state.credentials_refused = credentials;
        if self.up.swap(false, Ordering::AcqRel) {
            state.since_ms = Some(crate::model::now_ms());
            tracing::warn!(target: "kxp_sender::egress", error = %detail,
                "the egress proxy failed: deliveries wait for it (no attempt is counted)");
        }
    }

    /// The proxy passed its probe (or is given another chance): up, and the delivery loop is
    /// told.
    pub(crate) fn succeeded(&self) {
        let mut state = self.lock();
        state.credentials_refused = false;
        if !self.up.swap(true, Ordering::AcqRel) {
            state.since_ms = Some(crate::model::now_ms());
            drop(state);
            tracing::info!(target: "kxp_sender::egress", "the egress proxy is back: deliveries resume");
            self.back.notify_waiters();
        }
    }

    /// A tunnel opened: the proxy works, credentials included.
    pub(crate) fn tunnelled(&self) {
        self.lock().last_tunnel = Some(crate::model::instant());
        self.succeeded();
    }

    /// Whether a tunnel opened within [`TUNNELLED_LATELY`].
    pub(super) fn tunnelled_lately(&self) -> bool {
        self.lock()
            .last_tunnel
            .is_some_and(|at| at.elapsed() < TUNNELLED_LATELY)
    }

    /// Whether it is down because the credentials were refused.
    pub(super) fn credentials_refused(&self) -> bool {
        !self.is_up() && self.lock().credentials_refused
    }

    /// Waits for the probe running now, if any; probing while this is held is the holder's.
    pub(super) async fn probing(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.probing.lock().await
    }

    /// Returns once the proxy is back (or at once if it is up).
    pub(crate) async fn back(&self) {
        let notified = self.back.notified();
        if self.is_up() {
            return;
        }
        notified.await;
    }

    /// The last probe's result, while it stands.
    pub(super) fn recent_probe(&self) -> Option<Result<(), String>> {
        let state = self.lock();
        let (at, result) = state.last_probe.as_ref()?;
        (at.elapsed() < PROBE_STANDS).then(|| result.clone())
    }

    /// Records a probe's result, and what it says of the proxy.
    pub(super) fn probed(&self, result: &Result<(), String>) {
        self.lock().last_probe = Some((crate::model::instant(), result.clone()));
        match result {
            Ok(()) => self.succeeded(),
            Err(why) => self.failed(why),
        }
    }

    /// What `/healthz` shows, for the proxy `proxy` (its URL without the password).
    pub(crate) fn view(&self, proxy: String) -> EgressProxyHealth {
        let state = self.lock();
        EgressProxyHealth {
            proxy,
            state: if self.is_up() { "up" } else { "proxy_error" }.to_owned(),
            since: state.since_ms.map(Timestamp::from_unix_ms),
            last_error: state.last_error.clone(),
        }
    }

    /// Appends the proxy's samples to `/metrics`.
    pub(crate) fn render(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "# HELP kxp_egress_proxy_up Whether the egress proxy is taking deliveries (0: proxy_error, deliveries wait).\n\
             # TYPE kxp_egress_proxy_up gauge\nkxp_egress_proxy_up {}",
            u8::from(self.is_up())
        );
        let _ = writeln!(
            out,
            "# HELP kxp_egress_proxy_errors_total Requests (attempts, challenges, token requests, probes) that failed at the egress proxy: unreachable, 407, or failing its probe. None of them counts as an endpoint's attempt.\n\
             # TYPE kxp_egress_proxy_errors_total counter\nkxp_egress_proxy_errors_total {}",
            self.errors.load(Ordering::Relaxed)
        );
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}
