//! Integration tests of the sender library: a real server on 127.0.0.1, real receivers.

// Helpers outside #[test] functions unwrap too: in a test, a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// The tests watch the sender from outside: they read its rows with their own SQL and time its
// work with the clock, which the crate's own layers leave to store/ and model/time.rs.
#![allow(clippy::disallowed_methods)]

/// Each named scenario of the calling module, once per backend ([`kxp_testkit::each_backend!`]
/// with [`support::run`]): `scenario::sqlite` and `scenario::postgres`. A scenario is
/// `async fn(support::Database)`.
macro_rules! each_backend {
    ($($scenario:ident),+ $(,)?) => {
        kxp_testkit::each_backend!(crate::support::run => $($scenario),+);
    };
}

/// The named scenarios of the calling module once more, on a Citus cluster
/// ([`support::run_citus`]): `scenario` in the module's `citus` module
/// (`replay::citus::scenario`), so `cargo test citus::` runs them all. A module calls it once,
/// beside its `each_backend!`.
macro_rules! on_citus {
    ($($scenario:ident),+ $(,)?) => {
        mod citus {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    crate::support::run_citus(stringify!($scenario), super::$scenario).await;
                }
            )+
        }
    };
}

mod account_keys;
mod api_errors;
mod backpressure;
mod citus_faults;
mod concurrency;
mod connections;
mod console;
mod console_pages;
mod credentials;
mod durability;
mod ed25519;
mod egress;
mod encryption;
mod erasure;
mod events_list;
mod fairness;
mod feed;
mod filters;
mod guard;
mod health;
mod ingestion;
mod isolation;
mod layers;
mod lifecycle;
mod limits;
mod metrics;
mod monitoring;
mod mtls;
mod notifications;
mod openapi;
mod operators;
mod payload_retention;
mod pipeline;
mod postgres;
mod protection;
mod pull;
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
mod thin;
mod tracing;
mod upgrade;
