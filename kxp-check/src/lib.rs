#![doc = include_str!("../README.md")]

mod check;
mod event;
mod exchange;
mod grade;
mod report;
mod run;
mod sign;
mod target;

// The public interface.
pub use check::{Check, UnknownCheck};
pub use report::{Counts, Finding, Latency, Received, Report, Sent, Severity, Verdict};
pub use run::{BURST_CONCURRENCY, run};
pub use target::{
    DEFAULT_BODY_LIMIT, DEFAULT_BURST, DEFAULT_EVENT_TYPE, DEFAULT_TIMEOUT, MAX_BURST, MAX_SECRETS,
    MAX_TIMEOUT, Target, TargetBuilder, TargetError,
};
