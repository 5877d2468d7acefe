//! `TraceParent::parse` on arbitrary text, checked against an independent reading of W3C Trace
//! Context's version `00` (`00-<32 lowercase hex>-<16 lowercase hex>-<2 lowercase hex>`, neither
//! id all zeros), and printed back.
//!
//! The sender stores what it accepts and forwards it with every delivery, so an accepted value
//! must be exactly the canonical form (printing it gives the input back, byte for byte), and
//! every refused one must be one the recommendation refuses too: `reference` is written
//! differently on purpose (`split`, `u128::from_str_radix`) so the two cannot share a mistake.

#![no_main]

use kxp_verify::TraceParent;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match (TraceParent::parse(text), reference(text)) {
        (Some(parsed), true) => assert_eq!(parsed.to_string(), text, "printed back differently"),
        (None, false) => {}
        (Some(parsed), false) => panic!("accepted {parsed:?} from {text:?}"),
        (None, true) => panic!("refused a valid traceparent {text:?}"),
    }
});

fn reference(text: &str) -> bool {
    let parts: Vec<&str> = text.split('-').collect();
    let [version, trace, parent, flags] = parts.as_slice() else {
        return false;
    };
    let lower_hex = |s: &str, len: usize| {
        s.len() == len && s.chars().all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
    };
    *version == "00"
        && lower_hex(trace, 32)
        && lower_hex(parent, 16)
        && lower_hex(flags, 2)
        && u128::from_str_radix(trace, 16).is_ok_and(|id| id != 0)
        && u64::from_str_radix(parent, 16).is_ok_and(|id| id != 0)
}
