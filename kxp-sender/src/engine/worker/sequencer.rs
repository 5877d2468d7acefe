//! The sequencer: numbers new deliveries in each endpoint's sequence (for `X-Kxp-Sequence` and
//! the feed). On PostgreSQL it is a task of its own beside the delivery loop; on SQLite the
//! loop runs a pass just before the claim it serves ([`number`]).

use std::sync::Arc;
use std::time::Duration;

use super::lock;
use crate::engine::config::Shared;
use crate::model::EndpointKey;
use crate::store::Db;

/// Numbers the deliveries [`Shared::wake_for`] announces, then hands their endpoints to the
/// delivery loop (PostgreSQL, [`Shared::sequencer`]). A task of its own, beside the loop: the
/// loop never waits for a pass before a claim (it claims numbered deliveries, and ones a pass
/// missed once they are 2 s old). Passes start at least [`PASS_GAP`] apart, so that under load
/// one transaction numbers what many ingestions committed meanwhile.
pub(super) async fn sequencer(db: Db, shared: Arc<Shared>) {
    loop {
        shared.number.notified().await;
        tokio::time::sleep(PASS_GAP).await;
        let endpoints: Vec<EndpointKey> = std::mem::take(&mut *lock(&shared.unnumbered))
            .into_iter()
            .collect();
        if endpoints.is_empty() {
            continue;
        }
        number(&db, &shared, Some(&endpoints)).await;
        lock(&shared.ready).extend(endpoints);
        shared.wake.notify_one();
    }
}

/// How long the sequencer task lets announcements gather before a pass: a small part of a
/// delivery's latency, and under load many events numbered per commit.
const PASS_GAP: Duration = Duration::from_millis(2);

/// Aborts its task when dropped: the sequencer ends with the loop that started it.
pub(super) struct AbortOnDrop(pub(super) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A sequencer pass over `endpoints` (all when `None`), in its turn at SQLite's write lock, that
/// wakes the long polls of the feeds it numbered for. A failed pass is logged and left to the
/// next: delivery goes on, without numbers meanwhile.
pub(super) async fn number(db: &Db, shared: &Shared, endpoints: Option<&[EndpointKey]>) {
    let turn = shared.gate.enter().await;
    let numbered = db.assign_sequences(endpoints).await;
    drop(turn);
    match numbered {
        // The feeds' long polls read the new numbers.
        Ok(0) => {}
        Ok(_) => match endpoints {
            Some(keys) => shared.feed_waiters.wake(keys.iter().map(|k| &k.id)),
            None => shared.feed_waiters.wake_all(),
        },
        Err(e) => {
            tracing::error!(target: "kxp_sender", error = %e, "numbering deliveries failed");
        }
    }
}
