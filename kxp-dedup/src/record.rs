//! What the store answers: the outcome of a claim, an event's record and its status, and
//! which backend a store runs on.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::error::StoreError;

/// Which database a [`Store`](crate::Store) uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// SQLite: a file (WAL mode) or an in-memory database.
    Sqlite,
    /// PostgreSQL.
    Postgres,
}

impl Backend {
    /// `"sqlite"` or `"postgres"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What [`Store::claim`](crate::Store::claim) decided for a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// This caller holds the event until the lease ends: process it, then
    /// [`complete`](crate::Store::complete) or [`fail`](crate::Store::fail).
    Claimed,
    /// Processed before: answer 200 without processing again.
    AlreadyDone,
    /// Another caller holds a live lease on it: answer 409 and let the sender come back.
    InProgress {
        /// What is left of that lease, rounded up to whole seconds, at least 1 s: a ready
        /// `Retry-After` value.
        retry_after: Duration,
    },
}

/// What [`Store::claim_lease`](crate::Store::claim_lease) decided: a [`Claim`], with the
/// [`Lease`] a won claim holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseClaim {
    /// This caller holds the event: [`renew`](crate::Store::renew) the lease while working, then
    /// [`complete_lease`](crate::Store::complete_lease) or
    /// [`fail_lease`](crate::Store::fail_lease).
    Held(Lease),
    /// Processed before: answer 200 without processing again.
    AlreadyDone,
    /// Another caller holds a live lease on it: answer 409 and let the sender come back.
    InProgress {
        /// As in [`Claim::InProgress`].
        retry_after: Duration,
    },
}

/// A claim this caller holds, from [`Store::claim_lease`](crate::Store::claim_lease).
///
/// It carries a fencing token, the claim's number (the event's `attempts` after this claim):
/// every later claim of the event, by anyone, gets a higher one. Renewing, completing and
/// failing are conditional on the row still carrying this token, so a holder whose lease ran
/// out and was taken over is told so (`claim_lost`) and cannot overwrite the new holder's claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub(crate) scope: Arc<str>,
    pub(crate) event_id: String,
    pub(crate) token: u32,
    pub(crate) duration: Duration,
}

impl Lease {
    /// The scope of the store that took this lease ([`Store::scoped`](crate::Store::scoped)):
    /// renewing, completing and failing it act in that scope whichever handle is used.
    pub fn scope(&self) -> &str {
        &self.scope
    }

    /// The event this lease holds.
    pub fn event_id(&self) -> &str {
        &self.event_id
    }

    /// The fencing token: which claim of the event this is (1 for the first).
    pub fn token(&self) -> u32 {
        self.token
    }

    /// How long the lease lasts from its claim or its last [`renew`](crate::Store::renew).
    pub fn duration(&self) -> Duration {
        self.duration
    }
}

/// The state of one event id, as [`Store::record`](crate::Store::record) reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EventRecord {
    /// Where the event stands.
    pub status: EventStatus,
    /// How many times it was claimed (or marked in in-transaction mode).
    pub attempts: u32,
    /// The most recent handler error, kept after a later success.
    pub last_error: Option<String>,
}

/// The `status` column of `kxp_processed_events`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventStatus {
    /// `processing`: claimed; another claim succeeds only after the lease ends.
    Processing,
    /// `done`: processed; never processed again.
    Done,
    /// `failed`: the handler failed; the next claim takes it.
    Failed,
}

impl EventStatus {
    /// The value stored in the `status` column.
    pub const fn as_str(self) -> &'static str {
        match self {
            EventStatus::Processing => "processing",
            EventStatus::Done => "done",
            EventStatus::Failed => "failed",
        }
    }

    pub(crate) fn parse(text: &str) -> Result<EventStatus, StoreError> {
        match text {
            "processing" => Ok(EventStatus::Processing),
            "done" => Ok(EventStatus::Done),
            "failed" => Ok(EventStatus::Failed),
            other => Err(StoreError::Query {
                cause: sqlx::Error::Decode(
                    format!("unknown kxp_processed_events.status {other:?}").into(),
                ),
            }),
        }
    }
}
