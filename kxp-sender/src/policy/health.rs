//! Endpoint health maths: the latency histogram's buckets, clock hours, and the statistics of
//! a window of hourly rows. Pure: the store reads and writes the rows.

use crate::model::Window;

/// Upper bounds (ms, inclusive) of the latency histogram's buckets; one more bucket holds
/// everything slower. 30 000 ms is the longest endpoint timeout.
pub const LATENCY_BOUNDS_MS: [i64; 11] =
    [10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 30_000];

/// One hour, in ms: the width of a statistics bucket.
pub const HOUR_MS: i64 = 60 * 60 * 1000;

/// The histogram bucket of a duration.
pub fn bucket_of(duration_ms: i64) -> usize {
    LATENCY_BOUNDS_MS
        .iter()
        .position(|&bound| duration_ms <= bound)
        .unwrap_or(LATENCY_BOUNDS_MS.len())
}

/// The start (Unix ms) of the clock hour holding `at`.
pub fn hour_of(at: i64) -> i64 {
    at.div_euclid(HOUR_MS) * HOUR_MS
}

/// The upper bound of the bucket holding the `p`-quantile (nearest rank) of a histogram.
pub fn percentile(histogram: &[i64; 12], p: f64) -> Option<i64> {
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
pub fn window(rows: impl Iterator<Item = (i64, i64, [i64; 12])>) -> Window {
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

#[cfg(test)]
mod tests {
    use super::*;

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
