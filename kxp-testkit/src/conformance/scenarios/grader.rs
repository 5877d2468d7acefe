//! The grader: the checks of `kxp check` (kxp-check), run against the receiver exactly as they
//! run against a merchant's endpoint, so every receiver here is graded by the code merchants'
//! endpoints are graded by. On a SQLite store.

use kxp_check::{Check, Target, Verdict};

use super::super::{Config, ReceiverUnderTest, RunningReceiver, SECRET};
use super::*;

/// Every check of `kxp check` passes: with the receiver's secrets (a rotation's two, so the
/// rotation check runs), its body limit, and the challenge. The events it accepted are recorded
/// once each, the duplicate's included, and nothing else is.
pub async fn kxp_check_passes_every_check<R: ReceiverUnderTest>(receiver: &R) {
    let database = sqlite().await;
    let config = Config {
        secrets: vec![SECRET.to_owned(), "old-secret".to_owned()],
        ..Config::new(database.url())
    };
    let running = receiver.start(config.clone()).await;
    let target = config
        .secrets
        .iter()
        .fold(Target::builder(&running.url()), |target, secret| {
            target.secret(secret)
        })
        .body_limit(config.body_limit)
        .challenge(true)
        // The receivers record payments only: with the test type they would record nothing to
        // count below.
        .event_type("payment.succeeded")
        .build()
        .unwrap_or_else(|e| panic!("kxp-check refuses the receiver's URL: {e}"));
    let report = kxp_check::run(&target, &Check::ALL).await;

    let not_passed: Vec<String> = report
        .findings
        .iter()
        .filter(|f| f.verdict != Verdict::Pass)
        .map(|f| format!("{} {}: {}", f.check, f.verdict.as_str(), f.summary))
        .collect();
    assert!(
        not_passed.is_empty() && report.findings.len() == Check::ALL.len(),
        "{}: kxp check does not pass:\n{}",
        receiver.name(),
        not_passed.join("\n")
    );
    // One valid event, one delivered twice, one per secret, the burst.
    let accepted = 1 + 1 + config.secrets.len() + target.burst();
    let effects = running.effects().await;
    let mut ids = effect_ids(&effects);
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(
        (effects.len(), ids.len()),
        (accepted, accepted),
        "the accepted events, each recorded once"
    );
    finish(running, database).await;
}
