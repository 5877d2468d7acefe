//! Time as the sender stores it: Unix milliseconds, by one clock, shown as RFC 3339.

use std::time::Duration;

/// Unix milliseconds by the system clock: every stored time uses this one source.
pub fn now_ms() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

/// A `Duration` in whole milliseconds, saturating.
pub fn ms(d: Duration) -> i64 {
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
