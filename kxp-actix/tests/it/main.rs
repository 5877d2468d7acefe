//! Integration tests of kxp-actix over real HTTP on 127.0.0.1: the shared receiver conformance
//! suite of `kxp_testkit::conformance`, and what only this adapter's API can get wrong.

// Helpers outside #[test] functions unwrap too: in a test, a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod api;
mod conformance;
mod encryption;
mod receiver;
mod traces;
