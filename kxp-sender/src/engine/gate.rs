//! Taking turns at SQLite's one write lock.
//!
//! SQLite lets one writer in at a time, and a writer that finds the database locked sleeps in
//! SQLite's busy handler (1 ms, 2 ms, 5 ms, 10 ms, … between tries) before it tries again.
//! The three writers that run with every event — ingestion's group commit, the recorder's, and
//! the delivery loop's claims — would add those sleeps to events' latency whenever two of them
//! meet. They take turns through this gate instead, in the order they came, and each finds
//! the database free. PostgreSQL has no such lock: there the gate is open.

use std::sync::Arc;

use tokio::sync::{Mutex, OwnedMutexGuard};

use crate::store::Db;

/// The gate of one process; cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct WriteGate(Option<Arc<Mutex<()>>>);

impl WriteGate {
    /// A gate for `db`'s writers: shut for SQLite (one at a time), open for PostgreSQL.
    pub(crate) fn for_db(db: &Db) -> WriteGate {
        WriteGate(matches!(db, Db::Sqlite(_)).then(|| Arc::new(Mutex::new(()))))
    }

    /// Waits for this writer's turn; the turn lasts as long as the guard.
    pub(crate) async fn enter(&self) -> Option<OwnedMutexGuard<()>> {
        match &self.0 {
            Some(gate) => Some(gate.clone().lock_owned().await),
            None => None,
        }
    }
}
