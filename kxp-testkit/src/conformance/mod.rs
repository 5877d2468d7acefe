//! The receiver conformance suite (feature `conformance`): one black-box description of what a
//! kxp receiver answers, logs and records, run over real HTTP on 127.0.0.1 against every
//! receiver in the repository (kxp-axum, kxp-actix, the example binaries).
//!
//! A receiver takes part by implementing [`ReceiverUnderTest`] (start one with a [`Config`]) and
//! [`RunningReceiver`] (its URL, its log lines, its durable effects, and the few hooks some
//! scenarios need); [`receiver_conformance!`](crate::receiver_conformance) then makes one
//! `#[tokio::test]` per scenario of [`scenarios`], the way RustCrypto's `hmac/tests/mod.rs` runs
//! one set of vectors against every implementation. A scenario a receiver cannot take part in
//! is named in that receiver's own macro call, with the reason, and its test says so on stderr:
//! nothing is skipped silently, and a scenario added here runs everywhere at once.
//!
//! The scenarios that involve the dedup store run on a fresh SQLite file and on a fresh
//! PostgreSQL database (when [`db::PG_ENV`](crate::db::PG_ENV) is set; otherwise they say
//! `SKIPPED (PostgreSQL)` on stderr). The suite owns those databases: it hands the receiver the
//! URL, takes the database down for the outage scenario, and deletes it at the end.
//!
//! ```ignore
//! // tests/it/conformance.rs of an adapter:
//! kxp_testkit::receiver_conformance! {
//!     receiver: crate::receivers::Axum::claim_mode(),
//!     not_applicable: {
//!         killed_mid_processing_the_event_is_recorded_once_after_a_restart:
//!             "an in-process server has no process to kill",
//!     },
//! }
//! ```

use std::future::Future;
use std::io::Write;
use std::time::Duration;

mod client;
mod database;
mod logs;
pub mod payments;
pub mod scenarios;
pub mod standard_webhooks;

pub use client::{Answer, event_body, key_id, now, sign};
pub use database::{Outage, wait_for_open_transaction};
pub use logs::{CapturedLogs, request_lines};

/// The body limit every receiver is started with by the suite (the default of 1 MiB would make
/// the over-the-limit requests needlessly large).
pub const BODY_LIMIT: usize = 4096;

/// The secret of the standard configuration ([`Config::new`]).
pub const SECRET: &str = "41ab92590637ac82026ca65266b2898428ea491b1e6d543d7202cf486ea62965";

/// How a receiver makes an event's processing happen once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `kxp_dedup::process`: claim the event id with a lease, run the handler, mark it done or
    /// failed. Concurrent duplicates are answered 409 + `Retry-After` while the claim is held.
    ClaimComplete,
    /// `kxp_dedup::process_in_transaction`: the mark and the side effect commit together;
    /// concurrent duplicates wait for the first transaction, then answer 200.
    InTransaction,
}

/// How the suite wants a receiver started.
#[derive(Debug, Clone)]
pub struct Config {
    /// The secrets, newest first (`KXP_WEBHOOK_SECRET=new,old` for the example binaries).
    pub secrets: Vec<String>,
    /// A pinned clock (Unix seconds); `None` for the receiver's own system clock.
    pub now: Option<u64>,
    /// The timestamp tolerance; `None` for the default (five minutes).
    pub tolerance: Option<Duration>,
    /// The largest body accepted, in bytes.
    pub body_limit: usize,
    /// The dedup store's database: a `sqlite://` or `postgres://` URL the suite created.
    pub database_url: String,
    /// How long the handler sleeps before its effect (inside the transaction in
    /// [`Mode::InTransaction`]), so that concurrent deliveries overlap or a kill lands mid-way.
    pub slow: Option<Duration>,
}

impl Config {
    /// [`SECRET`], the system clock, the default tolerance, [`BODY_LIMIT`], no slowness.
    pub fn new(database_url: &str) -> Config {
        Config {
            secrets: vec![SECRET.to_owned()],
            now: None,
            tolerance: None,
            body_limit: BODY_LIMIT,
            database_url: database_url.to_owned(),
            slow: None,
        }
    }
}

/// The HTTP server library under a receiver. It reads the request head and frames the body
/// before any middleware runs, so a few answers are its own (see the table in
/// `docs/receiving-webhooks.md`); [`scenarios::the_server_library_decides_some_framing_alone`]
/// pins each one's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framework {
    /// axum, on hyper's HTTP/1 server (`axum::serve` or `kxp_axum::serve`).
    Axum,
    /// actix-web, on actix-http's HTTP/1 server.
    Actix,
}

/// A signal that asks a receiver process to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// `SIGTERM`: what an orchestrator (systemd, Kubernetes, Docker) sends first.
    Term,
    /// `SIGINT`: Ctrl-C in a terminal.
    Int,
}

/// One durable side effect of the handler: what the receiver recorded for an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effect {
    /// The event id, from the verified body.
    pub event_id: String,
    /// `data.amount` of the event, if it had one.
    pub amount: Option<i64>,
    /// `data.currency` of the event, if it had one.
    pub currency: Option<String>,
}

/// A kind of receiver the suite can start: an adapter in-process, or an example binary.
///
/// Every receiver must answer `POST` and the challenge `GET` on [`RunningReceiver::url`], use
/// the kxp middleware and one dedup mode for every event, and record the `amount` and `currency`
/// of each event's `data` as its [`Effect`].
pub trait ReceiverUnderTest {
    /// A started receiver.
    type Running: RunningReceiver;

    /// A name for messages, such as `kxp-axum (claim/complete)`.
    fn name(&self) -> String;

    /// The dedup mode of its handler.
    fn mode(&self) -> Mode;

    /// The framework, whose HTTP server library frames the requests.
    fn framework(&self) -> Framework;

    /// Starts a receiver with `config`, ready to answer when this returns. Panics when it
    /// cannot: the scenario fails.
    fn start(&self, config: Config) -> impl Future<Output = Self::Running>;
}

/// A started receiver: stopped (or killed) when dropped.
pub trait RunningReceiver {
    /// The webhook URL, such as `http://127.0.0.1:40123/webhooks`.
    fn url(&self) -> String;

    /// Everything the receiver logged so far, one string per line, once at least
    /// `request_lines` of them are request lines (target `kxp_webhooks`) or a few seconds have
    /// passed: a line is written before its response, but may be read from a pipe later.
    fn log_lines(&self, request_lines: usize) -> impl Future<Output = Vec<String>>;

    /// The durable effects of the handler so far, in the order they were recorded.
    fn effects(&self) -> impl Future<Output = Vec<Effect>>;

    /// From now on the handler fails (`true`) or works again (`false`). In
    /// [`Mode::InTransaction`] a failing handler should fail after writing, to show that the
    /// write rolls back.
    fn fail_handler(&self, failing: bool) -> impl Future<Output = ()>;

    /// Claims `event_id` for `lease` in the receiver's store and never completes it: what a
    /// process killed mid-handler leaves behind in [`Mode::ClaimComplete`].
    fn abandon_claim(&self, event_id: &str, lease: Duration) -> impl Future<Output = ()> {
        let _ = (event_id, lease);
        async {
            panic!("this receiver has no `abandon_claim`: declare the scenario not applicable")
        }
    }

    /// Sends the receiver's process `signal` and waits until it has exited, asserting that it
    /// exited successfully (a shutdown it asked for is not a failure).
    fn stop(&mut self, signal: Signal) -> impl Future<Output = ()> {
        let _ = signal;
        async { panic!("this receiver has no `stop`: declare the scenario not applicable") }
    }

    /// Kills the receiver at once, as the OOM killer would: no shutdown code runs.
    fn kill(&mut self) -> impl Future<Output = ()> {
        async { panic!("this receiver has no `kill`: declare the scenario not applicable") }
    }
}

/// Says on stderr (the handle itself, which libtest does not capture) that `scenario` does not
/// apply to `receiver`, when the receiver's macro call lists it; `true` then.
///
/// Panics if a listed name is not a scenario: a typo must not hide a scenario.
#[doc(hidden)]
pub fn not_applicable(receiver: &str, scenario: &str, declared: &[(&str, &str)]) -> bool {
    for (name, _) in declared {
        assert!(
            scenarios::ALL.contains(name),
            "{receiver}: `{name}` is declared not applicable, but there is no such scenario"
        );
    }
    let Some((_, why)) = declared.iter().find(|(name, _)| *name == scenario) else {
        return false;
    };
    let _ = writeln!(
        std::io::stderr(),
        "NOT APPLICABLE ({receiver}): {scenario}: {why}"
    );
    true
}

/// Makes one `#[tokio::test]` per conformance scenario for one receiver, in the calling module.
///
/// `receiver` is an expression of a type implementing [`ReceiverUnderTest`], written with
/// absolute paths (`crate::…`): the scenarios that involve the dedup store become modules with
/// a `sqlite` and a `postgres` test each. `not_applicable` names scenarios this receiver cannot
/// take part in, each with the reason (printed by its test).
///
/// The calling crate needs `tokio` (with `macros` and `rt`) among its test dependencies.
#[macro_export]
macro_rules! receiver_conformance {
    (
        receiver: $receiver:expr,
        not_applicable: { $($na:ident: $why:expr),* $(,)? } $(,)?
    ) => {
        $crate::__conformance_tests! {
            receiver: $receiver,
            not_applicable: [$((stringify!($na), $why)),*],
            http: [
                every_vector_over_http,
                an_empty_or_absent_header_is_a_missing_header,
                bodies_over_the_limit_are_refused_unread,
                a_body_cut_short_is_logged_as_unreadable,
                authentic_bodies_that_are_not_events_are_400,
                the_handler_gets_the_exact_bytes_and_the_typed_event,
                a_large_event_within_the_limit_reaches_the_handler_whole,
                the_challenge_echoes_a_safe_token_only,
                only_the_webhook_route_is_verified,
                rotation_accepts_either_secret_during_the_overlap,
                one_log_line_per_request_with_the_contract_fields_and_no_secrets,
                a_signature_header_over_4096_bytes_is_malformed,
                an_http_1_0_post_without_content_length_is_400,
                the_server_library_decides_some_framing_alone,
                kxp_check_passes_every_check,
            ],
            dedup: [
                a_delivered_event_is_processed_once_however_often_it_arrives,
                a_replay_under_another_event_id_header_is_a_duplicate,
                fifty_concurrent_deliveries_run_the_handler_once,
                a_failed_handler_answers_500_and_the_next_delivery_processes,
                an_abandoned_claim_answers_409_until_its_lease_ends,
                a_store_that_is_down_answers_503_never_200,
                killed_mid_processing_the_event_is_recorded_once_after_a_restart,
                stopped_mid_processing_the_request_completes_and_is_recorded_once,
            ],
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_tests {
    (
        receiver: $receiver:expr,
        not_applicable: $na:tt,
        http: [$($http:ident),* $(,)?],
        dedup: [$($dedup:ident),* $(,)?] $(,)?
    ) => {
        $(
            #[tokio::test]
            async fn $http() {
                let receiver = $receiver;
                let name = $crate::conformance::ReceiverUnderTest::name(&receiver);
                if $crate::conformance::not_applicable(&name, stringify!($http), &$na) {
                    return;
                }
                $crate::conformance::scenarios::$http(&receiver).await;
            }
        )*
        $(
            mod $dedup {
                #[tokio::test]
                async fn sqlite() {
                    let receiver = $receiver;
                    let name = $crate::conformance::ReceiverUnderTest::name(&receiver);
                    if $crate::conformance::not_applicable(&name, stringify!($dedup), &$na) {
                        return;
                    }
                    $crate::conformance::scenarios::$dedup(&receiver, $crate::db::Backend::Sqlite)
                        .await;
                }

                #[tokio::test]
                async fn postgres() {
                    let receiver = $receiver;
                    let name = $crate::conformance::ReceiverUnderTest::name(&receiver);
                    if $crate::conformance::not_applicable(&name, stringify!($dedup), &$na) {
                        return;
                    }
                    $crate::conformance::scenarios::$dedup(&receiver, $crate::db::Backend::Postgres)
                        .await;
                }
            }
        )*
    };
}
