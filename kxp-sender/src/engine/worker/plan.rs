//! What one round of the delivery loop may claim: per endpoint, per account, and which of the
//! endpoints named ready it claims for from their own queues. Pure: no database, no clock, no
//! lock. [`InFlight::plan`](super::in_flight::InFlight::plan) builds a [`Plan`] from what is in
//! flight; the loop claims what the plan allows and charges the plan with what it took.

use std::collections::{HashMap, HashSet};

use crate::model::{AccountId, EndpointId, EndpointKey};
use crate::policy::fairness::AccountCaps;

/// The room of one claiming round, from a snapshot of the attempts in flight.
#[derive(Debug)]
pub(super) struct Plan {
    /// What the round may take of each endpoint this worker knows (id → deliveries).
    pub(super) caps: HashMap<EndpointId, usize>,
    /// What it may take of an endpoint not in `caps`.
    pub(super) default_cap: usize,
    /// What it may take of each account.
    pub(super) accounts: AccountCaps,
    /// The accounts with work here: they count for the fair shares.
    pub(super) with_work: HashSet<AccountId>,
    /// The endpoints named ready, each with the attempts its account has in flight.
    pub(super) ready: Vec<(EndpointKey, usize)>,
}

impl Plan {
    /// The endpoint caps as the scan's claim takes them.
    pub(super) fn scan_caps(&self) -> Vec<(EndpointId, usize)> {
        self.caps
            .iter()
            .map(|(id, cap)| (id.clone(), *cap))
            .collect()
    }

    /// Charges the round with deliveries already taken (the scan's), each by its endpoint and
    /// account: what is left is what the claims for ready endpoints may still take.
    pub(super) fn charge<'a>(
        &mut self,
        taken: impl IntoIterator<Item = (&'a EndpointId, &'a AccountId)>,
    ) {
        for (endpoint_id, account_id) in taken {
            let cap = self
                .caps
                .entry(endpoint_id.clone())
                .or_insert(self.default_cap);
            *cap = cap.saturating_sub(1);
            let others = self.accounts.others;
            let cap = self
                .accounts
                .listed
                .entry(account_id.clone())
                .or_insert(others);
            *cap = cap.saturating_sub(1);
        }
    }

    /// How many deliveries to claim from each ready endpoint's own queue, for no more than
    /// `budget` (the free workers the scan left) in all and no more than each account's room:
    /// the accounts holding least are served first, and each target's account is charged.
    /// An endpoint with room of its own that gets nothing now, because no worker is left or
    /// its account has its share, is handed to `later`: it stays named for the next round.
    /// One with no room of its own is not: a finished attempt names it again.
    pub(super) fn targets(
        &mut self,
        mut budget: usize,
        mut later: impl FnMut(EndpointKey),
    ) -> Vec<(EndpointKey, usize)> {
        let mut targets = Vec::new();
        let mut ready = std::mem::take(&mut self.ready);
        ready.sort_by_key(|(_, held)| *held);
        for (key, _) in ready {
            let left = self.accounts.of(&key.account_id);
            let endpoint_cap = self.caps.get(&key.id).copied().unwrap_or(self.default_cap);
            let cap = endpoint_cap.min(budget).min(left);
            if cap > 0 {
                budget -= cap;
                self.accounts
                    .listed
                    .insert(key.account_id.clone(), left - cap);
                targets.push((key, cap));
            } else if budget == 0 || (endpoint_cap > 0 && left == 0) {
                later(key);
            }
        }
        targets
    }
}

#[cfg(test)]
mod tests;
