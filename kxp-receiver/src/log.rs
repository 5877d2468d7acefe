//! One structured log line per request, with the fields of ARCHITECTURE.md at the top level:
//! `event_id`, `verification`, `outcome`, `status`, `duration_ms`. Never a secret, a signature
//! or a body.

use std::time::Instant;

/// Times a request and emits its log line when it is done.
#[derive(Debug, Clone, Copy)]
pub struct RequestLog {
    started: Instant,
}

impl RequestLog {
    /// Starts the clock; call it before reading the body.
    pub fn start() -> RequestLog {
        RequestLog {
            started: Instant::now(),
        }
    }

    /// Emits the line on the `kxp_webhooks` target. `event_id` is empty when no verified event id
    /// is known (the unsigned `X-Kxp-Event-Id` header is never logged as if it were one).
    ///
    /// Level: `info` when the event was handled, `warn` when refused or deferred, `error` when
    /// the handler or the store failed.
    pub fn finish(self, event_id: &str, verification: &str, outcome: &str, status: u16) {
        let duration_ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        macro_rules! line {
            ($level:ident) => {
                tracing::$level!(
                    target: "kxp_webhooks",
                    event_id,
                    verification,
                    outcome,
                    status,
                    duration_ms,
                    "webhook request"
                )
            };
        }
        match outcome {
            "processed" | "duplicate" | "challenge" => line!(info),
            "failed" => line!(error),
            _ => line!(warn),
        }
    }
}

/// The `outcome` of a request the handler answered, when the handler did not say (no dedup
/// glue): 2xx processed, 409 in progress, 5xx failed, any other status rejected.
pub fn outcome_for_status(status: u16) -> &'static str {
    match status {
        200..=299 => "processed",
        409 => "in_progress",
        500..=599 => "failed",
        _ => "rejected",
    }
}
