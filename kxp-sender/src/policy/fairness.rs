//! Fair shares of the workers between accounts: how many more attempts an account may start
//! now, so that one account's backlog — above all one of endpoints that hang until their
//! timeout — never keeps another account's deliveries waiting.
//!
//! Two rules, both about attempts in flight in this process:
//!
//! - **A fair share.** With `n` accounts that have work here (attempts in flight, or due
//!   deliveries the loop knows of), none may hold more than `workers / n` (rounded up), and
//!   never less than a small floor. One account alone has them all: the share binds only when
//!   others are waiting.
//! - **A reserve for what returns quickly.** The last workers of the pool (an eighth, at least
//!   one) go only to attempts expected to give their worker back soon: to an endpoint that
//!   answered its last attempt quickly, or for an account that holds fewer than the floor. A
//!   busy account whose endpoints answer still uses every worker; one whose endpoints have not
//!   answered yet (a new endpoint, or one that hangs) cannot take the last of them, so an
//!   account that turns up while they hang finds a worker free at once instead of waiting for
//!   a timeout to free one. No attempt is ever cut short for another: the reserve is what
//!   makes room without preemption.
//!
//! Pure: the worker counts, this decides.

use std::collections::HashMap;

use crate::model::AccountId;
use crate::policy::concurrency;

/// The shares of one process's workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fairness {
    workers: usize,
    reserve: usize,
    floor: usize,
}

impl Fairness {
    /// The shares of `workers` (at least 1).
    pub(crate) fn new(workers: usize) -> Fairness {
        let workers = workers.max(1);
        let reserve = (workers / 8).max(1);
        Fairness {
            workers,
            reserve,
            floor: concurrency::INITIAL.min(reserve),
        }
    }

    /// The most attempts one account may hold while `accounts` accounts (itself included)
    /// have work.
    pub(crate) fn share(&self, accounts: usize) -> usize {
        self.workers.div_ceil(accounts.max(1)).max(self.floor)
    }

    /// How many more attempts an account holding `held` may start now, with `accounts`
    /// accounts having work (itself included) and `free` workers free: to endpoints that
    /// answer quickly (`quick`), or to any.
    pub(crate) fn room(&self, held: usize, accounts: usize, free: usize, quick: bool) -> usize {
        let fair = self.share(accounts).saturating_sub(held);
        let pool = if quick {
            free
        } else {
            free.saturating_sub(self.reserve)
                .max(self.floor.saturating_sub(held))
                .min(free)
        };
        fair.min(pool)
    }
}

/// What a claim may take per account: `listed` for the accounts it names (0: none), `others`
/// for the rest ([`Fairness`] decides both).
#[derive(Debug, Clone)]
pub(crate) struct AccountCaps {
    /// Account id → how many of its deliveries the claim may take.
    pub listed: HashMap<AccountId, usize>,
    /// How many each account not listed may give.
    pub others: usize,
}

impl AccountCaps {
    /// No per-account bound (the unfair claims of feature `test-util`).
    #[cfg(feature = "test-util")]
    pub(crate) fn unbounded() -> AccountCaps {
        AccountCaps {
            listed: HashMap::new(),
            others: usize::MAX,
        }
    }

    /// What the account `account_id` may give.
    pub(crate) fn of(&self, account_id: &AccountId) -> usize {
        self.listed.get(account_id).copied().unwrap_or(self.others)
    }

    /// The listed caps as a JSON object of account id → cap (what the claim reads).
    pub(crate) fn json(&self) -> String {
        let listed: HashMap<&str, i64> = self
            .listed
            .iter()
            .map(|(id, cap)| (id.as_str(), i64::try_from(*cap).unwrap_or(i64::MAX)))
            .collect();
        serde_json::to_string(&listed).unwrap_or_else(|_| "{}".to_owned())
    }

    /// [`AccountCaps::others`] as SQL's integer.
    pub(crate) fn others_i64(&self) -> i64 {
        i64::try_from(self.others).unwrap_or(i64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_account_alone_may_use_every_worker() {
        let f = Fairness::new(256);
        assert_eq!(f.share(1), 256);
        assert_eq!(f.room(0, 1, 256, true), 256);
        assert_eq!(
            f.room(255, 1, 1, true),
            1,
            "the last worker, to a quick endpoint"
        );
    }

    #[test]
    fn the_share_binds_when_others_have_work() {
        let f = Fairness::new(256);
        assert_eq!(f.share(2), 128);
        assert_eq!(f.share(3), 86);
        assert_eq!(f.room(200, 2, 56, true), 0, "above its share: nothing more");
        assert_eq!(f.room(100, 2, 56, true), 28);
        // However many accounts, each may hold the floor.
        assert_eq!(f.share(1000), 4);
    }

    #[test]
    fn the_reserve_is_kept_from_endpoints_that_have_not_answered() {
        let f = Fairness::new(256);
        // An eighth of the pool: an account that hangs stops short of it, alone or not.
        assert_eq!(f.room(0, 1, 256, false), 224);
        assert_eq!(f.room(224, 1, 32, false), 0);
        // An account that turns up now takes the reserve, up to the floor, until its own
        // endpoints have answered.
        assert_eq!(f.room(0, 2, 32, false), 4);
        assert_eq!(f.room(4, 2, 28, false), 0);
        assert_eq!(f.room(4, 2, 28, true), 28);
    }

    #[test]
    fn a_small_pool_still_keeps_one_worker() {
        let f = Fairness::new(8);
        assert_eq!(f.room(0, 1, 8, false), 7);
        assert_eq!(f.room(7, 1, 1, false), 0);
        assert_eq!(
            f.room(0, 2, 1, false),
            1,
            "another account gets the last worker"
        );
        // One worker in all: it serves whoever asks, one at a time.
        let one = Fairness::new(1);
        assert_eq!(one.room(0, 1, 1, false), 1);
        assert_eq!(one.room(1, 1, 0, true), 0);
    }
}
