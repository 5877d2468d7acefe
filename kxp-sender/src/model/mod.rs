//! The model: rows as the store returns them, typed ids, the states rows move through, and why
//! an attempt failed. Plain data: no SQL, no I/O, no policy. Every other layer imports it, and it
//! imports none of them.

mod account;
mod audit;
mod credentials;
mod delivery;
mod endpoint;
mod event;
mod failure;
mod health;
mod ids;
mod keys;
mod notification;
mod operator;
mod schema;
mod session;
mod status;
mod time;

pub use account::Account;
pub(crate) use account::{AccountChanges, AccountOverview, AccountsOverview, DEFAULT_API_VERSION};
pub(crate) use audit::{Actor, AuditAction, AuditEntry, ConsoleAction, NewAudit};
pub(crate) use credentials::{Credentials, CredentialsView, SealedCredentials};
pub(crate) use delivery::{Attempt, Job, KeyCheck, Secrets};
pub use delivery::{AttemptRecord, Delivery, DeliveryFilter, FinishAttempt, Finished, NextState};
pub(crate) use endpoint::{
    ContentFilter, Created, Endpoint, EndpointChanges, EventTypes, HELD, LiveSecret, NewEndpoint,
    READ_MARK_EVERY, Rotated, Subscriber, UNREAD,
};
pub(crate) use event::{
    Event, EventFilter, EventListed, Gone, Ingest, Ingested, Trace, thin_notice,
};
pub use failure::AttemptError;
pub(crate) use failure::{Failure, FailureKind};
pub(crate) use health::{EndpointHealth, Window};
pub use ids::{
    AccountId, DeliveryId, EndpointId, EventId, OperatorId, new_id, random_hex_32, sha256_hex,
};
pub(crate) use ids::{EndpointKey, ErasureId, KeyKind, fill_random, new_delivery_id};
pub(crate) use keys::{ED25519_PREFIX, Key, Material, new_key, new_secret, public_key_of};
pub use notification::NoticeNext;
pub(crate) use notification::{
    CertificateNotice, DeadLettersNotice, NoticeDetail, NoticeFacts, Notification,
};
pub use operator::Operator;
pub(crate) use schema::Schema;
pub(crate) use session::{PortalScope, Session, SignedIn};
pub use status::DeliveryStatus;
pub(crate) use status::{CircuitState, EndpointStatus, Transition};
pub(crate) use time::{DAY_MS, ms};
pub(crate) use time::{
    database_offset, instant, offset_from, set_database_offset, system_ms, tokio_instant,
    unix_seconds, utc_now,
};
pub use time::{now_ms, parse_rfc3339, rfc3339};
