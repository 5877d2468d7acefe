//! Integration tests of kxp-verify: one binary, one module per concern.

// Helpers outside #[test] functions unwrap too: in a test, a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod ed25519;
mod envelope;
mod feed_item;
mod no_alloc;
mod properties;
mod standard_webhooks;
mod vectors;

use std::time::Duration;

use kxp_testkit::Vector;
use kxp_verify::{Secret, Verifier};

/// The verifier a vector describes: its secrets, in order, and its tolerance.
fn verifier_for(vector: &Vector) -> Verifier {
    let secrets = vector.secrets.iter().map(|s| Secret::new(s).unwrap());
    Verifier::with_secrets(secrets)
        .unwrap()
        .with_tolerance(Duration::from_secs(vector.tolerance_s))
}
