//! `GET /metrics`: Prometheus text exposition (format 0.0.4) of what this process did and of
//! the queue it shares with the others.
//!
//! Counters are this process's own, since it started (Prometheus sums them over processes);
//! gauges are read from the database at each scrape, with queries that stay on small partial
//! indexes (due and leased deliveries) or small tables (endpoints). No label carries an
//! account, endpoint or event id: the page shows no merchant's data, and its size does not grow
//! with the number of merchants.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::engine::dispatch::Outcome;
use crate::model::{FailureKind, Transition};
use crate::policy::health::{LATENCY_BOUNDS_MS, bucket_of};
use crate::store::Gauges;

/// The outcome labels of `kxp_attempts_total`: a closed set, so a new error text can never
/// create a new series.
pub(crate) const OUTCOMES: [&str; 12] = [
    "success",
    "http_4xx",
    "http_5xx",
    "http_other",
    "timeout",
    "connect",
    "blocked_address",
    "too_many_redirects",
    "insecure_redirect",
    "invalid_url",
    "auth_failed",
    "other",
];

/// The label of an attempt's outcome.
pub(crate) fn outcome_label(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Delivered { .. } => "success",
        Outcome::Rejected { status, .. } => match status {
            400..=499 => "http_4xx",
            500..=599 => "http_5xx",
            _ => "http_other",
        },
        Outcome::Failed(failure) => match failure.kind {
            FailureKind::Timeout => "timeout",
            FailureKind::Connect => "connect",
            FailureKind::BlockedAddress => "blocked_address",
            FailureKind::TooManyRedirects => "too_many_redirects",
            FailureKind::InsecureRedirect => "insecure_redirect",
            FailureKind::InvalidUrl => "invalid_url",
            FailureKind::AuthFailed => "auth_failed",
            _ => "other",
        },
    }
}

const TRANSITIONS: [Transition; 4] = [
    Transition::Open,
    Transition::Reopen,
    Transition::Close,
    Transition::Disable,
];

const CHANNELS: [&str; 2] = ["webhook", "email"];

/// This process's counters. Cheap to update from any task (relaxed atomics).
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    events: AtomicU64,
    /// Ingests refused with `backlog_full`.
    refused: AtomicU64,
    attempts: [AtomicU64; OUTCOMES.len()],
    /// Per bucket of [`LATENCY_BOUNDS_MS`], then `+Inf`; not cumulative here.
    duration_buckets: [AtomicU64; LATENCY_BOUNDS_MS.len() + 1],
    duration_sum_ms: AtomicU64,
    delivered: AtomicU64,
    dead: AtomicU64,
    transitions: [AtomicU64; TRANSITIONS.len()],
    /// Per channel: sent, failed for good.
    notices: [[AtomicU64; 2]; CHANNELS.len()],
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

fn get(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

impl Metrics {
    /// An event was stored.
    pub(crate) fn event_ingested(&self) {
        bump(&self.events);
    }

    /// An ingest was refused with `backlog_full`.
    pub(crate) fn ingest_refused(&self) {
        bump(&self.refused);
    }

    /// An attempt ended with `outcome` after `took`.
    pub(crate) fn attempt(&self, outcome: &Outcome, took: Duration) {
        let label = outcome_label(outcome);
        if let Some(i) = OUTCOMES.iter().position(|o| *o == label) {
            bump(&self.attempts[i]);
        }
        let ms = i64::try_from(took.as_millis()).unwrap_or(i64::MAX);
        bump(&self.duration_buckets[bucket_of(ms)]);
        self.duration_sum_ms
            .fetch_add(u64::try_from(ms).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// A delivery ended: delivered, or dead (into the dead-letter queue).
    pub(crate) fn delivery_ended(&self, delivered: bool) {
        bump(if delivered {
            &self.delivered
        } else {
            &self.dead
        });
    }

    /// An endpoint's circuit or status changed.
    pub(crate) fn transition(&self, transition: Transition) {
        if let Some(i) = TRANSITIONS.iter().position(|t| *t == transition) {
            bump(&self.transitions[i]);
        }
    }

    /// A notification was sent, or failed for good.
    pub(crate) fn notice(&self, channel: &str, sent: bool) {
        if let Some(i) = CHANNELS.iter().position(|c| *c == channel) {
            bump(&self.notices[i][usize::from(!sent)]);
        }
    }

    /// The exposition text: these counters, and `gauges`, each family's samples right after
    /// its `# HELP` and `# TYPE` lines.
    pub(crate) fn render(&self, gauges: &Gauges) -> String {
        let mut out = String::with_capacity(4096);
        let o = &mut out;
        family(
            o,
            "kxp_events_ingested_total",
            "counter",
            "Events stored by this process's API.",
        );
        sample(o, "kxp_events_ingested_total", "", get(&self.events));

        let name = "kxp_events_refused_total";
        family(
            o,
            name,
            "counter",
            "Events this process's API refused, by reason: backlog_full (the account's due backlog was at backlog_limit).",
        );
        sample(o, name, "reason=\"backlog_full\"", get(&self.refused));

        family(
            o,
            "kxp_attempts_total",
            "counter",
            "Delivery attempts by this process, by outcome.",
        );
        for (label, counter) in OUTCOMES.iter().zip(&self.attempts) {
            sample(
                o,
                "kxp_attempts_total",
                &format!("outcome=\"{label}\""),
                get(counter),
            );
        }

        let name = "kxp_attempt_duration_seconds";
        family(
            o,
            name,
            "histogram",
            "How long delivery attempts took, redirects included.",
        );
        let mut cumulative = 0;
        for (i, counter) in self.duration_buckets.iter().enumerate() {
            cumulative += get(counter);
            let le = LATENCY_BOUNDS_MS
                .get(i)
                .map_or_else(|| "+Inf".to_owned(), |ms| seconds(*ms));
            sample(
                o,
                &format!("{name}_bucket"),
                &format!("le=\"{le}\""),
                cumulative,
            );
        }
        let sum = i64::try_from(get(&self.duration_sum_ms)).unwrap_or(i64::MAX);
        let _ = writeln!(o, "{name}_sum {}", seconds(sum));
        sample(o, &format!("{name}_count"), "", cumulative);

        let name = "kxp_deliveries_finished_total";
        family(
            o,
            name,
            "counter",
            "Deliveries this process finished: delivered, or dead (into the dead-letter queue).",
        );
        sample(o, name, "result=\"delivered\"", get(&self.delivered));
        sample(o, name, "result=\"dead\"", get(&self.dead));

        let name = "kxp_endpoint_transitions_total";
        family(
            o,
            name,
            "counter",
            "Circuit breaker and auto-disable changes made by this process.",
        );
        for (transition, counter) in TRANSITIONS.iter().zip(&self.transitions) {
            sample(
                o,
                name,
                &format!("transition=\"{}\"", transition.as_str()),
                get(counter),
            );
        }

        let name = "kxp_notifications_total";
        family(
            o,
            name,
            "counter",
            "Operational notices sent, or failed for good, by this process.",
        );
        for (channel, [sent, failed]) in CHANNELS.iter().zip(&self.notices) {
            sample(
                o,
                name,
                &format!("channel=\"{channel}\",result=\"sent\""),
                get(sent),
            );
            sample(
                o,
                name,
                &format!("channel=\"{channel}\",result=\"failed\""),
                get(failed),
            );
        }

        let name = "kxp_deliveries";
        family(
            o,
            name,
            "gauge",
            "Unfinished deliveries in the whole database: due now, scheduled later, held, or being attempted.",
        );
        for (state, n) in [
            ("due", gauges.due),
            ("scheduled", gauges.scheduled),
            ("held", gauges.held),
            ("delivering", gauges.delivering),
        ] {
            let _ = writeln!(o, "{name}{{state=\"{state}\"}} {n}");
        }

        let name = "kxp_delivery_lag_seconds";
        family(
            o,
            name,
            "gauge",
            "How long the oldest due delivery has waited (0 when none is due).",
        );
        let _ = writeln!(o, "{name} {}", seconds(gauges.lag_ms));

        let name = "kxp_endpoints";
        family(
            o,
            name,
            "gauge",
            "Endpoints in the whole database, by status and circuit state.",
        );
        for (status, circuit, n) in &gauges.endpoints {
            let _ = writeln!(
                o,
                "{name}{{status=\"{status}\",circuit_state=\"{circuit}\"}} {n}"
            );
        }

        // Citus's own: absent elsewhere.
        let citus = [
            (
                "kxp_store_shards_unanswered",
                "gauge",
                "Citus: shards that did not answer this scrape's reads; their rows are missing from the gauges above.",
                gauges.unanswered_shards.map(|n| n as u64),
            ),
            (
                "kxp_store_scans_by_shard_total",
                "counter",
                "Citus: cross-account reads that could not read every shard in one statement and went shard by shard (a worker down).",
                gauges.scans_by_shard,
            ),
        ];
        for (name, kind, help, value) in citus {
            if let Some(value) = value {
                family(o, name, kind, help);
                let _ = writeln!(o, "{name} {value}");
            }
        }
        out
    }
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn sample(out: &mut String, name: &str, labels: &str, value: u64) {
    if labels.is_empty() {
        let _ = writeln!(out, "{name} {value}");
    } else {
        let _ = writeln!(out, "{name}{{{labels}}} {value}");
    }
}

/// Milliseconds as seconds, exactly (`1500` → `1.5`, `10` → `0.01`).
fn seconds(ms: i64) -> String {
    let text = format!("{}.{:03}", ms / 1000, (ms % 1000).abs());
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

#[cfg(test)]
mod tests;
