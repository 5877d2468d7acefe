//! Backpressure: whether an account may ingest, from its due backlog and
//! [`Config::backlog_limit`](crate::Config::backlog_limit).
//!
//! The due backlog is an account's pending deliveries whose time has come: what its endpoints
//! are behind on. Held deliveries (paused, disabled or open-circuit endpoints) and retries
//! scheduled later are left out, so a resting or failing endpoint never blocks ingestion, and
//! deliveries being attempted are left out too (workers bound them). Past the limit, ingestion
//! answers 503 `backlog_full` until the workers catch up; other accounts are not affected.
//!
//! The count is cheap (it stops at the limit, on an index) and is cached per account for
//! [`FRESH`], so a burst of ingests counts once: between counts, this process adds what it
//! queued itself, and counts again at once when that reaches the limit. Other processes'
//! ingests are seen at the next count, so with several API processes an account can pass the
//! limit by what they accept in [`FRESH`]: the limit bounds latency, it is not an exact quota.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::model::AccountId;
use crate::store::{Db, StoreError};

/// How long a counted backlog is trusted.
pub(crate) const FRESH: Duration = Duration::from_millis(250);

/// The `Retry-After` of a `backlog_full` answer, in seconds: a few drain cycles of the workers,
/// short enough that a client retrying on it adds little latency once room is made.
pub(crate) const RETRY_AFTER_SECS: u64 = 2;

/// Cached counts beyond which stale entries are dropped, so the cache stays as small as the
/// set of accounts ingesting now.
const PRUNE_AT: usize = 4096;

/// Whether an ingestion may go ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Under the limit (or no limit).
    Admit,
    /// The due backlog is at the limit: counted, at least this many.
    Full(u64),
}

#[derive(Debug, Clone, Copy)]
struct Counted {
    due: u64,
    at: Instant,
}

/// The per-account gate in front of ingestion.
#[derive(Debug)]
pub(crate) struct Backlog {
    limit: u64,
    counted: Mutex<HashMap<AccountId, Counted>>,
}

impl Backlog {
    /// A gate refusing ingestion at `limit` due deliveries; 0: never.
    pub(crate) fn new(limit: u64) -> Backlog {
        Backlog {
            limit,
            counted: Mutex::default(),
        }
    }

    /// The configured limit (0: none).
    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }

    /// Whether `account` may ingest now.
    pub(crate) async fn admit(
        &self,
        db: &Db,
        account: &AccountId,
    ) -> Result<Admission, StoreError> {
        if self.limit == 0 {
            return Ok(Admission::Admit);
        }
        let cached = self.lock().get(account).copied();
        let due = match cached {
            Some(c) if c.at.elapsed() < FRESH && c.due < self.limit => c.due,
            // A full answer is trusted for FRESH too: refused ingests do not count again.
            Some(c) if c.at.elapsed() < FRESH => return Ok(Admission::Full(c.due)),
            _ => {
                let due = db.due_backlog(account, self.limit).await?;
                let mut counted = self.lock();
                if counted.len() >= PRUNE_AT {
                    counted.retain(|_, c| c.at.elapsed() < FRESH);
                }
                counted.insert(
                    account.clone(),
                    Counted {
                        due,
                        at: crate::model::instant(),
                    },
                );
                due
            }
        };
        Ok(decide(due, self.limit))
    }

    /// `queued` deliveries were just stored for `account`: added to its cached count, so a
    /// burst reaches the limit without waiting for the next count.
    pub(crate) fn queued(&self, account: &AccountId, queued: usize) {
        let mut counted = self.lock();
        let reached = counted.get_mut(account).is_some_and(|c| {
            c.due = c
                .due
                .saturating_add(u64::try_from(queued).unwrap_or(u64::MAX));
            c.due >= self.limit
        });
        if reached {
            // Count again on the next ingest rather than refuse on an estimate: some of these
            // may be held, and the workers may have caught up meanwhile.
            counted.remove(account);
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<AccountId, Counted>> {
        // The map holds only counts: one left by a panicking holder is still a fine estimate.
        self.counted.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Admits while the due backlog is under `limit` (0: no limit).
fn decide(due: u64, limit: u64) -> Admission {
    if limit == 0 || due < limit {
        Admission::Admit
    } else {
        Admission::Full(due)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_is_the_first_refused_count() {
        assert_eq!(decide(0, 5), Admission::Admit);
        assert_eq!(decide(4, 5), Admission::Admit);
        assert_eq!(decide(5, 5), Admission::Full(5));
        assert_eq!(decide(u64::MAX, 0), Admission::Admit);
    }
}
