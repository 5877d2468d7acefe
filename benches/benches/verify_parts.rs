//! Diagnostics for `verify`: where kxp-verify's time goes beyond the floor (one HMAC pass).
//!
//! Run: `cd benches && cargo bench --bench verify_parts`. Each row is one piece of
//! `Verifier::verify`, timed on its own, at the two small sizes where fixed costs show.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use hmac::Hmac;
use kxp_benches::{
    SECRET, canonical_fast_path, event_body, floor_mac, hand_rolled_verify, keyed_hmac,
};
use kxp_verify::{Secret, SignatureHeader, Signer, Verifier};
use sha2::Sha256;
use subtle::ConstantTimeEq;

fn parts(c: &mut Criterion) {
    let t = 1_764_464_523u64;
    let t_digits = t.to_string();
    let verifier = Verifier::new(Secret::new(SECRET).expect("non-empty secret"));
    let signer = Signer::new(Secret::new(SECRET).expect("non-empty secret"));
    let keyed = keyed_hmac();

    for (size, label) in [(256usize, "256B"), (1024, "1KiB")] {
        let body = event_body(size);
        let bytes = body.as_bytes();
        let header = signer.sign(t, bytes).to_string();
        let signature: [u8; 32] = hex::decode(&header[header.len() - 64..])
            .expect("hex")
            .try_into()
            .expect("32 bytes");
        let mut group = c.benchmark_group(format!("parts/{label}"));
        group.throughput(Throughput::Bytes(size as u64));

        group.bench_function("kxp_verify", |b| {
            b.iter(|| {
                verifier
                    .verify(black_box(header.as_str()), black_box(bytes), t)
                    .is_ok()
            })
        });
        group.bench_function("floor", |b| {
            b.iter(|| floor_mac(&keyed, black_box(t_digits.as_bytes()), black_box(bytes)))
        });
        // The floor plus what any verifier must add: compare with a pre-decoded signature.
        group.bench_function("floor_ct_eq", |b| {
            b.iter(|| {
                let mac = floor_mac(&keyed, black_box(t_digits.as_bytes()), black_box(bytes));
                bool::from(mac.ct_eq(black_box(&signature)))
            })
        });
        // Only the fixed costs: parsing the header, and decoding its v1 values.
        group.bench_function("header_parse", |b| {
            b.iter(|| SignatureHeader::parse(black_box(header.as_str())).is_ok())
        });
        group.bench_function("header_parse_and_decode", |b| {
            b.iter(|| {
                let parsed = SignatureHeader::parse(black_box(header.as_str())).expect("valid");
                parsed.signatures().fold(0u8, |acc, sig| acc ^ sig[0])
            })
        });
        // Cloning (and dropping) the pre-keyed HMAC state without hashing anything.
        group.bench_function("hmac_clone_drop", |b| {
            b.iter(|| {
                let mac: Hmac<Sha256> = black_box(&keyed).clone();
                black_box(&mac);
            })
        });
        // A whole verifier built by hand without allocating: parse (split), hex-decode, floor,
        // ct_eq, tolerance: the reachable target for kxp.
        group.bench_function("hand_rolled_no_alloc", |b| {
            b.iter(|| hand_rolled_verify(&keyed, black_box(header.as_str()), black_box(bytes), t))
        });
        // A prototype fast path for the canonical header `t=<digits>,v1=<64 hex>` (what
        // `Signer` emits for one secret): fixed offsets, table hex decode, floor, ct_eq.
        assert_eq!(
            canonical_fast_path(&keyed, header.as_bytes(), bytes, t),
            Some(true)
        );
        group.bench_function("canonical_fast_path", |b| {
            b.iter(|| {
                canonical_fast_path(&keyed, black_box(header.as_bytes()), black_box(bytes), t)
            })
        });
        group.finish();
    }
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50)
}

criterion_group! {
    name = benches;
    config = config();
    targets = parts
}
criterion_main!(benches);
