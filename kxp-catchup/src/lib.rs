#![doc = include_str!("../README.md")]

mod catch_up;
mod deliver;
mod feed;
mod pull;
mod state;
mod thin;

// The public interface.
pub use catch_up::{
    CatchUp, CatchUpConfig, CatchUpError, DEFAULT_DELAY, DEFAULT_INTERVAL, DEFAULT_PAGE_SIZE,
    MAX_LEARNED_ENDPOINTS, ORDERED_LOOKAHEAD, Received, Report,
};
pub use deliver::{BoxFuture, CATCH_UP_HEADER, Deliver, Loopback, Request, hint};
pub use feed::{Answer, Committed, Credential, FeedClient, FeedError, Fetched};
pub use pull::{DEFAULT_PULL_WAIT, Polled, PullConsumer, PullError, Pulled};
pub use state::{
    DEFAULT_MAX_FEED_FAILURE, DEFAULT_MAX_HELD, DEFAULT_MAX_HELD_AGE, EndpointStatus,
    OrderedBounds, ResetFound, STOPPED_RETRY_AFTER, Status, Stop,
};
pub use thin::{Resolved, ThinEvents, is_thin};
