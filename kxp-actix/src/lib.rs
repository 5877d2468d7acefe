#![doc = include_str!("../README.md")]

#[cfg(feature = "catch-up")]
pub mod catch_up;
mod extract;
mod middleware;

#[cfg(feature = "dedup")]
pub mod dedup;

// The public interface.
pub use extract::{VerifiedBody, VerifiedEvent, WebhookRejection};
pub use kxp_receiver::{
    DEFAULT_BODY_LIMIT, DecryptionKey, Format, FromEnvError, Receiver, Rejection,
};
pub use middleware::{VerifyMiddleware, VerifyService};
