//! The verify path allocates nothing, for every vector, valid or not (allocation-counter counts
//! per thread, so other tests running at the same time do not disturb the count).

use kxp_testkit::{Vector, vectors};
use kxp_verify::{SignatureHeader, Verifier};

use crate::verifier_for;

#[test]
fn verify_allocates_nothing() {
    for vector in vectors() {
        assert_verify_allocates_nothing(&vector, &verifier_for(&vector));
    }
}

/// `verifier` reaches `vector`'s verdict (ok or not) without allocating.
pub(crate) fn assert_verify_allocates_nothing(vector: &Vector, verifier: &Verifier) {
    let mut verdict = None;
    let info = allocation_counter::measure(|| {
        verdict = Some(
            verifier
                .verify(&vector.header, &vector.body, vector.now)
                .is_ok(),
        );
    });
    assert_eq!(info.count_total, 0, "{} allocated {info:?}", vector.name);
    assert_eq!(verdict, Some(vector.is_ok()), "{}", vector.name);
}

#[test]
fn parsing_and_iterating_signatures_allocates_nothing() {
    for vector in vectors() {
        let info = allocation_counter::measure(|| {
            if let Ok(header) = SignatureHeader::parse(&vector.header) {
                assert!(header.signatures().count() >= 1);
            }
        });
        assert_eq!(info.count_total, 0, "{} allocated {info:?}", vector.name);
    }
}

#[test]
fn the_counter_sees_allocations() {
    // Without this, a broken counter would make the tests above pass vacuously.
    let info = allocation_counter::measure(|| {
        std::hint::black_box(vec![0u8; 64]);
    });
    assert!(info.count_total >= 1);
}
