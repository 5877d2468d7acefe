//! `/v1/endpoints/{id}/feed`: the catch-up feed, a second, pull-based path to an endpoint's
//! events, by their number in the endpoint's sequence.
//!
//! The merchant's receiver calls it, not the platform: it is authenticated with the endpoint's
//! own credential (a request signed with the feed key of its HMAC secret, in
//! `X-Kxp-Feed-Signature`, or `Authorization: Bearer <feed token>`), never with an API key.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::ids::{EndpointId, EventId};

/// The most items a feed page holds ([`FeedQuery::limit`]).
pub const MAX_FEED_LIMIT: u32 = 500;

/// The items of a page that names no `limit`.
pub const DEFAULT_FEED_LIMIT: u32 = 100;

/// The longest a feed request waits for an item ([`FeedQuery::wait`]), in seconds.
pub const MAX_FEED_WAIT: u32 = 60;

/// `GET /v1/endpoints/{id}/feed?…`: where to start, how many, and how long to wait.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema, IntoParams)]
#[into_params(parameter_in = Query)]
#[non_exhaustive]
pub struct FeedQuery {
    /// The items after this number (0 from the start). Absent: from the start, or for a pull
    /// endpoint after its committed cursor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<u64>,
    /// Items per page, 1 to 500 (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
    /// A long poll: with nothing after `after` yet, wait up to this many seconds (0 to 60;
    /// default 0) and answer as soon as something comes, or with no items when the time is
    /// up. A waiting request holds no database connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 0, maximum = 60)]
    pub wait: Option<u32>,
}

impl FeedQuery {
    /// The page after `sequence`, of at most `limit` items.
    pub fn after(sequence: u64, limit: u32) -> FeedQuery {
        FeedQuery {
            after: Some(sequence),
            limit: Some(limit),
            wait: None,
        }
    }
}

/// One page of the feed: contiguous numbers from `after + 1`, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({
    "endpoint_id": "ep_0193a0c4c1e07c2e9f3b7a1d2c4e5f61",
    "latest": 8,
    "items": [{
        "sequence": 8,
        "event_id": "6f1c2b0e-8d4a-4c1e-9f3b-7a1d2c4e5f62",
        "event_type": "payment.succeeded",
        "body": "{\"id\":\"6f1c2b0e-8d4a-4c1e-9f3b-7a1d2c4e5f62\",\"type\":\"payment.succeeded\",\"api_version\":\"2026-11-01\",\"created_at\":\"2026-11-30T01:02:03Z\",\"data\":{}}",
        "headers": {"x-kxp-signature": "t=1764464523,v1=5f0c…"},
        "mac": "3b9e0f6a…"
    }],
    "mac": "8a41c2d7…"
}))]
pub struct FeedPage {
    /// The endpoint.
    pub endpoint_id: EndpointId,
    /// The highest number the endpoint has given so far: the page is the last one when its
    /// last item has it (or it holds none).
    pub latest: u64,
    /// The items, by number.
    pub items: Vec<FeedItem>,
    /// The page's frame MAC, 64 lowercase hex digits: HMAC-SHA256 with the item key (as
    /// [`FeedItem::mac`]) over the endpoint id, the request's `after` and `latest`
    /// (`kxp_verify::FeedPageFields::page`; docs/signature-format.md). The items' MACs do not
    /// cover `latest`, and a forged one below a receiver's checkpoint reads as a reset of the
    /// sender. Optional here only so that a page without it still reads, to be refused by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
}

/// One event of the feed, as a delivery would bring it now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct FeedItem {
    /// Its number in the endpoint's sequence.
    pub sequence: u64,
    /// The event.
    pub event_id: EventId,
    /// Its type.
    pub event_type: String,
    /// The [ordering key](crate::NewEvent::ordering_key) it was ingested with, if any: what an
    /// ordered receiver keeps it in order with. Read here, from the authenticated feed, and
    /// never from a header a delivery carries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordering_key: Option<String>,
    /// The request body byte for byte as a delivery sends it (for an endpoint with an
    /// encryption key, with `data_jwe` sealed anew); `{"erased":true}` or `{"expired":true}`
    /// once the event's payload is gone ([`FeedItem::gone`]), with no signature headers.
    pub body: String,
    /// The signature headers a delivery made now would carry (`x-kxp-signature`, or the
    /// `webhook-*` three), signed when the page was served: verify `body` with them exactly as
    /// a delivery, with the usual tolerance.
    pub headers: BTreeMap<String, String>,
    /// The item's MAC, 64 lowercase hex digits: HMAC-SHA256 with the feed key of the
    /// credential that read the page, over the endpoint id, `sequence`, `event_id`,
    /// `ordering_key` and the SHA-256 of `body` (`kxp_verify::FeedItemFields`; the encoding is
    /// in docs/signature-format.md). The signature headers cover only the body: this is what
    /// makes the number and the ordering key, which ordered mode orders by, as authentic as
    /// the body. A receiver refuses a page with an item whose MAC is wrong or missing.
    /// Optional here only so that such a page still reads, to be refused by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
}

impl FeedItem {
    /// Why the event's payload is gone, when the item says so: its `body` is then exactly
    /// `{"erased":true}` or `{"expired":true}` (never an envelope, which always has an `id`),
    /// with no signature headers, and the number stays in the sequence. The body is covered by
    /// the item's MAC, so this is as authentic as the item once the MAC is checked (which
    /// kxp-catchup's `FeedClient` does before it hands a page over): a receiver counts the
    /// number as processed, for ordered mode's key as well, and moves on.
    pub fn gone(&self) -> Option<crate::GoneReason> {
        match self.body.as_str() {
            r#"{"erased":true}"# => Some(crate::GoneReason::Erased),
            r#"{"expired":true}"# => Some(crate::GoneReason::Expired),
            _ => None,
        }
    }
}

/// `POST /v1/endpoints/{id}/feed-token`: a new feed token for the endpoint, shown once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"token": "kxpft_5b1e0c…"}))]
pub struct FeedToken {
    /// `kxpft_…`: `Authorization: Bearer <token>` on the feed. The server keeps only its hash;
    /// a new one replaces it.
    pub token: String,
}

/// `GET /v1/endpoints/{id}/cursor`: how far a pull endpoint's reader has committed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"sequence": 41, "latest": 44, "committed_at": "2026-11-30T01:02:03Z"}))]
pub struct PullCursor {
    /// The number committed last (0: none yet): a read without `after` starts after it.
    pub sequence: u64,
    /// The highest number the endpoint has given: `latest - sequence` items are unread.
    pub latest: u64,
    /// When it was last committed; `null`: never.
    #[schema(required = true)]
    pub committed_at: Option<crate::Timestamp>,
}

/// `PUT /v1/endpoints/{id}/cursor`: everything up to and including `sequence` is processed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"sequence": 42}))]
pub struct CommitCursor {
    /// A number from the feed, at most its `latest`. The same number again is accepted
    /// (204); a lower one is refused (409 `cursor_behind`).
    pub sequence: u64,
}
