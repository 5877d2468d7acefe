//! `/v1/deliveries`: one event to one endpoint, its attempts, and replays.

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::ids::{Cursor, DeliveryId, EndpointId, EventId};
use crate::timestamp::Timestamp;

string_enum! {
    /// Where a delivery is in its life.
    pub enum DeliveryStatus {
        /// Waiting for its next attempt (or held, by a pause or an open circuit).
        Pending = "pending",
        /// An attempt is in flight.
        Delivering = "delivering",
        /// A 2xx came back: finished.
        Delivered = "delivered",
        /// Out of attempts, or its endpoint was deleted: finished, replayable (the dead-letter
        /// queue is `status=dead`).
        Dead = "dead",
        /// A pull endpoint's: in its feed, and not yet committed past by its reader (then it
        /// is `delivered`). Never attempted.
        Unread = "unread",
        /// Its event was erased (`POST /v1/erasures`) before it was delivered: finished, never
        /// attempted again nor replayable.
        Erased = "erased",
        /// Its event's payload passed its `retention_days` before it was delivered: finished,
        /// never attempted again nor replayable.
        Expired = "expired",
    }
}

/// A delivery: one event to one endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({
    "id": "dlv_0193a0c4c1e07c2e9f3b7a1d2c4e5f63",
    "event_id": "6f1c2b0e-8d4a-4c1e-9f3b-7a1d2c4e5f62",
    "endpoint_id": "ep_0193a0c4c1e07c2e9f3b7a1d2c4e5f61",
    "status": "dead",
    "attempts": 8,
    "next_attempt_at": null,
    "last_status": 503,
    "last_error": "http_503",
    "replayed_by": null,
    "created_at": "2026-11-30T01:02:03Z",
    "updated_at": "2026-11-30T09:12:44Z",
    "sequence": 42
}))]
pub struct Delivery {
    /// The delivery's id.
    pub id: DeliveryId,
    /// The event it delivers.
    pub event_id: EventId,
    /// Where to.
    pub endpoint_id: EndpointId,
    /// Where it is in its life.
    pub status: DeliveryStatus,
    /// HTTP attempts so far.
    pub attempts: u32,
    /// When the next attempt is due; `null` unless `pending`, and while held by a pause.
    #[schema(required = true)]
    pub next_attempt_at: Option<Timestamp>,
    /// The HTTP status of the last attempt; `null` before one, or when none came back.
    #[schema(required = true)]
    pub last_status: Option<u16>,
    /// Why the last attempt failed (`http_503`, `timeout`, `endpoint_deleted`, …).
    #[schema(required = true)]
    pub last_error: Option<String>,
    /// The delivery that replayed this one, if any.
    #[schema(required = true)]
    pub replayed_by: Option<DeliveryId>,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
    /// Its number in the endpoint's sequence (1, 2, 3, … per endpoint, in commit order; a replay
    /// keeps its original's), sent as `X-Kxp-Sequence`; `null` for the moment between its
    /// ingestion and the sequencer's next pass. Absent from servers before sequences.
    #[serde(default)]
    #[schema(required = true)]
    pub sequence: Option<u64>,
}

/// One HTTP attempt of a delivery. Attempts have no id of their own: `attempt` numbers them
/// within their delivery, from 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({
    "attempt": 1,
    "started_at": "2026-11-30T01:02:03Z",
    "duration_ms": 41,
    "status_code": 503,
    "error": "http_503",
    "response_snippet": "Service Unavailable"
}))]
pub struct Attempt {
    /// Which attempt, from 1.
    pub attempt: u32,
    /// When it started.
    pub started_at: Timestamp,
    /// How long it took.
    pub duration_ms: u64,
    /// The HTTP status; `null` when none came back (timeout, refused connection).
    #[schema(required = true)]
    pub status_code: Option<u16>,
    /// Why it failed; `null` for a success.
    #[schema(required = true)]
    pub error: Option<String>,
    /// The first bytes of the response body.
    #[schema(required = true)]
    pub response_snippet: Option<String>,
}

/// `GET /v1/deliveries?…`: filters and paging; `status=dead` is the dead-letter queue.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema, IntoParams)]
#[into_params(parameter_in = Query)]
#[non_exhaustive]
pub struct DeliveryQuery {
    /// Only deliveries in this status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(value_type = Option<String>, example = "dead")]
    pub status: Option<DeliveryStatus>,
    /// Only this endpoint's deliveries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(value_type = Option<String>)]
    pub endpoint_id: Option<EndpointId>,
    /// Only deliveries created at or after this RFC 3339 time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(value_type = Option<String>, format = DateTime)]
    pub since: Option<Timestamp>,
    /// Only deliveries created before this RFC 3339 time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(value_type = Option<String>, format = DateTime)]
    pub until: Option<Timestamp>,
    /// The `next_cursor` of the previous page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(value_type = Option<String>)]
    pub cursor: Option<Cursor>,
    /// Items per page, 1 to 500 (default 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
}

impl DeliveryQuery {
    /// The dead-letter queue: every `dead` delivery.
    pub fn dead() -> DeliveryQuery {
        DeliveryQuery::status(DeliveryStatus::Dead)
    }

    /// Every delivery in `status`.
    pub fn status(status: DeliveryStatus) -> DeliveryQuery {
        DeliveryQuery {
            status: Some(status),
            ..DeliveryQuery::default()
        }
    }

    /// The same query, only `endpoint`'s deliveries.
    pub fn endpoint(self, endpoint: EndpointId) -> DeliveryQuery {
        DeliveryQuery {
            endpoint_id: Some(endpoint),
            ..self
        }
    }

    /// The same query, pages of `limit`.
    pub fn limit(self, limit: u32) -> DeliveryQuery {
        DeliveryQuery {
            limit: Some(limit),
            ..self
        }
    }

    /// The same query from `cursor` on.
    pub fn after(&self, cursor: Option<Cursor>) -> DeliveryQuery {
        DeliveryQuery {
            cursor,
            ..self.clone()
        }
    }
}
