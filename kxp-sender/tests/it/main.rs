//! Integration tests of the sender library: a real server on 127.0.0.1, real receivers.

// Helpers outside #[test] functions unwrap too: in a test, a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// The tests watch the sender from outside: they read its rows with their own SQL and time its
// work with the clock, which the crate's own layers leave to store/ and model/time.rs.
#![allow(clippy::disallowed_methods)]

/// Instantiates each named scenario of the calling module once per [`support::Backend`]: a
/// module named after the scenario, holding a test per backend (`scenario::sqlite`,
/// `scenario::postgres`). A scenario is `async fn(support::Database)`; the PostgreSQL test
/// says SKIPPED on stderr and passes when `KXP_TEST_DATABASE_URL` is unset. A third backend
/// is a variant of [`support::Backend`] and a line here.
macro_rules! each_backend {
    ($($scenario:ident),* $(,)?) => {
        $(
            mod $scenario {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    crate::support::Backend::Sqlite
                        .run(stringify!($scenario), super::$scenario)
                        .await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    crate::support::Backend::Postgres
                        .run(stringify!($scenario), super::$scenario)
                        .await;
                }
            }
        )*
    };
}

mod api_errors;
mod backpressure;
mod concurrency;
mod connections;
mod console;
mod console_pages;
mod durability;
mod ed25519;
mod encryption;
mod events_list;
mod fairness;
mod feed;
mod guard;
mod health;
mod ingestion;
mod isolation;
mod layers;
mod lifecycle;
mod limits;
mod metrics;
mod notifications;
mod openapi;
mod operators;
mod pipeline;
mod postgres;
mod protection;
mod replay;
mod retention;
mod rotation;
mod rotation_confirmed;
mod schema_parity;
mod schemas;
mod sealed_secrets;
mod sequence;
mod standard_webhooks;
mod support;
mod upgrade;
