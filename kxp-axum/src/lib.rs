#![doc = include_str!("../README.md")]

mod extract;
mod layer;
mod serve;

#[cfg(feature = "catch-up")]
pub mod catch_up;
#[cfg(feature = "dedup")]
pub mod dedup;

pub use extract::{VerifiedBody, VerifiedEvent, WebhookRejection};
pub use kxp_receiver::{
    DEFAULT_BODY_LIMIT, DecryptionKey, Format, FromEnvError, Receiver, Rejection,
};
pub use layer::{Verify, VerifyLayer};
pub use serve::{ServeLimits, serve};
