//! What each source's consumer reports, for `/healthz` and `/metrics`: its state, its lag,
//! and its messages counted by outcome and by [`RejectReason`].

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use kxp_api::SourceHealth;

/// Why a message was rejected to the broker's dead-letter path: stable names, the `reason`
/// label of `kxp_ingest_rejected_total` and the `Kxp-Reject-Reason` of NATS's rejections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RejectReason {
    /// The body is not JSON.
    InvalidJson,
    /// JSON, but not an event (`type` missing, a field of the wrong kind or out of bounds).
    InvalidRequest,
    /// `data` does not fit the schema registered for its type and version.
    SchemaViolation,
    /// `data` is over the server's limit.
    PayloadTooLarge,
    /// The account named (by the URL or the header) does not exist.
    UnknownAccount,
    /// The source has no account and the message names none.
    AccountRequired,
    /// The message names an account outside the source's `account_header=allow:` list.
    AccountNotAllowed,
    /// The message's id was used before with another body.
    IdempotencyKeyReused,
}

impl RejectReason {
    /// Every reason, in the order of the metric's lines.
    pub(crate) const ALL: [RejectReason; 8] = [
        RejectReason::InvalidJson,
        RejectReason::InvalidRequest,
        RejectReason::SchemaViolation,
        RejectReason::PayloadTooLarge,
        RejectReason::UnknownAccount,
        RejectReason::AccountRequired,
        RejectReason::AccountNotAllowed,
        RejectReason::IdempotencyKeyReused,
    ];

    /// The stable name.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RejectReason::InvalidJson => "invalid_json",
            RejectReason::InvalidRequest => "invalid_request",
            RejectReason::SchemaViolation => "schema_violation",
            RejectReason::PayloadTooLarge => "payload_too_large",
            RejectReason::UnknownAccount => "unknown_account",
            RejectReason::AccountRequired => "account_required",
            RejectReason::AccountNotAllowed => "account_not_allowed",
            RejectReason::IdempotencyKeyReused => "idempotency_key_reused",
        }
    }
}

/// Where a source's consumer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SourceState {
    /// Connecting (at start, and again after a failed session).
    Connecting,
    /// Consuming.
    Up,
    /// The last session failed; waiting before connecting again.
    Down,
}

/// What one source's consumer reports; shared with `/healthz` and `/metrics`.
#[derive(Debug)]
pub(crate) struct SourceStatus {
    /// [`IngestSource::name`](super::IngestSource::name).
    pub name: String,
    state: Mutex<(SourceState, Option<String>)>,
    /// Messages waiting in the broker; `u64::MAX` until read.
    lag: AtomicU64,
    created: AtomicU64,
    replayed: AtomicU64,
    reconnects: AtomicU64,
    rejected: [AtomicU64; RejectReason::ALL.len()],
}

impl SourceStatus {
    /// A source that has not connected yet.
    pub(crate) fn new(name: String) -> SourceStatus {
        SourceStatus {
            name,
            state: Mutex::new((SourceState::Connecting, None)),
            lag: AtomicU64::new(u64::MAX),
            created: AtomicU64::default(),
            replayed: AtomicU64::default(),
            reconnects: AtomicU64::default(),
            rejected: Default::default(),
        }
    }

    fn set(&self, state: SourceState, error: Option<String>) {
        let mut guard = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        guard.0 = state;
        if error.is_some() || state == SourceState::Up {
            guard.1 = error;
        }
    }

    /// Connecting again after a failed session.
    pub(crate) fn connecting(&self) {
        self.set(SourceState::Connecting, None);
    }

    /// Consuming.
    #[cfg_attr(
        not(any(test, feature = "amqp", feature = "nats")),
        expect(dead_code, reason = "no broker in this build")
    )]
    pub(crate) fn up(&self) {
        self.set(SourceState::Up, None);
    }

    /// Whether the source is consuming: asked when a session ends, to know whether it got
    /// that far (the next failure's wait then starts from the first).
    pub(crate) fn is_up(&self) -> bool {
        let guard = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        guard.0 == SourceState::Up
    }

    /// The source will not start, for `reason` ([`IngestSource::refusal`](super::IngestSource::refusal)): down for good,
    /// with no reconnect to count.
    pub(crate) fn refused(&self, reason: String) {
        self.set(SourceState::Down, Some(reason));
    }

    /// A session failed with `error` (already through
    /// [`redact_passwords`](crate::store::redact_passwords)).
    pub(crate) fn down(&self, error: String) {
        self.reconnects.fetch_add(1, Ordering::Relaxed);
        self.set(SourceState::Down, Some(error));
    }

    /// The broker's count of waiting messages, as just read.
    #[cfg_attr(
        not(any(test, feature = "amqp", feature = "nats")),
        expect(dead_code, reason = "no broker in this build")
    )]
    pub(crate) fn lag(&self, waiting: u64) {
        self.lag.store(waiting.min(u64::MAX - 1), Ordering::Relaxed);
    }

    /// A message became an event (`created`), or was one already (a redelivery).
    pub(crate) fn accepted(&self, created: bool) {
        let counter = if created {
            &self.created
        } else {
            &self.replayed
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A message was rejected to the dead-letter path.
    pub(crate) fn rejected(&self, reason: RejectReason) {
        let at = RejectReason::ALL
            .iter()
            .position(|r| *r == reason)
            .unwrap_or_default();
        self.rejected[at].fetch_add(1, Ordering::Relaxed);
    }

    /// What `/healthz` shows of it.
    pub(crate) fn health(&self) -> SourceHealth {
        let (state, last_error) = self
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let lag = self.lag.load(Ordering::Relaxed);
        SourceHealth {
            name: self.name.clone(),
            state: match state {
                SourceState::Connecting => "connecting",
                SourceState::Up => "up",
                SourceState::Down => "down",
            }
            .to_owned(),
            lag: (lag != u64::MAX).then_some(lag),
            last_error,
        }
    }
}

/// Every source of this process, fixed at start.
#[derive(Debug, Default)]
pub(crate) struct Sources(pub Vec<Arc<SourceStatus>>);

impl Sources {
    /// The `kxp_ingest_*` families of `/metrics` (nothing without sources).
    pub(crate) fn render(&self, out: &mut String) {
        if self.0.is_empty() {
            return;
        }
        let families: [(&str, &str, &str); 5] = [
            (
                "kxp_ingest_messages_total",
                "counter",
                "Broker messages taken in, by source and outcome (created: a new event; replayed: a redelivery of one already stored).",
            ),
            (
                "kxp_ingest_rejected_total",
                "counter",
                "Broker messages rejected to the dead-letter path, by source and reason.",
            ),
            (
                "kxp_ingest_source_up",
                "gauge",
                "1 while the source is consuming, else 0.",
            ),
            (
                "kxp_ingest_source_lag",
                "gauge",
                "Messages waiting in the broker for the source, as last read.",
            ),
            (
                "kxp_ingest_reconnects_total",
                "counter",
                "Sessions of the source that failed (each is followed by a reconnect).",
            ),
        ];
        for (name, kind, help) in families {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for source in &self.0 {
                let label = escape(&source.name);
                let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
                match name {
                    "kxp_ingest_messages_total" => {
                        for (outcome, counter) in
                            [("created", &source.created), ("replayed", &source.replayed)]
                        {
                            let _ = writeln!(
                                out,
                                "{name}{{source=\"{label}\",outcome=\"{outcome}\"}} {}",
                                load(counter)
                            );
                        }
                    }
                    "kxp_ingest_rejected_total" => {
                        for (reason, counter) in RejectReason::ALL.iter().zip(&source.rejected) {
                            let _ = writeln!(
                                out,
                                "{name}{{source=\"{label}\",reason=\"{}\"}} {}",
                                reason.as_str(),
                                load(counter)
                            );
                        }
                    }
                    "kxp_ingest_source_up" => {
                        let health = source.health();
                        let up = u8::from(health.state == "up");
                        let _ = writeln!(out, "{name}{{source=\"{label}\"}} {up}");
                    }
                    "kxp_ingest_source_lag" => {
                        if let Some(lag) = source.health().lag {
                            let _ = writeln!(out, "{name}{{source=\"{label}\"}} {lag}");
                        }
                    }
                    _ => {
                        let _ = writeln!(
                            out,
                            "{name}{{source=\"{label}\"}} {}",
                            load(&source.reconnects)
                        );
                    }
                }
            }
        }
    }
}

/// A Prometheus label value: backslash, quote and newline escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_name_every_reason_of_every_source() {
        let status = Arc::new(SourceStatus::new("amqp:/q".to_owned()));
        status.accepted(true);
        status.rejected(RejectReason::UnknownAccount);
        status.lag(3);
        status.up();
        let mut out = String::new();
        Sources(vec![status]).render(&mut out);
        for line in [
            "kxp_ingest_messages_total{source=\"amqp:/q\",outcome=\"created\"} 1",
            "kxp_ingest_rejected_total{source=\"amqp:/q\",reason=\"unknown_account\"} 1",
            "kxp_ingest_rejected_total{source=\"amqp:/q\",reason=\"invalid_json\"} 0",
            "kxp_ingest_source_up{source=\"amqp:/q\"} 1",
            "kxp_ingest_source_lag{source=\"amqp:/q\"} 3",
            "kxp_ingest_reconnects_total{source=\"amqp:/q\"} 0",
        ] {
            assert!(out.contains(line), "{line} missing from\n{out}");
        }
    }
}
