//! Ingestion's path to the store. On SQLite, by group commit ([`Batcher`]): the store has one
//! writer and flushes to disk at every commit, so one transaction per request would bound
//! ingestion by the disk's flushes per second; requests that arrive while a commit is on its
//! way share the next one ([`Db::ingest_many`]). On PostgreSQL each request runs its own
//! transaction on the pool: concurrent commits are flushed together by PostgreSQL itself, and
//! a batch would only serialise them.

use crate::engine::batch::Batcher;
use crate::engine::gate::WriteGate;
use crate::model::{Ingest, Ingested};
use crate::store::{Db, StoreError};

/// The most events one SQLite transaction ingests.
const MAX_BATCH: usize = 128;

/// How the API stores events; cheap to clone.
#[derive(Clone)]
pub(crate) enum Ingester {
    /// One transaction per request.
    Direct(Db),
    /// Group commit.
    Batched(Batcher<Ingest, Ingested>),
}

impl Ingester {
    /// The ingester `db` calls for. The batch task, when there is one, ends once every handle
    /// is dropped and what was handed to it is stored.
    pub(crate) fn start(db: &Db, gate: WriteGate) -> Ingester {
        match db {
            Db::Postgres(_) => Ingester::Direct(db.clone()),
            Db::Sqlite(_) => {
                let db = db.clone();
                let (batcher, _task) = Batcher::start(MAX_BATCH, move |batch: Vec<Ingest>| {
                    let (db, gate) = (db.clone(), gate.clone());
                    async move {
                        let _turn = gate.enter().await;
                        db.ingest_many(&batch).await
                    }
                });
                Ingester::Batched(batcher)
            }
        }
    }

    /// Stores `item` and its deliveries (or answers the event an idempotent retry refers to),
    /// durably, before it returns.
    pub(crate) async fn ingest(&self, item: Ingest) -> Result<Ingested, StoreError> {
        match self {
            Ingester::Direct(db) => db.ingest(&item).await,
            Ingester::Batched(batcher) => batcher.submit(item).await.map_err(unshare),
        }
    }
}

impl std::fmt::Debug for Ingester {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Ingester::Direct(_) => "Ingester::Direct",
            Ingester::Batched(_) => "Ingester::Batched",
        })
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
            StoreError::Conflict { code, message } => StoreError::Conflict {
                code: code.clone(),
                message: message.clone(),
            },
            StoreError::Database(e) => StoreError::Database(sqlx::Error::Protocol(e.to_string())),
        },
    }
}
