//! The report card: one [`Finding`] per check, with what was sent, what came back, why it
//! matters and where the fix is explained. Data only: printing it is the caller's business
//! (`kxp check` prints a table, or this as JSON).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::ser::SerializeStruct;
use serde::{Serialize, Serializer};

use crate::Check;

/// How bad a failed check is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Severity {
    /// `critical`: the endpoint accepted (2xx) a request that is not authentic: anyone can make
    /// it record an event.
    Critical,
    /// `error`: the endpoint breaks the contract in a way that costs deliveries, retries or
    /// availability, but is not open to forgeries.
    Error,
}

/// What a check came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// `pass`: the answer the contract asks for.
    Pass,
    /// `warn`: a safe answer, but not the one the contract asks for (a 403 instead of a 401, say):
    /// nothing is accepted that should not be, yet the sender and the merchant's logs cannot
    /// tell why. Not a failure.
    Warn,
    /// `fail`: a failure of the given severity.
    Fail(Severity),
    /// `skip`: not run, because the target does not allow it (no second secret, no challenge).
    Skip,
}

impl Verdict {
    /// `pass`, `warn`, `fail` or `skip`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Warn => "warn",
            Verdict::Fail(_) => "fail",
            Verdict::Skip => "skip",
        }
    }

    /// The severity of a failure; `None` for any other verdict.
    pub const fn severity(self) -> Option<Severity> {
        match self {
            Verdict::Fail(severity) => Some(severity),
            _ => None,
        }
    }
}

/// `"verdict": "fail", "severity": "critical"` (the severity is `null` unless it failed).
impl Serialize for Verdict {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut fields = serializer.serialize_struct("Verdict", 2)?;
        fields.serialize_field("verdict", self.as_str())?;
        fields.serialize_field("severity", &self.severity())?;
        fields.end()
    }
}

/// The request a finding rests on, as far as it tells what was checked.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Sent {
    /// `POST`, or `GET` for the challenge.
    pub method: &'static str,
    /// The query added to the URL (`challenge=<token>`), if any.
    pub query: Option<String>,
    /// The headers that make the difference: `X-Kxp-Signature` (each `v1` cut to its first 8
    /// digits; absent when none was sent), `X-Kxp-Event-Id`, `X-Kxp-Test`.
    pub headers: BTreeMap<&'static str, String>,
    /// The body's size.
    pub body_bytes: usize,
    /// The start of the body, on one line.
    pub body: String,
}

/// What the endpoint answered, or why nothing came.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Received {
    /// The status code; `None` when no answer came.
    pub status: Option<u16>,
    /// The `Location` of a redirect, which is reported, never followed.
    pub location: Option<String>,
    /// The start of the body, on one line.
    pub body: String,
    /// How many bytes of body were read (reading stops after a few KiB).
    pub body_bytes: usize,
    /// From sending the request to the end of the answer (or the failure).
    #[serde(rename = "latency_ms", serialize_with = "millis")]
    pub latency: Duration,
    /// Why there is no answer: a timeout, a refused connection, a reset.
    pub error: Option<String>,
}

/// Response times over the answers of a burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Latency {
    /// How many answers they are taken over.
    pub count: usize,
    /// The median.
    #[serde(rename = "p50_ms", serialize_with = "millis")]
    pub p50: Duration,
    /// The 95th percentile (nearest rank).
    #[serde(rename = "p95_ms", serialize_with = "millis")]
    pub p95: Duration,
    /// The slowest.
    #[serde(rename = "max_ms", serialize_with = "millis")]
    pub max: Duration,
}

impl Latency {
    /// The percentiles of `times`; `None` when there are none.
    pub(crate) fn of(mut times: Vec<Duration>) -> Option<Latency> {
        times.sort_unstable();
        let max = *times.last()?;
        // Nearest rank: the smallest time with at least q of all times at or below it.
        let rank = |q: usize| times[(times.len() * q).div_ceil(100).max(1) - 1];
        Some(Latency {
            count: times.len(),
            p50: rank(50),
            p95: rank(95),
            max,
        })
    }
}

/// One check's result.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Finding {
    /// Which check.
    pub check: Check,
    /// Passed, warned, failed (how badly) or skipped.
    #[serde(flatten)]
    pub verdict: Verdict,
    /// What happened, in one line: "answered 200 OK to a forged signature".
    pub summary: String,
    /// The request the verdict rests on (for a burst: the first that failed, or the last).
    pub sent: Option<Sent>,
    /// Its answer.
    pub received: Option<Received>,
    /// Response times, for the burst.
    pub latency: Option<Latency>,
    /// Why the check matters: [`Check::why`].
    pub why: &'static str,
    /// Where the fix is explained: [`Check::docs_url`].
    pub docs: String,
}

impl Finding {
    pub(crate) fn new(check: Check, verdict: Verdict, summary: impl Into<String>) -> Finding {
        Finding {
            check,
            verdict,
            summary: summary.into(),
            sent: None,
            received: None,
            latency: None,
            why: check.why(),
            docs: check.docs_url(),
        }
    }

    pub(crate) fn with_exchange(mut self, sent: Sent, received: Received) -> Finding {
        self.sent = Some(sent);
        self.received = Some(received);
        self
    }
}

/// How many checks came to each verdict.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Counts {
    /// Passed.
    pub passed: usize,
    /// Passed with a warning.
    pub warned: usize,
    /// Failed, critical ones included.
    pub failed: usize,
    /// Failed critically.
    pub critical: usize,
    /// Not run.
    pub skipped: usize,
}

/// The report card of one run.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Report {
    /// The endpoint, without credentials.
    pub url: String,
    /// `true` when no check failed (warnings and skips are not failures).
    pub passed: bool,
    /// The verdicts, counted.
    pub counts: Counts,
    /// One per check run, in the order of [`Check::ALL`].
    pub findings: Vec<Finding>,
    /// How many HTTP requests were sent in all.
    pub requests: usize,
    /// How long the run took.
    #[serde(rename = "duration_ms", serialize_with = "millis")]
    pub duration: Duration,
}

impl Report {
    pub(crate) fn new(
        url: String,
        findings: Vec<Finding>,
        requests: usize,
        duration: Duration,
    ) -> Report {
        let mut counts = Counts::default();
        for finding in &findings {
            match finding.verdict {
                Verdict::Pass => counts.passed += 1,
                Verdict::Warn => counts.warned += 1,
                Verdict::Fail(severity) => {
                    counts.failed += 1;
                    if severity == Severity::Critical {
                        counts.critical += 1;
                    }
                }
                Verdict::Skip => counts.skipped += 1,
            }
        }
        Report {
            url,
            passed: counts.failed == 0,
            counts,
            findings,
            requests,
            duration,
        }
    }
}

/// A duration as milliseconds, to the microsecond (`3.214`).
fn millis<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_f64(duration.as_micros() as f64 / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let ms = |n: u64| Duration::from_millis(n);
        let latency = Latency::of((1..=20).rev().map(ms).collect()).unwrap();
        assert_eq!(
            (latency.count, latency.p50, latency.p95, latency.max),
            (20, ms(10), ms(19), ms(20))
        );
        let one = Latency::of(vec![ms(7)]).unwrap();
        assert_eq!((one.p50, one.p95, one.max), (ms(7), ms(7), ms(7)));
        assert_eq!(Latency::of(Vec::new()), None);
    }

    #[test]
    fn findings_serialize_with_their_verdict_and_severity_flat() {
        let finding = Finding::new(
            Check::ForgedSignature,
            Verdict::Fail(Severity::Critical),
            "answered 200 OK to a forged signature",
        );
        let json = serde_json::to_value(&finding).unwrap();
        assert_eq!(json["check"], "forged_signature");
        assert_eq!(json["verdict"], "fail");
        assert_eq!(json["severity"], "critical");
        assert!(
            json["docs"]
                .as_str()
                .unwrap()
                .ends_with("#check-forged_signature")
        );
        let json = serde_json::to_value(Finding::new(Check::Burst, Verdict::Warn, "")).unwrap();
        assert_eq!(
            (&json["verdict"], &json["severity"]),
            (&"warn".into(), &serde_json::Value::Null)
        );
    }

    #[test]
    fn a_report_passes_unless_a_check_failed() {
        let finding = |check, verdict| Finding::new(check, verdict, "");
        let report = Report::new(
            "http://127.0.0.1/".to_owned(),
            vec![
                finding(Check::ValidEvent, Verdict::Pass),
                finding(Check::NotJson, Verdict::Warn),
                finding(Check::Rotation, Verdict::Skip),
            ],
            2,
            Duration::from_millis(1500),
        );
        assert!(report.passed);
        let report = Report::new(
            String::new(),
            vec![
                finding(Check::WrongSecret, Verdict::Fail(Severity::Critical)),
                finding(Check::Burst, Verdict::Fail(Severity::Error)),
            ],
            2,
            Duration::ZERO,
        );
        assert!(!report.passed);
        assert_eq!((report.counts.failed, report.counts.critical), (2, 1));
        assert_eq!(serde_json::to_value(&report).unwrap()["duration_ms"], 0.0);
    }
}
