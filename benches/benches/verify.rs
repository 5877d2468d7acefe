//! Signature verification speed: kxp-verify against the floor, a naive hand-written verifier,
//! svix and async-stripe-webhook, side by side for each body size; and kxp-verify's Ed25519
//! (`v1a`) path beside its HMAC one. At 1 KiB only, Ed25519 against others' (issue 13): kxp's
//! Standard Webhooks `v1a` (`kxp_ed25519_standard`), a hand-written `v1a` verifier on
//! ed25519-dalek's `verify_strict` (`floor_ed25519_verify_strict`: no crate verifies Standard
//! Webhooks `v1a`, so this is a floor, not a peer).
//!
//! Run: `cd benches && cargo bench --bench verify` (see ../../BENCHMARKS.md for the numbers).
//!
//! Every implementation verifies the same body bytes (a Stripe-shaped JSON event of the exact
//! size). Each input is checked once before it is measured, so no benchmark times a rejection.

use std::hint::black_box;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use ed25519_dalek::{Signature, VerifyingKey};
use http::{HeaderMap, HeaderValue};
use kxp_benches::{SECRET, SIZES, event_body, floor_mac, header_carries, keyed_hmac, naive_verify};
use kxp_verify::{Secret, Signer, SigningKey, Verifier};

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs()
}

/// The least a Standard Webhooks `v1a` verifier does, written as a receiver would by hand on
/// ed25519-dalek: parse the timestamp, build `<id>.<timestamp>.<body>` in one buffer (what
/// `verify_strict` takes), then for each `v1a,<base64>` item of the space-separated signature
/// list base64-decode it and `verify_strict` it with a key decoded once, ahead of time; and
/// check the 300 s tolerance. No length limits, item caps or error kinds: a floor, not a peer.
fn floor_v1a(
    key: &VerifyingKey,
    id: &str,
    timestamp: &str,
    signature: &str,
    body: &[u8],
    now: u64,
) -> bool {
    let Ok(t) = timestamp.parse::<u64>() else {
        return false;
    };
    let mut message = Vec::with_capacity(id.len() + timestamp.len() + body.len() + 2);
    message.extend_from_slice(id.as_bytes());
    message.push(b'.');
    message.extend_from_slice(timestamp.as_bytes());
    message.push(b'.');
    message.extend_from_slice(body);
    let verified = signature
        .split(' ')
        .filter_map(|item| item.strip_prefix("v1a,"))
        .any(|text| {
            let mut bytes = [0u8; 66];
            match base64::engine::general_purpose::STANDARD.decode_slice(text, &mut bytes) {
                Ok(64) => {
                    let signature = Signature::from_slice(&bytes[..64]).expect("64 bytes");
                    key.verify_strict(&message, &signature).is_ok()
                }
                _ => false,
            }
        });
    verified && now.abs_diff(t) <= 300
}

fn verification(c: &mut Criterion) {
    let verifier = Verifier::new(Secret::new(SECRET).expect("non-empty secret"));
    let signer = Signer::new(Secret::new(SECRET).expect("non-empty secret"));
    let keyed = keyed_hmac();
    // Ed25519 (`v1a`): the same body and `t`, one public key.
    let ed25519_key = SigningKey::from_seed(&[0x42; 32]);
    let ed25519_verifier =
        Verifier::with_public_keys([ed25519_key.public_key()]).expect("one public key");
    // The same key pair in ed25519-dalek (a seed is RFC 8032's private key), for the floor.
    let dalek_key = ed25519_dalek::SigningKey::from_bytes(&[0x42; 32]);
    let dalek_public = dalek_key.verifying_key();
    assert_eq!(dalek_public.to_bytes(), ed25519_key.public_key().to_bytes());

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
        if size == 1024 {
            ed25519_against_others(
                &mut group,
                Ed25519Inputs {
                    kxp_verifier: &ed25519_verifier,
                    kxp_key: &ed25519_key,
                    dalek_public: &dalek_public,
                    msg_id,
                    t,
                    t_digits: &t_digits,
                    bytes,
                },
            );
        }

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

struct Ed25519Inputs<'a> {
    kxp_verifier: &'a Verifier,
    kxp_key: &'a SigningKey,
    dalek_public: &'a VerifyingKey,
    msg_id: &'a str,
    t: u64,
    t_digits: &'a str,
    bytes: &'a [u8],
}

/// The 1 KiB rows of issue 13: Ed25519 webhook verification by kxp (Standard Webhooks `v1a`),
/// and by the hand-written floor.
fn ed25519_against_others(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    inputs: Ed25519Inputs<'_>,
) {
    let Ed25519Inputs {
        kxp_verifier,
        kxp_key,
        dalek_public,
        msg_id,
        t,
        t_digits,
        bytes,
    } = inputs;

    // kxp's Standard Webhooks path: the three header values, one `v1a` item over
    // `<id>.<t>.<body>`.
    let standard_signature = kxp_key
        .sign_standard(msg_id, t, bytes)
        .expect("a valid id")
        .to_string();
    assert!(
        kxp_verifier
            .verify_standard(msg_id, t_digits, &standard_signature, bytes, t)
            .is_ok()
    );
    group.bench_function("kxp_ed25519_standard", |b| {
        b.iter(|| {
            kxp_verifier
                .verify_standard(
                    black_box(msg_id),
                    black_box(t_digits),
                    black_box(standard_signature.as_str()),
                    black_box(bytes),
                    black_box(t),
                )
                .is_ok()
        })
    });

    // The floor verifies the very same three header values.
    assert!(floor_v1a(
        dalek_public,
        msg_id,
        t_digits,
        &standard_signature,
        bytes,
        t
    ));
    group.bench_function("floor_ed25519_verify_strict", |b| {
        b.iter(|| {
            floor_v1a(
                black_box(dalek_public),
                black_box(msg_id),
                black_box(t_digits),
                black_box(standard_signature.as_str()),
                black_box(bytes),
                black_box(t),
            )
        })
    });
}

fn config() -> Criterion {
    // 26 benchmarks (6 rows at each of 4 sizes, 2 more at 1 KiB) × (1 s warm-up + 3 s
    // measurement) + analysis: about 2 minutes on 2 cores.
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
