//! Test helpers shared by every crate that signs or verifies: the signature vectors of
//! `testdata/vectors/signatures.json` (a copy of the project's shared vectors; `.ci/run` checks
//! that the copy is current).
//!
//! It knows nothing of `kxp-verify`, so each implementation under test (the core, the CLI, the
//! adapters, the snippets in other languages) is checked against the same data by the same loader.

use std::path::PathBuf;

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
    /// The `X-Kxp-Signature` value; empty means the header is absent or empty.
    pub header: String,
    /// The raw body, base64 in the file.
    #[serde(rename = "body_b64", deserialize_with = "base64_bytes")]
    pub body: Vec<u8>,
    /// The receiver's clock, Unix seconds.
    pub now: u64,
    /// The receiver's tolerance, seconds.
    pub tolerance_s: u64,
    /// `ok` or one of the five error kinds.
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

/// Where the vectors file lives in this repository.
pub fn vectors_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/vectors/signatures.json")
}

/// Loads every vector. Panics with a clear message if the file is missing or invalid: a test
/// that cannot read its data must fail, not pass vacuously.
pub fn vectors() -> Vec<Vector> {
    let path = vectors_path();
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let file: File = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("invalid vectors file {}: {e}", path.display()));
    assert_eq!(
        file.vectors.len(),
        49,
        "the shared vector set has 49 vectors"
    );
    file.vectors
}

/// Runs `check` on every vector and reports all failures at once, with the vector names.
///
/// `check` returns the verdict the implementation reached: `"ok"` or an error kind.
pub fn check_all(mut check: impl FnMut(&Vector) -> String) {
    let failures: Vec<String> = vectors()
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
