//! The log lines of receivers that run inside the test process, and reading request lines.

use std::cell::RefCell;
use std::io::Write;
use std::sync::{Arc, Mutex, Once, PoisonError};

/// The JSON log lines of one in-process receiver, fields at the top level (as
/// `tracing_subscriber::fmt().json().flatten_event(true)` writes them, like the example
/// binaries).
///
/// One global subscriber serves the whole test binary: per-test scoped subscribers race with
/// tracing's global callsite-interest cache and drop lines now and then. It writes each line to
/// the buffer of the thread that logged it, so a receiver claims the threads its requests run
/// on with [`capture_this_thread`](CapturedLogs::capture_this_thread): the test's own thread for
/// a server spawned on a current-thread runtime, the worker thread for actix-web.
#[derive(Debug, Clone, Default)]
pub struct CapturedLogs(Arc<Mutex<Vec<u8>>>);

thread_local! {
    static CAPTURE: RefCell<Option<CapturedLogs>> = const { RefCell::new(None) };
}

/// The global subscriber's writer: appends to the logging thread's buffer, if it has one.
struct ThreadWriter;

impl Write for ThreadWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        CAPTURE.with(|c| {
            if let Some(logs) = c.borrow().as_ref() {
                logs.0
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .extend_from_slice(buf);
            }
        });
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl CapturedLogs {
    /// An empty buffer; installs the global subscriber the first time (if the test binary has
    /// none yet).
    pub fn new() -> CapturedLogs {
        static GLOBAL: Once = Once::new();
        GLOBAL.call_once(|| {
            let _ = tracing_subscriber::fmt()
                .json()
                .flatten_event(true)
                .with_writer(|| ThreadWriter)
                .try_init();
        });
        CapturedLogs::default()
    }

    /// Sends what the calling thread logs from now on to this buffer (instead of the buffer it
    /// had).
    pub fn capture_this_thread(&self) {
        CAPTURE.with(|c| *c.borrow_mut() = Some(self.clone()));
    }

    /// The lines written so far, once at least `request_lines` of them are request lines or
    /// 30 s have passed: a request the client gave up on is logged after the client is gone.
    pub async fn wait_for(&self, request_lines: usize) -> Vec<String> {
        let started = std::time::Instant::now();
        loop {
            let lines = self.lines();
            if request_lines_in(&lines) >= request_lines
                || started.elapsed() > super::database::PATIENCE
            {
                return lines;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// The lines written so far.
    pub fn lines(&self) -> Vec<String> {
        let bytes = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        String::from_utf8_lossy(&bytes)
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// The request lines (target `kxp_webhooks`) among `lines`, parsed. Panics if any line is not
/// one JSON object: a receiver logs JSON lines only.
pub fn request_lines(lines: &[String]) -> Vec<serde_json::Value> {
    lines
        .iter()
        .map(|line| {
            let value: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("a log line is not JSON ({e}): {line}"));
            assert!(value.is_object(), "a log line is not a JSON object: {line}");
            value
        })
        .filter(|value| value["target"] == "kxp_webhooks")
        .collect()
}

/// How many of `lines` are request lines (target `kxp_webhooks`), without judging the others.
fn request_lines_in(lines: &[String]) -> usize {
    lines
        .iter()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|value| value["target"] == "kxp_webhooks")
        .count()
}
