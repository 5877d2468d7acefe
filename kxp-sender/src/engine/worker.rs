//! The delivery loop: claim due deliveries, send each in its own task, record the outcome.
//!
//! Every attempt runs concurrently with the others, bounded by a global worker count and, per
//! endpoint, by an adaptive concurrency limit ([`Adaptive`]: it grows while the endpoint answers
//! quickly and halves on timeouts, 429s, 503s and slow answers, up to the configured
//! per-endpoint concurrency) and, where one is set, a rate limit ([`RateLimiter`]). So an
//! endpoint that hangs until its timeout holds at most its own share of the workers and never
//! delays deliveries to healthy ones, and a fast endpoint is not held to a fixed cap. Per
//! account, the workers are shared fairly ([`Fairness`]): while other accounts have work, no
//! account holds more than its share, and the last workers of the pool are kept for attempts
//! that give them back quickly, so an account whose endpoints all hang cannot take every worker
//! and make another account's deliveries wait for its timeouts.
//!
//! The loop claims from each endpoint's own queue for the endpoints it knows have work and
//! room for it — ingestion names the endpoints it queued for, and a finished attempt names its
//! own — so a claim costs what it takes, and an endpoint at its limit is not read at all,
//! however long its backlog ([`Db::claim_for_fair`]). Every poll interval, and when told of work it
//! cannot place (a replay, a resume), it also scans everything due in due order
//! ([`Db::claim`]): retries coming due, expired leases, other processes' events. Either claim
//! asks for no more of an endpoint's or an account's deliveries than it may start now, so a
//! backlog is not claimed only to be put back, and returns them ready to send. Outcomes are
//! recorded in batches by the [`Recorder`]. The loop also releases the probes of open circuits
//! whose cool-down has passed ([`Db::release_probes`](crate::store::Db::release_probes)).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use crate::engine::config::Shared;
use crate::engine::dispatch::{self, Outcome};
use crate::engine::recorder::Recorder;
use crate::model::{
    AccountId, AttemptError, AttemptRecord, DeliveryId, ED25519_PREFIX, EndpointId, Failure,
    FailureKind, FinishAttempt, Finished, Job, KeyCheck, Material, NextState, Secrets, Transition,
    ms, new_id, now_ms,
};
use crate::policy::concurrency::{self, Adaptive, Signal};
use crate::policy::fairness::{AccountCaps, Fairness};
use crate::policy::rate::RateLimiter;
use crate::policy::schedule::AfterFailure;
use crate::store::{Db, open_secret};

/// The least time between two claims of the delivery loop.
const CLAIM_GAP: Duration = Duration::from_millis(2);

/// How long an endpoint with nothing in flight keeps its learned limit.
const IDLE_LIMIT: Duration = Duration::from_secs(300);

/// Shared state of the in-flight attempts.
struct InFlight {
    per_endpoint: HashMap<EndpointId, usize>,
    /// Attempts in flight per account.
    per_account: HashMap<AccountId, usize>,
    /// The account of each endpoint this worker knows (learned from its claims).
    accounts: HashMap<EndpointId, AccountId>,
    fairness: Fairness,
    /// Endpoints whose attempts finished since the loop last claimed: they may have more.
    ready: HashSet<EndpointId>,
    limits: HashMap<EndpointId, (Adaptive, tokio::time::Instant)>,
    deliveries: HashSet<DeliveryId>,
    limiter: RateLimiter,
    ceiling: usize,
}

impl InFlight {
    fn new(ceiling: usize, workers: usize) -> InFlight {
        InFlight {
            per_endpoint: HashMap::new(),
            per_account: HashMap::new(),
            accounts: HashMap::new(),
            fairness: Fairness::new(workers),
            ready: HashSet::new(),
            limits: HashMap::new(),
            deliveries: HashSet::new(),
            limiter: RateLimiter::default(),
            ceiling,
        }
    }

    /// The endpoint's adaptive limit now.
    fn limit(&self, endpoint_id: &EndpointId) -> usize {
        self.limits
            .get(endpoint_id)
            .map_or(self.default_cap(), |(a, _)| a.limit())
    }

    /// What the next claim may take of each endpoint this worker knows: the smaller of its
    /// free concurrency and its rate tokens. Endpoints not listed may take
    /// [`default_cap`](InFlight::default_cap).
    fn caps(&mut self) -> Vec<(String, usize)> {
        let now = crate::model::tokio_instant();
        self.limits.retain(|id, (_, used)| {
            now.saturating_duration_since(*used) < IDLE_LIMIT || self.per_endpoint.contains_key(id)
        });
        self.accounts
            .retain(|id, _| self.limits.contains_key(id) || self.per_endpoint.contains_key(id));
        let mut caps: HashMap<String, usize> = self
            .limits
            .iter()
            .map(|(id, (a, _))| {
                let busy = self.per_endpoint.get(id).copied().unwrap_or(0);
                (id.to_string(), a.limit().saturating_sub(busy))
            })
            .collect();
        for (id, busy) in &self.per_endpoint {
            if !self.limits.contains_key(id) {
                caps.insert(id.to_string(), self.default_cap().saturating_sub(*busy));
            }
        }
        let default_cap = self.default_cap();
        for (id, tokens) in self.limiter.allowances(now) {
            let cap = caps.entry(id.to_owned()).or_insert(default_cap);
            *cap = (*cap).min(tokens);
        }
        caps.into_iter().collect()
    }

    /// Whether the endpoint answered its last attempt quickly ([`Adaptive::quick`]).
    fn quick(&self, endpoint_id: &EndpointId) -> bool {
        self.limits.get(endpoint_id).is_some_and(|(a, _)| a.quick())
    }

    /// The accounts with work here: attempts in flight, or due deliveries of endpoints in
    /// `ready` (whose accounts this worker knows), and whether `ready` names an endpoint of an
    /// account it does not know.
    fn with_work(&self, ready: &HashSet<EndpointId>) -> (HashSet<AccountId>, bool) {
        let mut accounts: HashSet<AccountId> = self.per_account.keys().cloned().collect();
        let mut unknown = false;
        for id in ready {
            match self.accounts.get(id) {
                Some(account) => {
                    accounts.insert(account.clone());
                }
                None => unknown = true,
            }
        }
        (accounts, unknown)
    }

    /// What the next claim may take of each account, with `free` workers free and
    /// `with_work` (and, if `unknown`, one more) having work: its [room](Fairness::room), for
    /// quick endpoints if it has one. Accounts not listed are new here, and may take what a
    /// newcomer may.
    fn account_caps(
        &self,
        with_work: &HashSet<AccountId>,
        unknown: bool,
        free: usize,
    ) -> AccountCaps {
        let busy = with_work.len() + usize::from(unknown);
        let quick: HashSet<&AccountId> = self
            .accounts
            .iter()
            .filter(|(id, _)| self.quick(id))
            .map(|(_, account)| account)
            .collect();
        let mut listed = HashMap::new();
        for account in self.accounts.values().chain(self.per_account.keys()) {
            if listed.contains_key(account.as_str()) {
                continue;
            }
            let held = self.per_account.get(account).copied().unwrap_or(0);
            let accounts = busy + usize::from(!with_work.contains(account));
            let room = self
                .fairness
                .room(held, accounts, free, quick.contains(account));
            listed.insert(account.to_string(), room);
        }
        AccountCaps {
            listed,
            others: self.fairness.room(0, with_work.len() + 1, free, false),
        }
    }

    /// Whether the job's account may start one more attempt now, with `free` workers free and
    /// `with_work` having work (the job's account among them).
    fn fair(&self, account: &AccountId, job: &Job, free: usize, with_work: usize) -> bool {
        let held = self.per_account.get(account).copied().unwrap_or(0);
        self.fairness
            .room(held, with_work, free, self.quick(&job.endpoint_id))
            > 0
    }

    /// What the claim may take of an endpoint this worker has not seen lately.
    fn default_cap(&self) -> usize {
        concurrency::INITIAL.min(self.ceiling)
    }

    /// Feeds an attempt's outcome to its endpoint's limit.
    fn observe(&mut self, endpoint_id: &EndpointId, signal: Signal) {
        let ceiling = self.ceiling;
        let (adaptive, used) = self
            .limits
            .entry(endpoint_id.clone())
            .or_insert_with(|| (Adaptive::new(ceiling), crate::model::tokio_instant()));
        adaptive.observe(signal);
        *used = crate::model::tokio_instant();
    }
}

/// What an outcome says about the endpoint's load, for its adaptive limit.
fn signal(outcome: &Outcome, took: Duration) -> Signal {
    match outcome {
        Outcome::Delivered { .. } => Signal::Answered(took.as_secs_f64() * 1000.0),
        Outcome::Rejected {
            status: 429 | 503, ..
        } => Signal::Overloaded,
        Outcome::Failed(failure)
            if matches!(failure.kind, FailureKind::Timeout | FailureKind::Connect) =>
        {
            Signal::Overloaded
        }
        _ => Signal::Neutral,
    }
}

/// Runs until `shutdown` turns true, then lets in-flight attempts finish (they are bounded by
/// their timeouts) for up to `grace`, and puts back whatever is still running.
pub(crate) async fn run(
    db: Db,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
    grace: Duration,
) {
    let config = &shared.config;
    let ceiling = config.per_endpoint_concurrency.max(1);
    let owner = new_id("wrk");
    let permits = Arc::new(Semaphore::new(config.workers.max(1)));
    let in_flight = Arc::new(Mutex::new(InFlight::new(ceiling, config.workers.max(1))));
    let (recorder, recording) =
        Recorder::start(db.clone(), config.protection.clone(), shared.gate.clone());
    let mut tasks = JoinSet::new();
    let mut last_reclaim = crate::model::tokio_instant();
    let mut last_scan: Option<tokio::time::Instant> = None;
    // Housekeeping (expired leases, due probes) runs this often; tests with millisecond
    // schedules poll faster, and housekeeping keeps pace with them.
    let housekeeping = (config.poll_interval * 4).min(Duration::from_secs(1));
    reclaim(&db).await;
    let sequencer = shared
        .sequencer
        .then(|| AbortOnDrop(tokio::spawn(sequencer(db.clone(), shared.clone()))));

    let mut last_claim: Option<tokio::time::Instant> = None;
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
        while let Some(ended) = tasks.try_join_next() {
            if ended.is_err_and(|e| e.is_panic()) {
                tracing::error!(
                    target: "kxp_sender",
                    "an attempt panicked; its delivery is taken again when its lease ends"
                );
            }
        }
        if last_reclaim.elapsed() >= housekeeping {
            reclaim(&db).await;
            probe(&db).await;
            last_reclaim = crate::model::tokio_instant();
        }
        let free = permits.available_permits();
        let mut claimed = Vec::new();
        let mut with_work: HashSet<AccountId> = HashSet::new();
        if free > 0 {
            last_claim = Some(crate::model::tokio_instant());
            let (ready, mut caps, default_cap, mut accounts, work, held) = {
                let mut state = lock(&in_flight);
                let mut ready = std::mem::take(&mut state.ready);
                ready.extend(shared.take_ready());
                let caps: HashMap<String, usize> = state.caps().into_iter().collect();
                let (with_work, unknown) = state.with_work(&ready);
                let accounts = state.account_caps(&with_work, unknown, free);
                // The ready endpoints' accounts and what those hold, to serve the accounts
                // holding least first.
                let held: HashMap<EndpointId, (Option<AccountId>, usize)> = ready
                    .iter()
                    .map(|id| {
                        let account = state.accounts.get(id).cloned();
                        let count = account
                            .as_ref()
                            .and_then(|a| state.per_account.get(a))
                            .copied()
                            .unwrap_or(0);
                        (id.clone(), (account, count))
                    })
                    .collect();
                (ready, caps, state.default_cap(), accounts, with_work, held)
            };
            with_work = work;
            // First, every poll interval or when told, a scan of everything due in due order:
            // retries coming due, expired leases, replays, other processes' events. It comes
            // first so that endpoints busy with their own backlogs never keep it from running.
            let told = shared.rescan.swap(false, Ordering::SeqCst);
            let scan = told
                || last_scan
                    .is_none_or(|at: tokio::time::Instant| at.elapsed() >= config.poll_interval);
            if scan {
                last_scan = Some(crate::model::tokio_instant());
                // Every endpoint's new deliveries are numbered, held ones (paused endpoints)
                // and other processes' too: the feed lists them by number.
                number(&db, &shared, None).await;
                let scan_caps: Vec<(String, usize)> =
                    caps.iter().map(|(id, cap)| (id.clone(), *cap)).collect();
                let limit = i64::try_from(free.min(100)).unwrap_or(100);
                match db
                    .claim_fair(
                        &owner,
                        ms(config.lease_extra),
                        limit,
                        (&scan_caps, default_cap),
                        &accounts,
                    )
                    .await
                {
                    Ok(jobs) => claimed = jobs,
                    Err(e) => {
                        tracing::error!(target: "kxp_sender", error = %e, "claiming deliveries failed")
                    }
                }
                for taken in &claimed {
                    let cap = caps
                        .entry(taken.job.endpoint_id.to_string())
                        .or_insert(default_cap);
                    *cap = cap.saturating_sub(1);
                    let others = accounts.others;
                    let cap = accounts
                        .listed
                        .entry(taken.account_id.to_string())
                        .or_insert(others);
                    *cap = cap.saturating_sub(1);
                }
            }
            // Then the endpoints known to have work and room, each from its own queue, for no
            // more than the free workers in all, and no more than each account's room: the
            // accounts holding least are served first.
            let mut budget = free.saturating_sub(claimed.len());
            let mut targets: Vec<(EndpointId, usize)> = Vec::new();
            let mut ready: Vec<(EndpointId, (Option<AccountId>, usize))> = held
                .into_iter()
                .filter(|(id, _)| ready.contains(id))
                .collect();
            ready.sort_by_key(|(_, (_, held))| *held);
            for (id, (account, _)) in ready {
                let left = account
                    .as_ref()
                    .map_or(accounts.others, |a| accounts.of(a.as_str()));
                let endpoint_cap = caps.get(id.as_str()).copied().unwrap_or(default_cap);
                let cap = endpoint_cap.min(budget).min(left);
                if cap > 0 {
                    budget -= cap;
                    if let Some(a) = &account {
                        accounts.listed.insert(a.to_string(), left - cap);
                    }
                    targets.push((id, cap));
                } else if budget == 0 || (endpoint_cap > 0 && left == 0) {
                    // No worker free for it now, or its account has its share: it stays named
                    // for the next round.
                    lock(&in_flight).ready.insert(id);
                }
            }
            if !targets.is_empty() {
                if !scan && !shared.sequencer {
                    // Their new deliveries numbered just before they are claimed, so that
                    // nearly every attempt carries its number; the claim never waits for one.
                    let ids: Vec<EndpointId> = targets.iter().map(|(id, _)| id.clone()).collect();
                    number(&db, &shared, Some(&ids)).await;
                }
                let turn = shared.gate.enter().await;
                let taken = db
                    .claim_for_fair(&owner, ms(config.lease_extra), &targets, &accounts)
                    .await;
                drop(turn);
                match taken {
                    Ok(jobs) => claimed.extend(jobs),
                    Err(e) => {
                        tracing::error!(target: "kxp_sender", error = %e, "claiming deliveries failed")
                    }
                }
            }
        }
        if claimed.is_empty() {
            tokio::select! {
                _ = tokio::time::sleep(config.poll_interval) => {}
                _ = shared.wake.notified() => {}
                _ = shutdown.changed() => {}
                Some(_) = tasks.join_next() => {}
            }
            continue;
        }
        // Every account with a claimed job has work: it counts for the shares.
        with_work.extend(claimed.iter().map(|taken| taken.account_id.clone()));
        for taken in claimed {
            let (account_id, job) = (taken.account_id, taken.job);
            lock(&in_flight)
                .accounts
                .insert(job.endpoint_id.clone(), account_id.clone());
            if !job.sendable() {
                // Paused or deleted, or its circuit opened, between the claim and now: put it
                // back untried (a deleted endpoint's delivery ends dead there, an open circuit's
                // probe release holds it). No attempt is spent.
                release(&db, &job.id, &owner).await;
                continue;
            }
            let free = permits.available_permits();
            let Ok(permit) = permits.clone().try_acquire_owned() else {
                release(&db, &job.id, &owner).await;
                continue;
            };
            let admitted = {
                let mut state = lock(&in_flight);
                let count = state
                    .per_endpoint
                    .get(&job.endpoint_id)
                    .copied()
                    .unwrap_or(0);
                let rate = config.protection.rate_of(job.rate_limit_per_second);
                let admitted = count < state.limit(&job.endpoint_id)
                    && state.fair(&account_id, &job, free, with_work.len())
                    && state.limiter.try_take(
                        job.endpoint_id.as_str(),
                        rate,
                        crate::model::tokio_instant(),
                    );
                if admitted {
                    *state
                        .per_endpoint
                        .entry(job.endpoint_id.clone())
                        .or_insert(0) += 1;
                    *state.per_account.entry(account_id.clone()).or_insert(0) += 1;
                    state.deliveries.insert(job.id.clone());
                }
                admitted
            };
            if !admitted {
                // The batch held more for this endpoint than it may start now (the first claim
                // of an endpoint, before its rate limit is known here), or more for its account
                // than its share.
                release(&db, &job.id, &owner).await;
                continue;
            }
            let (owner, shared, in_flight, recorder) = (
                owner.clone(),
                shared.clone(),
                in_flight.clone(),
                recorder.clone(),
            );
            tasks.spawn(async move {
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
                done.outcome = Some(attempt(&recorder, &owner, &shared, &job).await);
            });
        }
    }

    drop(sequencer);
    // Shutdown: no new claims. Attempts end by their timeouts; whatever outlives the grace
    // period is aborted and put back, so another process can take it at once.
    let _ = tokio::time::timeout(grace, async { while tasks.join_next().await.is_some() {} }).await;
    tasks.abort_all();
    // Every outcome handed to the recorder is written before the loop returns.
    drop(recorder);
    // Bounded: with the database gone, what is left is reclaimed when its leases run out.
    let _ = tokio::time::timeout(grace, recording).await;
    let left: Vec<DeliveryId> = lock(&in_flight).deliveries.iter().cloned().collect();
    for id in left {
        release(&db, &id, &owner).await;
    }
}

/// What an attempt's task hands back to the claim loop when it ends: its endpoint and account
/// each get a slot back, and, if it got an outcome, its delivery leaves the in-flight set and
/// the outcome feeds the endpoint's concurrency limit.
struct Done {
    in_flight: Arc<Mutex<InFlight>>,
    job_id: DeliveryId,
    endpoint_id: EndpointId,
    account_id: AccountId,
    /// The attempt's load signal and whether recording it closed the circuit.
    outcome: Option<(Signal, bool)>,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl Drop for Done {
    fn drop(&mut self) {
        let mut state = lock(&self.in_flight);
        if let Some((signal, closed)) = self.outcome {
            // Done with it. One that did not finish (aborted at shutdown, or panicked) stays
            // listed, so the shutdown puts it back for another process at once.
            state.deliveries.remove(&self.job_id);
            state.observe(&self.endpoint_id, signal);
            if closed {
                // The endpoint is back after an outage: what it could take before says
                // nothing about now, and its held backlog is about to be released. It starts
                // again from the initial limit, so the drain is gentle.
                state.limits.remove(&self.endpoint_id);
            }
        }
        // It may have more waiting: the loop claims for it next, from its own queue.
        state.ready.insert(self.endpoint_id.clone());
        if let Some(count) = state.per_endpoint.get_mut(&self.endpoint_id) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                state.per_endpoint.remove(&self.endpoint_id);
            }
        }
        if let Some(count) = state.per_account.get_mut(&self.account_id) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                state.per_account.remove(&self.account_id);
            }
        }
    }
}

/// The job's secrets, opened with the server's key ring and read. If one does not open (the
/// start-up check makes that a ring changed under a running fleet) or does not read (a row
/// altered by hand), the error is logged and none is used: the attempt fails as `no_secret`
/// and is retried, never sent unsigned or signed with part of its secrets.
pub(crate) fn open_secrets(
    shared: &Shared,
    endpoint_id: &EndpointId,
    secrets: &Secrets,
) -> Vec<Material> {
    let ring = shared.config.secrets_key.as_ref();
    let opened = secrets
        .0
        .iter()
        .map(|(_, entry)| {
            let entry = match entry.strip_prefix(ED25519_PREFIX) {
                Some(stored) => open_secret(ring, endpoint_id, stored)
                    .map(|seed| format!("{ED25519_PREFIX}{seed}")),
                None => open_secret(ring, endpoint_id, entry),
            }
            .map_err(|e| e.to_string())?;
            Material::parse(&entry)
                .ok_or_else(|| "it is not a secret or key (altered by hand?)".to_owned())
        })
        .collect::<Result<Vec<_>, _>>();
    opened.unwrap_or_else(|e| {
        tracing::error!(
            target: "kxp_sender", endpoint_id = %endpoint_id, error = %e,
            "a secret of the endpoint does not open or does not read"
        );
        Vec::new()
    })
}

/// What the attempt sends: the envelope as stored, or, for an endpoint with an encryption key,
/// the envelope with `data` sealed to that key as `data_jwe` (made anew for each attempt, with
/// the key the endpoint has now). A key or envelope that does not seal fails the attempt:
/// `data` is never sent in the clear to an endpoint that asked for it encrypted.
pub(crate) fn sealed<'p>(
    jwk: Option<&str>,
    payload: &'p str,
) -> Result<std::borrow::Cow<'p, str>, Failure> {
    let Some(jwk) = jwk else {
        return Ok(payload.into());
    };
    let failed = |why: String| Failure::new(FailureKind::EncryptionFailed, why);
    let key = kxp_jwe::EncryptionKey::from_jwk(jwk).map_err(|e| failed(e.to_string()))?;
    kxp_jwe::seal_envelope(&key, payload)
        .map(Into::into)
        .map_err(|e| failed(e.to_string()))
}

/// The fingerprints of the secrets (and keys) an attempt is signed with, in their order.
fn fingerprints(secrets: &[Material]) -> Vec<String> {
    secrets.iter().map(Material::fingerprint).collect()
}

/// What a delivered attempt's confirmation (`verified_key`) says about the job's secrets:
/// nothing to record unless it names one of them or a `when_confirmed` rotation is counting.
fn key_check(job: &Job, signed_with: &[String], verified_key: Option<&str>) -> Option<KeyCheck> {
    let verified = verified_key
        .and_then(|key| signed_with.iter().position(|f| f == key))
        .and_then(|i| job.secrets.0.get(i).map(|(id, _)| *id));
    (verified.is_some() || job.confirming).then_some(KeyCheck {
        verified,
        confirming: job.confirming,
    })
}

/// Sends one job and records its outcome; returns what the outcome says about the endpoint's
/// load, and whether recording it closed the endpoint's circuit.
async fn attempt(recorder: &Recorder, owner: &str, shared: &Shared, job: &Job) -> (Signal, bool) {
    let config = &shared.config;
    let number = job.attempts + 1;
    let started_at = now_ms();
    let secrets = open_secrets(shared, &job.endpoint_id, &job.secrets);
    let (outcome, took) = match sealed(job.encryption_jwk.as_deref(), &job.payload) {
        Ok(payload) => {
            let request = dispatch::Request {
                url: &job.url,
                payload: &payload,
                event_id: job.event_id.as_str(),
                event_type: &job.event_type,
                delivery_id: job.id.as_str(),
                attempt: number,
                endpoint_id: Some(job.endpoint_id.as_str()),
                sequence: job.sequence,
                secrets: &secrets,
                timeout: Duration::from_millis(u64::try_from(job.timeout_ms).unwrap_or(5000)),
                allow_http: config.dev,
            };
            dispatch::send(&shared.client, &request).await
        }
        Err(failure) => (Outcome::Failed(failure), Duration::ZERO),
    };
    shared.metrics.attempt(&outcome, took);

    let next = match &outcome {
        Outcome::Delivered { .. } => NextState::Delivered,
        Outcome::Rejected { retry_after, .. } => after_failure(shared, number, *retry_after),
        Outcome::Failed(_) => after_failure(shared, number, None),
    };
    let (snippet, error) = match &outcome {
        Outcome::Delivered { snippet, .. } => (Some(snippet.clone()), None),
        Outcome::Rejected {
            status, snippet, ..
        } => (Some(snippet.clone()), Some(AttemptError::Http(*status))),
        Outcome::Failed(failure) => (None, Some(AttemptError::Failed(failure.clone()))),
    };
    log(job, number, &outcome, next, took);
    let signed_with = fingerprints(&secrets);
    let verified_key = match &outcome {
        Outcome::Delivered { verified_key, .. } => Some(verified_key.clone()),
        _ => None,
    };
    let keys = verified_key
        .as_ref()
        .and_then(|key| key_check(job, &signed_with, key.as_deref()));
    let record = AttemptRecord {
        started_at,
        duration_ms: ms(took),
        status_code: outcome.status(),
        error,
        response_snippet: snippet,
        signed_with: signed_with.join(","),
        verified_key: verified_key.flatten(),
    };
    let finished = recorder
        .finish(FinishAttempt {
            delivery_id: job.id.clone(),
            endpoint_id: job.endpoint_id.clone(),
            owner: owner.to_owned(),
            attempt: number,
            record,
            next,
            keys,
        })
        .await;
    let closed = matches!(
        finished,
        Ok(Finished::Recorded {
            transition: Some(Transition::Close),
            ..
        })
    );
    match finished {
        Ok(Finished::Recorded {
            transition,
            notices,
        }) => {
            match next {
                NextState::Delivered => shared.metrics.delivery_ended(true),
                NextState::Dead => shared.metrics.delivery_ended(false),
                NextState::RetryAt(_) => {}
            }
            if let Some(t) = transition {
                shared.metrics.transition(t);
            }
            match transition {
                Some(t @ (Transition::Open | Transition::Disable)) => tracing::warn!(
                    target: "kxp_sender::circuit", endpoint_id = %job.endpoint_id,
                    transition = t.as_str(), notices, "endpoint state changed"
                ),
                Some(t) => tracing::info!(
                    target: "kxp_sender::circuit", endpoint_id = %job.endpoint_id,
                    transition = t.as_str(), "endpoint state changed"
                ),
                None => {}
            }
            if notices > 0 {
                shared.notices.notify_one();
            }
        }
        Ok(Finished::LeaseLost) => tracing::warn!(
            target: "kxp_sender", delivery_id = %job.id,
            "lease expired during the attempt; another worker owns the delivery now"
        ),
        // The lease will run out and the delivery will be tried again: at least once, never lost.
        Err(e) => {
            tracing::error!(target: "kxp_sender", delivery_id = %job.id, error = %e, "recording an attempt failed")
        }
    }
    (signal(&outcome, took), closed)
}

fn after_failure(shared: &Shared, attempts_made: i64, retry_after: Option<Duration>) -> NextState {
    let made = u32::try_from(attempts_made).unwrap_or(u32::MAX);
    match shared
        .config
        .schedule
        .after_failure(made, draw(), retry_after)
    {
        AfterFailure::RetryIn(delay) => NextState::RetryAt(now_ms().saturating_add(ms(delay))),
        AfterFailure::Dead => NextState::Dead,
    }
}

fn log(job: &Job, attempt: i64, outcome: &Outcome, next: NextState, took: Duration) {
    let took_ms = ms(took);
    let next = match next {
        NextState::Delivered => "delivered".to_owned(),
        NextState::RetryAt(at) => format!("retry in {} ms", at.saturating_sub(now_ms()).max(0)),
        NextState::Dead => "dead".to_owned(),
    };
    match outcome {
        Outcome::Delivered { status, .. } => tracing::info!(
            target: "kxp_sender", delivery_id = %job.id, event_id = %job.event_id, endpoint_id = %job.endpoint_id,
            attempt, status, duration_ms = took_ms, "delivered"
        ),
        // A 4xx usually means the receiver is misconfigured (wrong secret, wrong route): loud.
        Outcome::Rejected { status, .. } if (400..500).contains(status) => tracing::warn!(
            target: "kxp_sender", delivery_id = %job.id, event_id = %job.event_id, endpoint_id = %job.endpoint_id,
            attempt, status, duration_ms = took_ms, next = %next, "endpoint refused the delivery"
        ),
        Outcome::Rejected { status, .. } => tracing::info!(
            target: "kxp_sender", delivery_id = %job.id, event_id = %job.event_id, endpoint_id = %job.endpoint_id,
            attempt, status, duration_ms = took_ms, next = %next, "endpoint failed"
        ),
        Outcome::Failed(error) => tracing::info!(
            target: "kxp_sender", delivery_id = %job.id, event_id = %job.event_id, endpoint_id = %job.endpoint_id,
            attempt, error = %error, duration_ms = took_ms, next = %next, "attempt failed"
        ),
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

/// Numbers the deliveries [`Shared::wake_for`] announces, then hands their endpoints to the
/// delivery loop (PostgreSQL, [`Shared::sequencer`]). A task of its own, beside the loop: the
/// loop never waits for a pass before a claim (it claims numbered deliveries, and ones a pass
/// missed once they are 2 s old). Passes start at least [`PASS_GAP`] apart, so that under load
/// one transaction numbers what many ingestions committed meanwhile.
async fn sequencer(db: Db, shared: Arc<Shared>) {
    loop {
        shared.number.notified().await;
        tokio::time::sleep(PASS_GAP).await;
        let endpoints: Vec<EndpointId> = std::mem::take(&mut *lock(&shared.unnumbered))
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
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A sequencer pass over `endpoints` (all when `None`), in its turn at SQLite's write lock. A
/// failed pass is logged and left to the next: delivery goes on, without numbers meanwhile.
async fn number(db: &Db, shared: &Shared, endpoints: Option<&[EndpointId]>) {
    let turn = shared.gate.enter().await;
    let numbered = db.assign_sequences(endpoints).await;
    drop(turn);
    if let Err(e) = numbered {
        tracing::error!(target: "kxp_sender", error = %e, "numbering deliveries failed");
    }
}

async fn probe(db: &Db) {
    if let Err(e) = db.release_probes().await {
        tracing::error!(target: "kxp_sender", error = %e, "releasing circuit probes failed");
    }
}

async fn release(db: &Db, id: &DeliveryId, owner: &str) {
    if let Err(e) = db.release(id, owner).await {
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

/// A uniform draw in `0.0..1.0` from the OS generator, for jitter.
fn draw() -> f64 {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        return 0.5;
    }
    (u64::from_le_bytes(bytes) >> 11) as f64 / (1u64 << 53) as f64
}
