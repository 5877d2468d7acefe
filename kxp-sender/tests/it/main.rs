//! Integration tests of the `kxp` binary, run as a real process.

// Helpers outside #[test] functions unwrap too: in a test, a panic is the failure report.
#![allow(clippy::unwrap_used)]

mod accounts;
mod admin;
mod crash;
mod debug_commands;
mod demo;
mod guard;
mod health;
mod ingestion;
mod isolation;
mod lifecycle;
mod metrics;
mod notifications;
mod pipeline;
mod postgres;
mod protection;
mod retention;
mod rotation;
mod schemas;
mod send;
mod support;
