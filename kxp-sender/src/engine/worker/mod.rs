//! The delivery loop: claim due deliveries, send each in its own task, record the outcome.
//!
//! Every attempt runs concurrently with the others, bounded by a global worker count and, per
//! endpoint, by an adaptive concurrency limit
//! ([`Adaptive`](crate::policy::concurrency::Adaptive): it grows while the endpoint answers
//! quickly and halves on timeouts, 429s, 503s and slow answers, up to the configured
//! per-endpoint concurrency) and, where one is set, a rate limit
//! ([`RateLimiter`](crate::policy::rate::RateLimiter)). So an endpoint that hangs until its
//! timeout holds at most its own share of the workers and never delays deliveries to healthy
//! ones, and a fast endpoint is not held to a fixed cap. Per account, the workers are shared
//! fairly ([`Fairness`](crate::policy::fairness::Fairness)): while other accounts have work, no
//! account holds more than its share, and the last workers of the pool are kept for attempts
//! that give them back quickly, so an account whose endpoints all hang cannot take every worker
//! and make another account's deliveries wait for its timeouts.
//!
//! The loop claims from each endpoint's own queue for the endpoints it knows have work and
//! room for it — ingestion names the endpoints it queued for, and a finished attempt names its
//! own — so a claim costs what it takes, and an endpoint at its limit is not read at all,
//! however long its backlog ([`Db::claim_for_fair`]). Every poll interval, and when told of work it
//! cannot place (a replay, a resume), it also scans everything due in due order
//! ([`Db::claim_fair`]): retries coming due, expired leases, other processes' events. Either claim
//! asks for no more of an endpoint's or an account's deliveries than it may start now, so a
//! backlog is not claimed only to be put back, and returns them ready to send. Outcomes are
//! recorded in batches by the [`Recorder`]. The loop also releases the probes of open circuits
//! whose cool-down has passed ([`Db::release_probes`](crate::store::Db::release_probes)).
//!
//! Each round of the loop has its steps, each readable alone: [`InFlight::plan`] and
//! [`Plan`] decide what the round may claim (pure, unit-tested), the scan and the
//! claims for ready endpoints take it ([`Loop::claim`]), each claimed job is admitted or put
//! back and its attempt started ([`Loop::start`], [`attempt::attempt`]), and at shutdown the
//! attempts still running are drained ([`Loop::drain`]). The sequencer numbers deliveries
//! beside the loop on PostgreSQL ([`sequencer`]).

mod attempt;
mod in_flight;
mod plan;
mod sequencer;

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

pub(crate) use self::attempt::{body, open_secrets, sealed};
use self::in_flight::{Done, InFlight};
use self::plan::Plan;
use self::sequencer::{AbortOnDrop, number};
use crate::engine::config::Shared;
use crate::engine::recorder::Recorder;
use crate::model::{AccountId, DeliveryId, EndpointKey, Gone, Job, ms, new_id};
use crate::store::{Db, StoreError};

/// The least time between two claims of the delivery loop.
const CLAIM_GAP: Duration = Duration::from_millis(2);

/// Runs until `shutdown` turns true, then lets in-flight attempts finish (they are bounded by
/// their timeouts) for up to `grace`, and puts back whatever is still running.
pub(crate) async fn run(
    db: Db,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
    grace: Duration,
) {
    let config = &shared.config;
    let workers = config.workers.max(1);
    let ceiling = config.per_endpoint_concurrency.max(1);
    let (recorder, recording) =
        Recorder::start(db.clone(), config.protection.clone(), shared.gate.clone());
    let mut worker = Loop {
        db: db.clone(),
        shared: shared.clone(),
        owner: new_id("wrk"),
        permits: Arc::new(Semaphore::new(workers)),
        in_flight: Arc::new(Mutex::new(InFlight::new(ceiling, workers))),
        recorder,
        tasks: JoinSet::new(),
        last_scan: None,
    };
    let mut last_reclaim = crate::model::tokio_instant();
    // Housekeeping (expired leases, due probes) runs this often; tests with millisecond
    // schedules poll faster, and housekeeping keeps pace with them.
    let housekeeping = (config.poll_interval * 4).min(Duration::from_secs(1));
    reclaim(&db).await;
    let sequencer = shared.sequencer.then(|| {
        AbortOnDrop(tokio::spawn(sequencer::sequencer(
            db.clone(),
            shared.clone(),
        )))
    });

    let mut last_claim: Option<Instant> = None;
    while !*shutdown.borrow() {
        // Claims for room that finished attempts freed are at least CLAIM_GAP apart, so the
        // attempts finishing meanwhile are claimed for together, one statement for many
        // deliveries. New events are claimed for at once: the gap never adds to their latency.
        let gap = last_claim
            .and_then(|at| CLAIM_GAP.checked_sub(at.elapsed()))
            .filter(|_| !shared.has_news());
        if let Some(wait) = gap {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.changed() => continue,
            }
        }
        worker.reap();
        if last_reclaim.elapsed() >= housekeeping {
            reclaim(&db).await;
            probe(&db).await;
            last_reclaim = crate::model::tokio_instant();
        }
        if let Some(egress) = shared.client.egress()
            && !egress.health.is_up()
        {
            // Nothing goes out while the egress proxy fails: no claim, so no attempt is spent
            // on it; its probe says when it is back.
            tokio::select! {
                _ = egress.health.back() => {}
                _ = tokio::time::sleep(config.poll_interval) => {}
                _ = shutdown.changed() => {}
                Some(_) = worker.tasks.join_next() => {}
            }
            continue;
        }
        let free = worker.permits.available_permits();
        let (claimed, with_work) = if free > 0 {
            last_claim = Some(crate::model::tokio_instant());
            worker.claim(free).await
        } else {
            (Vec::new(), HashSet::new())
        };
        if claimed.is_empty() {
            tokio::select! {
                _ = tokio::time::sleep(config.poll_interval) => {}
                _ = shared.wake.notified() => {}
                _ = shutdown.changed() => {}
                Some(_) = worker.tasks.join_next() => {}
            }
            continue;
        }
        worker.start(claimed, with_work).await;
    }

    drop(sequencer);
    worker.drain(grace, recording).await;
}

/// The delivery loop's own state: what it claims with, what runs, and what it hands outcomes to.
struct Loop {
    db: Db,
    shared: Arc<Shared>,
    /// This loop's lease owner: every claim and release names it.
    owner: String,
    /// The workers: one permit per attempt in flight.
    permits: Arc<Semaphore>,
    in_flight: Arc<Mutex<InFlight>>,
    recorder: Recorder,
    /// The attempts' tasks.
    tasks: JoinSet<()>,
    /// When the loop last scanned everything due.
    last_scan: Option<Instant>,
}

impl Loop {
    /// Collects the attempts that ended; one that panicked is logged (its slots came back with
    /// its [`Done`]).
    fn reap(&mut self) {
        while let Some(ended) = self.tasks.try_join_next() {
            if ended.is_err_and(|e| e.is_panic()) {
                tracing::error!(
                    target: "kxp_sender",
                    "an attempt panicked; its delivery is taken again when its lease ends"
                );
            }
        }
    }

    /// Claims for `free` workers: the scan when it is due, then the ready endpoints. Returns
    /// the claimed jobs and the accounts that had work here when the round was planned.
    async fn claim(&mut self, free: usize) -> (Vec<Job>, HashSet<AccountId>) {
        let mut plan = {
            let mut state = lock(&self.in_flight);
            let mut ready = std::mem::take(&mut state.ready);
            ready.extend(self.shared.take_ready());
            state.plan(ready, free, crate::model::tokio_instant())
        };
        // First, every poll interval or when told, a scan of everything due in due order:
        // retries coming due, expired leases, replays, other processes' events. It comes
        // first so that endpoints busy with their own backlogs never keep it from running.
        let told = self.shared.rescan.swap(false, Ordering::SeqCst);
        let scan = told
            || self
                .last_scan
                .is_none_or(|at| at.elapsed() >= self.shared.config.poll_interval);
        let mut claimed = if scan {
            self.last_scan = Some(crate::model::tokio_instant());
            self.scan(&mut plan, free).await
        } else {
            Vec::new()
        };
        // Then the endpoints known to have work and room, each from its own queue.
        let in_flight = &self.in_flight;
        let targets = plan.targets(free.saturating_sub(claimed.len()), |key| {
            lock(in_flight).ready.insert(key);
        });
        if !targets.is_empty() {
            claimed.extend(self.claim_ready(&plan, &targets, scan).await);
        }
        (claimed, plan.with_work)
    }

    /// The scan of everything due, for no more than `free` (and 100) deliveries within the
    /// plan's caps; what it takes is charged to the plan.
    async fn scan(&self, plan: &mut Plan, free: usize) -> Vec<Job> {
        // Every endpoint's new deliveries are numbered, held ones (paused endpoints) and
        // other processes' too: the feed lists them by number.
        number(&self.db, &self.shared, None).await;
        let scan_caps = plan.scan_caps();
        let limit = i64::try_from(free.min(100)).unwrap_or(100);
        let claimed = self
            .db
            .claim_fair(
                &self.owner,
                ms(self.shared.config.lease_extra),
                limit,
                (&scan_caps, plan.default_cap),
                &plan.accounts,
            )
            .await;
        let claimed = claimed_jobs(claimed);
        plan.charge(
            claimed
                .iter()
                .map(|job| (&job.endpoint_id, &job.account_id)),
        );
        claimed
    }

    /// Claims the `targets` from each endpoint's own queue, within the plan's account caps;
    /// `scanned` says whether this round's scan numbered their deliveries already.
    async fn claim_ready(
        &self,
        plan: &Plan,
        targets: &[(EndpointKey, usize)],
        scanned: bool,
    ) -> Vec<Job> {
        if !scanned && !self.shared.sequencer {
            // Their new deliveries numbered just before they are claimed, so that nearly
            // every attempt carries its number; the claim never waits for one.
            let keys: Vec<EndpointKey> = targets.iter().map(|(key, _)| key.clone()).collect();
            number(&self.db, &self.shared, Some(&keys)).await;
        }
        let turn = self.shared.gate.enter().await;
        let taken = self
            .db
            .claim_for_fair(
                &self.owner,
                ms(self.shared.config.lease_extra),
                targets,
                &plan.accounts,
            )
            .await;
        drop(turn);
        claimed_jobs(taken)
    }

    /// Starts an attempt for each claimed job it admits, and puts back the others untried.
    /// `with_work` are the accounts that had work when the round was planned.
    async fn start(&mut self, claimed: Vec<Job>, mut with_work: HashSet<AccountId>) {
        // Every account with a claimed job has work: it counts for the shares.
        with_work.extend(claimed.iter().map(|job| job.account_id.clone()));
        for job in claimed {
            let account_id = job.account_id.clone();
            if let Some(gone) = Gone::parse(job.withheld.as_deref()) {
                // Its payload is gone, or going: it ends so, untried.
                if let Err(e) = self
                    .db
                    .withhold(&account_id, &job.id, &self.owner, gone)
                    .await
                {
                    tracing::error!(
                        target: "kxp_sender", delivery_id = %job.id, error = %e,
                        "ending a delivery whose payload is gone failed; its lease runs out"
                    );
                }
                continue;
            }
            lock(&self.in_flight)
                .accounts
                .insert(job.endpoint_id.clone(), account_id.clone());
            match self.admit(&account_id, &job, with_work.len()) {
                Some(permit) => self.spawn(account_id, job, permit),
                None => release(&self.db, &account_id, &job.id, &self.owner).await,
            }
        }
    }

    /// A worker for the job, if it may start now: its endpoint still takes deliveries, a
    /// worker is free, and its endpoint's limit, its account's share (`with_work` accounts
    /// having work) and its endpoint's rate allow it. `None` puts it back untried.
    fn admit(
        &self,
        account_id: &AccountId,
        job: &Job,
        with_work: usize,
    ) -> Option<tokio::sync::OwnedSemaphorePermit> {
        if !job.sendable() {
            // Paused or deleted, or its circuit opened, between the claim and now: put it
            // back untried (a deleted endpoint's delivery ends dead there, an open circuit's
            // probe release holds it). No attempt is spent.
            return None;
        }
        let free = self.permits.available_permits();
        let permit = self.permits.clone().try_acquire_owned().ok()?;
        let rate = self
            .shared
            .config
            .protection
            .rate_of(job.rate_limit_per_second);
        // Not admitted: the batch held more for this endpoint than it may start now (the
        // first claim of an endpoint, before its rate limit is known here), or more for its
        // account than its share.
        lock(&self.in_flight)
            .admit(
                account_id,
                job,
                (free, with_work),
                rate,
                crate::model::tokio_instant(),
            )
            .then_some(permit)
    }

    /// Runs the job's attempt in a task of its own, holding `permit`.
    fn spawn(
        &mut self,
        account_id: AccountId,
        job: Job,
        permit: tokio::sync::OwnedSemaphorePermit,
    ) {
        let (owner, shared, in_flight, recorder, db) = (
            self.owner.clone(),
            self.shared.clone(),
            self.in_flight.clone(),
            self.recorder.clone(),
            self.db.clone(),
        );
        self.tasks.spawn(async move {
            // Dropped when the task ends, however it ends: a panic in the attempt still
            // gives back the endpoint's and the account's slots (the delivery's lease then
            // runs out, and another claim takes it).
            let mut done = Done {
                in_flight,
                job_id: job.id.clone(),
                endpoint_id: job.endpoint_id.clone(),
                account_id,
                outcome: None,
                _permit: permit,
            };
            done.outcome = Some(attempt::attempt(&db, &recorder, &owner, &shared, &job).await);
        });
    }

    /// Shutdown: no new claims. Attempts end by their timeouts; whatever outlives `grace` is
    /// aborted and put back, so another process can take it at once. `recording` is the
    /// recorder's task: every outcome handed to it is written before this returns.
    async fn drain(mut self, grace: Duration, recording: tokio::task::JoinHandle<()>) {
        let tasks = &mut self.tasks;
        let _ =
            tokio::time::timeout(grace, async { while tasks.join_next().await.is_some() {} }).await;
        self.tasks.abort_all();
        drop(self.recorder);
        // Bounded: with the database gone, what is left is reclaimed when its leases run out.
        let _ = tokio::time::timeout(grace, recording).await;
        let left: Vec<(DeliveryId, AccountId)> = lock(&self.in_flight)
            .deliveries
            .iter()
            .map(|(id, account_id)| (id.clone(), account_id.clone()))
            .collect();
        for (id, account_id) in left {
            release(&self.db, &account_id, &id, &self.owner).await;
        }
    }
}
/// The jobs a claim took; a failed claim is logged and took none.
fn claimed_jobs(claim: Result<Vec<Job>, StoreError>) -> Vec<Job> {
    match claim {
        Ok(jobs) => jobs,
        Err(e) => {
            tracing::error!(target: "kxp_sender", error = %e, "claiming deliveries failed");
            Vec::new()
        }
    }
}

async fn reclaim(db: &Db) {
    match db.reclaim_expired().await {
        Ok(0) => {}
        Ok(n) => {
            tracing::warn!(target: "kxp_sender", deliveries = n, "reclaimed deliveries whose worker stopped")
        }
        Err(e) => {
            tracing::error!(target: "kxp_sender", error = %e, "reclaiming expired leases failed")
        }
    }
}

async fn probe(db: &Db) {
    if let Err(e) = db.release_probes().await {
        tracing::error!(target: "kxp_sender", error = %e, "releasing circuit probes failed");
    }
}

async fn release(db: &Db, account_id: &AccountId, id: &DeliveryId, owner: &str) {
    if let Err(e) = db.release(account_id, id, owner).await {
        // Not fatal: the lease runs out and the delivery is reclaimed then.
        tracing::error!(target: "kxp_sender", delivery_id = %id, error = %e, "releasing a delivery failed");
    }
}

fn lock<T>(state: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves only counters or sets of endpoints
    // behind; keep going with them.
    state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
