#![doc = include_str!("../README.md")]

mod catch_up;
mod deliver;
mod feed;

// The public interface.
pub use catch_up::{
    CatchUp, CatchUpConfig, CatchUpError, DEFAULT_DELAY, DEFAULT_INTERVAL, DEFAULT_PAGE_SIZE,
    MAX_LEARNED_ENDPOINTS, ORDERED_LOOKAHEAD, Received, Report,
};
pub use deliver::{BoxFuture, CATCH_UP_HEADER, Deliver, Loopback, Request, hint};
pub use feed::{Answer, Credential, FeedClient, FeedError};
