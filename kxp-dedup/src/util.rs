//! Small conversions shared by the statements of both backends.

use std::time::Duration;

/// The longest duration passed to SQL, 1000 years in milliseconds: `now + lease` and
/// `now - age` stay far inside both backends' ranges whatever a caller passes.
const MAX_MILLIS: i64 = 1000 * 365 * 24 * 60 * 60 * 1000;

/// A duration as whole milliseconds for a bind parameter, capped at [`MAX_MILLIS`].
pub(crate) fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis())
        .unwrap_or(MAX_MILLIS)
        .min(MAX_MILLIS)
}

/// A `Retry-After` from the milliseconds left on a lease: whole seconds, rounded up so the
/// sender never comes back before the lease ends, and at least one second.
pub(crate) fn retry_after_from_millis(left_ms: i64) -> Duration {
    let left_ms = u64::try_from(left_ms).unwrap_or(0);
    Duration::from_secs(left_ms.div_ceil(1000).max(1))
}

/// `text` cut to at most `max` bytes, on a character boundary.
pub(crate) fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.get(..end).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millis_caps_huge_durations() {
        assert_eq!(millis(Duration::from_millis(1500)), 1500);
        assert_eq!(millis(Duration::MAX), MAX_MILLIS);
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(retry_after_from_millis(-5), Duration::from_secs(1));
        assert_eq!(retry_after_from_millis(0), Duration::from_secs(1));
        assert_eq!(retry_after_from_millis(1), Duration::from_secs(1));
        assert_eq!(retry_after_from_millis(1000), Duration::from_secs(1));
        assert_eq!(retry_after_from_millis(1001), Duration::from_secs(2));
        assert_eq!(retry_after_from_millis(59_500), Duration::from_secs(60));
    }

    #[test]
    fn truncate_respects_char_boundaries() {
        assert_eq!(truncate("abc", 10), "abc");
        assert_eq!(truncate("abcdef", 3), "abc");
        // "é" is two bytes: cutting inside it backs off to before it.
        assert_eq!(truncate("aé", 2), "a");
    }
}
