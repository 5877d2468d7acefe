//! What the demo shows: live progress while it runs, then the summary table and the verdict,
//! both pure functions of the counts so the loss detector itself is unit-tested.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::io;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use kxp_api::{Delivery, DeliveryId, DeliveryStatus, EventId};
use tracing_subscriber::fmt::MakeWriter;

use super::receiver::Counts;

/// The title line above the table; the test finds the table by it.
pub(super) const TABLE_TITLE: &str = "kxp demo summary";

/// Everything the table shows.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Summary {
    /// Events asked for (`--events`).
    pub requested: u64,
    /// Events the API accepted.
    pub emitted: u64,
    /// Emitted events with a delivered delivery.
    pub delivered: u64,
    /// HTTP tries, over every delivery.
    pub attempts: u64,
    /// Tries beyond each delivery's first.
    pub retried: u64,
    /// Tries that never reached the receiver (connection refused).
    pub refused: u64,
    /// 503s while the receiver was starting.
    pub unavailable: u64,
    /// 500s injected before processing.
    pub injected: u64,
    /// 500s of the broken endpoint.
    pub broken: u64,
    /// 500s to the payments the shop rejected until it was fixed.
    pub rejected: u64,
    /// Events processed whose answer was then lost.
    pub acks_lost: u64,
    /// Dead deliveries that were replayed and then delivered.
    pub dead_replayed: u64,
    /// Deliveries of already-processed events that dedup answered without running the handler.
    pub duplicates: u64,
    /// Emitted events whose handler effect is in the ledger exactly once.
    pub processed_once: u64,
    /// Emitted events that are not in the ledger.
    pub lost: u64,
    /// Emitted events in the ledger more than once.
    pub processed_twice: u64,
    /// Ledger events that were never emitted.
    pub unexpected: u64,
    /// Whether every delivery reached delivered or dead before the deadline.
    pub settled: bool,
    /// The whole run.
    pub elapsed: Duration,
}

/// The ledger checked against the emitted ids.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Tally {
    /// Emitted, processed once.
    pub once: u64,
    /// Emitted, never processed.
    pub lost: u64,
    /// Emitted, processed more than once.
    pub twice: u64,
    /// Processed, never emitted.
    pub unexpected: u64,
}

/// Compares the ledger (event id, times processed) with the emitted ids.
pub(super) fn tally(emitted: &[EventId], ledger: &[(String, u64)]) -> Tally {
    let counts: HashMap<&str, u64> = ledger.iter().map(|(id, n)| (id.as_str(), *n)).collect();
    let emitted: HashSet<&str> = emitted.iter().map(EventId::as_str).collect();
    let mut tally = Tally::default();
    for id in &emitted {
        match counts.get(id).copied().unwrap_or(0) {
            0 => tally.lost += 1,
            1 => tally.once += 1,
            _ => tally.twice += 1,
        }
    }
    tally.unexpected = counts
        .iter()
        .filter(|(id, n)| **n > 0 && !emitted.contains(**id))
        .count() as u64;
    tally
}

/// What the sender's deliveries say.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Deliveries {
    /// Distinct events with a delivered delivery.
    pub delivered_events: u64,
    /// HTTP tries in all.
    pub attempts: u64,
    /// Tries beyond each delivery's first.
    pub retried: u64,
    /// Dead deliveries not replayed yet.
    pub dead: u64,
    /// Dead deliveries whose replay (or the replay's replay…) was delivered.
    pub dead_replayed: u64,
    /// Pending or being attempted.
    pub in_flight: u64,
}

impl Deliveries {
    /// Counts a listing of every delivery.
    pub(super) fn of(rows: &[Delivery]) -> Deliveries {
        let by_id: HashMap<&DeliveryId, &Delivery> = rows.iter().map(|d| (&d.id, d)).collect();
        let mut out = Deliveries::default();
        let mut delivered = HashSet::new();
        for d in rows {
            let attempts = u64::from(d.attempts);
            out.attempts += attempts;
            out.retried += attempts.saturating_sub(1);
            match d.status {
                DeliveryStatus::Delivered => {
                    delivered.insert(&d.event_id);
                }
                DeliveryStatus::Dead if d.replayed_by.is_none() => out.dead += 1,
                DeliveryStatus::Dead => {
                    // Follow the replay chain to its end (bounded: ids cannot loop, but a
                    // corrupt listing must not hang the demo).
                    let mut next = d.replayed_by.as_ref();
                    let mut end = None;
                    for _ in 0..rows.len() {
                        let Some(row) = next.and_then(|id| by_id.get(id)) else {
                            break;
                        };
                        end = Some(*row);
                        next = row.replayed_by.as_ref();
                    }
                    if end.is_some_and(|row| row.status == DeliveryStatus::Delivered) {
                        out.dead_replayed += 1;
                    }
                }
                _ => out.in_flight += 1,
            }
        }
        out.delivered_events = delivered.len() as u64;
        out
    }
}

/// The summary from the sender's deliveries, the receiver's counters and ledger, and the
/// emitted ids.
pub(super) fn summarize(
    requested: u64,
    emitted: &[EventId],
    deliveries: &Deliveries,
    counts: &Counts,
    ledger: &[(String, u64)],
    settled: bool,
    elapsed: Duration,
) -> Summary {
    let tally = tally(emitted, ledger);
    Summary {
        requested,
        emitted: emitted.len() as u64,
        delivered: deliveries.delivered_events,
        attempts: deliveries.attempts,
        retried: deliveries.retried,
        refused: deliveries.attempts.saturating_sub(counts.requests),
        unavailable: counts.unavailable,
        injected: counts.injected,
        broken: counts.broken,
        rejected: counts.rejected,
        acks_lost: counts.acks_lost,
        dead_replayed: deliveries.dead_replayed,
        duplicates: counts.duplicates,
        processed_once: tally.once,
        lost: tally.lost,
        processed_twice: tally.twice,
        unexpected: tally.unexpected,
        settled,
        elapsed,
    }
}

/// Ok when every requested event was emitted, delivered, and processed exactly once.
pub(super) fn verdict(s: &Summary) -> Result<(), String> {
    let mut problems = Vec::new();
    if s.emitted < s.requested {
        problems.push(format!(
            "the API accepted {} of {} events",
            s.emitted, s.requested
        ));
    }
    if s.lost > 0 {
        problems.push(format!("{} events were never processed (lost)", s.lost));
    }
    if s.processed_twice > 0 {
        problems.push(format!(
            "{} events were processed more than once",
            s.processed_twice
        ));
    }
    if s.unexpected > 0 {
        problems.push(format!(
            "{} processed events were never emitted",
            s.unexpected
        ));
    }
    if s.processed_once != s.emitted {
        problems.push(format!(
            "{} of {} events were processed exactly once",
            s.processed_once, s.emitted
        ));
    }
    if s.delivered < s.emitted {
        problems.push(format!(
            "{} events are not marked delivered by the sender",
            s.emitted - s.delivered
        ));
    }
    if !s.settled {
        problems.push("deliveries were still in flight at the deadline".to_owned());
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// The table: a title line, then one `label  value` line per count, labels left-aligned and
/// values right-aligned, so both people and tests read it.
pub(super) fn table(s: &Summary) -> String {
    let rows: [(&str, String); 16] = [
        ("emitted", s.emitted.to_string()),
        ("delivered", s.delivered.to_string()),
        ("attempts", s.attempts.to_string()),
        ("retried", s.retried.to_string()),
        ("connection refused", s.refused.to_string()),
        ("answered 503 (starting up)", s.unavailable.to_string()),
        ("answered 500 (flaky)", s.injected.to_string()),
        ("answered 500 (broken endpoint)", s.broken.to_string()),
        ("answered 500 (rejected payment)", s.rejected.to_string()),
        ("acks lost after processing", s.acks_lost.to_string()),
        ("dead then replayed", s.dead_replayed.to_string()),
        ("duplicates absorbed by dedup", s.duplicates.to_string()),
        ("processed exactly once", s.processed_once.to_string()),
        ("lost", s.lost.to_string()),
        ("processed more than once", s.processed_twice.to_string()),
        ("elapsed", format!("{:.1}s", s.elapsed.as_secs_f64())),
    ];
    let mut out = format!("{TABLE_TITLE}\n");
    for (label, value) in rows {
        let _ = writeln!(out, "  {label:<32}{value:>8}");
    }
    out
}

/// One moment of the run, for the progress display.
#[derive(Debug, Clone, Copy)]
pub(super) struct Live {
    /// Since the receiver's phases started.
    pub elapsed: Duration,
    /// Events emitted so far.
    pub emitted: u64,
    /// Events to emit.
    pub requested: u64,
    /// The receiver's counters.
    pub counts: Counts,
    /// Dead deliveries not replayed yet.
    pub dead: u64,
    /// The receiver's state, in words.
    pub receiver: &'static str,
}

impl Live {
    fn message(&self) -> String {
        format!(
            "emitted {}/{} · duplicates absorbed {} · dead {} · receiver {}",
            self.emitted, self.requested, self.counts.duplicates, self.dead, self.receiver
        )
    }
}

/// A progress bar on a terminal, or a plain line every second.
pub(super) enum Progress {
    /// An indicatif bar of processed events.
    Bar(ProgressBar),
    /// Periodic lines, for CI and pipes.
    Lines {
        /// When the last line was printed.
        last: Option<Instant>,
    },
}

impl Progress {
    /// A bar of `total` events when `bar`, plain lines otherwise.
    pub(super) fn new(bar: bool, total: u64) -> Progress {
        if !bar {
            return Progress::Lines { last: None };
        }
        let pb = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stdout());
        if let Ok(style) = ProgressStyle::with_template(
            "{spinner} {prefix} [{bar:30.green}] {pos}/{len} processed · {msg}",
        ) {
            pb.set_style(style.progress_chars("=> "));
        }
        pb.enable_steady_tick(Duration::from_millis(100));
        Progress::Bar(pb)
    }

    /// A line above the bar (or just a line).
    pub(super) fn say(&self, line: &str) {
        match self {
            Progress::Bar(pb) => pb.println(line),
            Progress::Lines { .. } => println!("{line}"),
        }
    }

    /// Shows `live`.
    pub(super) fn update(&mut self, live: &Live) {
        match self {
            Progress::Bar(pb) => {
                pb.set_prefix(format!("[{:>5.1}s]", live.elapsed.as_secs_f64()));
                pb.set_position(live.counts.processed);
                pb.set_message(live.message());
            }
            Progress::Lines { last } => {
                if last.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
                    return;
                }
                *last = Some(Instant::now());
                println!(
                    "[{:>5.1}s] processed {}/{} · {}",
                    live.elapsed.as_secs_f64(),
                    live.counts.processed,
                    live.requested,
                    live.message()
                );
            }
        }
    }

    /// Removes the bar before the table is printed.
    pub(super) fn finish(&self) {
        if let Progress::Bar(pb) = self {
            pb.finish_and_clear();
        }
    }

    /// A log writer that prints above the bar, on stderr.
    pub(super) fn log_writer(&self) -> LogWriter {
        match self {
            Progress::Bar(pb) => LogWriter(Some(pb.clone())),
            Progress::Lines { .. } => LogWriter(None),
        }
    }
}

/// Writes log lines to stderr, suspending the progress bar around each so they land above it.
#[derive(Clone)]
pub(super) struct LogWriter(Option<ProgressBar>);

impl<'a> MakeWriter<'a> for LogWriter {
    type Writer = LogWriter;

    fn make_writer(&'a self) -> LogWriter {
        self.clone()
    }
}

impl io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &self.0 {
            Some(pb) => pb.suspend(|| io::stderr().write_all(buf).map(|()| buf.len())),
            None => io::stderr().write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: u64) -> Vec<EventId> {
        (0..n).map(|i| EventId::from(format!("evt-{i}"))).collect()
    }

    fn good() -> Summary {
        Summary {
            requested: 3,
            emitted: 3,
            delivered: 3,
            processed_once: 3,
            settled: true,
            ..Summary::default()
        }
    }

    #[test]
    fn everything_once_passes() {
        assert_eq!(verdict(&good()), Ok(()));
        let ledger: Vec<(String, u64)> = ids(3).into_iter().map(|id| (id.into(), 1)).collect();
        assert_eq!(
            tally(&ids(3), &ledger),
            Tally {
                once: 3,
                ..Tally::default()
            }
        );
    }

    #[test]
    fn a_lost_event_fails_the_demo() {
        let ledger = vec![("evt-0".to_owned(), 1), ("evt-2".to_owned(), 1)];
        let t = tally(&ids(3), &ledger);
        assert_eq!((t.once, t.lost), (2, 1));
        let deliveries = Deliveries {
            delivered_events: 3,
            ..Deliveries::default()
        };
        let s = summarize(
            3,
            &ids(3),
            &deliveries,
            &Counts::default(),
            &ledger,
            true,
            Duration::ZERO,
        );
        let why = verdict(&s).unwrap_err();
        assert!(
            why.contains("1 events were never processed (lost)"),
            "{why}"
        );
    }

    #[test]
    fn an_event_processed_twice_fails_the_demo() {
        let ledger = vec![
            ("evt-0".to_owned(), 1),
            ("evt-1".to_owned(), 2),
            ("evt-2".to_owned(), 1),
        ];
        let t = tally(&ids(3), &ledger);
        assert_eq!((t.once, t.twice, t.lost), (2, 1, 0));
        let s = Summary {
            processed_once: t.once,
            processed_twice: t.twice,
            ..good()
        };
        let why = verdict(&s).unwrap_err();
        assert!(why.contains("processed more than once"), "{why}");
    }

    #[test]
    fn other_shortfalls_fail_the_demo_too() {
        let unknown = vec![("evt-9".to_owned(), 1)];
        assert_eq!(tally(&ids(0), &unknown).unexpected, 1);
        for broken in [
            Summary {
                emitted: 2,
                processed_once: 2,
                delivered: 2,
                ..good()
            },
            Summary {
                unexpected: 1,
                ..good()
            },
            Summary {
                delivered: 2,
                ..good()
            },
            Summary {
                settled: false,
                ..good()
            },
        ] {
            assert!(verdict(&broken).is_err(), "{broken:?}");
        }
    }

    fn row(id: &str, event: &str, status: &str, attempts: u32, by: Option<&str>) -> Delivery {
        let at = kxp_api::Timestamp::from_unix_ms(0);
        Delivery {
            id: id.into(),
            event_id: event.into(),
            endpoint_id: "ep".into(),
            status: DeliveryStatus::parse(status),
            attempts,
            next_attempt_at: None,
            last_status: None,
            last_error: None,
            replayed_by: by.map(DeliveryId::from),
            created_at: at.clone(),
            updated_at: at,
            sequence: None,
        }
    }

    #[test]
    fn deliveries_count_retries_and_replays_that_got_through() {
        let rows = [
            row("d1", "e1", "delivered", 3, None),
            row("d2", "e2", "dead", 9, Some("d4")),
            row("d3", "e3", "dead", 9, None),
            row("d4", "e2", "dead", 9, Some("d5")),
            row("d5", "e2", "delivered", 1, None),
            row("d6", "e4", "pending", 1, None),
        ];
        let d = Deliveries::of(&rows);
        assert_eq!(d.attempts, 32);
        assert_eq!(d.retried, 2 + 8 + 8 + 8);
        assert_eq!(d.delivered_events, 2);
        assert_eq!(d.dead, 1);
        assert_eq!(d.dead_replayed, 2, "d2 and d4 both end delivered");
        assert_eq!(d.in_flight, 1);
    }

    #[test]
    fn the_table_is_one_label_and_one_value_per_line() {
        let text = table(&Summary {
            elapsed: Duration::from_millis(12_345),
            ..good()
        });
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some(TABLE_TITLE));
        let rows: Vec<(String, String)> = lines
            .map(|l| {
                let (label, value) = l.trim().rsplit_once(' ').unwrap();
                (label.trim().to_owned(), value.to_owned())
            })
            .collect();
        assert_eq!(rows[0], ("emitted".to_owned(), "3".to_owned()));
        assert!(rows.contains(&("processed exactly once".to_owned(), "3".to_owned())));
        assert_eq!(rows.last().unwrap().1, "12.3s");
    }
}
