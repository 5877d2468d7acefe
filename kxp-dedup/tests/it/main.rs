//! Integration tests of kxp-dedup: one binary, one module per mode.
//!
//! Every scenario is written once, as `async fn scenario(store: Store)`, and instantiated by
//! [`both_backends!`] as `scenario::sqlite` (a fresh database file, always) and
//! `scenario::postgres` (a fresh database, when `KXP_TEST_DATABASE_URL` is set; otherwise the
//! test says SKIPPED on stderr and passes).

// Helpers outside #[test] functions unwrap too: in a test, a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

/// Each named scenario of the calling module, once per backend ([`kxp_testkit::each_backend!`]
/// with [`support::run`]).
macro_rules! both_backends {
    ($($scenario:ident),+ $(,)?) => {
        kxp_testkit::each_backend!(crate::support::run => $($scenario),+);
    };
}

mod checkpoint;
mod claim;
mod held;
mod in_transaction;
mod inbox;
mod purge;
mod scope;
mod support;
mod unavailable;
mod upgrade;
