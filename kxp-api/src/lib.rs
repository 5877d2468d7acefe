//! The kxp sender's HTTP API as Rust types.
