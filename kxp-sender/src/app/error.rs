//! Why a use case refused: one enum in the service's own words. Its `Display` is the message
//! for people, the same whoever shows it; the API turns a kind into its status and code, the
//! console into a page, a broker source into holding, retrying or rejecting a message.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use kxp_api::ErrorCode;

use super::MAX_UNUSED_PORTAL_LINKS;
use crate::model::now_ms;
use crate::store::{StoreConflict, StoreError};

/// The API's database errors are logged once a second at most: a database (or a Citus worker)
/// down refuses every request, and a line for each, hundreds a second, would bury the rest of
/// the log. Each line says how many errors since the last one it stands for (`also`).
static DATABASE_ERRORS: Throttle = Throttle::new();

/// Lets one event through per second and counts the others.
struct Throttle {
    /// The second (Unix) of the last event let through.
    last: AtomicI64,
    /// Events held back since.
    held: AtomicU64,
}

impl Throttle {
    const fn new() -> Throttle {
        Throttle {
            last: AtomicI64::new(i64::MIN),
            held: AtomicU64::new(0),
        }
    }

    /// At second `now`: `Some(held back since the last one)` when this event goes through,
    /// `None` when it is held back.
    fn admit(&self, now: i64) -> Option<u64> {
        let last = self.last.load(Ordering::Relaxed);
        if now > last
            && self
                .last
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            return Some(self.held.swap(0, Ordering::Relaxed));
        }
        self.held.fetch_add(1, Ordering::Relaxed);
        None
    }
}

/// Why a use case refused, or could not finish. Nothing was stored.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The resource does not exist for this account (another account's ids look the same).
    #[error("no such resource")]
    NotFound,
    /// The body is not JSON at all.
    #[error("{0}")]
    InvalidJson(String),
    /// A field is missing, of the wrong kind, or out of bounds; the message names it.
    #[error("{0}")]
    Invalid(String),
    /// The event's `data` is over this server's limit.
    #[error("{0}")]
    TooLarge(String),
    /// The event's `data` does not fit the schema registered for its type and version.
    #[error("{message}")]
    SchemaViolation {
        /// Where in `data` (a JSON pointer).
        path: String,
        /// What is wrong there, for people.
        message: String,
    },
    /// The idempotency key (or the event id) was used with another request.
    #[error("this Idempotency-Key or event id was used with a different request")]
    KeyReused,
    /// The account has as many endpoints as it may.
    #[error("{0}")]
    TooManyEndpoints(String),
    /// The URL's host is one deliveries never go to.
    #[error("{0}")]
    BlockedAddress(String),
    /// The endpoint did not answer its challenge.
    #[error("{0}")]
    ChallengeFailed(String),
    /// The endpoint challenge failed at the egress proxy, not at the endpoint.
    #[error(
        "the endpoint challenge could not be made: this server's egress proxy is failing (its \
         operator sees why in /healthz); retry later, or send \"skip_challenge\": true"
    )]
    EgressUnavailable,
    /// The request contradicts the row's state ([`StoreConflict`] says which).
    #[error("{message}")]
    Conflict {
        /// Which contradiction.
        kind: StoreConflict,
        /// What is wrong, and what to do instead.
        message: String,
    },
    /// A portal link's lifetime is not 1 s to [`MAX_LINK_TTL`](super::MAX_LINK_TTL).
    #[error("`ttl_seconds` must be 1 to 86400 (24 hours)")]
    InvalidTtl,
    /// The account has as many unused portal links as it may.
    #[error(
        "this account has {MAX_UNUSED_PORTAL_LINKS} unused portal links that have not expired; \
         use one, or retry when the first expires"
    )]
    TooManyPortalLinks {
        /// Seconds until the first of them expires, freeing a place.
        retry_after: u64,
    },
    /// The account's due backlog is full: nothing was stored, retry after
    /// [`RETRY_AFTER_SECS`](crate::engine::backlog::RETRY_AFTER_SECS).
    #[error("{0}")]
    BacklogFull(String),
    /// The database failed or is unreachable: retry.
    #[error("the database is unavailable; retry")]
    Unavailable,
    /// A stored secret does not open with this server's key ring: the operator must act.
    #[error(
        "a stored secret does not open with this server's key ring; the operator must fix KXP_SECRETS_KEY"
    )]
    Sealed,
}

impl Error {
    /// A field that is not acceptable, `message` naming it.
    pub(crate) fn invalid(message: impl Into<String>) -> Error {
        Error::Invalid(message.into())
    }

    /// The API's error code for this refusal (which fixes its status), also what an ingestion
    /// span records as its `error.type`.
    pub(crate) fn code(&self) -> ErrorCode {
        match self {
            Error::NotFound => ErrorCode::NotFound,
            Error::InvalidJson(_) => ErrorCode::InvalidJson,
            Error::Invalid(_) => ErrorCode::InvalidRequest,
            Error::TooLarge(_) => ErrorCode::PayloadTooLarge,
            Error::SchemaViolation { .. } => ErrorCode::SchemaViolation,
            Error::KeyReused => ErrorCode::IdempotencyKeyReused,
            Error::TooManyEndpoints(_) => ErrorCode::TooManyEndpoints,
            Error::BlockedAddress(_) => ErrorCode::BlockedAddress,
            Error::ChallengeFailed(_) => ErrorCode::ChallengeFailed,
            Error::EgressUnavailable => ErrorCode::EgressUnavailable,
            Error::Conflict { kind, .. } => match kind {
                StoreConflict::EndpointDeleted => ErrorCode::EndpointDeleted,
                StoreConflict::TooManySecrets => ErrorCode::TooManySecrets,
                StoreConflict::SharedSecretRetired | StoreConflict::PullEndpoint => {
                    ErrorCode::InvalidRequest
                }
                StoreConflict::Erased => ErrorCode::Erased,
                StoreConflict::Expired => ErrorCode::Expired,
            },
            Error::InvalidTtl => ErrorCode::InvalidTtl,
            Error::TooManyPortalLinks { .. } => ErrorCode::TooManyPortalLinks,
            Error::BacklogFull(_) => ErrorCode::BacklogFull,
            Error::Unavailable | Error::Sealed => ErrorCode::StoreUnavailable,
        }
    }
}

/// The store's failures in the service's words; the details of a database failure or of a
/// secret that does not open are logged here, never shown.
impl From<StoreError> for Error {
    fn from(error: StoreError) -> Error {
        match error {
            StoreError::NotFound => Error::NotFound,
            StoreError::Conflict { kind, message } => Error::Conflict { kind, message },
            StoreError::Database(e) => {
                if let Some(also) = DATABASE_ERRORS.admit(now_ms().div_euclid(1000)) {
                    tracing::error!(target: "kxp_sender", error = %e, also, "database error in the API");
                }
                Error::Unavailable
            }
            StoreError::Sealed(e) => {
                tracing::error!(target: "kxp_sender", error = %e, "a stored secret does not open");
                Error::Sealed
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Throttle;

    #[test]
    fn the_throttle_lets_one_event_through_per_second_and_counts_the_rest() {
        let throttle = Throttle::new();
        assert_eq!(throttle.admit(10), Some(0));
        assert_eq!(throttle.admit(10), None);
        assert_eq!(throttle.admit(10), None);
        assert_eq!(throttle.admit(11), Some(2));
        // A clock stepping back holds events until it passes the last second again.
        assert_eq!(throttle.admit(9), None);
        assert_eq!(throttle.admit(12), Some(1));
    }
}
