//! Ingestion's path to the store: group commit ([`Batcher`]), requests that arrive while a
//! commit is on its way sharing the next one.
//!
//! - On SQLite one batch at a time ([`Db::ingest_many`], each item under a savepoint): the
//!   store has one writer and flushes to disk at every commit, so one transaction per request
//!   would bound ingestion by the disk's flushes per second.
//! - On PostgreSQL up to [`PG_IN_FLIGHT`] batches at once ([`Db::ingest_together`]).
//!   PostgreSQL flushes concurrent commits together by itself, but each transaction still
//!   costs it CPU (the commit record, `BEGIN` and `COMMIT` round trips): at full speed on two
//!   cores a transaction per request made ingestion take CPU from delivery, and batching cut
//!   the commits per delivered event from 2.8 to about 2.2 (BENCHMARKS.md). More than one
//!   batch in flight keeps one transaction's round trips from bounding the rate.

use std::sync::Arc;

use crate::engine::batch::{Answer, Batcher};
use crate::engine::gate::WriteGate;
use crate::model::{Ingest, Ingested};
use crate::store::{Db, StoreError};

/// The most events one transaction ingests.
const MAX_BATCH: usize = 128;

/// Batches written at once on PostgreSQL: a few of the pool's connections, the rest left to
/// the workers.
const PG_IN_FLIGHT: usize = 4;

/// How the API stores events; cheap to clone.
#[derive(Clone)]
pub(crate) struct Ingester(Batcher<Ingest, Ingested>);

impl Ingester {
    /// The ingester `db` calls for. Its batch task ends once every handle is dropped and what
    /// was handed to it is stored.
    pub(crate) fn start(db: &Db, gate: WriteGate) -> Ingester {
        let db = db.clone();
        let (batcher, _task) = match db {
            Db::Postgres(_) | Db::Citus(_) => {
                Batcher::start_concurrent(MAX_BATCH, PG_IN_FLIGHT, move |batch: Vec<Ingest>| {
                    let db = db.clone();
                    async move { shared(db.ingest_together(&batch).await) }
                })
            }
            Db::Sqlite(_) => Batcher::start(MAX_BATCH, move |batch: Vec<Ingest>| {
                let (db, gate) = (db.clone(), gate.clone());
                async move {
                    let _turn = gate.enter().await;
                    shared(db.ingest_many(&batch).await)
                }
            }),
        };
        Ingester(batcher)
    }

    /// Stores `item` and its deliveries (or answers the event an idempotent retry refers to),
    /// durably, before it returns.
    pub(crate) async fn ingest(&self, item: Ingest) -> Result<Ingested, StoreError> {
        self.0.submit(item).await.map_err(unshare)
    }
}

/// A batch's answers, each item's error shareable as the batcher answers it.
fn shared(
    answers: Result<Vec<Result<Ingested, StoreError>>, StoreError>,
) -> Result<Vec<Answer<Ingested>>, StoreError> {
    answers.map(|items| {
        items
            .into_iter()
            .map(|item| item.map_err(Arc::new))
            .collect()
    })
}

impl std::fmt::Debug for Ingester {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ingester")
    }
}

/// A batch's error for one of its callers. The batch's error is shared by its items; each
/// caller gets the same kind of error (a database failure, told as text), which is all the API
/// needs to answer it.
fn unshare(e: std::sync::Arc<StoreError>) -> StoreError {
    match std::sync::Arc::try_unwrap(e) {
        Ok(e) => e,
        Err(shared) => match &*shared {
            StoreError::NotFound => StoreError::NotFound,
            StoreError::Conflict { kind, message } => StoreError::Conflict {
                kind: *kind,
                message: message.clone(),
            },
            StoreError::Database(e) => StoreError::Database(sqlx::Error::Protocol(e.to_string())),
            StoreError::Sealed(e) => StoreError::Sealed(e.clone()),
        },
    }
}
