//! Endpoint health maths: the latency histogram's buckets, clock hours, the statistics of a
//! window of hourly rows, and how a run of finished attempts moves an endpoint's running
//! statistics. Pure: the store reads and writes the rows.

use crate::model::Window;

/// Upper bounds (ms, inclusive) of the latency histogram's buckets; one more bucket holds
/// everything slower. 30 000 ms is the longest endpoint timeout.
pub const LATENCY_BOUNDS_MS: [i64; 11] =
    [10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 30_000];

/// One hour, in ms: the width of a statistics bucket.
pub(crate) const HOUR_MS: i64 = 60 * 60 * 1000;

/// The histogram bucket of a duration.
pub fn bucket_of(duration_ms: i64) -> usize {
    LATENCY_BOUNDS_MS
        .iter()
        .position(|&bound| duration_ms <= bound)
        .unwrap_or(LATENCY_BOUNDS_MS.len())
}

/// The start (Unix ms) of the clock hour holding `at`.
pub(crate) fn hour_of(at: i64) -> i64 {
    at.div_euclid(HOUR_MS) * HOUR_MS
}

/// The upper bound of the bucket holding the `p`-quantile (nearest rank) of a histogram.
pub(crate) fn percentile(histogram: &[i64; 12], p: f64) -> Option<i64> {
    let total: i64 = histogram.iter().sum();
    if total == 0 {
        return None;
    }
    // Nearest rank: the smallest value with at least p of the attempts at or below it.
    let rank = ((p * total as f64).ceil() as i64).clamp(1, total);
    let mut seen = 0;
    for (i, count) in histogram.iter().enumerate() {
        seen += count;
        if seen >= rank {
            return LATENCY_BOUNDS_MS.get(i).copied();
        }
    }
    None
}

/// The statistics of a window from its hourly rows: `(successes, failures, histogram)` each.
pub(crate) fn window(rows: impl Iterator<Item = (i64, i64, [i64; 12])>) -> Window {
    let mut histogram = [0i64; 12];
    let (mut successes, mut failures) = (0, 0);
    for (row_successes, row_failures, row_histogram) in rows {
        successes += row_successes;
        failures += row_failures;
        for (sum, count) in histogram.iter_mut().zip(row_histogram) {
            *sum += count;
        }
    }
    let attempts = successes + failures;
    Window {
        attempts,
        successes,
        failures,
        success_rate: (attempts > 0).then(|| successes as f64 / attempts as f64),
        latency_p50_ms: percentile(&histogram, 0.5),
        latency_p95_ms: percentile(&histogram, 0.95),
    }
}

/// An endpoint's running statistics (`kxp_endpoint_stats`), as attempts move them on. The
/// store reads the row once per batch of finished attempts, folds every attempt of the batch
/// into it in order ([`RunningStats::record`]), and writes it back once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RunningStats {
    /// Failed attempts since the last success.
    pub consecutive_failures: i64,
    /// When the current run of failures began (`None` after a success): what auto-disable
    /// measures.
    pub failing_since: Option<i64>,
    /// Unix ms of the last success.
    pub last_success_at: Option<i64>,
    /// Unix ms of the last failure.
    pub last_failure_at: Option<i64>,
    /// The error of the last failed attempt, kept after a success.
    pub last_error: Option<String>,
}

impl RunningStats {
    /// One more finished attempt, at `at`; `error` is `None` for a success.
    pub(crate) fn record(&mut self, at: i64, error: Option<&str>) {
        match error {
            None => {
                self.consecutive_failures = 0;
                self.failing_since = None;
                self.last_success_at = Some(at);
            }
            Some(error) => {
                self.consecutive_failures += 1;
                self.failing_since = Some(self.failing_since.unwrap_or(at));
                self.last_failure_at = Some(at);
                self.last_error = Some(error.to_owned());
            }
        }
    }
}

/// What a batch adds to one endpoint's clock hour (`kxp_endpoint_stats_hourly`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct HourTally {
    /// 2xx attempts.
    pub successes: i64,
    /// The others.
    pub failures: i64,
    /// Attempts per latency bucket ([`bucket_of`]).
    pub histogram: [i64; 12],
}

impl HourTally {
    /// One more attempt that took `duration_ms`.
    pub(crate) fn add(&mut self, success: bool, duration_ms: i64) {
        if success {
            self.successes += 1;
        } else {
            self.failures += 1;
        }
        self.histogram[bucket_of(duration_ms)] += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_statistics_follow_each_attempt() {
        let mut stats = RunningStats::default();
        stats.record(10, Some("http_500"));
        stats.record(20, Some("timeout"));
        assert_eq!(stats.consecutive_failures, 2);
        assert_eq!(
            stats.failing_since,
            Some(10),
            "from the first failure of the run"
        );
        assert_eq!(stats.last_error.as_deref(), Some("timeout"));
        stats.record(30, None);
        assert_eq!(
            stats,
            RunningStats {
                consecutive_failures: 0,
                failing_since: None,
                last_success_at: Some(30),
                last_failure_at: Some(20),
                last_error: Some("timeout".to_owned()),
            },
            "a success ends the run and keeps the last error"
        );
        stats.record(40, Some("http_503"));
        assert_eq!(
            (stats.consecutive_failures, stats.failing_since),
            (1, Some(40))
        );
    }

    #[test]
    fn an_hour_tallies_outcomes_and_latencies() {
        let mut tally = HourTally::default();
        tally.add(true, 5);
        tally.add(false, 5);
        tally.add(true, 40_000);
        assert_eq!((tally.successes, tally.failures), (2, 1));
        assert_eq!(tally.histogram[0], 2);
        assert_eq!(tally.histogram[11], 1);
    }

    #[test]
    fn buckets_and_percentiles() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(10), 0);
        assert_eq!(bucket_of(11), 1);
        assert_eq!(bucket_of(30_000), 10);
        assert_eq!(bucket_of(30_001), 11);
        let mut h = [0i64; 12];
        assert_eq!(percentile(&h, 0.5), None);
        h[0] = 7;
        h[5] = 1;
        assert_eq!(percentile(&h, 0.5), Some(10));
        assert_eq!(percentile(&h, 0.95), Some(500));
        h[11] = 10;
        assert_eq!(percentile(&h, 0.95), None);
        assert_eq!(hour_of(HOUR_MS + 5), HOUR_MS);
    }
}
