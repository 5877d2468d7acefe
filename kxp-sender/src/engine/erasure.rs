//! The erasure loop: runs the accepted erasures by tag (`POST /v1/erasures`) to the end, a
//! batch of events at a time ([`Db::erase_batch`]), in whichever `kxp serve` process finds them.
//!
//! An erasure stays `running` for five seconds at the least, so an ingestion that stamped an event just before it but committed just after is
//! still erased by a later batch. Until an erasure's batch reaches an event, its deliveries are kept from starting by the
//! workers themselves (the claim reads whether a running erasure covers the event, and a
//! covered delivery ends `erased` untried), so "no attempt starts after the 202" holds from
//! the moment the erasure is recorded, however many events it covers. One batch of an erasure
//! runs at a time, whichever process takes it (the others skip its locked row).

use std::sync::Arc;
use std::time::Duration;

use crate::engine::config::Shared;
use crate::store::{Db, ERASURE_BATCH, ErasureRow};

/// How often the loop looks for erasures other processes accepted.
const POLL: Duration = Duration::from_secs(5);

/// Pause between two batches: ingestion and the workers get the database in between.
const BETWEEN_BATCHES: Duration = Duration::from_millis(10);

/// Runs erasures until `shutdown` turns true.
pub(crate) async fn run(
    db: Db,
    shared: Arc<Shared>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    while !*shutdown.borrow() {
        match db.running_erasures().await {
            Ok(running) => {
                for erasure in running {
                    if *shutdown.borrow() {
                        return;
                    }
                    finish(&db, &erasure, &shutdown).await;
                }
            }
            Err(e) => {
                tracing::error!(target: "kxp_sender", error = %e, "looking for running erasures failed");
            }
        }
        tokio::select! {
            () = tokio::time::sleep(POLL) => {}
            () = shared.erasures.notified() => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// Runs one erasure's batches until it has no event left for now (it is done, or waits out
/// the settling time and is taken up at a later pass), the database fails (the next pass
/// resumes it), another process is running it, or this one stops.
async fn finish(db: &Db, erasure: &ErasureRow, shutdown: &tokio::sync::watch::Receiver<bool>) {
    let mut events = 0;
    loop {
        match db.erase_batch(erasure).await {
            // Another process's batch holds it, or it is done.
            Ok(None) => return,
            Ok(Some(taken)) => {
                events += taken.events;
                if taken.done {
                    tracing::info!(
                        target: "kxp_sender", account_id = %erasure.account_id,
                        erasure_id = %erasure.id, events, "erasure done"
                    );
                    if let Err(e) = db.checkpoint_erased().await {
                        tracing::warn!(target: "kxp_sender", error = %e, "the checkpoint after an erasure failed");
                    }
                    return;
                }
                if taken.events < ERASURE_BATCH {
                    return;
                }
            }
            Err(e) => {
                tracing::error!(
                    target: "kxp_sender", erasure_id = %erasure.id, error = %e,
                    "an erasure's batch failed; it resumes at the next pass"
                );
                return;
            }
        }
        if *shutdown.borrow() {
            return;
        }
        tokio::time::sleep(BETWEEN_BATCHES).await;
    }
}
