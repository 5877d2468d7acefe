//! The engine: what runs. The workers that claim and send deliveries, the notifier that sends
//! operational notices, the purger, this process's counters, the validator cache, and the
//! pieces they send with (the address guard, the guarded HTTP client, endpoints' credentials and
//! OAuth2 tokens, SMTP). It calls the store
//! for every read and write and the policy for every decision; it holds no SQL.

pub(crate) mod announce;
pub(crate) mod announcements;
pub(crate) mod auth;
pub(crate) mod backlog;
pub(crate) mod batch;
pub(crate) mod config;
pub(crate) mod dispatch;
pub(crate) mod egress;
pub(crate) mod erasure;
pub(crate) mod gate;
pub(crate) mod guard;
pub(crate) mod ingester;
pub(crate) mod mail;
pub(crate) mod metrics;
pub(crate) mod notifier;
pub(crate) mod recorder;
pub(crate) mod retention;
pub(crate) mod schemas;
pub(crate) mod sources;
pub(crate) mod tls;
pub(crate) mod traces;
pub(crate) mod waiters;
pub(crate) mod worker;
