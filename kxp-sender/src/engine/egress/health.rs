//! What the sender knows of its egress proxy: up until something shows otherwise (an attempt
//! that could not reach it, a `407`, a failed probe), down until a probe or a tunnel succeeds.
//! The delivery loop claims nothing while it is down; `/healthz` and `/metrics` show it.

use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kxp_api::{EgressProxyHealth, Timestamp};
use tokio::sync::Notify;

/// How long a probe's result stands for the `5xx` answers that ask for one: many endpoints
/// refused at once make one probe, not one each.
const PROBE_STANDS: Duration = Duration::from_secs(5);

#[derive(Debug)]
pub(crate) struct Health {
    up: AtomicBool,
    errors: AtomicU64,
    state: Mutex<State>,
    back: Notify,
}

#[derive(Debug, Default)]
struct State {
    /// Why it is down, or why it last was.
    last_error: Option<String>,
    /// When it last went up or down (Unix ms); `None` while it has never failed.
    since_ms: Option<i64>,
    last_probe: Option<(Instant, Result<(), String>)>,
}

impl Default for Health {
    fn default() -> Health {
        Health {
            up: AtomicBool::new(true),
            errors: AtomicU64::new(0),
            state: Mutex::new(State::default()),
            back: Notify::new(),
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
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut state = self.lock();
        state.last_error = Some(detail.to_owned());
        if self.up.swap(false, Ordering::AcqRel) {
            state.since_ms = Some(crate::model::now_ms());
            tracing::warn!(target: "kxp_sender::egress", error = %detail,
                "the egress proxy failed: deliveries wait for it (no attempt is counted)");
        }
    }

    /// The proxy made a tunnel or passed its probe: up, and the delivery loop is told.
    pub(crate) fn succeeded(&self) {
        if !self.up.swap(true, Ordering::AcqRel) {
            self.lock().since_ms = Some(crate::model::now_ms());
            tracing::info!(target: "kxp_sender::egress", "the egress proxy is back: deliveries resume");
            self.back.notify_waiters();
        }
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
