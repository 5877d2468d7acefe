//! Time as the sender stores it: Unix milliseconds, by one clock, shown as RFC 3339, and the
//! only place the crate reads a clock. `kxp-sender/clippy.toml` forbids the clock functions
//! everywhere else, so what time a decision sees can always be traced here (and tokio's test
//! clock pauses every timer that goes through [`tokio_instant`]).
#![expect(
    clippy::disallowed_methods,
    reason = "the one module that reads the clocks"
)]

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

/// How far the shared database's clock is ahead of this machine's, in milliseconds (0 until
/// measured, and on SQLite, whose database is on this machine).
static DATABASE_OFFSET_MS: AtomicI64 = AtomicI64::new(0);

/// A day in ms.
pub(crate) const DAY_MS: i64 = 24 * 60 * 60 * 1000;

/// Unix milliseconds by the database's clock, as this process best knows it: the system clock
/// corrected by the last measured offset. Every stored time uses this one source, so leases,
/// schedules and circuit probes written by several `kxp serve` processes on one PostgreSQL
/// agree even when the machines' clocks do not.
pub fn now_ms() -> i64 {
    system_ms().saturating_add(DATABASE_OFFSET_MS.load(Ordering::Relaxed))
}

/// Unix milliseconds by this machine's clock.
pub(crate) fn system_ms() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

/// Unix seconds by this machine's clock: a signature's `t`, which the receiver compares with
/// its own clock (never the database's).
pub(crate) fn unix_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// This machine's time, as a date: what an HTTP date (`Retry-After`) is measured from.
pub(crate) fn utc_now() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc()
}

/// The monotonic clock, for how long something took or since when a count holds.
pub(crate) fn instant() -> std::time::Instant {
    std::time::Instant::now()
}

/// The monotonic clock as tokio's timers read it (paused in tests that pause time).
pub(crate) fn tokio_instant() -> tokio::time::Instant {
    tokio::time::Instant::now()
}

/// The database's clock read between `before` and `after` (this machine's, in ms), as an offset:
/// the reading is taken to be from the middle of the round trip. `None` when the round trip was
/// too slow (over a second) to say anything useful.
pub(crate) fn offset_from(before: i64, database: i64, after: i64) -> Option<i64> {
    let round_trip = after.checked_sub(before)?;
    (0..=1000)
        .contains(&round_trip)
        .then(|| database.saturating_sub(before.saturating_add(round_trip / 2)))
}

/// Makes [`now_ms`] follow the database's clock by `offset` ms.
/// How far [`now_ms`] is ahead of this machine's clock: what turns a stored time into the clock
/// ids are made by ([`new_id`](crate::new_id)'s UUIDv7).
pub(crate) fn database_offset() -> i64 {
    DATABASE_OFFSET_MS.load(Ordering::Relaxed)
}

pub(crate) fn set_database_offset(offset: i64) {
    DATABASE_OFFSET_MS.store(offset, Ordering::Relaxed);
}

/// A `Duration` in whole milliseconds, saturating.
pub(crate) fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// An RFC 3339 time as Unix ms; `None` when it is not one.
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    let t =
        time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok()
}

/// Unix ms as RFC 3339 UTC with second precision, the envelope's `created_at` form.
pub fn rfc3339(ms: i64) -> String {
    let seconds = ms.div_euclid(1000);
    time::OffsetDateTime::from_unix_timestamp(seconds)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod clock_tests {
    use super::offset_from;

    #[test]
    fn the_database_reading_is_taken_from_the_middle_of_the_round_trip() {
        assert_eq!(offset_from(1_000, 1_005, 1_010), Some(0));
        assert_eq!(
            offset_from(1_000, 61_005, 1_010),
            Some(60_000),
            "a minute ahead"
        );
        assert_eq!(offset_from(1_000, 995, 1_010), Some(-10), "behind");
        assert_eq!(
            offset_from(1_000, 1_000, 3_000),
            None,
            "a 2 s round trip says nothing"
        );
        assert_eq!(
            offset_from(1_000, 1_000, 900),
            None,
            "this clock stepped back"
        );
    }
}
