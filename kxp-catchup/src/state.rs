//! What the catch-up knows of each endpoint between its passes: how many events ordered mode
//! holds and since when, since when the feed has been failing, whether the sender was found
//! reset. From it come the bounds past which ordered mode stops holding (and answers 503, so the
//! sender's own retries, notices and dead-letter queue take over), and the [`Status`] an
//! application exports as metrics and mounts as a health check.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Ordered mode stops holding when an endpoint has more events held than this: one event the
/// handler keeps refusing holds its key's later events back, and past this the receiver is no
/// longer keeping up, whatever it answers.
pub const DEFAULT_MAX_HELD: u64 = 1000;

/// Ordered mode stops holding when an endpoint's oldest held event has waited this long.
pub const DEFAULT_MAX_HELD_AGE: Duration = Duration::from_secs(10 * 60);

/// Ordered mode stops holding when the feed has failed this long without a success: a held
/// event reaches the handler only through the feed, so holding more while it cannot be read
/// only hides the outage.
pub const DEFAULT_MAX_FEED_FAILURE: Duration = Duration::from_secs(5 * 60);

/// The `Retry-After` of a delivery ordered mode refuses ([`Received::Stopped`](crate::Received)),
/// unless configured ([`OrderedBounds::retry_after`]): the sender retries no sooner, and its
/// schedule's later tries are spaced wider anyway.
pub const STOPPED_RETRY_AFTER: Duration = Duration::from_secs(60);

/// The most endpoints whose state is kept. An endpoint gets a state only when a catch-up of it
/// starts (configured, checkpointed, or learned by the catch-up's task within its own bound),
/// never from a delivery's unsigned `X-Kxp-Endpoint-Id` alone; this is the bound behind those.
const MAX_ENDPOINTS: usize = 256;

/// Where ordered mode stops holding and answers 503 ([`CatchUpConfig::with_bounds`](crate::CatchUpConfig::with_bounds)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct OrderedBounds {
    /// See [`DEFAULT_MAX_HELD`].
    pub max_held: u64,
    /// See [`DEFAULT_MAX_HELD_AGE`].
    pub max_held_age: Duration,
    /// See [`DEFAULT_MAX_FEED_FAILURE`].
    pub max_feed_failure: Duration,
    /// The `Retry-After` refused deliveries are answered with: see [`STOPPED_RETRY_AFTER`].
    pub retry_after: Duration,
}

impl Default for OrderedBounds {
    fn default() -> OrderedBounds {
        OrderedBounds {
            max_held: DEFAULT_MAX_HELD,
            max_held_age: DEFAULT_MAX_HELD_AGE,
            max_feed_failure: DEFAULT_MAX_FEED_FAILURE,
            retry_after: STOPPED_RETRY_AFTER,
        }
    }
}

impl OrderedBounds {
    /// With another [`max_held`](OrderedBounds::max_held).
    pub fn with_max_held(mut self, max_held: u64) -> OrderedBounds {
        self.max_held = max_held;
        self
    }

    /// With another [`max_held_age`](OrderedBounds::max_held_age).
    pub fn with_max_held_age(mut self, age: Duration) -> OrderedBounds {
        self.max_held_age = age;
        self
    }

    /// With another [`max_feed_failure`](OrderedBounds::max_feed_failure).
    pub fn with_max_feed_failure(mut self, failure: Duration) -> OrderedBounds {
        self.max_feed_failure = failure;
        self
    }

    /// With another [`retry_after`](OrderedBounds::retry_after) (whole seconds; 0 leaves the
    /// sender's schedule alone).
    pub fn with_retry_after(mut self, retry_after: Duration) -> OrderedBounds {
        self.retry_after = retry_after;
        self
    }
}

/// Why ordered mode stopped holding an endpoint's deliveries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Stop {
    /// More events held than [`OrderedBounds::max_held`].
    TooManyHeld,
    /// The oldest held event older than [`OrderedBounds::max_held_age`].
    HeldTooLong,
    /// The feed failing for longer than [`OrderedBounds::max_feed_failure`].
    FeedFailing,
    /// The sender was found reset ([`ResetFound`]): held until
    /// [`CatchUp::reset_checkpoint`](crate::CatchUp::reset_checkpoint).
    Reset,
}

impl Stop {
    /// A stable name, for logs, metrics and the 503's body.
    pub fn as_str(self) -> &'static str {
        match self {
            Stop::TooManyHeld => "too_many_held",
            Stop::HeldTooLong => "held_too_long",
            Stop::FeedFailing => "feed_failing",
            Stop::Reset => "reset",
        }
    }
}

/// What a catch-up found that says the sender was reset (its database restored from an older
/// backup, say): its feed holds another event at the checkpoint's number, or ends before it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResetFound {
    /// The receiver's checkpoint.
    pub checkpoint: u64,
    /// The event the checkpoint recorded at its number.
    pub expected: Option<String>,
    /// The event the feed has at that number now; `None` when the feed ends before it.
    pub found: Option<String>,
    /// The highest number the feed has given.
    pub latest: u64,
}

/// One endpoint in a [`Status`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EndpointStatus {
    /// The sender's endpoint.
    pub endpoint_id: String,
    /// Events held for it (ordered mode), as of its last catch-up and the holds since.
    pub held: u64,
    /// How long its oldest held event has waited.
    pub oldest_held_age: Option<Duration>,
    /// How long its feed has failed without a success in between.
    pub feed_failing_for: Option<Duration>,
    /// The code of the feed's last failure, while it fails ([`FeedError::code`](crate::FeedError::code)).
    pub feed_error: Option<&'static str>,
    /// The reset found and not yet dealt with.
    pub reset: Option<ResetFound>,
    /// Why ordered mode refuses its deliveries now, if it does.
    pub stopped: Option<Stop>,
    /// Resets found since the process started.
    pub resets_total: u64,
    /// Deliveries ordered mode refused with 503 since the process started.
    pub refused_total: u64,
}

/// A snapshot of the catch-up ([`CatchUp::status`](crate::CatchUp::status)): what an application
/// exports ([`Status::prometheus`]) and answers a health check with ([`Status::is_healthy`],
/// [`Status::json`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Status {
    /// Whether ordered mode is on.
    pub ordered: bool,
    /// Each endpoint the catch-up has state for, by id.
    pub endpoints: Vec<EndpointStatus>,
    /// How long a feed may fail before it counts against health.
    max_feed_failure: Duration,
}

impl Status {
    /// No endpoint stopped, found reset, or with a feed failing longer than
    /// [`OrderedBounds::max_feed_failure`]: a failure or two in between (a restart of the
    /// sender, a timeout) is no reason to take a receiver out of its load balancer.
    pub fn is_healthy(&self) -> bool {
        self.endpoints.iter().all(|e| {
            e.stopped.is_none()
                && e.reset.is_none()
                && e.feed_failing_for
                    .is_none_or(|failing| failing <= self.max_feed_failure)
        })
    }

    /// The snapshot as JSON, for a health check: `{"status": "ok" | "failing", "ordered":
    /// …, "endpoints": [{"endpoint_id", "held", "oldest_held_seconds", "feed_failing_seconds",
    /// "feed_error", "stopped", "reset", …}]}`.
    pub fn json(&self) -> String {
        let endpoints: Vec<serde_json::Value> = self
            .endpoints
            .iter()
            .map(|e| {
                serde_json::json!({
                    "endpoint_id": e.endpoint_id,
                    "held": e.held,
                    "oldest_held_seconds": e.oldest_held_age.map(|d| d.as_secs_f64()),
                    "feed_failing_seconds": e.feed_failing_for.map(|d| d.as_secs_f64()),
                    "feed_error": e.feed_error,
                    "stopped": e.stopped.map(Stop::as_str),
                    "reset": e.reset.as_ref().map(|r| serde_json::json!({
                        "checkpoint": r.checkpoint,
                        "expected": r.expected,
                        "found": r.found,
                        "latest": r.latest,
                    })),
                    "resets_total": e.resets_total,
                    "refused_total": e.refused_total,
                })
            })
            .collect();
        serde_json::json!({
            "status": if self.is_healthy() { "ok" } else { "failing" },
            "ordered": self.ordered,
            "endpoints": endpoints,
        })
        .to_string()
    }

    /// The snapshot in Prometheus' text format, one series per endpoint:
    /// `kxp_catchup_held_events`, `kxp_catchup_oldest_held_seconds`,
    /// `kxp_catchup_feed_failing_seconds`, `kxp_catchup_stopped` (1 with a `reason`),
    /// `kxp_catchup_reset` (1 while a reset waits to be dealt with), and the counters
    /// `kxp_catchup_resets_total` and `kxp_catchup_refused_total`. Serve it on the app's own
    /// `/metrics`, or append it to what the app already exports.
    pub fn prometheus(&self) -> String {
        let mut out = String::new();
        let mut family = |name: &str, kind: &str, help: &str, rows: Vec<(String, f64)>| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (labels, value) in rows {
                let _ = writeln!(out, "{name}{{{labels}}} {value}");
            }
        };
        let endpoint = |e: &EndpointStatus| format!("endpoint=\"{}\"", escape(&e.endpoint_id));
        let each = |f: &dyn Fn(&EndpointStatus) -> f64| {
            self.endpoints
                .iter()
                .map(|e| (endpoint(e), f(e)))
                .collect::<Vec<_>>()
        };
        family(
            "kxp_catchup_held_events",
            "gauge",
            "Events ordered mode holds for the endpoint.",
            each(&|e| e.held as f64),
        );
        family(
            "kxp_catchup_oldest_held_seconds",
            "gauge",
            "How long the endpoint's oldest held event has waited (0 when none).",
            each(&|e| e.oldest_held_age.map_or(0.0, |d| d.as_secs_f64())),
        );
        family(
            "kxp_catchup_feed_failing_seconds",
            "gauge",
            "How long the endpoint's feed has failed without a success (0 when it works).",
            each(&|e| e.feed_failing_for.map_or(0.0, |d| d.as_secs_f64())),
        );
        family(
            "kxp_catchup_stopped",
            "gauge",
            "1 while ordered mode refuses the endpoint's deliveries with 503, with the reason.",
            self.endpoints
                .iter()
                .filter_map(|e| {
                    let reason = e.stopped?.as_str();
                    Some((format!("{},reason=\"{reason}\"", endpoint(e)), 1.0))
                })
                .collect(),
        );
        family(
            "kxp_catchup_reset",
            "gauge",
            "1 while a reset of the sender, found by the catch-up, waits to be dealt with.",
            each(&|e| if e.reset.is_some() { 1.0 } else { 0.0 }),
        );
        family(
            "kxp_catchup_resets_total",
            "counter",
            "Resets of the sender the catch-up found.",
            each(&|e| e.resets_total as f64),
        );
        family(
            "kxp_catchup_refused_total",
            "counter",
            "Deliveries ordered mode refused with 503.",
            each(&|e| e.refused_total as f64),
        );
        out
    }
}

/// A label value as Prometheus' text format wants it.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// One endpoint's state.
#[derive(Default)]
struct Endpoint {
    held: u64,
    oldest_held_at: Option<Instant>,
    feed_failing_since: Option<Instant>,
    feed_error: Option<&'static str>,
    reset: Option<ResetFound>,
    resets_total: u64,
    refused_total: u64,
}

impl Endpoint {
    fn stop(&self, bounds: &OrderedBounds, now: Instant) -> Option<Stop> {
        if self.reset.is_some() {
            Some(Stop::Reset)
        } else if self.held > bounds.max_held {
            Some(Stop::TooManyHeld)
        } else if self
            .oldest_held_at
            .is_some_and(|at| now.saturating_duration_since(at) > bounds.max_held_age)
        {
            Some(Stop::HeldTooLong)
        } else if self
            .feed_failing_since
            .is_some_and(|since| now.saturating_duration_since(since) > bounds.max_feed_failure)
        {
            Some(Stop::FeedFailing)
        } else {
            None
        }
    }
}

/// Every endpoint's state, behind one lock held for a few field updates at a time.
#[derive(Default)]
pub(crate) struct States {
    endpoints: Mutex<HashMap<String, Endpoint>>,
}

impl States {
    /// Runs `f` on the endpoint's state, if it has one ([`track`](States::track)).
    fn with<T>(&self, endpoint_id: &str, f: impl FnOnce(&mut Endpoint) -> T) -> Option<T> {
        let mut endpoints = self
            .endpoints
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        endpoints.get_mut(endpoint_id).map(f)
    }

    /// Gives the endpoint a state, if it has none and there is room ([`MAX_ENDPOINTS`]): a
    /// catch-up of it is starting.
    pub(crate) fn track(&self, endpoint_id: &str) {
        let mut endpoints = self
            .endpoints
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !endpoints.contains_key(endpoint_id) && endpoints.len() < MAX_ENDPOINTS {
            endpoints.insert(endpoint_id.to_owned(), Endpoint::default());
        }
    }

    /// Why ordered mode refuses the endpoint's deliveries now, if it does; a refusal is
    /// counted.
    pub(crate) fn refuse(&self, endpoint_id: &str, bounds: &OrderedBounds) -> Option<Stop> {
        self.with(endpoint_id, |e| {
            let stop = e.stop(bounds, Instant::now());
            if stop.is_some() {
                e.refused_total += 1;
            }
            stop
        })
        .flatten()
    }

    /// A delivery was held.
    pub(crate) fn held_one(&self, endpoint_id: &str) {
        self.with(endpoint_id, |e| {
            e.held += 1;
            e.oldest_held_at.get_or_insert_with(Instant::now);
        });
    }

    /// The endpoint's held events, as the store counts them after a catch-up.
    pub(crate) fn held(&self, endpoint_id: &str, held: u64, oldest_age: Option<Duration>) {
        let now = Instant::now();
        self.with(endpoint_id, |e| {
            e.held = held;
            e.oldest_held_at = oldest_age.map(|age| now.checked_sub(age).unwrap_or(now));
        });
    }

    pub(crate) fn feed_ok(&self, endpoint_id: &str) {
        self.with(endpoint_id, |e| {
            e.feed_failing_since = None;
            e.feed_error = None;
        });
    }

    /// The feed failed with `code`; a 429 (the catch-up asked too often) is no failure of
    /// the feed.
    pub(crate) fn feed_failed(&self, endpoint_id: &str, code: &'static str) {
        if code == "rate_limited" {
            return;
        }
        self.with(endpoint_id, |e| {
            e.feed_failing_since.get_or_insert_with(Instant::now);
            e.feed_error = Some(code);
        });
    }

    /// Records `found`; `true` when it is news (no reset was recorded before), to be logged
    /// and counted once: the catch-ups that find the same reset again, until it is dealt
    /// with, only bring its details up to date.
    pub(crate) fn reset_found(&self, endpoint_id: &str, found: &ResetFound) -> bool {
        self.with(endpoint_id, |e| {
            let news = e.reset.is_none();
            e.reset = Some(found.clone());
            if news {
                e.resets_total += 1;
            }
            news
        })
        .unwrap_or(true)
    }

    /// A catch-up found no reset: whatever was found before was dealt with.
    pub(crate) fn no_reset(&self, endpoint_id: &str) {
        self.with(endpoint_id, |e| e.reset = None);
    }

    pub(crate) fn snapshot(&self, ordered: bool, bounds: &OrderedBounds) -> Status {
        let now = Instant::now();
        let endpoints = self
            .endpoints
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut rows: Vec<EndpointStatus> = endpoints
            .iter()
            .map(|(id, e)| EndpointStatus {
                endpoint_id: id.clone(),
                held: e.held,
                oldest_held_age: e.oldest_held_at.map(|at| now.saturating_duration_since(at)),
                feed_failing_for: e
                    .feed_failing_since
                    .map(|since| now.saturating_duration_since(since)),
                feed_error: e.feed_error,
                reset: e.reset.clone(),
                stopped: if ordered { e.stop(bounds, now) } else { None },
                resets_total: e.resets_total,
                refused_total: e.refused_total,
            })
            .collect();
        rows.sort_by(|a, b| a.endpoint_id.cmp(&b.endpoint_id));
        Status {
            ordered,
            endpoints: rows,
            max_feed_failure: bounds.max_feed_failure,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds() -> OrderedBounds {
        OrderedBounds::default()
            .with_max_held(2)
            .with_max_held_age(Duration::from_secs(60))
            .with_max_feed_failure(Duration::from_secs(30))
    }

    #[tokio::test(start_paused = true)]
    async fn each_bound_stops_holding_and_coming_back_under_it_resumes() {
        let states = States::default();
        let b = bounds();
        states.held_one("ep");
        assert!(
            states.snapshot(true, &b).endpoints.is_empty(),
            "no state before a catch-up of the endpoint starts"
        );
        states.track("ep");
        assert_eq!(states.refuse("ep", &b), None);
        for _ in 0..3 {
            states.held_one("ep");
        }
        assert_eq!(states.refuse("ep", &b), Some(Stop::TooManyHeld));
        states.held("ep", 1, Some(Duration::from_secs(1)));
        assert_eq!(states.refuse("ep", &b), None);
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(states.refuse("ep", &b), Some(Stop::HeldTooLong));
        states.held("ep", 0, None);
        states.feed_failed("ep", "rate_limited");
        assert_eq!(
            states.snapshot(true, &b).endpoints[0].feed_failing_for,
            None
        );
        states.feed_failed("ep", "transport");
        tokio::time::advance(Duration::from_secs(29)).await;
        assert_eq!(states.refuse("ep", &b), None, "within the bound");
        assert!(
            states.snapshot(true, &b).is_healthy(),
            "a failure within the bound"
        );
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(states.refuse("ep", &b), Some(Stop::FeedFailing));
        states.feed_ok("ep");
        assert_eq!(states.refuse("ep", &b), None);
        let status = states.snapshot(true, &b);
        assert_eq!(status.endpoints[0].refused_total, 3);
        assert!(status.is_healthy());
    }

    #[tokio::test(start_paused = true)]
    async fn a_reset_is_counted_once_and_stops_until_dealt_with() {
        let states = States::default();
        states.track("ep");
        let found = ResetFound {
            checkpoint: 9,
            expected: Some("evt_9".into()),
            found: Some("evt_other".into()),
            latest: 12,
        };
        assert!(states.reset_found("ep", &found));
        assert!(!states.reset_found("ep", &found), "the same reset again");
        let further = ResetFound {
            latest: 13,
            ..found.clone()
        };
        assert!(!states.reset_found("ep", &further), "still the same reset");
        assert_eq!(states.refuse("ep", &bounds()), Some(Stop::Reset));
        let status = states.snapshot(true, &bounds());
        assert!(!status.is_healthy());
        assert!(
            status.json().contains(r#""stopped":"reset""#),
            "{}",
            status.json()
        );
        let text = status.prometheus();
        assert!(
            text.contains("kxp_catchup_resets_total{endpoint=\"ep\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("kxp_catchup_stopped{endpoint=\"ep\",reason=\"reset\"} 1\n"),
            "{text}"
        );
        states.no_reset("ep");
        assert_eq!(states.refuse("ep", &bounds()), None);
        // Plain catch-up never refuses: its snapshot says nothing is stopped.
        states.reset_found("ep", &found);
        assert_eq!(states.snapshot(false, &bounds()).endpoints[0].stopped, None);
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn the_state_of_endpoints_is_bounded() {
        let states = States::default();
        for i in 0..MAX_ENDPOINTS + 10 {
            states.track(&format!("ep_{i}"));
        }
        assert_eq!(
            states.snapshot(true, &bounds()).endpoints.len(),
            MAX_ENDPOINTS
        );
    }
}
