//! Runs one piece of the verify path N times, for counting instructions under valgrind, which
//! (unlike wall time on a shared 2-core machine) does not move with the load:
//!
//! ```sh
//! cd benches && cargo build --release --example verify_icount
//! for m in floor kxp parse parse_decode hand fast; do
//!   ir() { valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \
//!          target/release/examples/verify_icount $m 256 $1 2>&1 | awk '/I *refs/ {gsub(",","",$NF); print $NF}'; }
//!   echo "$m $(( ($(ir 2000) - $(ir 1000)) / 1000 )) instructions/call"
//! done
//! ```
//!
//! valgrind hides the CPU's SHA extensions, so `sha2` runs its portable code there and the
//! hashing part is inflated; the differences to `floor` (the fixed costs) are what to read.

use std::hint::black_box;

use kxp_benches::{
    SECRET, canonical_fast_path, event_body, floor_mac, hand_rolled_verify, keyed_hmac,
};
use kxp_verify::{Secret, SignatureHeader, Signer, Verifier};

#[inline(never)]
fn kxp(verifier: &Verifier, header: &str, body: &[u8], now: u64) -> bool {
    verifier.verify(header, body, now).is_ok()
}

#[inline(never)]
fn parse(header: &str) -> bool {
    SignatureHeader::parse(header).is_ok()
}

#[inline(never)]
fn parse_decode(header: &str) -> u8 {
    SignatureHeader::parse(header)
        .map(|parsed| parsed.signatures().fold(0, |acc, sig| acc ^ sig[0]))
        .unwrap_or(0)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: verify_icount <floor|kxp|parse|parse_decode|hand|fast|none> <size> <n>";
    let mode = args.next().expect(usage);
    let size: usize = args.next().and_then(|s| s.parse().ok()).expect(usage);
    let n: u64 = args.next().and_then(|s| s.parse().ok()).expect(usage);

    let t = 1_764_464_523u64;
    let t_digits = t.to_string();
    let body = event_body(size);
    let bytes = body.as_bytes();
    let verifier = Verifier::new(Secret::new(SECRET).expect("non-empty secret"));
    let header = Signer::new(Secret::new(SECRET).expect("non-empty secret"))
        .sign(t, bytes)
        .to_string();
    let keyed = keyed_hmac();

    let mut acc = 0u64;
    for _ in 0..n {
        let header = black_box(header.as_str());
        let bytes = black_box(bytes);
        acc += match mode.as_str() {
            "none" => 1,
            "floor" => u64::from(floor_mac(&keyed, t_digits.as_bytes(), bytes)[0]),
            "kxp" => u64::from(kxp(&verifier, header, bytes, t)),
            "parse" => u64::from(parse(header)),
            "parse_decode" => u64::from(parse_decode(header)),
            "hand" => u64::from(hand_rolled_verify(&keyed, header, bytes, t)),
            "fast" => {
                u64::from(canonical_fast_path(&keyed, header.as_bytes(), bytes, t) == Some(true))
            }
            _ => panic!("{usage}"),
        };
    }
    println!("{acc}");
}
