#![doc = include_str!("../README.md")]
#![no_std]
// The verify path must never panic, whatever the input: these lints make every index, every
// arithmetic operation and every explicit panic in this crate a reviewed exception.
#![deny(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic,
    clippy::expect_used
)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(any(feature = "std", test))]
extern crate std;

mod base64;
mod ed25519;
mod error;
#[cfg(feature = "serde")]
mod event;
mod feed_item;
mod fingerprint;
mod header;
mod hex;
mod secret;
mod sign;
mod standard;
mod trace;
mod verify;

// The public interface.
pub use ed25519::{Ed25519SignedHeader, PublicKey, SigningKey};
pub use error::{ConfigError, Error, ErrorKind, Malformed};
#[cfg(feature = "serde")]
pub use event::{Envelope, EnvelopeError, EnvelopeErrorKind, Event};
pub use feed_item::{
    FEED_ITEM_MAC_LABEL, FEED_PAGE_MAC_LABEL, FEED_PURGED_MAC_LABEL, FeedItemFields, FeedPageFields,
};
pub use fingerprint::{KeyFingerprint, key_fingerprint};
pub use header::SignatureHeader;
pub use secret::{FEED_KEY_LABEL, Secret};
#[cfg(feature = "alloc")]
pub use secret::{feed_message, feed_request_message, to_whsec};
pub use sign::{SignedHeader, Signer};
pub use standard::{StandardEd25519SignedHeader, StandardSignedHeader};
pub use trace::{MAX_TRACESTATE_LEN, TRACEPARENT, TRACESTATE, TraceParent, tracestate};
pub use verify::{Verified, VerifiedBuf, Verifier};

/// The header that carries the signature, in the lowercase form `http::HeaderName` wants.
pub const SIGNATURE_HEADER: &str = "x-kxp-signature";

/// The header a catch-up feed request is signed in: `t=<unix seconds>,v1=<hex>` as in
/// [`SIGNATURE_HEADER`], over [`feed_message`] with the [`Secret::feed_key`]. Lowercase, as
/// `http::HeaderName` wants.
pub const FEED_SIGNATURE_HEADER: &str = "x-kxp-feed-signature";

/// The hint header that names the endpoint a delivery was sent to, beside
/// [`SEQUENCE_HEADER`]. Not signed: it only tells a receiver where to look (the feed), never
/// what to believe.
pub const ENDPOINT_ID_HEADER: &str = "x-kxp-endpoint-id";

/// The hint header with a delivery's number in its endpoint's sequence (1, 2, 3, … with no
/// holes, kept by retries and replays). Not signed: a receiver uses it to notice a gap early,
/// and finds what is missing in the feed, which is authenticated.
pub const SEQUENCE_HEADER: &str = "x-kxp-sequence";

/// The header a receiver answers a verified request's 2xx with: the [`key_fingerprint`] of the
/// key that verified it ([`Verified::key_fingerprint`]), 16 lowercase hex digits. The sender
/// reads it to end a rotation once the receiver verifies with the new key. Lowercase, as
/// `http::HeaderName` wants.
pub const VERIFIED_KEY_HEADER: &str = "x-kxp-verified-key";

/// How far a timestamp may be from the receiver's clock, either way, unless configured
/// otherwise: five minutes, wide enough for ordinary clock skew and narrow enough that a captured
/// request cannot be replayed later.
pub const DEFAULT_TOLERANCE: core::time::Duration = core::time::Duration::from_secs(300);

/// Headers longer than this are malformed: a real one with [`MAX_SECRETS`] signatures is under
/// 300 bytes, and the bound keeps parsing cost fixed whatever a client sends.
pub const MAX_HEADER_LEN: usize = 4096;

/// How many `v1a` items a header may carry; more is `malformed_header` for a verifier with public
/// keys. Each costs one Ed25519 verification per key (some 36 µs, see BENCHMARKS.md), so without
/// a bound a 4 KiB header of `v1a` items would make one unauthenticated request cost
/// milliseconds; a sender signs with at most [`MAX_SECRETS`] keys, so no real header has more.
pub const MAX_ED25519_SIGNATURES: usize = 4;

/// How many secrets a [`Verifier`] or [`Signer`] holds at once. Rotation needs two (old and new);
/// the rest is headroom. The bound lets both work without a heap.
pub const MAX_SECRETS: usize = 4;

/// Standard Webhooks 1.0: the header with the message's id, which is signed with the body and
/// stays the same across retries (the dedup key). Lowercase, as `http::HeaderName` wants.
pub const WEBHOOK_ID_HEADER: &str = "webhook-id";

/// Standard Webhooks 1.0: the header with the signed Unix time in decimal seconds. Lowercase,
/// as `http::HeaderName` wants.
pub const WEBHOOK_TIMESTAMP_HEADER: &str = "webhook-timestamp";

/// Standard Webhooks 1.0: the header with the space-separated `v1,<base64>` and
/// `v1a,<base64>` signatures. Lowercase, as `http::HeaderName` wants.
pub const WEBHOOK_SIGNATURE_HEADER: &str = "webhook-signature";

/// How many items a `webhook-signature` may hold, whatever their version; more is
/// `malformed_header`. A sender signs with at most [`MAX_SECRETS`] secrets and as many keys,
/// so a real list has at most 8; the rest leaves room for versions not yet defined. The bound
/// keeps the work per request fixed ([`MAX_SECRETS`] MACs, each compared with at most this
/// many items) whatever a client sends.
pub const MAX_SIGNATURE_ITEMS: usize = 16;
