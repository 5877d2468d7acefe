//! Erasure by tag (`POST /v1/erasures`): every event of the account carrying a tag loses its
//! payload wherever the server holds it, and none of its deliveries is attempted again.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::ids::ErasureId;
use crate::timestamp::Timestamp;

/// `POST /v1/erasures`: erase the payloads of the account's events carrying `tag`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"tag": "customer:cus_9"}))]
pub struct NewErasure {
    /// The tag (as [`NewEvent::tags`](crate::NewEvent::tags) hold them): the events accepted
    /// before the erasure that carry it are erased; later ones are not.
    pub tag: String,
}

string_enum! {
    /// Where an erasure is.
    pub enum ErasureStatus {
        /// Accepted: no delivery of the tag's events starts any more, and their payloads are
        /// being erased, batch by batch.
        Running = "running",
        /// Every event the tag was on is erased.
        Done = "done",
    }
}

/// An erasure: the answer of `POST /v1/erasures` (202) and `GET /v1/erasures/{id}`. Kept as
/// the record of who erased which tag when; it holds the tag, never the data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({
    "id": "er_0193a0c4c1e07c2e9f3b7a1d2c4e5f67",
    "tag": "customer:cus_9",
    "status": "done",
    "events": 412,
    "created_at": "2026-12-05T10:00:00Z",
    "finished_at": "2026-12-05T10:00:02Z"
}))]
pub struct Erasure {
    /// Its id.
    pub id: ErasureId,
    /// The tag erased.
    pub tag: String,
    /// `running` or `done`.
    pub status: ErasureStatus,
    /// The events erased so far.
    pub events: u64,
    /// When it was accepted: the events accepted before this carrying the tag are erased.
    pub created_at: Timestamp,
    /// When it finished, once `done`.
    pub finished_at: Option<Timestamp>,
}
