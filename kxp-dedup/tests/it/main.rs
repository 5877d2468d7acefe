//! Integration tests of kxp-dedup: one binary, one module per mode.
//!
//! Every scenario is written once, as `async fn scenario(store: Store)`, and instantiated by
//! [`both_backends!`] as `scenario::sqlite` (a fresh database file, always) and
//! `scenario::postgres` (a fresh database, when `KXP_TEST_DATABASE_URL` is set; otherwise the
//! test says SKIPPED on stderr and passes).

// Helpers outside #[test] functions unwrap too: in a test, a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

/// Instantiates each named scenario of the calling module for both backends.
macro_rules! both_backends {
    ($($scenario:ident),* $(,)?) => {
        $(
            mod $scenario {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    crate::support::run(crate::support::Db::Sqlite, super::$scenario).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    crate::support::run(crate::support::Db::Postgres, super::$scenario).await;
                }
            }
        )*
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
