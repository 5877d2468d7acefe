#![doc = include_str!("../README.md")]

#[cfg(not(any(feature = "sqlite", feature = "postgres")))]
compile_error!(
    "kxp-outbox needs a database: enable its feature `sqlite` (the default), `postgres`, or both"
);

mod backend;
mod emit;
mod relay;

// The public interface.
pub use backend::{Backend, SCHEMA, migrate};
pub use emit::{EmitError, emit, emit_in_trace};
pub use relay::{Pass, Refused, Relay, RelayConfig, RelayError};

/// The event and id types of the sender's API, which [`emit`] takes and returns, and the trace
/// context [`emit_in_trace`] keeps with an event.
pub use kxp_api::{EventId, NewEvent, TraceContext};

/// The sqlx this crate is built with: [`emit`] takes its transactions and [`Relay`] its pools.
pub use sqlx;
