//! Recording finished attempts by group commit ([`Batcher`]): every attempt of this process
//! hands its outcome to one recorder, which writes whatever has finished meanwhile in one
//! transaction ([`Db::finish_attempts`]). An attempt is answered only after the commit (or its
//! failure): it keeps its endpoint's concurrency slot until then, and nothing reports a
//! delivery as done before it is recorded.
//!
//! What receivers confirm about the secrets (`X-Kxp-Verified-Key`) is recorded after the
//! batch, in a transaction of its own ([`Db::record_key_checks`]), and only when it tells
//! something new: a secret's latest verification is written at most once a minute, except
//! while a `when_confirmed` rotation counts every delivery. It is bookkeeping, not delivery
//! state: if it fails, a rotation waits for a few more confirmations (or its overlap).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::task::JoinHandle;

use crate::engine::batch::{Answer, Batcher};
use crate::engine::gate::WriteGate;
use crate::model::{EndpointKey, FinishAttempt, Finished, KeyCheck};
use crate::policy::circuit::Protection;
use crate::store::{Db, StoreError};

/// The most attempts one transaction records.
const MAX_BATCH: usize = 256;

/// How stale a secret's recorded latest verification may get before it is written again.
const VERIFIED_PRECISION_MS: i64 = 60_000;

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
        let written = Arc::new(Mutex::new(Written::default()));
        let (batcher, task) = Batcher::start(MAX_BATCH, move |batch: Vec<FinishAttempt>| {
            let (db, protection, gate) = (db.clone(), protection.clone(), gate.clone());
            let written = written.clone();
            async move {
                let _turn = gate.enter().await;
                let results = db.finish_attempts(&batch, &protection).await;
                record_keys(&db, &batch, &results, &written).await;
                Ok::<_, StoreError>(results)
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

/// When this process last wrote each secret's latest verification ((endpoint, secret row id) →
/// Unix ms).
#[derive(Default)]
struct Written(HashMap<(EndpointKey, i64), i64>);

impl Written {
    /// The most secrets remembered; past it, entries old enough to be written again go.
    const MAX: usize = 10_000;

    /// Whether `check` of `endpoint`, made at `at`, is worth a write.
    fn news(&self, endpoint: &EndpointKey, at: i64, check: &KeyCheck) -> bool {
        check.confirming
            || check.verified.is_some_and(|secret| {
                self.0
                    .get(&(endpoint.clone(), secret))
                    .is_none_or(|&written| at.saturating_sub(written) >= VERIFIED_PRECISION_MS)
            })
    }

    fn wrote(&mut self, checks: &[(EndpointKey, i64, KeyCheck)]) {
        for (endpoint, at, check) in checks {
            if let Some(secret) = check.verified {
                self.0.insert((endpoint.clone(), secret), *at);
            }
        }
        if self.0.len() > Written::MAX {
            let newest = self.0.values().copied().max().unwrap_or(0);
            self.0
                .retain(|_, at| newest.saturating_sub(*at) < VERIFIED_PRECISION_MS);
        }
    }
}

/// Records what the batch's recorded 2xx said about their secrets, when it is news.
async fn record_keys(
    db: &Db,
    batch: &[FinishAttempt],
    results: &[Answer<Finished>],
    written: &Mutex<Written>,
) {
    let checks: Vec<(EndpointKey, i64, KeyCheck)> = {
        let written = written
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        batch
            .iter()
            .zip(results)
            .filter(|(_, result)| matches!(result, Ok(Finished::Recorded { .. })))
            .filter_map(|(item, _)| {
                let (endpoint, at) = (item.endpoint(), item.record.started_at);
                item.keys
                    .filter(|check| written.news(&endpoint, at, check))
                    .map(|check| (endpoint, at, check))
            })
            .collect()
    };
    if checks.is_empty() {
        return;
    }
    match db.record_key_checks(&checks).await {
        Ok(ended) => {
            written
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .wrote(&checks);
            for endpoint in ended {
                tracing::info!(
                    target: "kxp_sender", endpoint_id = %endpoint.id,
                    "the receiver confirmed the new secret: the older secrets stopped signing"
                );
            }
        }
        Err(e) => tracing::warn!(
            target: "kxp_sender", error = %e,
            "could not record which secrets receivers verified with"
        ),
    }
}
