//! The attempts in flight in this process, per endpoint and per account, with each endpoint's
//! adaptive limit and rate tokens: what the claims are planned from ([`InFlight::plan`]), what
//! admits a claimed job ([`InFlight::admit`]), and what a finished attempt gives back
//! ([`Done`]). Pure state: the time is passed in, and the loop holds the lock.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use super::lock;
use super::plan::Plan;
use crate::model::{AccountId, DeliveryId, EndpointId, EndpointKey, Job};
use crate::policy::concurrency::{self, Adaptive, Signal};
use crate::policy::fairness::{AccountCaps, Fairness};
use crate::policy::rate::RateLimiter;

/// How long an endpoint with nothing in flight keeps its learned limit.
const IDLE_LIMIT: Duration = Duration::from_secs(300);

/// Shared state of the in-flight attempts.
pub(super) struct InFlight {
    per_endpoint: HashMap<EndpointId, usize>,
    /// Attempts in flight per account.
    per_account: HashMap<AccountId, usize>,
    /// The account of each endpoint this worker knows (learned from its claims).
    pub(super) accounts: HashMap<EndpointId, AccountId>,
    fairness: Fairness,
    /// Endpoints whose attempts finished since the loop last claimed: they may have more.
    pub(super) ready: HashSet<EndpointKey>,
    limits: HashMap<EndpointId, (Adaptive, Instant)>,
    /// The deliveries of the attempts in flight: put back at shutdown if they do not finish.
    pub(super) deliveries: HashMap<DeliveryId, AccountId>,
    limiter: RateLimiter<EndpointId>,
    ceiling: usize,
}

impl InFlight {
    /// Nothing in flight, with `ceiling` the most attempts at once per endpoint and `workers`
    /// the pool the accounts share.
    pub(super) fn new(ceiling: usize, workers: usize) -> InFlight {
        InFlight {
            per_endpoint: HashMap::new(),
            per_account: HashMap::new(),
            accounts: HashMap::new(),
            fairness: Fairness::new(workers),
            ready: HashSet::new(),
            limits: HashMap::new(),
            deliveries: HashMap::new(),
            limiter: RateLimiter::default(),
            ceiling,
        }
    }

    /// The room of the next claiming round, with `free` workers free at `now` and `ready` the
    /// endpoints named since the last one.
    pub(super) fn plan(&mut self, ready: HashSet<EndpointKey>, free: usize, now: Instant) -> Plan {
        let caps = self.caps(now);
        let with_work = self.with_work(&ready);
        let accounts = self.account_caps(&with_work, free);
        // What the ready endpoints' accounts hold, to serve the accounts holding least first.
        let ready = ready
            .into_iter()
            .map(|key| {
                let held = self.per_account.get(&key.account_id).copied().unwrap_or(0);
                (key, held)
            })
            .collect();
        Plan {
            caps,
            default_cap: self.default_cap(),
            accounts,
            with_work,
            ready,
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
    fn caps(&mut self, now: Instant) -> HashMap<EndpointId, usize> {
        self.limits.retain(|id, (_, used)| {
            now.saturating_duration_since(*used) < IDLE_LIMIT || self.per_endpoint.contains_key(id)
        });
        self.accounts
            .retain(|id, _| self.limits.contains_key(id) || self.per_endpoint.contains_key(id));
        let mut caps: HashMap<EndpointId, usize> = self
            .limits
            .iter()
            .map(|(id, (a, _))| {
                let busy = self.per_endpoint.get(id).copied().unwrap_or(0);
                (id.clone(), a.limit().saturating_sub(busy))
            })
            .collect();
        for (id, busy) in &self.per_endpoint {
            if !self.limits.contains_key(id) {
                caps.insert(id.clone(), self.default_cap().saturating_sub(*busy));
            }
        }
        let default_cap = self.default_cap();
        for (id, tokens) in self.limiter.allowances(now) {
            let cap = caps.entry(id.clone()).or_insert(default_cap);
            *cap = (*cap).min(tokens);
        }
        caps
    }

    /// Whether the endpoint answered its last attempt quickly ([`Adaptive::quick`]).
    fn quick(&self, endpoint_id: &EndpointId) -> bool {
        self.limits.get(endpoint_id).is_some_and(|(a, _)| a.quick())
    }

    /// The accounts with work here: attempts in flight, or due deliveries of endpoints in
    /// `ready`.
    fn with_work(&self, ready: &HashSet<EndpointKey>) -> HashSet<AccountId> {
        let mut accounts: HashSet<AccountId> = self.per_account.keys().cloned().collect();
        accounts.extend(ready.iter().map(|key| key.account_id.clone()));
        accounts
    }

    /// What the next claim may take of each account, with `free` workers free and
    /// `with_work` having work: its [room](Fairness::room), for quick endpoints if it has one.
    /// Accounts not listed are new here, and may take what a newcomer may.
    fn account_caps(&self, with_work: &HashSet<AccountId>, free: usize) -> AccountCaps {
        let busy = with_work.len();
        let quick: HashSet<&AccountId> = self
            .accounts
            .iter()
            .filter(|(id, _)| self.quick(id))
            .map(|(_, account)| account)
            .collect();
        let mut listed = HashMap::new();
        let known = self.accounts.values().chain(self.per_account.keys());
        for account in known.chain(with_work) {
            if listed.contains_key(account) {
                continue;
            }
            let held = self.per_account.get(account).copied().unwrap_or(0);
            let accounts = busy + usize::from(!with_work.contains(account));
            let room = self
                .fairness
                .room(held, accounts, free, quick.contains(account));
            listed.insert(account.clone(), room);
        }
        AccountCaps {
            listed,
            others: self.fairness.room(0, with_work.len() + 1, free, false),
        }
    }

    /// Whether the job may start now, with `free` workers free and `with_work` accounts having
    /// work (the job's account among them): under its endpoint's limit, within its account's
    /// share, and with a token of its endpoint's `rate` (per second) at `now`. If it may, its
    /// endpoint's and account's slots are taken and its delivery is listed in flight.
    pub(super) fn admit(
        &mut self,
        account_id: &AccountId,
        job: &Job,
        (free, with_work): (usize, usize),
        rate: Option<u32>,
        now: Instant,
    ) -> bool {
        let count = self
            .per_endpoint
            .get(&job.endpoint_id)
            .copied()
            .unwrap_or(0);
        let admitted = count < self.limit(&job.endpoint_id)
            && self.fair(account_id, job, free, with_work)
            && self.limiter.try_take(&job.endpoint_id, rate, now);
        if admitted {
            *self
                .per_endpoint
                .entry(job.endpoint_id.clone())
                .or_insert(0) += 1;
            *self.per_account.entry(account_id.clone()).or_insert(0) += 1;
            self.deliveries
                .insert(job.id.clone(), job.account_id.clone());
        }
        admitted
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

    /// Gives back an attempt's slots; `outcome` is its load signal and whether recording it
    /// closed the circuit, if it finished, fed to its endpoint's limit at `now`.
    fn finish(&mut self, done: &Done, now: Instant) {
        if let Some((signal, closed)) = done.outcome {
            // Done with it. One that did not finish (aborted at shutdown, or panicked) stays
            // listed, so the shutdown puts it back for another process at once.
            self.deliveries.remove(&done.job_id);
            self.observe(&done.endpoint_id, signal, now);
            if closed {
                // The endpoint is back after an outage: what it could take before says
                // nothing about now, and its held backlog is about to be released. It starts
                // again from the initial limit, so the drain is gentle.
                self.limits.remove(&done.endpoint_id);
            }
        }
        // It may have more waiting: the loop claims for it next, from its own queue.
        self.ready.insert(EndpointKey {
            account_id: done.account_id.clone(),
            id: done.endpoint_id.clone(),
        });
        if let Some(count) = self.per_endpoint.get_mut(&done.endpoint_id) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.per_endpoint.remove(&done.endpoint_id);
            }
        }
        if let Some(count) = self.per_account.get_mut(&done.account_id) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.per_account.remove(&done.account_id);
            }
        }
    }

    /// Feeds an attempt's outcome to its endpoint's limit.
    fn observe(&mut self, endpoint_id: &EndpointId, signal: Signal, now: Instant) {
        let ceiling = self.ceiling;
        let (adaptive, used) = self
            .limits
            .entry(endpoint_id.clone())
            .or_insert_with(|| (Adaptive::new(ceiling), now));
        adaptive.observe(signal);
        *used = now;
    }
}

/// What an attempt's task hands back to the claim loop when it ends: its endpoint and account
/// each get a slot back, and, if it got an outcome, its delivery leaves the in-flight set and
/// the outcome feeds the endpoint's concurrency limit.
pub(super) struct Done {
    pub(super) in_flight: Arc<Mutex<InFlight>>,
    pub(super) job_id: DeliveryId,
    pub(super) endpoint_id: EndpointId,
    pub(super) account_id: AccountId,
    /// The attempt's load signal and whether recording it closed the circuit.
    pub(super) outcome: Option<(Signal, bool)>,
    pub(super) _permit: OwnedSemaphorePermit,
}

impl Drop for Done {
    fn drop(&mut self) {
        lock(&self.in_flight).finish(self, crate::model::tokio_instant());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CircuitState, EndpointStatus, EventId, Secrets};

    fn job(endpoint_id: &str, id: &str) -> Job {
        Job {
            id: DeliveryId::from(id),
            event_id: EventId::from("evt"),
            event_type: "order.paid".to_owned(),
            payload: "{}".to_owned(),
            endpoint_id: EndpointId::from(endpoint_id),
            account_id: AccountId::from("acc_a"),
            url: "https://example.com/hook".to_owned(),
            timeout_ms: 5000,
            attempts: 0,
            endpoint_status: EndpointStatus::Active,
            rate_limit_per_second: None,
            circuit_state: CircuitState::Closed,
            circuit_probe_id: None,
            secrets: Secrets::default(),
            confirming: false,
            encryption_jwk: None,
            sequence: None,
            traceparent: None,
            tracestate: None,
            trace_propagation: true,
            credentials: Default::default(),
            thin: false,
            withheld: None,
        }
    }

    #[test]
    fn a_new_endpoint_is_admitted_up_to_the_initial_limit() {
        let mut state = InFlight::new(16, 64);
        let now = crate::model::tokio_instant();
        let account = AccountId::from("acc_1");
        let admitted = (0..10)
            .filter(|n| {
                let job = job("ep_a", &format!("dlv_{n}"));
                state.admit(&account, &job, (64, 1), None, now)
            })
            .count();
        assert_eq!(admitted, concurrency::INITIAL);
        assert_eq!(state.deliveries.len(), concurrency::INITIAL);
        let plan = state.plan(HashSet::new(), 60, now);
        assert_eq!(
            plan.caps[&EndpointId::from("ep_a")],
            0,
            "a busy endpoint has no room left"
        );
        assert!(plan.with_work.contains(&account));
    }

    #[test]
    fn a_rate_limited_endpoint_is_admitted_for_its_tokens_only() {
        let mut state = InFlight::new(16, 64);
        let now = crate::model::tokio_instant();
        let account = AccountId::from("acc_1");
        assert!(state.admit(&account, &job("ep_a", "dlv_1"), (64, 1), Some(1), now));
        assert!(!state.admit(&account, &job("ep_a", "dlv_2"), (64, 1), Some(1), now));
    }

    #[test]
    fn plan_lists_the_ready_endpoints_with_their_accounts_and_what_those_hold() {
        let mut state = InFlight::new(16, 64);
        let now = crate::model::tokio_instant();
        let (known, busy) = (EndpointId::from("ep_known"), AccountId::from("acc_busy"));
        state.accounts.insert(known.clone(), busy.clone());
        assert!(state.admit(&busy, &job("ep_known", "dlv_1"), (64, 1), None, now));
        let known = EndpointKey {
            account_id: busy,
            id: known,
        };
        let new = EndpointKey {
            account_id: AccountId::from("acc_new"),
            id: EndpointId::from("ep_new"),
        };
        let ready = HashSet::from([known.clone(), new.clone()]);
        let mut plan = state.plan(ready, 63, now);
        plan.ready
            .sort_by(|a, b| a.0.id.as_str().cmp(b.0.id.as_str()));
        assert_eq!(plan.ready, [(known, 1), (new.clone(), 0)]);
        assert!(
            plan.with_work.contains(&new.account_id),
            "a ready account has work"
        );
        assert_eq!(plan.default_cap, concurrency::INITIAL);
    }
}
