//! The broker sources (`kxp serve --ingest <URL>`) at work: one task per source runs its
//! broker's sessions (each broker's module is the engine's, `engine::sources`, behind its Cargo
//! feature), and every message they hand over is taken in exactly as `POST /v1/events` would
//! take it ([`message`]).
//!
//! **At least once in, exactly one event out.** A message is acknowledged only after its event
//! and deliveries are committed, so a crash at any instant leaves it with the broker, which
//! delivers it again; its idempotency key (the broker's message id, else an identity of the
//! message that is stable across redeliveries) makes the second time answer the first event
//! instead of storing another. Several processes consuming one queue are competing consumers
//! for the same reason. A message no retry can cure (not JSON, not an event, an unknown
//! account) goes to the broker's dead-letter path with its reason, never dropped; one the
//! server cannot take *now* (the account's backlog is full, the database is down) is held and
//! tried again, so the prefetch bound pauses consumption instead of refusing messages.
//!
//! A session that fails (the connection is lost, the queue is missing) is started again with
//! jittered backoff; what was not acknowledged is the broker's to deliver again.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::app::AppState;
use crate::engine::sources::broker::{Boxed, Delivery, Intake, Session, Verdict, stopping};
use crate::engine::sources::{IngestSource, SourceStatus};
use crate::store::redact_passwords;

mod message;

/// The first wait before connecting again; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(250);

/// The longest wait before connecting again.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Starts one consumer per configured source; each ends once `stopped` is set and its
/// messages in flight are settled.
pub(crate) fn start(state: &AppState, stopped: &watch::Receiver<bool>) -> Vec<JoinHandle<()>> {
    let sources = state.shared.config.ingest.iter();
    sources
        .zip(state.shared.sources.0.iter())
        .map(|(source, status)| {
            let run = Run {
                state: state.clone(),
                source: source.clone(),
                status: status.clone(),
                stopped: stopped.clone(),
            };
            tokio::spawn(run.sessions())
        })
        .collect()
}

/// One source's consumer: the [`Intake`] of its sessions' messages.
struct Run {
    state: AppState,
    source: IngestSource,
    status: Arc<SourceStatus>,
    stopped: watch::Receiver<bool>,
}

impl Run {
    /// The source's life: sessions, each started again after a failure, until stopped.
    async fn sessions(self) {
        let mut stopped = self.stopped.clone();
        if let Some(reason) = self.source.refusal() {
            tracing::error!(target: "kxp_sender", source = %self.status.name, reason = %reason,
                "broker source: refused to start");
            self.status.refused(reason);
            stopping(&mut stopped).await;
            return;
        }
        let (broker, status) = (self.source.broker.clone(), self.status.clone());
        let session = Session {
            prefetch: self.source.prefetch,
            status: status.clone(),
            stopped: stopped.clone(),
            intake: Arc::new(self),
        };
        let mut backoff = Backoff::default();
        loop {
            status.connecting();
            let Err(error) = broker.session(&session).await else {
                return;
            };
            // A session that got as far as consuming: the next failure waits the first wait.
            if status.is_up() {
                backoff.reset();
            }
            // The clients' errors may quote a URL: redacted once, for the log and `/healthz`.
            let text = redact_passwords(&error.to_string());
            tracing::warn!(target: "kxp_sender", source = %status.name, kind = error.as_str(),
                error = %text, "broker source: the session ended; connecting again");
            status.down(text);
            let wait = backoff.next();
            tokio::select! {
                () = stopping(&mut stopped) => return,
                () = tokio::time::sleep(wait) => {}
            }
        }
    }
}

impl Intake for Run {
    fn take<'a>(&'a self, delivery: &'a dyn Delivery) -> Boxed<'a, Verdict> {
        Box::pin(message::take(self, delivery))
    }
}

/// Exponential backoff with full jitter, reset once a session is consuming.
#[derive(Debug)]
struct Backoff(Duration);

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff(FIRST_BACKOFF)
    }
}

impl Backoff {
    /// The wait before the next try: uniform in `[ceiling / 2, ceiling]`, the ceiling doubling.
    fn next(&mut self) -> Duration {
        let ceiling = self.0;
        self.0 = (self.0 * 2).min(MAX_BACKOFF);
        let mut byte = [0u8; 1];
        let fraction = match getrandom::fill(&mut byte) {
            Ok(()) => f64::from(byte[0]) / 255.0,
            Err(_) => 1.0,
        };
        ceiling.mul_f64(0.5 + fraction / 2.0)
    }

    /// A session reached the point of consuming: the next failure starts from the first wait.
    fn reset(&mut self) {
        self.0 = FIRST_BACKOFF;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_its_ceiling_and_restarts_after_a_good_session() {
        let mut backoff = Backoff::default();
        let waits: Vec<Duration> = (0..10).map(|_| backoff.next()).collect();
        assert!(waits[0] <= FIRST_BACKOFF && waits[0] >= FIRST_BACKOFF / 2);
        assert!(waits[9] <= MAX_BACKOFF && waits[9] >= MAX_BACKOFF / 2);
        backoff.reset();
        assert!(backoff.next() <= FIRST_BACKOFF);
    }
}
