//! When to try a delivery again: pure functions of the schedule, the attempt count and a random
//! draw, so every rule here is unit-tested without a clock.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// The default schedule: tries at these offsets from the first one, nine in all, spanning a day
/// and a half, which outlasts most outages without flooding a merchant who is down for good.
pub(crate) const DEFAULT_OFFSETS: [Duration; 9] = [
    Duration::ZERO,
    Duration::from_secs(10),
    Duration::from_secs(30),
    Duration::from_secs(60),
    Duration::from_secs(5 * 60),
    Duration::from_secs(15 * 60),
    Duration::from_secs(60 * 60),
    Duration::from_secs(6 * 60 * 60),
    Duration::from_secs(24 * 60 * 60),
];

/// The default jitter: each gap is stretched or shrunk by up to 25 %, so deliveries that failed
/// together (an endpoint's outage) do not all come back at the same instant.
pub(crate) const DEFAULT_JITTER: f64 = 0.25;

/// The longest wait a `Retry-After` can impose; a receiver asking for more is capped here.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 60 * 60);

/// A retry schedule: offsets from the first try (the first is usually zero), and the jitter
/// applied to each gap between them.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    offsets: Vec<Duration>,
    jitter: f64,
}

impl Default for Schedule {
    fn default() -> Schedule {
        Schedule {
            offsets: DEFAULT_OFFSETS.to_vec(),
            jitter: DEFAULT_JITTER,
        }
    }
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AfterFailure {
    /// Try again after this delay.
    RetryIn(Duration),
    /// That was the last try: the delivery is dead (in the dead-letter queue).
    Dead,
}

impl Schedule {
    /// A schedule from offsets that never decrease, with a jitter fraction in `0.0..=1.0`.
    pub fn new(offsets: Vec<Duration>, jitter: f64) -> Result<Schedule, ScheduleError> {
        if offsets.is_empty() {
            return Err(ScheduleError::Empty);
        }
        if offsets.windows(2).any(|w| matches!(w, [a, b] if b < a)) {
            return Err(ScheduleError::Decreasing);
        }
        if !(0.0..=1.0).contains(&jitter) {
            return Err(ScheduleError::Jitter);
        }
        Ok(Schedule { offsets, jitter })
    }

    /// The same offsets with another jitter.
    pub fn with_jitter(self, jitter: f64) -> Result<Schedule, ScheduleError> {
        Schedule::new(self.offsets, jitter)
    }

    /// How many tries in all.
    pub fn tries(&self) -> u32 {
        u32::try_from(self.offsets.len()).unwrap_or(u32::MAX)
    }

    /// The offsets from the first try.
    pub fn offsets(&self) -> &[Duration] {
        &self.offsets
    }

    /// The jitter fraction.
    pub fn jitter(&self) -> f64 {
        self.jitter
    }

    /// After `attempts_made` tries have all failed: the delay before the next, jittered by
    /// `draw` (uniform in `0.0..1.0`, mapped to `-jitter..+jitter` of the gap), at least
    /// `retry_after` when the receiver asked for one (capped at [`MAX_RETRY_AFTER`]).
    pub fn after_failure(
        &self,
        attempts_made: u32,
        draw: f64,
        retry_after: Option<Duration>,
    ) -> AfterFailure {
        let index = usize::try_from(attempts_made).unwrap_or(usize::MAX);
        let (Some(previous), Some(next)) = (
            index.checked_sub(1).and_then(|i| self.offsets.get(i)),
            self.offsets.get(index),
        ) else {
            return AfterFailure::Dead;
        };
        let gap = next.saturating_sub(*previous);
        let factor = 1.0 + self.jitter * (draw.clamp(0.0, 1.0) * 2.0 - 1.0);
        let jittered = gap.mul_f64(factor.max(0.0));
        let floor = retry_after.map_or(Duration::ZERO, |r| r.min(MAX_RETRY_AFTER));
        AfterFailure::RetryIn(jittered.max(floor))
    }
}

/// Parses `0s,10s,30s,1m` (offsets from the first try) into a schedule with the default jitter.
impl FromStr for Schedule {
    type Err = ScheduleError;

    fn from_str(text: &str) -> Result<Schedule, ScheduleError> {
        let offsets = text
            .split(',')
            .map(|item| parse_duration(item.trim()))
            .collect::<Result<Vec<_>, _>>()?;
        Schedule::new(offsets, DEFAULT_JITTER)
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for offset in &self.offsets {
            if !first {
                f.write_str(",")?;
            }
            first = false;
            write!(f, "{}", format_duration(*offset))?;
        }
        Ok(())
    }
}

/// Parses a duration such as `250ms`, `10s`, `5m`, `6h`, `3d` (a bare `0` is zero).
pub fn parse_duration(text: &str) -> Result<Duration, ScheduleError> {
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| ScheduleError::Duration(text.to_owned()))?;
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| ScheduleError::Duration(text.to_owned()))?;
    let unit_ms: u64 = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(ScheduleError::Duration(text.to_owned())),
    };
    n.checked_mul(unit_ms)
        .map(Duration::from_millis)
        .ok_or_else(|| ScheduleError::Duration(text.to_owned()))
}

/// The shortest exact spelling: `0s`, `250ms`, `10s`, `5m`, `6h`, `1d`.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
    ] {
        if ms != 0 && ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    if ms == 0 {
        "0s".to_owned()
    } else {
        format!("{ms}ms")
    }
}

/// A schedule that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    /// No offsets at all.
    #[error("a retry schedule needs at least one offset")]
    Empty,
    /// An offset smaller than the one before it.
    #[error("retry offsets must not decrease (they are offsets from the first try, not gaps)")]
    Decreasing,
    /// Jitter outside 0–1.
    #[error("jitter must be a fraction between 0 and 1")]
    Jitter,
    /// A duration that does not parse.
    #[error("`{0}` is not a duration such as 250ms, 10s, 5m, 6h or 1d")]
    Duration(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retry_in(s: &Schedule, attempts: u32, draw: f64) -> Duration {
        match s.after_failure(attempts, draw, None) {
            AfterFailure::RetryIn(d) => d,
            AfterFailure::Dead => panic!("dead after {attempts}"),
        }
    }

    #[test]
    fn the_default_schedule_is_nine_tries_over_a_day_and_a_half() {
        let s = Schedule::default();
        assert_eq!(s.tries(), 9);
        assert_eq!(s.to_string(), "0s,10s,30s,1m,5m,15m,1h,6h,1d");
        let gaps: Vec<Duration> = (1..9).map(|n| retry_in(&s, n, 0.5)).collect();
        let secs: Vec<u64> = gaps.iter().map(Duration::as_secs).collect();
        assert_eq!(secs, [10, 20, 30, 240, 600, 2700, 18000, 64800]);
        assert_eq!(s.after_failure(9, 0.5, None), AfterFailure::Dead);
        assert_eq!(
            s.after_failure(0, 0.5, None),
            AfterFailure::Dead,
            "nothing failed yet"
        );
    }

    #[test]
    fn jitter_stays_within_a_quarter_of_each_gap() {
        let s = Schedule::default();
        for attempts in 1..9 {
            let gap = s.offsets()[attempts as usize] - s.offsets()[attempts as usize - 1];
            for step in 0..=100 {
                let d = retry_in(&s, attempts, f64::from(step) / 100.0);
                assert!(
                    d >= gap.mul_f64(0.75) && d <= gap.mul_f64(1.25),
                    "{attempts}: {d:?} vs {gap:?}"
                );
            }
            assert_eq!(retry_in(&s, attempts, 0.0), gap.mul_f64(0.75));
            assert_eq!(retry_in(&s, attempts, 1.0), gap.mul_f64(1.25));
        }
    }

    #[test]
    fn retry_after_is_a_floor_with_a_cap() {
        let s = Schedule::default();
        assert_eq!(
            s.after_failure(1, 0.5, Some(Duration::from_secs(120))),
            AfterFailure::RetryIn(Duration::from_secs(120))
        );
        assert_eq!(
            s.after_failure(1, 0.5, Some(Duration::from_secs(1))),
            AfterFailure::RetryIn(Duration::from_secs(10))
        );
        assert_eq!(
            s.after_failure(1, 0.5, Some(Duration::from_secs(10 * 86_400))),
            AfterFailure::RetryIn(MAX_RETRY_AFTER)
        );
        assert_eq!(
            s.after_failure(9, 0.5, Some(Duration::from_secs(1))),
            AfterFailure::Dead,
            "never beyond the last try"
        );
    }

    #[test]
    fn schedules_parse_and_print() {
        let s: Schedule = "0s, 100ms,1m,3d".parse().unwrap();
        assert_eq!(
            s.offsets(),
            [
                Duration::ZERO,
                Duration::from_millis(100),
                Duration::from_secs(60),
                Duration::from_secs(259_200)
            ]
        );
        assert_eq!(s.to_string(), "0s,100ms,1m,3d");
        assert_eq!(
            "".parse::<Schedule>(),
            Err(ScheduleError::Duration(String::new()))
        );
        assert_eq!("1m,10s".parse::<Schedule>(), Err(ScheduleError::Decreasing));
        assert_eq!(
            "10x".parse::<Schedule>(),
            Err(ScheduleError::Duration("10x".into()))
        );
        assert_eq!(
            "99999999999999999d".parse::<Schedule>(),
            Err(ScheduleError::Duration("99999999999999999d".into()))
        );
        assert!(Schedule::default().with_jitter(1.5).is_err());
    }

    #[test]
    fn zero_jitter_is_exact_and_an_exponential_schedule_is_expressible() {
        let s: Schedule = "0s,1m,3m,7m,15m,31m,1h"
            .parse::<Schedule>()
            .unwrap()
            .with_jitter(0.0)
            .unwrap();
        assert_eq!(retry_in(&s, 1, 0.9), Duration::from_secs(60));
        assert_eq!(retry_in(&s, 6, 0.1), Duration::from_secs(29 * 60));
    }
}
