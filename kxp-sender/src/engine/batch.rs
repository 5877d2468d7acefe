//! Group commit: many callers' writes in one transaction. Each caller hands its item to one
//! task, which writes whatever has queued up in one commit and answers every caller when that
//! commit is on disk.
//!
//! No timer holds a batch back: while one commit waits for the disk, the items that arrive
//! meanwhile queue up and form the next batch, so a lone item is written at once and a busy
//! process writes hundreds per flush. A batch is bounded (`max`) so one transaction never holds
//! the database for long. If the database refuses a batch's transaction, its items are written
//! again one by one, so one item it refuses cannot keep the others from being written; if it
//! is unreachable, the whole batch fails at once.
//!
//! Used for recording finished attempts ([`Recorder`](crate::engine::recorder::Recorder)) and
//! for ingestion ([`Ingester`](crate::engine::ingester::Ingester)): one batch at a time on
//! SQLite (one writer), several at once on PostgreSQL.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::task::{JoinHandle, JoinSet};

use crate::store::StoreError;

/// What a caller gets back: its own result, or the error that kept its item from being
/// written (shared by every item of a failed batch).
pub(crate) type Answer<O> = Result<O, Arc<StoreError>>;

type Reply<O> = oneshot::Sender<Answer<O>>;

/// The handle callers submit through; cheap to clone.
pub(crate) struct Batcher<I, O> {
    queue: mpsc::UnboundedSender<(I, Reply<O>)>,
}

impl<I, O> Clone for Batcher<I, O> {
    fn clone(&self) -> Self {
        Batcher {
            queue: self.queue.clone(),
        }
    }
}

impl<I, O> Batcher<I, O>
where
    I: Clone + Send + 'static,
    O: Send + 'static,
{
    /// Starts the task, one batch written at a time. `commit` writes a batch in one
    /// transaction (or, on Citus, one per account) and answers one result per item, in order
    /// (an item can fail alone: `Ok(vec![Err(…), …])`, and several items with one shared
    /// error), or fails as a whole. The task ends once every handle is dropped
    /// and the queue is drained: nothing handed to it is left unwritten.
    pub(crate) fn start<F, Fut>(max: usize, commit: F) -> (Batcher<I, O>, JoinHandle<()>)
    where
        F: Fn(Vec<I>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<Answer<O>>, StoreError>> + Send + 'static,
    {
        Self::start_concurrent(max, 1, commit)
    }

    /// [`start`](Batcher::start), with up to `in_flight` batches written at once: for a
    /// database that commits concurrent transactions in parallel (PostgreSQL), where one batch
    /// at a time would bound the rate by one transaction's round trips. A new batch is formed
    /// only when a slot is free, so while all are busy the arrivals queue up into it.
    pub(crate) fn start_concurrent<F, Fut>(
        max: usize,
        in_flight: usize,
        commit: F,
    ) -> (Batcher<I, O>, JoinHandle<()>)
    where
        F: Fn(Vec<I>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<Answer<O>>, StoreError>> + Send + 'static,
    {
        let (queue, mut inbox) = mpsc::unbounded_channel::<(I, Reply<O>)>();
        let commit = Arc::new(commit);
        let slots = Arc::new(Semaphore::new(in_flight.max(1)));
        let task = tokio::spawn(async move {
            let mut writing = JoinSet::new();
            loop {
                let Ok(slot) = slots.clone().acquire_owned().await else {
                    break;
                };
                let mut batch = Vec::with_capacity(max);
                if inbox.recv_many(&mut batch, max.max(1)).await == 0 {
                    break;
                }
                let commit = commit.clone();
                writing.spawn(async move {
                    write(&*commit, batch).await;
                    drop(slot);
                });
                while writing.try_join_next().is_some() {}
            }
            while writing.join_next().await.is_some() {}
        });
        (Batcher { queue }, task)
    }

    /// Writes `item` with whatever else is queued, and answers once its batch has committed.
    pub(crate) async fn submit(&self, item: I) -> Answer<O> {
        let stopped = || Arc::new(StoreError::Database(sqlx::Error::PoolClosed));
        let (reply, answer) = oneshot::channel();
        if self.queue.send((item, reply)).is_err() {
            return Err(stopped());
        }
        answer.await.unwrap_or_else(|_| Err(stopped()))
    }
}

/// Writes one batch and answers each of its callers.
async fn write<I, O, F, Fut>(commit: &F, batch: Vec<(I, Reply<O>)>)
where
    I: Clone,
    F: Fn(Vec<I>) -> Fut,
    Fut: Future<Output = Result<Vec<Answer<O>>, StoreError>>,
{
    let (items, replies): (Vec<I>, Vec<Reply<O>>) = batch.into_iter().unzip();
    let count = items.len();
    match commit(items.clone()).await {
        Ok(results) => {
            for (reply, result) in replies.into_iter().zip(results) {
                let _ = reply.send(result);
            }
        }
        // Item by item only when the database refused something in the batch: when it is
        // unreachable, each item alone would wait for it again.
        Err(e @ StoreError::Database(sqlx::Error::Database(_))) if count > 1 => {
            tracing::warn!(target: "kxp_sender", error = %e, items = count,
                "a group commit failed; writing its items one by one");
            for (item, reply) in items.into_iter().zip(replies) {
                let answer = match commit(vec![item]).await {
                    Ok(mut results) => results.pop().unwrap_or_else(|| {
                        Err(Arc::new(StoreError::Database(sqlx::Error::RowNotFound)))
                    }),
                    Err(e) => Err(Arc::new(e)),
                };
                let _ = reply.send(answer);
            }
        }
        Err(e) => {
            let e = Arc::new(e);
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// What the database says when it refuses a statement (a constraint, say).
    #[derive(Debug)]
    struct Refused;

    impl std::fmt::Display for Refused {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("refused")
        }
    }

    impl std::error::Error for Refused {}

    impl sqlx::error::DatabaseError for Refused {
        fn message(&self) -> &str {
            "refused"
        }
        fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
            self
        }
        fn kind(&self) -> sqlx::error::ErrorKind {
            sqlx::error::ErrorKind::Other
        }
    }

    fn refused() -> StoreError {
        StoreError::Database(sqlx::Error::Database(Box::new(Refused)))
    }

    #[tokio::test]
    async fn a_refused_batch_is_written_again_item_by_item() {
        let commits = Arc::new(AtomicUsize::new(0));
        let counted = commits.clone();
        // The database refuses any transaction holding item 2; alone, the others go through.
        let (batcher, _task) = Batcher::start(16, move |items: Vec<u32>| {
            counted.fetch_add(1, Ordering::SeqCst);
            async move {
                if items.contains(&2) {
                    return Err(refused());
                }
                Ok(items.into_iter().map(|n| Ok(n * 10)).collect())
            }
        });
        // One thread: the three are queued before the task runs, so they form one batch.
        let (a, b, c) = tokio::join!(batcher.submit(1), batcher.submit(2), batcher.submit(3));
        assert_eq!(a.unwrap(), 10);
        assert!(b.is_err(), "the refused item answers its error");
        assert_eq!(c.unwrap(), 30);
        assert_eq!(
            commits.load(Ordering::SeqCst),
            4,
            "the batch, then each item alone"
        );
    }

    #[tokio::test]
    async fn an_unreachable_database_fails_the_whole_batch_at_once() {
        let commits = Arc::new(AtomicUsize::new(0));
        let counted = commits.clone();
        let (batcher, _task) = Batcher::start(16, move |_: Vec<u32>| {
            counted.fetch_add(1, Ordering::SeqCst);
            async { Err::<Vec<Answer<u32>>, _>(StoreError::Database(sqlx::Error::PoolTimedOut)) }
        });
        let (a, b, c) = tokio::join!(batcher.submit(1), batcher.submit(2), batcher.submit(3));
        assert!(a.is_err() && b.is_err() && c.is_err());
        assert_eq!(
            commits.load(Ordering::SeqCst),
            1,
            "no item-by-item retry: each would wait for the database again"
        );
    }
}
