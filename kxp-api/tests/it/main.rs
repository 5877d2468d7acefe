//! kxp-api's integration tests: the wire format against the JSON the server writes, and the
//! client against a loopback server.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod client;
mod openapi;
mod wire;
