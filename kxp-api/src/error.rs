//! The API's error vocabulary: every error answer is `{"error": "<code>", "message": "…"}`,
//! and the code is one of [`ErrorCode`]'s.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

string_enum! {
    /// What went wrong, as a stable code: branch on it, show the message. This is the API's
    /// whole error vocabulary; newer servers may add codes, so clients must handle codes they
    /// do not know ([`ErrorCode::Unknown`]) — by the HTTP status, typically.
    pub enum ErrorCode {
        /// 404: no such resource for this account (another account's ids answer the same).
        NotFound = "not_found",
        /// 422: the request is well-formed JSON but a field is missing, unknown or out of range.
        InvalidRequest = "invalid_request",
        /// 400: the body is not JSON.
        InvalidJson = "invalid_json",
        /// 400: a query parameter cannot be read (`?limit=abc`); the message names it.
        InvalidQuery = "invalid_query",
        /// 405: the route exists but not with this method; the `Allow` header lists those it has.
        MethodNotAllowed = "method_not_allowed",
        /// 413: the request body is over the server's limit.
        PayloadTooLarge = "payload_too_large",
        /// 401: the `Authorization: Bearer <api key>` header is missing or names no account;
        /// on the operator routes (`/v1/accounts`), it names no operator (an account key is
        /// refused there the same way).
        Unauthorized = "unauthorized",
        /// 400: an operator key called a route of one account without naming it in the
        /// `X-Kxp-Account` header.
        AccountRequired = "account_required",
        /// 503: the database is unavailable; retry.
        StoreUnavailable = "store_unavailable",
        /// 422: this `Idempotency-Key` was used with a different request body.
        IdempotencyKeyReused = "idempotency_key_reused",
        /// 400: the `Idempotency-Key` header is not 1 to 255 printable ASCII characters.
        InvalidIdempotencyKey = "invalid_idempotency_key",
        /// 422: the endpoint URL did not pass the challenge (`GET <url>?challenge=<token>`).
        ChallengeFailed = "challenge_failed",
        /// 422: the URL's host is an address in a blocked range (SSRF guard).
        BlockedAddress = "blocked_address",
        /// 422: the JSON Schema does not compile, or is too large.
        InvalidSchema = "invalid_schema",
        /// 400: the event's `data` does not match the schema of its type and version; the
        /// body's `path` points at the first error.
        SchemaViolation = "schema_violation",
        /// 409: a rotation would give the endpoint more live secrets than a signature carries.
        TooManySecrets = "too_many_secrets",
        /// 409: the delivery's endpoint is deleted, so it cannot be replayed.
        EndpointDeleted = "endpoint_deleted",
        /// 409: the account has as many endpoints as it may (500); delete one first.
        TooManyEndpoints = "too_many_endpoints",
        /// 429: this key made more requests in the last second than the server allows
        /// (`--api-rate-limit`); retry after the `Retry-After` header's seconds.
        RateLimited = "rate_limited",
        /// 503: the account's due backlog of deliveries is at its bound, so the event was not
        /// stored; retry after the `Retry-After` header's seconds.
        BacklogFull = "backlog_full",
        /// 400: a portal link's `ttl_seconds` is outside 1 to 86,400 (24 h).
        InvalidTtl = "invalid_ttl",
        /// 410: the feed no longer holds the numbers asked for: retention purged them. The
        /// body's `earliest` is the first number after them that it still holds.
        SequencePurged = "sequence_purged",
        /// 429: the account has as many unused portal links that have not expired as it may
        /// (1,000), so no link was made; use one, or retry after the `Retry-After` header's
        /// seconds, when the oldest expires.
        TooManyPortalLinks = "too_many_portal_links",
        /// 503: this process is shutting down (SIGTERM): it finishes what it started and takes
        /// nothing new; retry after the `Retry-After` header's seconds, on another process.
        ShuttingDown = "shutting_down",
        /// 503, from `/readyz` only: the database lacks migrations of this server's version
        /// (`kxp migrate apply`), so it should not be sent traffic.
        MigrationsPending = "migrations_pending",
        /// 503: the endpoint challenge could not be made because the sender's egress proxy
        /// (`kxp serve --egress-proxy`) is failing, not because of the endpoint; retry later.
        EgressUnavailable = "egress_unavailable",
        /// 409: a pull endpoint's cursor is already past the number committed (commits only
        /// move forward; the body's message says where it is).
        CursorBehind = "cursor_behind",
        /// 429: too many long polls wait on this endpoint's feed (4), or on this server process
        /// (1,024, or half its connection cap if lower); retry after the `Retry-After` header's
        /// seconds.
        TooManyWaiters = "too_many_waiters",
        /// 403: the credential is valid but may not do this: a listen token (`kxp_lt_…`) only
        /// creates, reads and deletes its account's temporary pull endpoints.
        Forbidden = "forbidden",
        /// 410: the event's payload was erased (`POST /v1/erasures`): it can no longer be
        /// fetched or replayed.
        Erased = "erased",
        /// 410: the event's payload passed its `retention_days`: it can no longer be fetched
        /// or replayed.
        Expired = "expired",
    }
}

impl ErrorCode {
    /// The HTTP status the server answers this code with. [`ErrorCode::Unknown`] has none
    /// this crate knows: 500 (a client has the real status in its error anyway).
    pub fn status(&self) -> u16 {
        match self {
            ErrorCode::InvalidJson
            | ErrorCode::InvalidQuery
            | ErrorCode::InvalidIdempotencyKey
            | ErrorCode::SchemaViolation
            | ErrorCode::AccountRequired
            | ErrorCode::InvalidTtl => 400,
            ErrorCode::Unauthorized => 401,
            ErrorCode::Forbidden => 403,
            ErrorCode::NotFound => 404,
            ErrorCode::MethodNotAllowed => 405,
            ErrorCode::PayloadTooLarge => 413,
            ErrorCode::TooManySecrets
            | ErrorCode::EndpointDeleted
            | ErrorCode::TooManyEndpoints
            | ErrorCode::CursorBehind => 409,
            ErrorCode::InvalidRequest
            | ErrorCode::IdempotencyKeyReused
            | ErrorCode::ChallengeFailed
            | ErrorCode::BlockedAddress
            | ErrorCode::InvalidSchema => 422,
            ErrorCode::SequencePurged | ErrorCode::Erased | ErrorCode::Expired => 410,
            ErrorCode::RateLimited | ErrorCode::TooManyPortalLinks | ErrorCode::TooManyWaiters => {
                429
            }
            ErrorCode::StoreUnavailable
            | ErrorCode::BacklogFull
            | ErrorCode::ShuttingDown
            | ErrorCode::MigrationsPending
            | ErrorCode::EgressUnavailable => 503,
            ErrorCode::Unknown(_) => 500,
        }
    }
}

/// The body of every error answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"error": "not_found", "message": "no such resource"}))]
pub struct ErrorBody {
    /// The stable code to branch on.
    pub error: ErrorCode,
    /// What is wrong and what to do instead, for people; its wording may change.
    pub message: String,
    /// With `schema_violation` only: a JSON Pointer into the event's `data` to the first
    /// error (empty for `data` itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub path: Option<String>,
    /// With `sequence_purged` only: the first number after the purged ones that the feed still
    /// holds (the next page is `after = earliest - 1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub earliest: Option<u64>,
    /// With `sequence_purged` only: the MAC of `earliest` for the request's `after`, as a feed
    /// page's (`kxp_verify::FeedPageFields::purged`): a forged `earliest` would move a
    /// receiver's checkpoint past events it never processed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub mac: Option<String>,
}

impl ErrorBody {
    /// A body without `path`.
    pub fn new(error: ErrorCode, message: impl Into<String>) -> ErrorBody {
        ErrorBody {
            error,
            message: message.into(),
            path: None,
            earliest: None,
            mac: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_as_its_string() {
        assert_eq!(ErrorCode::KNOWN.len(), 31);
        for code in ErrorCode::KNOWN {
            let json = serde_json::to_string(code).expect("serializes");
            assert_eq!(json, format!("\"{}\"", code.as_str()));
            let back: ErrorCode = serde_json::from_str(&json).expect("deserializes");
            assert_eq!(&back, code);
            assert!(back.is_known());
            assert!((400..600).contains(&code.status()), "{code}");
        }
    }

    #[test]
    fn an_unknown_code_is_kept() {
        let body: ErrorBody =
            serde_json::from_str(r#"{"error": "quota_exceeded", "message": "slow down"}"#)
                .expect("deserializes");
        assert_eq!(body.error, ErrorCode::Unknown("quota_exceeded".to_owned()));
        assert!(!body.error.is_known());
        assert_eq!(
            serde_json::to_string(&body).expect("serializes"),
            r#"{"error":"quota_exceeded","message":"slow down"}"#
        );
    }
}
