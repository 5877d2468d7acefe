//! Endpoint health as the API shows it: statistics over windows of whole clock hours.

use serde::Serialize;

use super::ids::EndpointId;
use super::status::{CircuitState, EndpointStatus};

/// `GET /v1/endpoints/{id}/health`.
#[derive(Debug, Clone, Serialize)]
pub struct EndpointHealth {
    /// `ep_…`
    pub endpoint_id: EndpointId,
    /// The current clock hour and the one before it.
    pub last_1h: Window,
    /// The current clock hour and the 24 before it.
    pub last_24h: Window,
    /// Failed attempts since the last success (or since the first attempt).
    pub consecutive_failures: i64,
    /// RFC 3339; `null` before the first success.
    pub last_success_at: Option<String>,
    /// RFC 3339; `null` before the first failure.
    pub last_failure_at: Option<String>,
    /// The error of the last failed attempt (`http_503`, `timeout`, …), kept after a success.
    pub last_error: Option<String>,
    /// Deliveries not finished yet (`pending` or `delivering`).
    pub pending: i64,
    /// Pending deliveries whose time has come, waiting for a worker: the backlog.
    pub due: i64,
    /// RFC 3339: when the oldest of them came due; `null` without a backlog.
    pub oldest_due_at: Option<String>,
    /// Dead deliveries.
    pub dead: i64,
    /// `active`, `paused` or `disabled` (by the sender, after failing for too long).
    pub status: EndpointStatus,
    /// The circuit breaker: `closed`, `open` (deliveries held) or `half_open` (one probing).
    pub circuit_state: CircuitState,
    /// RFC 3339: when the circuit opened, while it is not closed.
    pub circuit_opened_at: Option<String>,
    /// RFC 3339: when an open circuit is probed next.
    pub next_probe_at: Option<String>,
    /// RFC 3339: when the current run of failures began (auto-disable counts from here);
    /// `null` after a success.
    pub failing_since: Option<String>,
    /// What a recent TLS handshake showed of the endpoint's own certificate.
    pub server_certificate: Option<kxp_api::ServerCertificate>,
    /// Its certificates that expire soon, most urgent first.
    pub expiring_certificates: Vec<kxp_api::ExpiringCertificate>,
    /// The last 25 clock hours, oldest first, the current one last: successes and failures of
    /// each (the console's chart). Hours without attempts are zeros.
    #[serde(skip)]
    pub hours: Vec<(i64, i64)>,
    /// A pull endpoint's reader: its cursor against the newest number; `None` for push.
    pub pull: Option<kxp_api::PullHealth>,
}

/// Attempt statistics over a window of whole clock hours.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Window {
    /// Attempts finished in the window.
    pub attempts: i64,
    /// Of which 2xx.
    pub successes: i64,
    /// Of which not.
    pub failures: i64,
    /// `successes / attempts`; `null` without attempts.
    pub success_rate: Option<f64>,
    /// The upper bound (ms) of the histogram bucket holding the median; `null` without attempts
    /// or above the last bound.
    pub latency_p50_ms: Option<i64>,
    /// The same, for the 95th percentile.
    pub latency_p95_ms: Option<i64>,
}
