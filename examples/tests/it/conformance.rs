//! The receiver conformance suite, against both example binaries.

/// The suite for one binary. The binaries run in in-transaction mode, which claims nothing: a
/// request killed mid-way rolls back (`killed_mid_processing…` checks that instead).
macro_rules! binary_conformance {
    ($bin:ident) => {
        kxp_testkit::receiver_conformance! {
            receiver: crate::binaries::Bin::$bin,
            not_applicable: {
                an_abandoned_claim_answers_409_until_its_lease_ends:
                    "in-transaction mode claims nothing: an unfinished transaction rolls back",
            },
        }
    };
}

mod axum_receiver {
    binary_conformance!(Axum);
}

mod actix_receiver {
    binary_conformance!(Actix);
}
