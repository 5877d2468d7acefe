//! How long a console session lives: an idle expiry (no request for 8 h) and an absolute one
//! (24 h after sign-in, however busy), checked on every request. `last_seen` is written at
//! most once a minute, so a page that polls costs one write a minute, not one per request; the
//! idle expiry is thus exact to within that minute.

/// A session with no request for this long (ms) is over.
pub(crate) const IDLE_EXPIRY_MS: i64 = 8 * 60 * 60 * 1000;

/// A session this old (ms) is over, however busy.
pub(crate) const ABSOLUTE_EXPIRY_MS: i64 = 24 * 60 * 60 * 1000;

/// `last_seen` is rewritten only when older than this (ms).
pub(crate) const TOUCH_EVERY_MS: i64 = 60 * 1000;

/// What to do with a session seen at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Freshness {
    /// Valid, `last_seen` recent enough: nothing to write.
    Fresh,
    /// Valid; write `last_seen = now`.
    Touch,
    /// Over (idle or absolute expiry): delete it, and treat the request as signed out.
    Expired,
}

/// The state of a session created at `created_at` and last seen at `last_seen`, at `now` (all
/// Unix ms).
pub(crate) fn freshness(created_at: i64, last_seen: i64, now: i64) -> Freshness {
    if now - created_at >= ABSOLUTE_EXPIRY_MS || now - last_seen >= IDLE_EXPIRY_MS {
        Freshness::Expired
    } else if now - last_seen >= TOUCH_EVERY_MS {
        Freshness::Touch
    } else {
        Freshness::Fresh
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: i64 = 60 * 60 * 1000;

    #[test]
    fn a_session_idle_for_8_hours_is_over() {
        assert_eq!(freshness(0, 0, 8 * HOUR - 1), Freshness::Touch);
        assert_eq!(freshness(0, 0, 8 * HOUR), Freshness::Expired);
    }

    #[test]
    fn a_busy_session_is_over_after_24_hours() {
        let now = 24 * HOUR;
        assert_eq!(freshness(0, now - 1, now - 1), Freshness::Fresh);
        assert_eq!(freshness(0, now - 1, now), Freshness::Expired);
    }

    #[test]
    fn last_seen_is_written_at_most_once_a_minute() {
        assert_eq!(freshness(0, 0, TOUCH_EVERY_MS - 1), Freshness::Fresh);
        assert_eq!(freshness(0, 0, TOUCH_EVERY_MS), Freshness::Touch);
    }
}
