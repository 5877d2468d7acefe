//! Integration tests of the `kxp` binary, run as a real process.

// Helpers outside #[test] functions unwrap too: in a test, a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod accounts;
mod admin;
mod check;
mod citus_kill;
mod config;
mod crash;
mod debug_commands;
mod demo;
mod disk_full;
mod encryption_key;
mod ingest;
mod listen;
mod operators;
mod outbox_crash;
mod secrets_key;
mod send;
mod shutdown;
mod upgrade;
// The in-process sender and scripted receivers of kxp-sender's own tests: the commands tested
// here run against the same fixtures.
// Only part of them is used here.
#[allow(dead_code)]
#[path = "../../../kxp-sender/tests/it/support.rs"]
mod support;
