//! Test helpers shared by every crate that signs or verifies: the signature vectors of
//! `testdata/vectors/signatures.json` (a copy of the project's shared vectors; `.ci/run` checks
//! that the copy is current) and `testdata/vectors/extra.json` (rules the shared set leaves
//! unpinned; made by `make-extra.py` beside it), and the Ed25519 (`v1a`) vectors of
//! `testdata/vectors/ed25519.json` (made by `make-ed25519.py`).
//!
//! It knows nothing of `kxp-verify`, so each implementation under test (the core, the CLI, the
//! adapters, the snippets in other languages) is checked against the same data by the same loader.
//!
//! With the feature `db`, the module `db` gives each test a fresh PostgreSQL database or SQLite
//! file, and the module `citus` a database of its own on a Citus cluster. With the feature `smtp`, the module `smtp` runs an SMTP server on 127.0.0.1 that records
//! the e-mails it receives. With the feature `otlp`, the module `otlp` runs an OTLP/HTTP trace
//! receiver on 127.0.0.1 that decodes and keeps the spans sent to it. With the feature `brokers`, the module `brokers` gives each test a
//! RabbitMQ queue (with a dead-letter queue) or a NATS JetStream stream of its own, and runs
//! private `nats-server`s to stop and start. The module `confine` runs processes on a small
//! tmpfs of their own, for full-disk tests. The module `interop` runs the independent libraries
//! (PyPI, npm) that `.ci/interop-install` pins, for interop tests. With the feature `conformance`, the module `conformance` is the
//! black-box suite every receiver (kxp-axum, kxp-actix, the example binaries) runs over HTTP. The
//! crate depends on none of the project's own but `kxp-check` (the graders' checks, with the
//! feature `conformance`), which depends on none either, so every crate can use it in its tests.

use std::path::PathBuf;

#[cfg(feature = "brokers")]
pub mod brokers;
#[cfg(feature = "db")]
pub mod citus;
pub mod confine;
#[cfg(feature = "conformance")]
pub mod conformance;
#[cfg(feature = "db")]
pub mod db;
pub mod interop;
#[cfg(feature = "otlp")]
pub mod otlp;
#[cfg(feature = "smtp")]
pub mod smtp;

/// The top-level README's Rust examples, run as doctests so the front page cannot drift.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

use base64::Engine;
use serde::Deserialize;

/// One test vector: a request as a receiver sees it, and the verdict it must reach.
#[derive(Debug, Clone, Deserialize)]
pub struct Vector {
    /// A unique, descriptive name, used in failure messages.
    pub name: String,
    /// The secrets the receiver is configured with, in order.
    pub secrets: Vec<String>,
    /// The Ed25519 public keys (padded standard base64 of 32 bytes) the receiver is configured
    /// with instead, in order: only the vectors of [`ed25519_vectors`] have them.
    #[serde(default)]
    pub public_keys: Vec<String>,
    /// The `X-Kxp-Signature` value; empty means the header is absent or empty.
    pub header: String,
    /// The raw body, base64 in the file.
    #[serde(rename = "body_b64", deserialize_with = "base64_bytes")]
    pub body: Vec<u8>,
    /// The receiver's clock, Unix seconds.
    pub now: u64,
    /// The receiver's tolerance, seconds.
    pub tolerance_s: u64,
    /// `ok` or one of the five error kinds; in [`ed25519_vectors`] also `invalid_public_key` or
    /// `weak_public_key`, for a verifier that cannot be built with these keys.
    pub expect: String,
}

impl Vector {
    /// Whether the vector must verify.
    pub fn is_ok(&self) -> bool {
        self.expect == "ok"
    }

    /// The `v1` values of the header, in order (for checking what a signer produces).
    pub fn v1_values(&self) -> Vec<&str> {
        self.header
            .split(',')
            .filter_map(|item| item.trim_matches([' ', '\t']).strip_prefix("v1="))
            .collect()
    }

    /// Whether an HTTP header value carries exactly these bytes. Control characters (NUL,
    /// newline, DEL) cannot be sent at all, and whitespace at either end is not part of a field
    /// value (HTTP strips it), so HTTP tests skip such vectors and say which.
    pub fn fits_http(&self) -> bool {
        let bytes = self.header.as_bytes();
        let controls = bytes.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f);
        let padded = bytes.first().is_some_and(|b| *b == b' ' || *b == b'\t')
            || bytes.last().is_some_and(|b| *b == b' ' || *b == b'\t');
        !controls && !padded
    }

    /// Whether a signer could have produced this header's `t`: a signer writes the number
    /// without leading zeros, so a vector with `t=000…` is only reachable by hand.
    pub fn has_canonical_timestamp(&self) -> bool {
        self.timestamp().is_some_and(|t| {
            self.header.contains(&format!("t={t},")) || self.header.ends_with(&format!("t={t}"))
        })
    }

    /// The `t` value of the header, if it is a number.
    pub fn timestamp(&self) -> Option<u64> {
        self.header
            .split(',')
            .find_map(|item| item.trim_matches([' ', '\t']).strip_prefix("t="))
            .and_then(|t| t.parse().ok())
    }
}

#[derive(Deserialize)]
struct File {
    vectors: Vec<Vector>,
}

fn base64_bytes<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    let text = String::deserialize(d)?;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(serde::de::Error::custom)
}

/// The vector files: the shared set, then this repository's extra set. Implementations in other
/// languages read these paths directly.
pub fn vector_paths() -> [PathBuf; 2] {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/vectors");
    [dir.join("signatures.json"), dir.join("extra.json")]
}

/// Loads every vector of both files. Panics with a clear message if a file is missing or
/// invalid: a test that cannot read its data must fail, not pass vacuously.
pub fn vectors() -> Vec<Vector> {
    let [shared, extra] = vector_paths();
    let shared = load(&shared);
    assert_eq!(shared.len(), 49, "the shared vector set has 49 vectors");
    let extra = load(&extra);
    assert!(extra.len() >= 20, "the extra vector set is incomplete");
    shared.into_iter().chain(extra).collect()
}

/// The Ed25519 (`v1a`) vectors: verifiers with public keys, and some with secrets to pin how
/// `v1` and `v1a` coexist. Kept apart from [`vectors`] because an implementation of `v1` only
/// (the snippets in other languages) has no use for them.
pub fn ed25519_vectors() -> Vec<Vector> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/vectors/ed25519.json");
    let vectors = load(&path);
    assert!(vectors.len() >= 40, "the Ed25519 vector set is incomplete");
    vectors
}

fn load(path: &std::path::Path) -> Vec<Vector> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let file: File = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("invalid vectors file {}: {e}", path.display()));
    file.vectors
}

/// Runs `check` on every vector and reports all failures at once, with the vector names.
///
/// `check` returns the verdict the implementation reached: `"ok"` or an error kind.
pub fn check_all(check: impl FnMut(&Vector) -> String) {
    check_each(&vectors(), check);
}

/// [`check_all`] over the given vectors (such as [`ed25519_vectors`]).
pub fn check_each(vectors: &[Vector], mut check: impl FnMut(&Vector) -> String) {
    let failures: Vec<String> = vectors
        .iter()
        .filter_map(|v| {
            let got = check(v);
            (got != v.expect).then(|| format!("{}: expected {}, got {got}", v.name, v.expect))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} vectors failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
