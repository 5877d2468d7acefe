//! The receiver conformance suite, against both example binaries.

/// What a binary in in-transaction mode never leaves behind.
macro_rules! binary_conformance {
    ($bin:ident) => {
        kxp_testkit::receiver_conformance! {
            receiver: crate::binaries::Bin::$bin,
            not_applicable: {
                an_abandoned_claim_answers_409_until_its_lease_ends:
                    "the binaries run in in-transaction mode, which claims nothing: a killed \
             request rolls back (see killed_mid_processing…)",
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
