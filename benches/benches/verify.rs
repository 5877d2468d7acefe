//! Signature verification speed: kxp-verify against the floor, a naive hand-written verifier,
//! svix and async-stripe-webhook, side by side for each body size; and kxp-verify's Ed25519
//! (`v1a`) path beside its HMAC one.
//!
//! Run: `cd benches && cargo bench --bench verify` (see ../../BENCHMARKS.md for the numbers).
//!
//! Every implementation verifies the same body bytes (a Stripe-shaped JSON event of the exact
//! size). Each input is checked once before it is measured, so no benchmark times a rejection.

use std::hint::black_box;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use http::{HeaderMap, HeaderValue};
use kxp_benches::{SECRET, SIZES, event_body, floor_mac, header_carries, keyed_hmac, naive_verify};
use kxp_verify::{Secret, Signer, SigningKey, Verifier};

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs()
}

fn verification(c: &mut Criterion) {
    let verifier = Verifier::new(Secret::new(SECRET).expect("non-empty secret"));
    let signer = Signer::new(Secret::new(SECRET).expect("non-empty secret"));
    let keyed = keyed_hmac();
    // Ed25519 (`v1a`): the same body and `t`, one public key.
    let ed25519_key = SigningKey::from_seed(&[0x42; 32]);
    let ed25519_verifier =
        Verifier::with_public_keys([ed25519_key.public_key()]).expect("one public key");

    // svix: its own headers and a `whsec_<base64 of the key bytes>` secret.
    let svix_key = [0x5au8; 32];
    let svix_secret = format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(svix_key)
    );
    let svix = svix::webhooks::Webhook::new(&svix_secret).expect("valid svix secret");

    for (size, label) in SIZES {
        let body = event_body(size);
        let bytes = body.as_bytes();
        let mut group = c.benchmark_group(format!("verify/{label}"));
        group.throughput(Throughput::Bytes(size as u64));
        if size >= 1024 * 1024 {
            // Milliseconds per call: equal-sized samples keep the group within its 3 s.
            group.sampling_mode(SamplingMode::Flat);
        }

        // svix and async-stripe-webhook read the system clock and allow 300 s, so every input is
        // signed at the current time, just before its size's group runs (a group takes < 1 min).
        let t = unix_now();
        let t_digits = t.to_string();
        // The Stripe-Signature header has exactly the kxp format (t=…,v1=…, HMAC-SHA256 over
        // `<t>.<body>` keyed with the secret string's bytes), so one header serves kxp, the
        // floor's check, the naive verifier and Stripe.
        let header = signer.sign(t, bytes).to_string();

        assert!(verifier.verify(&header, bytes, t).is_ok());
        group.bench_function("kxp", |b| {
            b.iter(|| {
                verifier
                    .verify(black_box(header.as_str()), black_box(bytes), black_box(t))
                    .is_ok()
            })
        });

        let ed25519_header = ed25519_key.sign(t, bytes).to_string();
        assert!(ed25519_verifier.verify(&ed25519_header, bytes, t).is_ok());
        group.bench_function("kxp_ed25519", |b| {
            b.iter(|| {
                ed25519_verifier
                    .verify(
                        black_box(ed25519_header.as_str()),
                        black_box(bytes),
                        black_box(t),
                    )
                    .is_ok()
            })
        });

        assert!(header_carries(
            &header,
            &floor_mac(&keyed, t_digits.as_bytes(), bytes)
        ));
        group.bench_function("floor", |b| {
            b.iter(|| floor_mac(&keyed, black_box(t_digits.as_bytes()), black_box(bytes)))
        });

        assert!(naive_verify(SECRET, &header, bytes, t));
        group.bench_function("naive", |b| {
            b.iter(|| naive_verify(SECRET, black_box(header.as_str()), black_box(bytes), t))
        });

        let msg_id = "msg_2Lh4vZ9k3Q0p1XyZaBcDeFgHiJk";
        let svix_signature = svix.sign(msg_id, t as i64, bytes).expect("UTF-8 body");
        let mut svix_headers = HeaderMap::new();
        svix_headers.insert("svix-id", HeaderValue::from_static(msg_id));
        svix_headers.insert(
            "svix-timestamp",
            HeaderValue::from_str(&t_digits).expect("digits"),
        );
        svix_headers.insert(
            "svix-signature",
            HeaderValue::from_str(&svix_signature).expect("base64"),
        );
        svix.verify(bytes, &svix_headers)
            .expect("svix accepts its own signature");
        group.bench_function("svix", |b| {
            b.iter(|| {
                svix.verify(black_box(bytes), black_box(&svix_headers))
                    .is_ok()
            })
        });

        // async-stripe-webhook has no verify-only call: `construct_event` checks the signature
        // and then parses the whole event (miniserde). It is measured as a user would call it.
        let event = stripe_webhook::Webhook::construct_event(&body, &header, SECRET)
            .expect("Stripe accepts the event");
        assert_eq!(event.id.as_str(), "evt_1QkXp2LkdIwHu7");
        group.bench_function("stripe", |b| {
            b.iter(|| {
                stripe_webhook::Webhook::construct_event(
                    black_box(body.as_str()),
                    black_box(header.as_str()),
                    SECRET,
                )
                .is_ok()
            })
        });

        group.finish();
        assert!(
            unix_now() - t < 300,
            "the {label} group outlasted the peers' 300 s tolerance: its svix/stripe rows timed rejections"
        );
    }
}

fn config() -> Criterion {
    // 24 benchmarks × (1 s warm-up + 3 s measurement) + analysis: about 2 minutes on 2 cores.
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50)
}

criterion_group! {
    name = benches;
    config = config();
    targets = verification
}
criterion_main!(benches);
