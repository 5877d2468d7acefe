//! `GET /v1/endpoints/{id}/health` (how one endpoint is doing) and `GET /healthz` (whether the
//! server is).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::credentials::{ExpiringCertificate, ServerCertificate};
use crate::endpoints::{CircuitState, EndpointStatus};
use crate::ids::EndpointId;
use crate::timestamp::Timestamp;

/// Attempt statistics over a window of whole clock hours (UTC).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"attempts": 8, "successes": 3, "failures": 5, "success_rate": 0.375, "latency_p50_ms": 10, "latency_p95_ms": 500}))]
pub struct HealthWindow {
    /// Attempts finished in the window (a delivery retried three times is three).
    pub attempts: u64,
    /// Of which 2xx.
    pub successes: u64,
    /// Of which not.
    pub failures: u64,
    /// `successes / attempts`; `null` without attempts.
    #[schema(required = true)]
    pub success_rate: Option<f64>,
    /// The upper bound (ms) of the latency bucket holding the median (≤ 10, 25, 50, 100, 250,
    /// 500, 1000, 2500, 5000, 10000, 30000): approximate. `null` without attempts or above
    /// 30000 ms.
    #[schema(required = true)]
    pub latency_p50_ms: Option<u64>,
    /// The same, for the 95th percentile.
    #[schema(required = true)]
    pub latency_p95_ms: Option<u64>,
}

/// How an endpoint is doing: success rates, latency, failure streak, backlog, breaker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({
    "endpoint_id": "ep_0193a0c4c1e07c2e9f3b7a1d2c4e5f61",
    "last_1h": {"attempts": 8, "successes": 3, "failures": 5, "success_rate": 0.375, "latency_p50_ms": 10, "latency_p95_ms": 500},
    "last_24h": {"attempts": 8, "successes": 3, "failures": 5, "success_rate": 0.375, "latency_p50_ms": 10, "latency_p95_ms": 500},
    "consecutive_failures": 0,
    "last_success_at": "2026-11-30T04:27:00Z",
    "last_failure_at": "2026-11-30T04:26:59Z",
    "last_error": "http_503",
    "pending": 0,
    "due": 0,
    "oldest_due_at": null,
    "dead": 1,
    "status": "active",
    "circuit_state": "closed",
    "circuit_opened_at": null,
    "next_probe_at": null,
    "failing_since": null,
    "server_certificate": {
        "issuer": "CN=R11,O=Let's Encrypt,C=US",
        "not_after": "2026-12-09T08:30:00Z",
        "seen_at": "2026-11-30T04:27:00Z"
    },
    "expiring_certificates": [
        {"certificate": "server", "not_after": "2026-12-09T08:30:00Z", "days_left": 9}
    ],
    "pull": null
}))]
pub struct EndpointHealth {
    /// The endpoint.
    pub endpoint_id: EndpointId,
    /// The current clock hour and the one before it.
    pub last_1h: HealthWindow,
    /// The current clock hour and the 24 before it.
    pub last_24h: HealthWindow,
    /// Failed attempts since the last success (or since the first attempt).
    pub consecutive_failures: u64,
    /// `null` before the first success.
    #[schema(required = true)]
    pub last_success_at: Option<Timestamp>,
    /// `null` before the first failure.
    #[schema(required = true)]
    pub last_failure_at: Option<Timestamp>,
    /// The error of the last failed attempt (`http_503`, `timeout`, …), kept after a success.
    #[schema(required = true)]
    pub last_error: Option<String>,
    /// Deliveries not finished yet (`pending`, held, or in flight).
    pub pending: u64,
    /// Of those, the ones whose time has come and that wait for a worker (held deliveries and
    /// retries scheduled later are not due): the endpoint's backlog. (0 from servers that
    /// predate it.)
    #[serde(default)]
    pub due: u64,
    /// When the oldest due delivery came due: the backlog's age. `null` without a backlog.
    #[schema(required = true)]
    #[serde(default)]
    pub oldest_due_at: Option<Timestamp>,
    /// Dead deliveries.
    pub dead: u64,
    /// `active`, `paused` or `disabled`.
    pub status: EndpointStatus,
    /// The circuit breaker's state.
    pub circuit_state: CircuitState,
    /// When the circuit opened, while it is not closed.
    #[schema(required = true)]
    pub circuit_opened_at: Option<Timestamp>,
    /// When an open circuit is probed next.
    #[schema(required = true)]
    pub next_probe_at: Option<Timestamp>,
    /// When the current run of failures began (auto-disable counts from here); `null` after a
    /// success.
    #[schema(required = true)]
    pub failing_since: Option<Timestamp>,
    /// The endpoint's own certificate as a recent TLS handshake showed it; `null` before the
    /// first, and for `http://` endpoints.
    #[serde(default)]
    #[schema(required = true)]
    pub server_certificate: Option<ServerCertificate>,
    /// Its certificates that expire soon (the client certificate within 30 days, the server
    /// certificate within 14), most urgent first.
    #[serde(default)]
    pub expiring_certificates: Vec<ExpiringCertificate>,
    /// A pull endpoint's reader: how far behind it is; `null` for a push endpoint.
    #[serde(default)]
    #[schema(required = true)]
    pub pull: Option<PullHealth>,
}

/// How a pull endpoint's reader keeps up ([`EndpointHealth::pull`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({
    "cursor": 41, "latest": 44, "lag": 3,
    "committed_at": "2026-11-30T04:27:00Z", "read_at": "2026-11-30T04:27:03Z"
}))]
pub struct PullHealth {
    /// The number the reader committed last (0: none yet).
    pub cursor: u64,
    /// The highest number the endpoint has given.
    pub latest: u64,
    /// `latest - cursor`: the items the reader has not committed.
    pub lag: u64,
    /// When it last committed; `null`: never. With a lag, the lag is at least this old.
    #[schema(required = true)]
    pub committed_at: Option<Timestamp>,
    /// When the feed (or the cursor) was last read, to within 30 seconds; `null`: never.
    #[schema(required = true)]
    pub read_at: Option<Timestamp>,
}

/// `GET /healthz` (no key): the server answers and its database does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"status": "ok", "database": "sqlite", "sources": [
    {"name": "amqp:/payments", "state": "up", "lag": 0, "last_error": null}]}))]
pub struct ServiceHealth {
    /// `ok`; on Citus `degraded` while some shards do not answer (a worker is down: the
    /// accounts on the others are served, `unanswered_shards` says how many), and `degraded`
    /// while the egress proxy fails (`egress_proxy` says why). A database that does not answer
    /// at all is 503 `store_unavailable` instead. A broker source that is down does not change
    /// it: the API still takes events; `sources` tells.
    pub status: String,
    /// The backend: `sqlite` or `postgres` (Citus too).
    pub database: String,
    /// On Citus, how many shards of the accounts table did not answer; absent elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unanswered_shards: Option<u32>,
    /// This process's broker sources (`kxp serve --ingest`), in the order configured; empty
    /// without any.
    #[serde(default)]
    pub sources: Vec<SourceHealth>,
    /// The egress proxy deliveries leave through (`kxp serve --egress-proxy`); absent without
    /// one. While it fails, `status` is `degraded`: the API still takes events, and they wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_proxy: Option<EgressProxyHealth>,
}

/// The egress proxy of this process (`kxp serve --egress-proxy <URL>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"proxy": "http://***@proxy.internal:3128", "state": "up",
    "since": null, "last_error": null}))]
pub struct EgressProxyHealth {
    /// Its URL, the user and password replaced by `***`.
    pub proxy: String,
    /// `up`, or `proxy_error`: it could not be reached, answered `407`, or failed its probe.
    /// Deliveries wait meanwhile; no attempt is counted against an endpoint, and they resume
    /// when a probe (every second while down) passes.
    pub state: String,
    /// When it last went up or down; `null` while it has never failed.
    #[schema(required = true)]
    pub since: Option<Timestamp>,
    /// Why it failed, the last time it did.
    #[schema(required = true)]
    pub last_error: Option<String>,
}

/// `GET /livez` and `GET /readyz` (no key) when they answer 200: `{"status": "ok"}` (the
/// process runs) and `{"status": "ready"}` (send it traffic). `/readyz` answers 503 otherwise:
/// `store_unavailable`, `migrations_pending` or `shutting_down`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"status": "ready"}))]
pub struct Probe {
    /// `ok` for `/livez`, `ready` for `/readyz`.
    pub status: String,
}

/// One broker source of this process (`kxp serve --ingest <URL>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SourceHealth {
    /// `amqp:<vhost>/<queue>` or `nats:<stream>/<durable consumer>`: no host, no credentials.
    pub name: String,
    /// `connecting` (not consuming yet), `up` (consuming) or `down` (the last session failed;
    /// reconnecting with backoff).
    pub state: String,
    /// Messages waiting in the broker, as last read (every few seconds while up): RabbitMQ's
    /// ready messages of the queue, JetStream's pending messages of the consumer. `null` until
    /// read.
    #[schema(required = true)]
    pub lag: Option<u64>,
    /// Why the last session ended, when it failed (the broker's words, credentials removed).
    #[schema(required = true)]
    pub last_error: Option<String>,
}
