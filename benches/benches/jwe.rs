//! Payload encryption (issue 13, part 3): what `data_jwe` adds to each attempt of an endpoint
//! with an `encryption_jwk`, on both curves, beside the floor every attempt already pays (its
//! HMAC signature). A JWE costs two ECDH operations (the ephemeral key, then the agreement);
//! AES-KW and AES-GCM are small beside them at these sizes. `read_jwk_and_seal_*` is what an
//! attempt does in full: read the endpoint's stored JWK, then seal.
//!
//! Run: `cd benches && cargo bench --bench jwe`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kxp_benches::{SECRET, event_body};
use kxp_jwe::{Curve, DecryptionKey, EncryptionKey, open_envelope, seal_envelope};
use kxp_verify::{Secret, Signer};

fn jwe(c: &mut Criterion) {
    let signer = Signer::new(Secret::new(SECRET).expect("non-empty secret"));
    for (size, label) in [(256usize, "256B"), (1024, "1KiB"), (16 * 1024, "16KiB")] {
        // A kxp envelope whose `data` is a realistic event of about `size` bytes.
        let body = format!(
            r#"{{"id":"0193a0c4-c1e0-7c2e-9f3b-7a1d2c4e5f61","type":"payment.succeeded","api_version":"2026-11-01","created_at":"2026-12-01T10:00:00Z","data":{}}}"#,
            event_body(size)
        );
        let mut group = c.benchmark_group(format!("jwe/{label}"));
        group.throughput(Throughput::Bytes(size as u64));
        group.bench_function("floor_hmac_sign", |b| {
            b.iter(|| {
                signer
                    .sign(1_764_464_523, black_box(body.as_bytes()))
                    .timestamp()
            })
        });
        for (curve, name) in [(Curve::X25519, "x25519"), (Curve::P256, "p256")] {
            let private = DecryptionKey::generate(curve, Some("bench"));
            let public = EncryptionKey::from_jwk(&private.public().to_jwk().to_string())
                .expect("its own public key");
            let sealed = seal_envelope(&public, &body).expect("an envelope");
            group.bench_function(format!("seal_{name}"), |b| {
                b.iter(|| seal_envelope(black_box(&public), black_box(&body)).expect("sealed"))
            });
            // What an attempt does in full: read the stored JWK, then seal.
            let jwk = public.to_jwk().to_string();
            group.bench_function(format!("read_jwk_and_seal_{name}"), |b| {
                b.iter(|| {
                    let key = EncryptionKey::from_jwk(black_box(&jwk)).expect("a key");
                    seal_envelope(&key, black_box(&body)).expect("sealed")
                })
            });
            group.bench_function(format!("open_{name}"), |b| {
                b.iter(|| {
                    open_envelope(black_box(&private), black_box(sealed.as_bytes()))
                        .expect("opened")
                })
            });
        }
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = jwe
}
criterion_main!(benches);
