//! Integration tests of kxp-axum over real HTTP on 127.0.0.1.

// Helpers outside #[test] functions unwrap too: in a test, a panic is the failure report.
#![allow(clippy::unwrap_used)]

#[cfg(feature = "dedup")]
mod dedup;
mod harness;
mod verification;
