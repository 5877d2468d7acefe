//! The receiver conformance suite, against kxp-axum in both dedup modes.

mod claim_complete {
    kxp_testkit::receiver_conformance! {
        receiver: crate::receiver::Axum(kxp_testkit::conformance::Mode::ClaimComplete),
        not_applicable: {
            killed_mid_processing_the_event_is_recorded_once_after_a_restart:
                "an in-process server has no process to kill (the example binaries run it)",
            stopped_mid_processing_the_request_completes_and_is_recorded_once:
                "signals are the process's to handle (the example binaries run it)",
        },
    }
}

mod in_transaction {
    kxp_testkit::receiver_conformance! {
        receiver: crate::receiver::Axum(kxp_testkit::conformance::Mode::InTransaction),
        not_applicable: {
            an_abandoned_claim_answers_409_until_its_lease_ends:
                "in-transaction mode claims nothing: an unfinished transaction rolls back",
            killed_mid_processing_the_event_is_recorded_once_after_a_restart:
                "an in-process server has no process to kill (the example binaries run it)",
            stopped_mid_processing_the_request_completes_and_is_recorded_once:
                "signals are the process's to handle (the example binaries run it)",
        },
    }
}
