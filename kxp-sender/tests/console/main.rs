//! The console in a real browser (issue 12, section 3): headless Chromium, driven over
//! WebDriver by chromedriver, against a real server on 127.0.0.1. Each test starts its own
//! browser and server; without Chromium and chromedriver installed, each says
//! `SKIPPED (browser): …` on stderr and passes (with `KXP_REQUIRE_BROWSER=1`, fails).
//!
//! - `browser`: the harness (chromedriver, the session, waits, cookies, scripts, axe-core,
//!   screenshots into `$KXP_SCREENSHOTS`). `app`: the server, its operator and merchant, the
//!   console's paths and selectors, the sign-in flows.
//! - One file of tests per area: `sign_in` (portal links, the key form, scopes, signing out),
//!   `security` (used and expired links, no session, CSRF, the CSP), `accessibility` (axe-core
//!   on every page, and the screenshots). New pages get their tests in a file of their own
//!   (`endpoints.rs`, `events.rs`, `dead_letters.rs`, …) and a line in `accessibility.rs`.

// Helpers outside #[test] functions unwrap too: in a test, a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// The tests watch the sender from outside: they read its rows with their own SQL and time its
// work with the clock, which the crate's own layers leave to store/ and model/time.rs.
#![allow(clippy::disallowed_methods)]

mod accessibility;
mod app;
mod browser;
mod flows;
mod security;
mod sign_in;
