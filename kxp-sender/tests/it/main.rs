//! Integration tests of the `kxp` binary, run as a real process.

// Helpers outside #[test] functions unwrap too: in a test, a panic is the failure report.
#![allow(clippy::unwrap_used)]

mod debug_commands;
mod ingestion;
mod pipeline;
mod send;
mod support;
