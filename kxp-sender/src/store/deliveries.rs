//! The API's side of `kxp_deliveries` and `kxp_attempts`: listing, reading and replaying.

use std::collections::HashMap;

use sqlx::{Pool, QueryBuilder};

use crate::model::{
    AccountId, Attempt, Delivery, DeliveryFilter, DeliveryId, DeliveryStatus, Endpoint, EndpointId,
    EndpointStatus, EventId, Gone, database_offset, new_delivery_id, now_ms,
};
use crate::store::backend::{Backend, NewDelivery};
use crate::store::{Db, StoreError, on_db};

const DELIVERY_COLUMNS: &str = "id, event_id, endpoint_id, status, attempts, next_attempt_at, \
     last_status, last_error, replayed_by, created_at, updated_at, sequence";

impl Db {
    /// A page of the account's deliveries, oldest first, after `cursor`.
    ///
    /// The statement holds only the filters that are set ([`push_filters`]): the dead letters
    /// are one range of `(account_id, status, id)`, or of `(endpoint_id, status, id)` for one
    /// endpoint.
    pub(crate) async fn deliveries(
        &self,
        account_id: &AccountId,
        filter: &DeliveryFilter,
        cursor: Option<&str>,
        limit: i64,
    ) -> Result<Vec<Delivery>, StoreError> {
        Ok(on_db!(self, |pool, DB| {
            let mut query = sqlx::QueryBuilder::<DB>::new(format!(
                "SELECT {DELIVERY_COLUMNS} FROM kxp_deliveries WHERE account_id = "
            ));
            query.push_bind(account_id);
            if let Some(status) = &filter.status {
                query.push(" AND status = ").push_bind(status.as_str());
            }
            push_filters(&mut query, "", filter);
            if let Some(cursor) = cursor {
                query.push(" AND id > ").push_bind(cursor);
            }
            if filter.status.as_deref() == Some("dead") {
                // The dead-letter queue: dead and not replayed yet.
                query.push(" AND replayed_by IS NULL");
            }
            query.push(" ORDER BY id LIMIT ").push_bind(limit);
            query.build_query_as::<Delivery>().fetch_all(pool).await?
        }))
    }

    /// How many of the account's dead deliveries a bulk replay with `filter` would queue: dead,
    /// not replayed yet, of an endpoint that still exists, dead by `filter.dead_by` if set. On
    /// the deliveries' account (or endpoint) index.
    pub(crate) async fn count_dead(
        &self,
        account_id: &AccountId,
        filter: &DeliveryFilter,
    ) -> Result<i64, StoreError> {
        Ok(on_db!(self, |pool, DB| {
            let mut query = sqlx::QueryBuilder::<DB>::new(
                "SELECT COUNT(*) FROM kxp_deliveries d JOIN kxp_endpoints e \
                 ON e.id = d.endpoint_id AND e.account_id = d.account_id \
                 WHERE d.status = 'dead' AND d.replayed_by IS NULL AND e.status <> 'deleted' \
                 AND d.account_id = ",
            );
            query.push_bind(account_id);
            push_filters(&mut query, "d.", filter);
            query.build_query_scalar::<i64>().fetch_one(pool).await?
        }))
    }

    /// The deliveries that replays made since `since` (Unix ms) for the account (and
    /// endpoint), newest first, at most `limit`: what the dead-letter page shows moving to
    /// delivered after a bulk replay.
    pub(crate) async fn replays_since(
        &self,
        account_id: &AccountId,
        endpoint_id: Option<&EndpointId>,
        since: i64,
        limit: i64,
    ) -> Result<Vec<Delivery>, StoreError> {
        let columns = DELIVERY_COLUMNS
            .split(", ")
            .map(|c| format!("n.{}", c.trim()))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "SELECT {columns} FROM kxp_deliveries o JOIN kxp_deliveries n ON n.account_id = o.account_id AND n.id = o.replayed_by \
             WHERE o.replayed_by >= $2 AND o.account_id = $1 AND o.status = 'dead' \
             AND (CAST($3 AS TEXT) IS NULL OR o.endpoint_id = $3) \
             ORDER BY o.replayed_by DESC LIMIT $4"
        );
        // Delivery ids are `dlv_` and a UUIDv7, whose first 12 hex digits are its creation's
        // Unix ms by this machine's clock: the smallest id of `since` (a stored time, on the
        // database's clock, turned back to the machine's) bounds the replays' ids from below,
        // on the `replayed_by` index.
        let since = since.saturating_sub(database_offset());
        let first_id = format!("dlv_{:012x}{}", since.max(0), "0".repeat(20));
        Ok(on_db!(self, |pool| {
            sqlx::query_as::<_, Delivery>(&sql)
                .bind(account_id)
                .bind(&first_id)
                .bind(endpoint_id)
                .bind(limit)
                .fetch_all(pool)
                .await?
        }))
    }

    /// One delivery of the account.
    pub(crate) async fn delivery(
        &self,
        account_id: &AccountId,
        id: &DeliveryId,
    ) -> Result<Delivery, StoreError> {
        let sql = format!(
            "SELECT {DELIVERY_COLUMNS} FROM kxp_deliveries WHERE account_id = $1 AND id = $2"
        );
        on_db!(self, |pool| {
            sqlx::query_as::<_, Delivery>(&sql)
                .bind(account_id)
                .bind(id)
                .fetch_optional(pool)
                .await?
        })
        .ok_or(StoreError::NotFound)
    }

    /// Every delivery of one of the account's events, replays included.
    pub(crate) async fn event_deliveries(
        &self,
        account_id: &AccountId,
        event_id: &EventId,
    ) -> Result<Vec<Delivery>, StoreError> {
        self.event(account_id, event_id).await?;
        let sql = format!(
            "SELECT {DELIVERY_COLUMNS} FROM kxp_deliveries WHERE account_id = $1 AND event_id = $2 ORDER BY id"
        );
        Ok(on_db!(self, |pool| {
            sqlx::query_as::<_, Delivery>(&sql)
                .bind(account_id)
                .bind(event_id)
                .fetch_all(pool)
                .await?
        }))
    }

    /// The attempts of one of the account's deliveries.
    pub(crate) async fn attempts(
        &self,
        account_id: &AccountId,
        delivery_id: &DeliveryId,
    ) -> Result<Vec<Attempt>, StoreError> {
        self.delivery(account_id, delivery_id).await?;
        Ok(on_db!(self, |pool| {
            sqlx::query_as::<_, Attempt>(
                "SELECT attempt, started_at, duration_ms, status_code, error, response_snippet, signed_with, verified_key \
                 FROM kxp_attempts WHERE account_id = $1 AND delivery_id = $2 ORDER BY attempt, id",
            )
            .bind(account_id)
            .bind(delivery_id)
            .fetch_all(pool)
            .await?
        }))
    }

    /// Queues the same event to the same endpoint again, as a new delivery.
    pub(crate) async fn replay(
        &self,
        account_id: &AccountId,
        delivery_id: &DeliveryId,
    ) -> Result<Delivery, StoreError> {
        let old = self.delivery(account_id, delivery_id).await?;
        let gone = match old.status {
            DeliveryStatus::Erased => Some(Gone::Erased),
            DeliveryStatus::Expired => Some(Gone::Expired),
            _ => self
                .gone_events(account_id, &[old.event_id.as_str()])
                .await?
                .into_iter()
                .next()
                .map(|(_, gone)| gone),
        };
        if let Some(gone) = gone {
            let kind = match gone {
                Gone::Erased => super::StoreConflict::Erased,
                Gone::Expired => super::StoreConflict::Expired,
            };
            return Err(StoreError::Conflict {
                kind,
                message: format!(
                    "delivery {delivery_id}'s event's payload is {}: it cannot be sent again",
                    gone.as_str()
                ),
            });
        }
        let new_id = new_delivery_id();
        let now = now_ms();
        on_db!(self, |pool| replay_on(pool, account_id, &old, &new_id, now)
            .await?);
        self.delivery(account_id, &new_id).await
    }

    /// Replays every matching delivery of one endpoint (dead ones by default) that has not been
    /// replayed yet, each once; returns how many were queued.
    ///
    /// It acts on a snapshot: the deliveries created before the call started. Its own replays
    /// are created at that instant or later, so none of them is scanned again once delivered
    /// (they sort after the cursor: the scan used to reach and replay them, issue 11, item 5).
    pub(crate) async fn replay_endpoint(
        &self,
        account_id: &AccountId,
        endpoint_id: &EndpointId,
        filter: &DeliveryFilter,
    ) -> Result<u64, StoreError> {
        self.endpoint(account_id, endpoint_id).await?;
        let start = now_ms();
        let filter = DeliveryFilter {
            status: Some(filter.status.clone().unwrap_or_else(|| "dead".to_owned())),
            endpoint_id: Some(endpoint_id.to_owned()),
            since: filter.since,
            until: Some(filter.until.map_or(start, |until| until.min(start))),
            dead_by: filter.dead_by,
        };
        let mut queued = 0;
        let mut cursor: Option<String> = None;
        loop {
            let page = self
                .deliveries(account_id, &filter, cursor.as_deref(), 500)
                .await?;
            let Some(last) = page.last() else { break };
            cursor = Some(last.id.to_string());
            // Deliveries whose event's payload is gone, or going, are not sent again.
            let ids: Vec<&str> = page.iter().map(|d| d.event_id.as_str()).collect();
            let gone = self.gone_events(account_id, &ids).await?;
            let page: Vec<Delivery> = page
                .into_iter()
                .filter(|d| !gone.contains_key(d.event_id.as_str()))
                .collect();
            // Never before `start`, even if the clock steps back: the snapshot excludes these.
            let now = now_ms().max(start);
            queued += on_db!(self, |pool| replay_page(
                pool,
                account_id,
                endpoint_id,
                &page,
                now
            )
            .await?);
        }
        Ok(queued)
    }
}

impl Db {
    /// Which of the account's events `ids` have a payload that is gone or going (past its
    /// retention, or covered by a running erasure), and why.
    async fn gone_events(
        &self,
        account_id: &AccountId,
        ids: &[&str],
    ) -> Result<HashMap<String, Gone>, StoreError> {
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        let list = super::erasures::batch_ids(self);
        let sql = format!(
            "SELECT e.id, {} AS gone FROM kxp_events e WHERE e.account_id = $1 AND e.id IN {list}",
            crate::store::claim::withheld("$3", "$1")
        );
        let ids = serde_json::to_string(ids)
            .map_err(|e| StoreError::Database(sqlx::Error::Encode(Box::new(e))))?;
        let rows: Vec<(String, Option<String>)> = on_db!(self, |pool| {
            sqlx::query_as(&sql)
                .bind(account_id)
                .bind(&ids)
                .bind(now_ms())
                .fetch_all(pool)
                .await?
        });
        Ok(rows
            .into_iter()
            .filter_map(|(id, gone)| Some((id, Gone::parse(gone.as_deref())?)))
            .collect())
    }
}

/// Adds `filter`'s endpoint, creation window and `dead_by` to `query`, on the columns of the
/// deliveries' table `table` (`""` or an alias with its dot). Only the filters that are set:
/// each is a bound of an index range. The `(CAST($n AS …) IS NULL OR col = $n)` form of every
/// filter let neither backend narrow an index by the values: SQLite plans without looking at
/// them and read every delivery of the account to sort them (over 100 ms at a million
/// deliveries, BENCHMARKS.md), and PostgreSQL's generic plan for it scans the whole primary key.
fn push_filters<'a, DB>(query: &mut QueryBuilder<'a, DB>, table: &str, filter: &'a DeliveryFilter)
where
    DB: sqlx::Database,
    i64: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
{
    if let Some(endpoint) = &filter.endpoint_id {
        query
            .push(format_args!(" AND {table}endpoint_id = "))
            .push_bind(endpoint.as_str());
    }
    if let Some(since) = filter.since {
        query
            .push(format_args!(" AND {table}created_at >= "))
            .push_bind(since);
    }
    if let Some(until) = filter.until {
        query
            .push(format_args!(" AND {table}created_at < "))
            .push_bind(until);
    }
    if let Some(dead_by) = filter.dead_by {
        query
            .push(format_args!(" AND {table}updated_at <= "))
            .push_bind(dead_by);
    }
}

/// [`Db::replay`] on one database: the replay of `old` as `new_id`, due by its endpoint's state.
async fn replay_on<DB: Backend>(
    pool: &Pool<DB>,
    account_id: &AccountId,
    old: &Delivery,
    new_id: &DeliveryId,
    now: i64,
) -> Result<(), StoreError> {
    let mut tx = pool.begin_with(DB::BEGIN).await?;
    let endpoint = DB::endpoint_shared(&mut *tx, account_id, &old.endpoint_id).await?;
    let due = replay_due(endpoint.as_ref(), &old.endpoint_id, now)?;
    DB::insert_delivery(&mut *tx, &replay_of(old, new_id, account_id, now, due)).await?;
    DB::mark_replayed(&mut *tx, account_id, &old.id, new_id).await?;
    tx.commit().await?;
    Ok(())
}

/// One page of [`Db::replay_endpoint`] on one database, in one transaction; answers how many
/// of its deliveries were replayed.
async fn replay_page<DB: Backend>(
    pool: &Pool<DB>,
    account_id: &AccountId,
    endpoint_id: &EndpointId,
    page: &[Delivery],
    now: i64,
) -> Result<u64, StoreError> {
    let mut tx = pool.begin_with(DB::BEGIN).await?;
    let endpoint = DB::endpoint_shared(&mut *tx, account_id, endpoint_id).await?;
    let due = replay_due(endpoint.as_ref(), endpoint_id, now)?;
    let mut queued = 0;
    for old in page.iter().filter(|d| {
        d.replayed_by.is_none()
            && !matches!(
                d.status,
                DeliveryStatus::Delivering
                    | DeliveryStatus::Pending
                    | DeliveryStatus::Unread
                    | DeliveryStatus::Erased
                    | DeliveryStatus::Expired
            )
    }) {
        let new_id = new_delivery_id();
        // Claimed in the transaction: a delivery another bulk replay took since the page was
        // read (or that retention removed) is left alone, so each is replayed once.
        if !DB::claim_replay(&mut *tx, account_id, &old.id, &new_id).await? {
            continue;
        }
        DB::insert_delivery(&mut *tx, &replay_of(old, &new_id, account_id, now, due)).await?;
        queued += 1;
    }
    tx.commit().await?;
    Ok(queued)
}

/// The delivery `id` that replays `old`, created at `now` and due at `due`, with `old`'s
/// sequence number.
fn replay_of<'a>(
    old: &'a Delivery,
    id: &'a DeliveryId,
    account_id: &'a AccountId,
    now: i64,
    due: i64,
) -> NewDelivery<'a> {
    NewDelivery {
        id,
        account_id,
        event_id: &old.event_id,
        endpoint_id: &old.endpoint_id,
        status: "pending",
        now,
        due,
        sequence: old.sequence,
    }
}

/// When a replay to `endpoint` is due ([`Endpoint::due_for_new_delivery`]); a deleted endpoint
/// takes no deliveries, and a pull endpoint no replays (its reader reads the feed again).
fn replay_due(
    endpoint: Option<&Endpoint>,
    endpoint_id: &EndpointId,
    now: i64,
) -> Result<i64, StoreError> {
    match endpoint {
        Some(endpoint) if endpoint.is_pull() => Err(StoreError::Conflict {
            kind: super::StoreConflict::PullEndpoint,
            message: format!(
                "endpoint {endpoint_id} is a pull endpoint: nothing is sent to it, so nothing \
                 can be replayed; its reader reads the feed again from any number it holds"
            ),
        }),
        Some(endpoint) if endpoint.status != EndpointStatus::Deleted => {
            Ok(endpoint.due_for_new_delivery(now))
        }
        _ => Err(StoreError::Conflict {
            kind: super::StoreConflict::EndpointDeleted,
            message: format!("endpoint {endpoint_id} was deleted: nothing can be delivered to it"),
        }),
    }
}
