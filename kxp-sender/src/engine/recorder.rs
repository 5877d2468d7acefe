//! Recording finished attempts by group commit ([`Batcher`]): every attempt of this process
//! hands its outcome to one recorder, which writes whatever has finished meanwhile in one
//! transaction ([`Db::finish_attempts`]). An attempt is answered only after the commit (or its
//! failure): it keeps its endpoint's concurrency slot until then, and nothing reports a
//! delivery as done before it is recorded.

use std::sync::Arc;

use tokio::task::JoinHandle;

use crate::engine::batch::{Answer, Batcher};
use crate::engine::gate::WriteGate;
use crate::model::{FinishAttempt, Finished};
use crate::policy::circuit::Protection;
use crate::store::{Db, StoreError};

/// The most attempts one transaction records.
const MAX_BATCH: usize = 256;

/// The handle attempts record through; cheap to clone.
#[derive(Clone)]
pub(crate) struct Recorder(Batcher<FinishAttempt, Finished>);

impl Recorder {
    /// Starts the recorder on `db`. Its task ends once every handle is dropped and everything
    /// handed to it is recorded.
    pub(crate) fn start(
        db: Db,
        protection: Protection,
        gate: WriteGate,
    ) -> (Recorder, JoinHandle<()>) {
        let protection = Arc::new(protection);
        let (batcher, task) = Batcher::start(MAX_BATCH, move |batch: Vec<FinishAttempt>| {
            let (db, protection, gate) = (db.clone(), protection.clone(), gate.clone());
            async move {
                let _turn = gate.enter().await;
                let results = db.finish_attempts(&batch, &protection).await?;
                Ok::<_, StoreError>(results.into_iter().map(Ok).collect())
            }
        });
        (Recorder(batcher), task)
    }

    /// Records one finished attempt with whatever else is queued. An error means the outcome
    /// was not recorded: the delivery's lease runs out and it is tried again (at least once,
    /// never lost).
    pub(crate) async fn finish(&self, attempt: FinishAttempt) -> Answer<Finished> {
        self.0.submit(attempt).await
    }
}
