//! The catch-up feed's reads: an endpoint's credentials and its events by number, and its feed
//! token.

use std::sync::LazyLock;

use sqlx::FromRow;

use crate::model::{
    AccountId, EndpointId, EndpointKey, EventId, NoticeDetail, Secrets, ms, now_ms,
};
use crate::policy::notice::READER_STALLED;
use crate::store::claim::{live_secrets, withheld};
use crate::store::notifications::queue_notices;
use crate::store::{Db, StoreError, on_db};

/// What the feed needs of an endpoint: what authenticates a request, and how items are signed
/// and sealed.
#[derive(Debug, Clone, FromRow)]
pub(crate) struct FeedSource {
    /// The endpoint.
    pub id: EndpointId,
    /// Its account: the feed's rows are read in it.
    pub account_id: AccountId,
    /// The highest number it has given (its `kxp_sequences.next_sequence - 1`).
    pub latest: i64,
    /// Its encryption key, if it has one: items are sealed to it, as deliveries are.
    pub encryption_jwk: Option<String>,
    /// The SHA-256 hex of its feed token, if it has one.
    pub feed_token_hash: Option<String>,
    /// Its live secrets and keys, newest first: feed requests are checked against the feed
    /// keys of the HMAC ones, and items signed with all.
    #[sqlx(try_from = "String")]
    pub secrets: Secrets,
    /// `push` or `pull`.
    #[sqlx(try_from = "String")]
    pub mode: kxp_api::EndpointMode,
    /// `full` or `thin`: a thin endpoint's items carry the thin notice, as its deliveries do.
    #[sqlx(try_from = "String")]
    pub payload_mode: kxp_api::PayloadMode,
    /// A pull endpoint's committed cursor (0: none).
    pub pull_cursor: i64,
    /// When a pull endpoint's cursor was last committed (Unix ms).
    pub pull_cursor_at: Option<i64>,
    /// When its feed was last read, as written down (Unix ms).
    pub pull_read_at: Option<i64>,
}

impl FeedSource {
    /// Whether its receiver reads the feed rather than being sent deliveries.
    pub(crate) fn is_pull(&self) -> bool {
        self.mode == kxp_api::EndpointMode::Pull
    }

    /// Whether its deliveries (and items) carry thin notices.
    pub(crate) fn is_thin(&self) -> bool {
        self.payload_mode == kxp_api::PayloadMode::Thin
    }
}

/// What a commit of a pull endpoint's cursor did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Committed {
    /// The cursor moved to the number.
    Moved,
    /// It was there already.
    Same,
    /// It is past the number already, at this one.
    Behind(i64),
}

/// One event of the feed, as stored.
#[derive(Debug, Clone, FromRow)]
pub(crate) struct FeedRow {
    /// Its number.
    pub sequence: i64,
    /// The event.
    pub event_id: EventId,
    /// Its type.
    pub event_type: String,
    /// Its ordering key, if it has one.
    pub ordering_key: Option<String>,
    /// The envelope bytes ('' once the payload is gone).
    pub payload: String,
    /// Why the payload may not be served, if so: `erased` or `expired`.
    pub withheld: Option<String>,
}

/// An endpoint not deleted, with its live secrets (as the claim reads them): `$1` the
/// endpoint, `$2` now, `$3` its account.
static SOURCE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT p.id, p.account_id, COALESCE((SELECT s.next_sequence FROM kxp_sequences s \
           WHERE s.account_id = p.account_id AND s.endpoint_id = p.id), 1) - 1 AS latest, \
         p.encryption_jwk, p.feed_token_hash, {} AS secrets, p.mode, p.payload_mode, p.pull_cursor, p.pull_cursor_at, p.pull_read_at \
         FROM kxp_endpoints p WHERE p.account_id = $3 AND p.id = $1 AND p.status <> 'deleted'",
        live_secrets("$2", "p.account_id")
    )
});

/// The endpoint's events after a number, by number: each (endpoint, event) once, from the
/// delivery no replay has replaced (a replay carries its original's number); `$5` now, for
/// whether a payload may still be served.
static ROWS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT d.sequence, d.event_id, e.event_type, e.ordering_key, e.payload, {} AS withheld FROM kxp_deliveries d \
           JOIN kxp_events e ON e.account_id = d.account_id AND e.id = d.event_id \
         WHERE d.account_id = $4 AND d.endpoint_id = $1 AND d.sequence > $2 AND d.replayed_by IS NULL ORDER BY d.sequence LIMIT $3",
        withheld("$5", "$4")
    )
});

/// An event delivered to an endpoint, for a thin event's fetch: `$1` the account, `$2` the
/// endpoint, `$3` the event, `$4` now.
static DELIVERED_EVENT: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT e.event_type, e.payload, {} AS withheld FROM kxp_events e \
         WHERE e.account_id = $1 AND e.id = $3 AND EXISTS (SELECT 1 FROM kxp_deliveries d \
           WHERE d.account_id = $1 AND d.endpoint_id = $2 AND d.event_id = $3)",
        withheld("$4", "$1")
    )
});

/// What a thin event's fetch reads: the event's envelope, unless it may not be served.
#[derive(Debug, Clone, FromRow)]
pub(crate) struct DeliveredEvent {
    /// Its type.
    pub event_type: String,
    /// The envelope bytes.
    pub payload: String,
    /// `erased` or `expired`, when the payload may not be served ([`crate::model::Gone`]).
    pub withheld: Option<String>,
}

impl Db {
    /// The event `event_id`, when it has a delivery to the endpoint of `source` (an endpoint's
    /// credential reads its own events, not its account's): for `GET
    /// /v1/endpoints/{id}/events/{event_id}`.
    pub(crate) async fn delivered_event(
        &self,
        source: &FeedSource,
        event_id: &EventId,
    ) -> Result<DeliveredEvent, StoreError> {
        on_db!(self, |pool| {
            sqlx::query_as::<_, DeliveredEvent>(DELIVERED_EVENT.as_str())
                .bind(&source.account_id)
                .bind(&source.id)
                .bind(event_id)
                .bind(now_ms())
                .fetch_optional(pool)
                .await?
        })
        .ok_or(StoreError::NotFound)
    }

    /// The endpoint `id` (of whichever account: the feed authenticates with the endpoint's
    /// own credential, and its account is looked up by its id), unless it does not exist or
    /// was deleted.
    pub(crate) async fn feed_source(
        &self,
        id: &EndpointId,
    ) -> Result<Option<FeedSource>, StoreError> {
        let Some(account_id) = self.endpoint_account(id).await? else {
            return Ok(None);
        };
        let now = now_ms();
        Ok(on_db!(self, |pool| {
            sqlx::query_as::<_, FeedSource>(SOURCE.as_str())
                .bind(id)
                .bind(now)
                .bind(&account_id)
                .fetch_optional(pool)
                .await?
        }))
    }

    /// At most `limit` of the endpoint's ([`FeedSource`]) events numbered after `after`, by
    /// number.
    pub(crate) async fn feed_rows(
        &self,
        source: &FeedSource,
        after: i64,
        limit: i64,
    ) -> Result<Vec<FeedRow>, StoreError> {
        Ok(on_db!(self, |pool| {
            sqlx::query_as::<_, FeedRow>(ROWS.as_str())
                .bind(&source.id)
                .bind(after)
                .bind(limit)
                .bind(&source.account_id)
                .bind(now_ms())
                .fetch_all(pool)
                .await?
        }))
    }

    /// The highest number the endpoint has given now.
    pub(crate) async fn feed_latest(&self, source: &FeedSource) -> Result<i64, StoreError> {
        Ok(on_db!(self, |pool| {
            sqlx::query_scalar::<_, i64>(crate::store::health::LATEST)
                .bind(&source.account_id)
                .bind(&source.id)
                .fetch_one(pool)
                .await?
        }))
    }

    /// Moves a pull endpoint's cursor to `sequence` (checked against its `latest` by the
    /// caller) unless it is there or past it already; the deliveries up to where the cursor
    /// then is become `delivered`. The cursor moves first, in a statement of its own, so the
    /// endpoint's row is locked no longer than that takes; the marking is made again by every
    /// commit (the same number included), so one that failed midway is finished by the
    /// reader's retry.
    pub(crate) async fn commit_cursor(
        &self,
        source: &FeedSource,
        sequence: i64,
    ) -> Result<Committed, StoreError> {
        let now = now_ms();
        on_db!(self, |pool| {
            let moved = sqlx::query(
                "UPDATE kxp_endpoints SET pull_cursor = $3, pull_cursor_at = $4, pull_read_at = $4, \
                 pull_stall_notice_at = NULL WHERE account_id = $1 AND id = $2 AND status <> 'deleted' AND pull_cursor < $3",
            )
            .bind(&source.account_id)
            .bind(&source.id)
            .bind(sequence)
            .bind(now)
            .execute(pool)
            .await?
            .rows_affected();
            let (committed, cursor) = if moved == 1 {
                (Committed::Moved, sequence)
            } else {
                let cursor: Option<i64> = sqlx::query_scalar(
                    "SELECT pull_cursor FROM kxp_endpoints WHERE account_id = $1 AND id = $2 AND status <> 'deleted'",
                )
                .bind(&source.account_id)
                .bind(&source.id)
                .fetch_optional(pool)
                .await?;
                match cursor {
                    None => return Err(StoreError::NotFound),
                    Some(cursor) if cursor == sequence => (Committed::Same, cursor),
                    Some(cursor) => (Committed::Behind(cursor), cursor),
                }
            };
            sqlx::query(
                "UPDATE kxp_deliveries SET status = 'delivered', updated_at = $4 \
                 WHERE account_id = $1 AND endpoint_id = $2 AND status = 'unread' AND sequence <= $3",
            )
            .bind(&source.account_id)
            .bind(&source.id)
            .bind(cursor)
            .bind(now)
            .execute(pool)
            .await?;
            Ok(committed)
        })
    }

    /// The temporary pull endpoints (of every account) whose feed was last read — or, never
    /// read, that were made — before `before` (Unix ms).
    pub(crate) async fn abandoned_temporary(
        &self,
        before: i64,
    ) -> Result<Vec<EndpointKey>, StoreError> {
        let rows: Vec<(AccountId, EndpointId)> = on_db!(self, |pool| {
            sqlx::query_as(
                "SELECT account_id, id FROM kxp_endpoints WHERE temporary AND status <> 'deleted' \
                 AND COALESCE(pull_read_at, created_at) < $1",
            )
            .bind(before)
            .fetch_all(pool)
            .await?
        });
        Ok(rows
            .into_iter()
            .map(|(account_id, id)| EndpointKey { account_id, id })
            .collect())
    }

    /// Notifies the platform of each pull endpoint (not a temporary one) whose reader has not
    /// committed since `before` (Unix ms) while an event older than that waits unread, once per
    /// stall (its next commit ends the stall); answers how many were noticed.
    pub(crate) async fn notice_stalled_readers(&self, before: i64) -> Result<u64, StoreError> {
        let now = now_ms();
        let stalled: Vec<(AccountId, EndpointId)> = on_db!(self, |pool| {
            sqlx::query_as(
                "SELECT p.account_id, p.id FROM kxp_endpoints p \
                 WHERE p.mode = 'pull' AND NOT p.temporary AND p.status <> 'deleted' \
                 AND p.pull_stall_notice_at IS NULL AND COALESCE(p.pull_cursor_at, 0) < $1 \
                 AND EXISTS (SELECT 1 FROM kxp_deliveries d WHERE d.account_id = p.account_id \
                   AND d.endpoint_id = p.id AND d.status = 'unread' AND d.created_at < $1 \
                   AND (d.sequence IS NULL OR d.sequence > p.pull_cursor))",
            )
            .bind(before)
            .fetch_all(pool)
            .await?
        });
        let mut noticed = 0;
        for (account_id, id) in stalled {
            let key = EndpointKey { account_id, id };
            // Marked and queued in one transaction: announced exactly once, even with several
            // processes looking.
            let queued = on_db!(self, |pool, DB| {
                let mut tx = pool.begin_with(DB::BEGIN).await?;
                let marked = sqlx::query(
                    "UPDATE kxp_endpoints SET pull_stall_notice_at = $3 \
                     WHERE account_id = $1 AND id = $2 AND pull_stall_notice_at IS NULL",
                )
                .bind(&key.account_id)
                .bind(&key.id)
                .bind(now)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                if marked == 1 {
                    queue_notices::<DB>(&mut tx, READER_STALLED, &key, NoticeDetail::None, now)
                        .await?;
                }
                tx.commit().await?;
                marked
            });
            noticed += queued;
        }
        Ok(noticed)
    }

    /// Writes down that a pull endpoint's feed was read now, unless that was done within the
    /// last `every`.
    pub(crate) async fn mark_read(
        &self,
        source: &FeedSource,
        every: std::time::Duration,
    ) -> Result<(), StoreError> {
        let now = now_ms();
        let every = ms(every);
        if source
            .pull_read_at
            .is_some_and(|at| now.saturating_sub(at) < every)
        {
            return Ok(());
        }
        on_db!(self, |pool| {
            sqlx::query(
                "UPDATE kxp_endpoints SET pull_read_at = $3 WHERE account_id = $1 AND id = $2 \
                 AND (pull_read_at IS NULL OR pull_read_at < $4)",
            )
            .bind(&source.account_id)
            .bind(&source.id)
            .bind(now)
            .bind(now.saturating_sub(every))
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// Gives the account's endpoint `id` a feed token by its hash, in place of any before.
    pub(crate) async fn set_feed_token(
        &self,
        account_id: &AccountId,
        id: &EndpointId,
        hash: &str,
    ) -> Result<(), StoreError> {
        let now = now_ms();
        let changed = on_db!(self, |pool| {
            sqlx::query(
                "UPDATE kxp_endpoints SET feed_token_hash = $1, updated_at = $2 \
                 WHERE account_id = $3 AND id = $4 AND status <> 'deleted'",
            )
            .bind(hash)
            .bind(now)
            .bind(account_id)
            .bind(id)
            .execute(pool)
            .await?
            .rows_affected()
        });
        if changed == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }
}
