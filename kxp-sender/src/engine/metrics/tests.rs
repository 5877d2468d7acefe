//! The counters' labels and the exposition's text, without a server.

use super::*;

#[test]
fn outcomes_map_to_a_closed_set() {
    let failed = |kind| Outcome::Failed(crate::model::Failure::new(kind, "x"));
    assert_eq!(outcome_label(&failed(FailureKind::Timeout)), "timeout");
    assert_eq!(
        outcome_label(&failed(FailureKind::BlockedAddress)),
        "blocked_address"
    );
    assert_eq!(outcome_label(&failed(FailureKind::Request)), "other");
    assert_eq!(outcome_label(&failed(FailureKind::NoSecret)), "other");
    assert_eq!(
        outcome_label(&failed(FailureKind::AuthFailed)),
        "auth_failed"
    );
    // Every label a failure can take is in the closed set.
    for kind in [
        FailureKind::Timeout,
        FailureKind::Connect,
        FailureKind::Request,
        FailureKind::BlockedAddress,
        FailureKind::TooManyRedirects,
        FailureKind::InsecureRedirect,
        FailureKind::InvalidRedirect,
        FailureKind::InvalidUrl,
        FailureKind::NoSecret,
        FailureKind::InvalidHeader,
        FailureKind::EncryptionFailed,
        FailureKind::AuthFailed,
    ] {
        assert!(OUTCOMES.contains(&outcome_label(&failed(kind))));
    }
    let rejected = |status| Outcome::Rejected {
        status,
        snippet: String::new(),
        retry_after: None,
    };
    assert_eq!(outcome_label(&rejected(404)), "http_4xx");
    assert_eq!(outcome_label(&rejected(503)), "http_5xx");
    assert_eq!(outcome_label(&rejected(302)), "http_other");
}

#[test]
fn the_exposition_groups_each_family() {
    let m = Metrics::default();
    m.event_ingested();
    m.ingest_refused();
    m.attempt(
        &Outcome::Delivered {
            status: 200,
            snippet: String::new(),
            verified_key: None,
        },
        Duration::from_millis(7),
    );
    m.attempt(
        &Outcome::Failed(crate::model::Failure::new(FailureKind::Timeout, "x")),
        Duration::from_millis(40_000),
    );
    m.delivery_ended(true);
    m.transition(Transition::Open);
    m.notice("email", false);
    let gauges = Gauges {
        due: 2,
        lag_ms: 1500,
        endpoints: vec![("active".into(), "open".into(), 1)],
        ..Gauges::default()
    };
    let text = m.render(&gauges);
    for line in [
        "kxp_events_ingested_total 1",
        "kxp_events_refused_total{reason=\"backlog_full\"} 1",
        "kxp_attempts_total{outcome=\"success\"} 1",
        "kxp_attempts_total{outcome=\"timeout\"} 1",
        "kxp_attempt_duration_seconds_bucket{le=\"0.01\"} 1",
        "kxp_attempt_duration_seconds_bucket{le=\"30\"} 1",
        "kxp_attempt_duration_seconds_bucket{le=\"+Inf\"} 2",
        "kxp_attempt_duration_seconds_sum 40.007",
        "kxp_attempt_duration_seconds_count 2",
        "kxp_deliveries_finished_total{result=\"delivered\"} 1",
        "kxp_endpoint_transitions_total{transition=\"circuit_opened\"} 1",
        "kxp_notifications_total{channel=\"email\",result=\"failed\"} 1",
        "kxp_deliveries{state=\"due\"} 2",
        "kxp_delivery_lag_seconds 1.5",
        "kxp_endpoints{status=\"active\",circuit_state=\"open\"} 1",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "{line} missing from\n{text}"
        );
    }
    // The shards' gauge is Citus's alone.
    assert!(!text.contains("kxp_store_shards_unanswered"), "{text}");
    let text = m.render(&Gauges {
        unanswered_shards: Some(2),
        scans_by_shard: Some(7),
        ..gauges
    });
    for line in [
        "kxp_store_shards_unanswered 2",
        "kxp_store_scans_by_shard_total 7",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "{line} missing from\n{text}"
        );
    }
    // Every sample follows its own family's TYPE line.
    let mut family = "";
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            family = rest.split(' ').next().unwrap();
        } else if !line.starts_with('#') {
            assert!(line.starts_with(family), "{line} outside {family}");
        }
    }
}
