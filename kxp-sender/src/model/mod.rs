//! The model: rows as the store returns them, typed ids, the states rows move through, and why
//! an attempt failed. Plain data: no SQL, no I/O, no policy. Every other layer imports it, and it
//! imports none of them.

mod account;
mod audit;
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

pub use account::{Account, AccountChanges, AccountOverview, DEFAULT_API_VERSION};
pub use audit::{Actor, AuditEntry, NewAudit};
pub use delivery::{
    Attempt, AttemptRecord, Delivery, DeliveryFilter, FinishAttempt, Finished, Job, KeyCheck,
    NextState, Secrets,
};
pub use endpoint::{
    Created, Endpoint, EndpointChanges, HELD, LiveSecret, NewEndpoint, Rotated, Subscriber,
};
pub use event::{Event, EventFilter, EventListed, Ingest, Ingested};
pub use failure::{AttemptError, Failure, FailureKind};
pub use health::{EndpointHealth, Window};
pub use ids::{
    AccountId, DeliveryId, EndpointId, EventId, KeyKind, NotificationId, OperatorId, SchemaId,
    new_id, random_hex_32, sha256_hex,
};
pub use keys::{ED25519_PREFIX, Key, Material, new_key, new_secret, public_key_of};
pub use notification::{NoticeFacts, NoticeNext, Notification};
pub use operator::Operator;
pub use schema::Schema;
pub use session::{PortalScope, Session, SignedIn};
pub use status::{CircuitState, DeliveryStatus, EndpointStatus, Transition};
pub(crate) use time::{
    database_offset, instant, offset_from, set_database_offset, system_ms, tokio_instant,
    unix_seconds, utc_now,
};
pub use time::{ms, now_ms, parse_rfc3339, rfc3339};
