//! The delivery loop: claim due deliveries, send each in its own task, record the outcome.
//!
//! Every attempt runs concurrently with the others, bounded by a global worker count and, per
//! endpoint, by a concurrency limit and a rate limit ([`RateLimiter`]), so an endpoint that
//! hangs until its timeout holds at most its own share of the workers and never delays
//! deliveries to healthy endpoints. The claim asks the database for no more of an endpoint's
//! deliveries than it may start now, so a backlog is not claimed only to be put back.
//! The loop also releases the probes of open circuits whose cool-down has passed
//! ([`Db::release_probes`](crate::store::Db::release_probes)).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use crate::engine::config::Shared;
use crate::engine::dispatch::{self, Outcome};
use crate::model::{
    AttemptError, AttemptRecord, DeliveryId, EndpointId, Finished, Job, NextState, Transition, ms,
    new_id, now_ms,
};
use crate::policy::rate::RateLimiter;
use crate::policy::schedule::AfterFailure;
use crate::store::Db;

/// Shared state of the in-flight attempts.
#[derive(Default)]
struct InFlight {
    per_endpoint: HashMap<EndpointId, usize>,
    deliveries: HashSet<DeliveryId>,
    limiter: RateLimiter,
}

impl InFlight {
    /// What the next claim may take of each endpoint this worker is limiting now: the smaller
    /// of its free concurrency and its rate tokens. Endpoints not listed may take up to the
    /// concurrency limit.
    fn caps(&mut self, per_endpoint: usize) -> Vec<(String, usize)> {
        let now = tokio::time::Instant::now();
        let mut caps: HashMap<String, usize> = self
            .per_endpoint
            .iter()
            .map(|(id, n)| (id.to_string(), per_endpoint.saturating_sub(*n)))
            .collect();
        for (id, tokens) in self.limiter.allowances(now) {
            let cap = caps.entry(id.to_owned()).or_insert(per_endpoint);
            *cap = (*cap).min(tokens);
        }
        caps.into_iter().collect()
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
    let per_endpoint = config.per_endpoint_concurrency.max(1);
    let owner = new_id("wrk");
    let permits = Arc::new(Semaphore::new(config.workers.max(1)));
    let in_flight = Arc::new(Mutex::new(InFlight::default()));
    let mut tasks = JoinSet::new();
    let mut last_reclaim = tokio::time::Instant::now();
    // Housekeeping (expired leases, due probes) runs this often; tests with millisecond
    // schedules poll faster, and housekeeping keeps pace with them.
    let housekeeping = (config.poll_interval * 4).min(Duration::from_secs(1));
    reclaim(&db).await;

    while !*shutdown.borrow() {
        while tasks.try_join_next().is_some() {}
        if last_reclaim.elapsed() >= housekeeping {
            reclaim(&db).await;
            probe(&db).await;
            last_reclaim = tokio::time::Instant::now();
        }
        let free = permits.available_permits();
        let claimed = if free == 0 {
            Vec::new()
        } else {
            let caps = lock(&in_flight).caps(per_endpoint);
            let limit = i64::try_from(free.min(100)).unwrap_or(100);
            match db
                .claim(&owner, ms(config.lease_extra), limit, &caps, per_endpoint)
                .await
            {
                Ok(ids) => ids,
                Err(e) => {
                    tracing::error!(target: "kxp_sender", error = %e, "claiming deliveries failed");
                    Vec::new()
                }
            }
        };
        if claimed.is_empty() {
            tokio::select! {
                _ = tokio::time::sleep(config.poll_interval) => {}
                _ = shared.wake.notified() => {}
                _ = shutdown.changed() => {}
                Some(_) = tasks.join_next() => {}
            }
            continue;
        }
        for id in claimed {
            let job = match db.job(&id).await {
                Ok(job) => job,
                Err(e) => {
                    tracing::error!(target: "kxp_sender", delivery_id = %id, error = %e, "loading a claimed delivery failed");
                    continue;
                }
            };
            if !job.sendable() {
                // Paused or deleted, or its circuit opened, between the claim and now: put it
                // back untried (a deleted endpoint's delivery ends dead there, an open circuit's
                // probe release holds it). No attempt is spent.
                release(&db, job.id.as_str(), &owner).await;
                continue;
            }
            let Ok(permit) = permits.clone().try_acquire_owned() else {
                release(&db, job.id.as_str(), &owner).await;
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
                let admitted = count < per_endpoint
                    && state.limiter.try_take(
                        job.endpoint_id.as_str(),
                        rate,
                        tokio::time::Instant::now(),
                    );
                if admitted {
                    *state
                        .per_endpoint
                        .entry(job.endpoint_id.clone())
                        .or_insert(0) += 1;
                    state.deliveries.insert(job.id.clone());
                }
                admitted
            };
            if !admitted {
                // The batch held more for this endpoint than it may start now (the first claim
                // of an endpoint, before its rate limit is known here).
                release(&db, job.id.as_str(), &owner).await;
                continue;
            }
            let (db, owner, shared, in_flight) =
                (db.clone(), owner.clone(), shared.clone(), in_flight.clone());
            tasks.spawn(async move {
                attempt(&db, &owner, &shared, &job).await;
                let mut state = lock(&in_flight);
                state.deliveries.remove(&job.id);
                if let Some(count) = state.per_endpoint.get_mut(&job.endpoint_id) {
                    *count = count.saturating_sub(1);
                    if *count == 0 {
                        state.per_endpoint.remove(&job.endpoint_id);
                    }
                }
                drop(permit);
            });
        }
    }

    // Shutdown: no new claims. Attempts end by their timeouts; whatever outlives the grace
    // period is aborted and put back, so another process can take it at once.
    let _ = tokio::time::timeout(grace, async { while tasks.join_next().await.is_some() {} }).await;
    tasks.abort_all();
    let left: Vec<DeliveryId> = lock(&in_flight).deliveries.iter().cloned().collect();
    for id in left {
        release(&db, id.as_str(), &owner).await;
    }
}

async fn attempt(db: &Db, owner: &str, shared: &Shared, job: &Job) {
    let config = &shared.config;
    let secrets = match db.live_secrets(job.endpoint_id.as_str()).await {
        Ok(secrets) => secrets,
        Err(e) => {
            tracing::error!(target: "kxp_sender", delivery_id = %job.id, error = %e, "loading secrets failed");
            return release(db, job.id.as_str(), owner).await;
        }
    };
    let number = job.attempts + 1;
    let started_at = now_ms();
    let request = dispatch::Request {
        url: &job.url,
        payload: &job.payload,
        event_id: job.event_id.as_str(),
        event_type: &job.event_type,
        delivery_id: job.id.as_str(),
        attempt: number,
        secrets: &secrets,
        timeout: Duration::from_millis(u64::try_from(job.timeout_ms).unwrap_or(5000)),
        allow_http: config.dev,
    };
    let (outcome, took) = dispatch::send(&shared.client, &request).await;
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
    let record = AttemptRecord {
        started_at,
        duration_ms: ms(took),
        status_code: outcome.status(),
        error,
        response_snippet: snippet,
    };
    match db
        .finish_attempt(
            job.id.as_str(),
            owner,
            number,
            &record,
            next,
            &config.protection,
        )
        .await
    {
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

async fn probe(db: &Db) {
    if let Err(e) = db.release_probes().await {
        tracing::error!(target: "kxp_sender", error = %e, "releasing circuit probes failed");
    }
}

async fn release(db: &Db, id: &str, owner: &str) {
    if let Err(e) = db.release(id, owner).await {
        // Not fatal: the lease runs out and the delivery is reclaimed then.
        tracing::error!(target: "kxp_sender", delivery_id = %id, error = %e, "releasing a delivery failed");
    }
}

fn lock(state: &Mutex<InFlight>) -> std::sync::MutexGuard<'_, InFlight> {
    // A panic while holding this lock leaves only counters behind; keep going with them.
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
