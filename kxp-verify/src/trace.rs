//! W3C Trace Context (<https://www.w3.org/TR/trace-context/>): the `traceparent` a producer
//! sends with an event, which the sender passes on with each delivery, and the `tracestate`
//! beside it. One strict parser for both ends: the sender's ingestion and the receivers'
//! handler spans.
//!
//! Parsing is strict: version `00` only, exactly `00-<32 hex>-<16 hex>-<2 hex>` in lowercase,
//! neither id all zeros. Anything else is **ignored**, never an error: a request with a
//! malformed header is taken as if it had none (W3C: a vendor that cannot parse the header
//! starts a new trace).
//!
//! **The header is outside the signature.** Verifying a delivery proves who sent its body, not
//! its `traceparent`: whoever can send the request (or replay a captured one within its
//! tolerance) chooses the trace it joins. A receiver should use it to correlate spans, never to
//! decide anything.

use core::fmt;

/// The header that carries a trace context (`00-<trace id>-<parent id>-<flags>`).
pub const TRACEPARENT: &str = "traceparent";

/// The header of vendor-specific trace data that travels with [`TRACEPARENT`]. `kxp serve`
/// stores a producer's with the event and never forwards it to a merchant.
pub const TRACESTATE: &str = "tracestate";

/// The longest `tracestate` kept; a longer one is dropped (the recommendation's limit).
pub const MAX_TRACESTATE_LEN: usize = 512;

/// A parsed W3C `traceparent` of version `00`: a trace id, the id of the caller's span (the
/// parent) and the trace flags.
///
/// [`parse`](TraceParent::parse) is strict: exactly `00-<32 hex>-<16 hex>-<2 hex>` in
/// lowercase, neither id all zeros. Anything else is to be **ignored**, never refused: a
/// request with a malformed header is taken as if it had none, and starts a trace of its own.
///
/// **The header is outside the signature.** Verifying a delivery proves who sent its body, not
/// its `traceparent`: whoever can alter the request on its way (or replay a captured one within
/// the timestamp tolerance) chooses the trace it joins. Use it to correlate spans, never to
/// decide anything.
///
/// ```
/// use kxp_verify::TraceParent;
///
/// let header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
/// let parent = TraceParent::parse(header).unwrap();
/// assert!(parent.sampled());
/// assert_eq!(parent.to_string(), header);
/// assert_eq!(TraceParent::parse("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceParent {
    trace_id: [u8; 16],
    parent_id: [u8; 8],
    flags: u8,
}

impl TraceParent {
    /// A context of `trace_id` whose parent span is `parent_id`; `None` if either is all zeros
    /// (the recommendation's invalid ids).
    pub fn new(trace_id: [u8; 16], parent_id: [u8; 8], flags: u8) -> Option<TraceParent> {
        (trace_id != [0; 16] && parent_id != [0; 8]).then_some(TraceParent {
            trace_id,
            parent_id,
            flags,
        })
    }

    /// Parses a `traceparent` header value strictly (see [`TraceParent`]); `None` when it is
    /// not one, which the caller treats as no header at all.
    pub fn parse(value: &str) -> Option<TraceParent> {
        let bytes: &[u8; 55] = value.as_bytes().try_into().ok()?;
        let (version, rest) = bytes.split_first_chunk::<3>()?;
        let (trace, rest) = rest.split_first_chunk::<32>()?;
        let (dash, rest) = rest.split_first_chunk::<1>()?;
        let (parent, rest) = rest.split_first_chunk::<16>()?;
        let (dash_2, flags) = rest.split_first_chunk::<1>()?;
        if version != b"00-" || dash != b"-" || dash_2 != b"-" {
            return None;
        }
        let mut trace_id = [0; 16];
        let mut parent_id = [0; 8];
        let mut flag = [0; 1];
        hex_lower(trace, &mut trace_id)?;
        hex_lower(parent, &mut parent_id)?;
        hex_lower(flags, &mut flag)?;
        let [flags] = flag;
        TraceParent::new(trace_id, parent_id, flags)
    }

    /// The trace's id.
    pub fn trace_id(&self) -> [u8; 16] {
        self.trace_id
    }

    /// The id of the caller's span: the parent of the spans made for this request.
    pub fn parent_id(&self) -> [u8; 8] {
        self.parent_id
    }

    /// The trace flags (bit 0: sampled).
    pub fn flags(&self) -> u8 {
        self.flags
    }

    /// Whether the caller sampled the trace (flag bit 0).
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }
}

/// The header value, version `00`, lowercase.
impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("00-")?;
        for b in self.trace_id {
            write!(f, "{b:02x}")?;
        }
        f.write_str("-")?;
        for b in self.parent_id {
            write!(f, "{b:02x}")?;
        }
        write!(f, "-{:02x}", self.flags)
    }
}

/// Decodes lowercase hex `src` into `out` (two digits a byte); `None` on any other character,
/// uppercase included.
fn hex_lower(src: &[u8], out: &mut [u8]) -> Option<()> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c.wrapping_sub(b'0')),
        b'a'..=b'f' => Some(c.wrapping_sub(b'a').wrapping_add(10)),
        _ => None,
    };
    for (pair, byte) in src.chunks_exact(2).zip(out.iter_mut()) {
        let [hi, lo] = pair else { return None };
        *byte = (digit(*hi)? << 4) | digit(*lo)?;
    }
    Some(())
}

/// A `tracestate` value worth keeping: 1 to [`MAX_TRACESTATE_LEN`] bytes of printable ASCII
/// (spaces and tabs allowed between members), trimmed; `None` otherwise, and then it is dropped
/// (the recommendation lets a participant discard a `tracestate` it cannot keep whole).
pub fn tracestate(value: &str) -> Option<&str> {
    let value = value.trim_matches([' ', '\t']);
    let fits = (1..=MAX_TRACESTATE_LEN).contains(&value.len())
        && value
            .bytes()
            .all(|b| b == b'\t' || (b' '..=b'~').contains(&b));
    fits.then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_parses_and_prints_back() {
        let parsed = TraceParent::parse(VALID).unwrap();
        assert_eq!(parsed.to_string(), VALID);
        assert!(parsed.sampled());
        assert_eq!(parsed.parent_id()[7], 0xb7);
        assert_eq!(parsed.trace_id()[0], 0x4b);
    }

    #[test]
    fn anything_but_a_strict_version_00_is_ignored() {
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
            "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
            "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
            " 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "00-1-1-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-é",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_tracestate_is_kept_only_whole_and_printable() {
        assert_eq!(
            tracestate(" vendor=abc,other=1 "),
            Some("vendor=abc,other=1")
        );
        assert_eq!(tracestate(""), None);
        assert_eq!(tracestate("a=\u{7f}"), None);
        assert_eq!(tracestate(&"a".repeat(513)), None);
    }
}
