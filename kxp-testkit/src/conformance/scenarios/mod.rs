//! The scenarios, each a plain async fn over any [`ReceiverUnderTest`](super::ReceiverUnderTest).
//!
//! The first group speaks to the middleware (vectors, limits, envelopes, the challenge, rotation,
//! the log line) and runs on a SQLite store; the second sends raw bytes to see how requests are
//! framed (head sizes, lengths, HTTP/1.0: what the middleware decides alike, and what each
//! framework's server library decides before it), also on SQLite; the grader runs the checks of
//! `kxp check` (kxp-check), also on SQLite; the last is about processing each event once,
//! through failures, kills and graceful stops, and takes the backend to run on (see the module
//! docs of [`conformance`](super)). One file per group; the helpers they share are here.

use serde_json::Value;

use super::{Config, Effect, RunningReceiver, SECRET, now, request_lines, sign};
use crate::db::{Backend, TestDatabase};

/// Every scenario's name: [`receiver_conformance!`](crate::receiver_conformance) makes a test of
/// each (keep the two lists in step).
pub const ALL: &[&str] = &[
    "every_vector_over_http",
    "an_empty_or_absent_header_is_a_missing_header",
    "bodies_over_the_limit_are_refused_unread",
    "a_body_cut_short_is_logged_as_unreadable",
    "authentic_bodies_that_are_not_events_are_400",
    "the_handler_gets_the_exact_bytes_and_the_typed_event",
    "a_large_event_within_the_limit_reaches_the_handler_whole",
    "the_challenge_echoes_a_safe_token_only",
    "only_the_webhook_route_is_verified",
    "rotation_accepts_either_secret_during_the_overlap",
    "one_log_line_per_request_with_the_contract_fields_and_no_secrets",
    "a_signature_header_over_4096_bytes_is_malformed",
    "an_http_1_0_post_without_content_length_is_400",
    "the_server_library_decides_some_framing_alone",
    "kxp_check_passes_every_check",
    "a_delivered_event_is_processed_once_however_often_it_arrives",
    "a_replay_under_another_event_id_header_is_a_duplicate",
    "fifty_concurrent_deliveries_run_the_handler_once",
    "a_failed_handler_answers_500_and_the_next_delivery_processes",
    "an_abandoned_claim_answers_409_until_its_lease_ends",
    "a_store_that_is_down_answers_503_never_200",
    "killed_mid_processing_the_event_is_recorded_once_after_a_restart",
    "stopped_mid_processing_the_request_completes_and_is_recorded_once",
];

/// The default body limit of ARCHITECTURE.md, for the scenarios whose bodies need it.
const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;

mod framing;
mod grader;
mod middleware;
mod once;

pub use framing::*;
pub use grader::*;
pub use middleware::*;
pub use once::*;

// --- Helpers ---------------------------------------------------------------------------------

/// A fresh database for a scenario: `None` (after the `SKIPPED` line) for PostgreSQL without
/// [`PG_ENV`](crate::db::PG_ENV).
pub(super) async fn database(backend: Backend) -> Option<TestDatabase> {
    TestDatabase::create(backend, "kxp_conformance").await
}

/// A fresh SQLite database, for the scenarios that do not depend on the backend.
pub(super) async fn sqlite() -> TestDatabase {
    TestDatabase::create(Backend::Sqlite, "receiver")
        .await
        .unwrap_or_else(|| unreachable!("SQLite is always available"))
}

/// Stops the receiver, then deletes its database.
pub(super) async fn finish(running: impl RunningReceiver, database: TestDatabase) {
    drop(running);
    database.drop().await;
}

/// The request lines once there are `count`, after checking there are exactly `count`.
pub(super) async fn requests(running: &impl RunningReceiver, count: usize) -> Vec<Value> {
    let lines = running.log_lines(count).await;
    let requests = request_lines(&lines);
    assert_eq!(
        requests.len(),
        count,
        "one log line per request:\n{}",
        lines.join("\n")
    );
    requests
}

/// `event_id`, `verification`, `outcome` and `status` of a request line.
pub(super) fn fields(line: &Value) -> (String, String, String, u64) {
    let text = |name: &str| {
        line[name]
            .as_str()
            .unwrap_or_else(|| panic!("`{name}` is not a string in {line}"))
            .to_owned()
    };
    let status = line["status"]
        .as_u64()
        .unwrap_or_else(|| panic!("`status` is not a number in {line}"));
    (
        text("event_id"),
        text("verification"),
        text("outcome"),
        status,
    )
}

/// The `outcome` of each request line.
pub(super) fn outcomes(lines: &[Value]) -> Vec<String> {
    lines.iter().map(|l| fields(l).2).collect()
}

/// The event ids of the effects.
pub(super) fn effect_ids(effects: &[Effect]) -> Vec<&str> {
    effects.iter().map(|e| e.event_id.as_str()).collect()
}

pub(super) fn effect(event_id: &str, amount: i64, currency: &str) -> Effect {
    Effect {
        event_id: event_id.to_owned(),
        amount: Some(amount),
        currency: Some(currency.to_owned()),
    }
}

/// `body` signed with [`SECRET`] at the receiver's time.
pub(super) fn signed(config: &Config, body: &[u8]) -> String {
    sign(&[SECRET], now(config), body)
}
