#![doc = include_str!("../README.md")]

#[cfg(not(any(feature = "sqlite", feature = "postgres")))]
compile_error!(
    "kxp-dedup needs a database: enable its feature `sqlite` (the default), `postgres`, or both"
);

mod checkpoint;
mod error;
mod held;
mod inbox;
mod process;
mod record;
mod store;
mod tx;
mod util;

use std::time::Duration;

// The public interface.
pub use checkpoint::Checkpoint;
pub use error::StoreError;
pub use inbox::{InboxPut, InboxRun, inbox_retry_delay};
pub use process::{Outcome, process, process_in_transaction};
pub use record::{Backend, Claim, EventRecord, EventStatus, Lease, LeaseClaim};
pub use store::{Store, clean_on_release};
pub use tx::Tx;

/// The sqlx this crate is built with: [`Tx::sqlite`], `Tx::postgres` and the pool accessors
/// hand out its types, so run your statements with this one.
pub use sqlx;

/// How long [`Store::purge`] keeps rows unless told otherwise: 30 days, longer than the
/// sender's whole retry span (9 tries over about a day), so no retry of a purged event arrives.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(30 * 24 * 60 * 60);

/// A lease for [`process`] and [`Store::inbox_run_once`] when nothing better is known: one
/// minute, far above a webhook handler's few seconds, short enough that an event whose process
/// died is retried by the sender's next tries (at 1, 5, 15 minutes…).
pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);

/// The `Retry-After` of [`Outcome::StoreUnavailable`]: the sender's schedule retries later
/// anyway; this asks for no sooner than 5 s.
pub const STORE_UNAVAILABLE_RETRY_AFTER: Duration = Duration::from_secs(5);

/// Handler errors longer than this many bytes are cut (on a character boundary) before they are
/// stored as `last_error`.
pub const MAX_ERROR_LEN: usize = 2000;
