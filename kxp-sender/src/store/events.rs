//! `kxp_events` and `kxp_event_tags`: ingestion (the event, its tags and one delivery per
//! subscribed endpoint, in one transaction, idempotent by key), reading events back, and
//! listing them newest first (by tag on the tags' index).

use std::collections::HashMap;
use std::sync::LazyLock;

use futures_util::StreamExt;
use serde::Serialize;
use serde_json::value::RawValue;
use sqlx::{PgPool, Pool};

use crate::model::{
    AccountId, ContentFilter, EndpointKey, Event, EventFilter, EventId, EventListed, Ingest,
    Ingested, Subscriber, UNREAD, new_delivery_id, now_ms, rfc3339,
};
use crate::store::backend::{Backend, NewDelivery};
use crate::store::{Db, StoreError, on_db};

/// The account's event by id: `$1` the account, `$2` the event.
pub(crate) static EVENT_BY_ID: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {} FROM kxp_events e WHERE e.account_id = $1 AND e.id = $2",
        event_columns("$3", "$1")
    )
});

/// The columns of an [`Event`] read from `kxp_events e` (of the account `account`): its
/// `payload_gone` says `expired` or `erased` as soon as its payload may no longer be shown
/// (`now`: past its retention, or covered by a running erasure), before retention or the
/// erasure's batch has removed it.
pub(crate) fn event_columns(now: &str, account: &str) -> String {
    format!(
        "e.id, e.account_id, e.event_type, e.api_version, e.payload, e.created_at, e.request_hash, \
         {} AS payload_gone, e.erasure_id",
        crate::store::claim::withheld(now, account)
    )
}

/// Ingests `item` on the transaction `conn`, at `now`: the event, its tags and one delivery per
/// subscribed endpoint, idempotent by key.
async fn ingest_on<DB: Backend>(
    conn: &mut DB::Connection,
    item: &Ingest,
    now: i64,
) -> Result<Ingested, StoreError> {
    if let Some(key) = &item.idempotency
        && let Some(existing) = DB::event_by_key(conn, &item.account.id, key).await?
    {
        return Ok(existing.answers(item));
    }
    // The account's own only: a chosen id is unique within its account, so another account's
    // event with the same id neither blocks this one nor shows it exists.
    if let Some(id) = &item.id
        && let Some(existing) = DB::event_by_id(conn, &item.account.id, id).await?
    {
        return Ok(existing.answers(item));
    }
    let event = new_event(item, now)?;
    DB::insert_event(conn, &event, item).await?;
    if !item.tags.is_empty() {
        let tags = serde_json::to_string(&item.tags)
            .map_err(|e| StoreError::Database(sqlx::Error::Encode(Box::new(e))))?;
        DB::insert_tags(conn, &event, tags).await?;
    }
    // A paused or disabled endpoint, or one whose circuit is open, gets its deliveries too,
    // held: nothing is lost while it rests.
    let endpoints = DB::subscribers(conn, &item.account.id).await?;
    let mut due_to = Vec::new();
    let mut takers: Vec<&Subscriber> = match &item.only {
        Some(only) => endpoints.iter().filter(|e| e.id == *only).collect(),
        None => endpoints
            .iter()
            .filter(|e| e.takes(&item.event_type, &item.api_version))
            .collect(),
    };
    // Content filters (never for `only`: a test event goes where it is sent), compiled for
    // the endpoints the types took, and the content read, only when one of them has a filter.
    if item.only.is_none() && takers.iter().any(|e| e.content_filter.is_some()) {
        let data: Option<serde_json::Value> = serde_json::from_str(item.data.get()).ok();
        let created_at = rfc3339(now);
        let content = data.as_ref().map(|data| kxp_filter::Event {
            id: event.id.as_str(),
            event_type: &item.event_type,
            api_version: &item.api_version,
            created_at: &created_at,
            data,
            tags: &item.tags,
        });
        takers.retain(|e| ContentFilter::of(e.content_filter.as_deref()).takes(content.as_ref()));
    }
    for endpoint in takers {
        let (status, due) = endpoint.new_delivery(now);
        let delivery = NewDelivery {
            id: &new_delivery_id(),
            account_id: &item.account.id,
            event_id: &event.id,
            endpoint_id: &endpoint.id,
            status,
            now,
            due,
            sequence: None,
        };
        DB::insert_delivery(conn, &delivery).await?;
        // A pull endpoint's too: its announcement is what gets it numbered, and what wakes
        // its feed's long polls.
        if due <= now || status == UNREAD {
            due_to.push(EndpointKey {
                account_id: item.account.id.clone(),
                id: endpoint.id.clone(),
            });
        }
    }
    Ok(Ingested::Created(event, due_to))
}

/// [`Db::try_ingest`] on one database.
async fn try_ingest_on<DB: Backend>(
    pool: &Pool<DB>,
    item: &Ingest,
) -> Result<Ingested, StoreError> {
    let mut tx = pool.begin_with(DB::BEGIN).await?;
    let ingested = ingest_on::<DB>(&mut *tx, item, now_ms()).await?;
    tx.commit().await?;
    Ok(ingested)
}

/// [`Db::ingest_many`] on one database.
async fn ingest_many_on<DB: Backend>(
    pool: &Pool<DB>,
    batch: &[Ingest],
) -> Result<Vec<Result<Ingested, StoreError>>, StoreError> {
    let mut tx = pool.begin_with(DB::BEGIN).await?;
    let mut results = Vec::with_capacity(batch.len());
    for item in batch {
        let mut savepoint = sqlx::Acquire::begin(&mut tx).await?;
        match ingest_on::<DB>(&mut *savepoint, item, now_ms()).await {
            Ok(ingested) => {
                savepoint.commit().await?;
                results.push(Ok(ingested));
            }
            Err(e) => {
                savepoint.rollback().await?;
                results.push(Err(e));
            }
        }
    }
    tx.commit().await?;
    Ok(results)
}

/// [`Db::ingest_together`] on one database.
async fn ingest_together_on<DB: Backend>(
    pool: &Pool<DB>,
    batch: &[&Ingest],
) -> Result<Vec<Ingested>, StoreError> {
    let mut tx = pool.begin_with(DB::BEGIN).await?;
    let mut results = Vec::with_capacity(batch.len());
    for item in batch {
        results.push(ingest_on::<DB>(&mut *tx, item, now_ms()).await?);
    }
    tx.commit().await?;
    Ok(results)
}

/// Accounts' transactions [`Db::ingest_by_account`] writes at once.
const ACCOUNTS_IN_FLIGHT: usize = 4;

impl Db {
    /// Stores an event and one delivery per subscribed endpoint, in one transaction.
    ///
    /// With an idempotency key, a repeat of the same request (same `request_hash`) returns the
    /// original event, and the same key with another request is refused.
    pub(crate) async fn ingest(&self, item: &Ingest) -> Result<Ingested, StoreError> {
        // Two requests with one new key (or id) can race past the lookup; the unique index
        // stops the second insert, and the retry then finds the first one's event.
        for _ in 0..2 {
            match self.try_ingest(item).await {
                Err(StoreError::Database(sqlx::Error::Database(e))) if e.is_unique_violation() => {
                    continue;
                }
                other => return other,
            }
        }
        self.try_ingest(item).await
    }

    async fn try_ingest(&self, item: &Ingest) -> Result<Ingested, StoreError> {
        on_db!(self, |pool| try_ingest_on(pool, item).await)
    }

    /// Ingests a batch in one transaction, each item under its own savepoint: an item that
    /// fails is rolled back alone and answers its error, the others commit together. One
    /// commit, one wait for the disk, for the whole batch: what SQLite, with one writer and a
    /// flush per commit, needs to ingest faster than its disk flushes. (PostgreSQL flushes
    /// concurrent transactions' commits together by itself.)
    pub(crate) async fn ingest_many(
        &self,
        batch: &[Ingest],
    ) -> Result<Vec<Result<Ingested, StoreError>>, StoreError> {
        on_db!(self, |pool| ingest_many_on(pool, batch).await)
    }

    /// Ingests a batch in one transaction without savepoints (they cost PostgreSQL two round
    /// trips and a subtransaction each): PostgreSQL's group commit, where a commit per request
    /// costs its CPU more than its disk. If any item is refused the whole batch is, and the
    /// [`Batcher`](crate::engine::batch::Batcher) then writes each item alone; a batch of one
    /// is [`ingest`](Db::ingest), which retries the race of two new idempotency keys.
    pub(crate) async fn ingest_together(
        &self,
        batch: &[Ingest],
    ) -> Result<Vec<Result<Ingested, StoreError>>, StoreError> {
        if let [item] = batch {
            return Ok(vec![self.ingest(item).await]);
        }
        if let Db::Citus(pool) = self {
            return Ok(self.ingest_by_account(pool, batch).await);
        }
        let batch: Vec<&Ingest> = batch.iter().collect();
        let ingested = on_db!(self, |pool| ingest_together_on(pool, &batch).await?);
        Ok(ingested.into_iter().map(Ok).collect())
    }

    /// [`Db::ingest_together`] on Citus: one transaction per account, so that each commits on
    /// its account's shard alone (one over several workers would commit in two phases, and
    /// fail as a whole when any of them is down), a few accounts' at once. An account's
    /// transaction that fails has its events written one by one, as a refused batch does; the
    /// other accounts' stand.
    async fn ingest_by_account(
        &self,
        pool: &PgPool,
        batch: &[Ingest],
    ) -> Vec<Result<Ingested, StoreError>> {
        // Each account's items, by index, in the batch's order.
        let mut accounts: Vec<Vec<usize>> = Vec::new();
        for (i, item) in batch.iter().enumerate() {
            match accounts
                .iter_mut()
                .find(|items| batch[items[0]].account.id == item.account.id)
            {
                Some(items) => items.push(i),
                None => accounts.push(vec![i]),
            }
        }
        let written: Vec<Vec<(usize, Result<Ingested, StoreError>)>> =
            futures_util::stream::iter(accounts.into_iter().map(|items| async move {
                let of_account: Vec<&Ingest> = items.iter().map(|&i| &batch[i]).collect();
                let together = match of_account.as_slice() {
                    [_, _, ..] => ingest_together_on(pool, &of_account).await.ok(),
                    _ => None,
                };
                let answers = match together {
                    Some(ingested) => ingested.into_iter().map(Ok).collect(),
                    None => {
                        let mut each = Vec::with_capacity(of_account.len());
                        for item in of_account {
                            each.push(self.ingest(item).await);
                        }
                        each
                    }
                };
                items.into_iter().zip(answers).collect()
            }))
            .buffer_unordered(ACCOUNTS_IN_FLIGHT)
            .collect()
            .await;
        let mut answers: Vec<(usize, Result<Ingested, StoreError>)> =
            written.into_iter().flatten().collect();
        answers.sort_unstable_by_key(|(i, _)| *i);
        answers.into_iter().map(|(_, answer)| answer).collect()
    }

    /// A page of the account's events, newest first (by `created_at`, then id), with their
    /// tags.
    ///
    /// With a tag, the page is one backward range of `kxp_event_tags_search` (account, tag,
    /// created_at, event id): the bounds of time and the cursor are bounds of that range, so a
    /// page costs its own rows (and the events they join), however many events the account or
    /// the tag has. Without one, the same on `kxp_events_account_created`. The type filter is
    /// applied to the rows of that range.
    pub(crate) async fn events(
        &self,
        account_id: &AccountId,
        filter: &EventFilter,
        limit: i64,
    ) -> Result<Vec<EventListed>, StoreError> {
        // `$4`, the range's upper bound: `created_at` before `until` and not after the cursor's
        // (the row comparison then leaves out the cursor's own millisecond up to its id).
        let upper = [
            filter.until.map(|until| until.saturating_sub(1)),
            filter.before.as_ref().map(|(at, _)| *at),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(i64::MAX);
        let (before_at, before_id) = match &filter.before {
            Some((at, id)) => (*at, id.as_str()),
            None => (i64::MAX, ""),
        };
        let sql = if filter.tag.is_some() {
            "SELECT e.id, e.event_type, e.api_version, e.created_at \
             FROM kxp_event_tags t JOIN kxp_events e ON e.account_id = t.account_id AND e.id = t.event_id \
             WHERE t.account_id = $1 AND t.tag = $2 AND t.created_at >= $3 AND t.created_at <= $4 \
             AND (t.created_at, t.event_id) < ($5, $6) \
             AND (CAST($7 AS TEXT) IS NULL OR e.event_type = $7) \
             ORDER BY t.created_at DESC, t.event_id DESC LIMIT $8"
        } else {
            "SELECT id, event_type, api_version, created_at FROM kxp_events \
             WHERE account_id = $1 AND CAST($2 AS TEXT) IS NULL \
             AND created_at >= $3 AND created_at <= $4 AND (created_at, id) < ($5, $6) \
             AND (CAST($7 AS TEXT) IS NULL OR event_type = $7) \
             ORDER BY created_at DESC, id DESC LIMIT $8"
        };
        let mut events = on_db!(self, |pool| {
            sqlx::query_as::<_, EventListed>(sql)
                .bind(account_id)
                .bind(&filter.tag)
                .bind(filter.since.unwrap_or(i64::MIN))
                .bind(upper)
                .bind(before_at)
                .bind(before_id)
                .bind(&filter.event_type)
                .bind(limit)
                .fetch_all(pool)
                .await?
        });
        let ids: Vec<&str> = events.iter().map(|e| e.id.as_str()).collect();
        let mut by_event = self.tags_of(account_id, &ids).await?;
        for event in &mut events {
            if let Some(tags) = by_event.remove(event.id.as_str()) {
                event.tags = tags;
            }
        }
        Ok(events)
    }

    /// The tags of the account's events `ids`, by event id, each event's sorted (here, not by
    /// the database: its collation may differ by backend). Events without tags are left out.
    async fn tags_of(
        &self,
        account_id: &AccountId,
        ids: &[&str],
    ) -> Result<HashMap<String, Vec<String>>, StoreError> {
        let mut by_event: HashMap<String, Vec<String>> = HashMap::new();
        if ids.is_empty() {
            return Ok(by_event);
        }
        let ids = serde_json::to_string(ids)
            .map_err(|e| StoreError::Database(sqlx::Error::Encode(Box::new(e))))?;
        let tags_sql = match self {
            Db::Sqlite(_) => {
                "SELECT event_id, tag FROM kxp_event_tags \
                 WHERE account_id = $2 AND event_id IN (SELECT value FROM json_each($1))"
            }
            Db::Postgres(_) | Db::Citus(_) => {
                "SELECT event_id, tag FROM kxp_event_tags \
                 WHERE account_id = $2 AND event_id IN (SELECT jsonb_array_elements_text($1::jsonb))"
            }
        };
        let rows: Vec<(String, String)> = on_db!(self, |pool| {
            sqlx::query_as(tags_sql)
                .bind(&ids)
                .bind(account_id)
                .fetch_all(pool)
                .await?
        });
        for (event_id, tag) in rows {
            by_event.entry(event_id).or_default().push(tag);
        }
        by_event.values_mut().for_each(|tags| tags.sort());
        Ok(by_event)
    }

    /// A page of the account's events, newest first (by `created_at`, then id), before
    /// `before` (`created_at`, id) when given, each with its tags: what a dry run of a content
    /// filter reads, a page at a time.
    pub(crate) async fn recent_events(
        &self,
        account_id: &AccountId,
        before: Option<&(i64, EventId)>,
        limit: i64,
    ) -> Result<Vec<(Event, Vec<String>)>, StoreError> {
        let (before_at, before_id) = match before {
            Some((at, id)) => (*at, id.as_str()),
            None => (i64::MAX, ""),
        };
        let events = on_db!(self, |pool| {
            sqlx::query_as::<_, Event>(&format!(
                "SELECT {} FROM kxp_events e WHERE e.account_id = $1 AND (e.created_at, e.id) < ($2, $3) \
                 ORDER BY e.created_at DESC, e.id DESC LIMIT $4",
                event_columns("$5", "$1")
            ))
            .bind(account_id)
            .bind(before_at)
            .bind(before_id)
            .bind(limit)
            .bind(now_ms())
            .fetch_all(pool)
            .await?
        });
        let ids: Vec<&str> = events.iter().map(|e| e.id.as_str()).collect();
        let mut by_event = self.tags_of(account_id, &ids).await?;
        Ok(events
            .into_iter()
            .map(|event| {
                let tags = by_event.remove(event.id.as_str()).unwrap_or_default();
                (event, tags)
            })
            .collect())
    }

    /// The account's due backlog, counted up to `bound`: its pending deliveries whose time has
    /// come (held ones, at [`HELD`](crate::HELD), and retries scheduled later are past `now`).
    /// The count stops at `bound` on the `kxp_deliveries_account_due` index, so it costs at
    /// most `bound` index entries however large the backlog is.
    pub(crate) async fn due_backlog(
        &self,
        account_id: &AccountId,
        bound: u64,
    ) -> Result<u64, StoreError> {
        let now = now_ms();
        let bound = i64::try_from(bound).unwrap_or(i64::MAX);
        let due = on_db!(self, |pool| {
            sqlx::query_scalar::<_, i64>(
                "SELECT COUNT(*) FROM (SELECT 1 FROM kxp_deliveries \
                 WHERE account_id = $1 AND status = 'pending' AND next_attempt_at <= $2 LIMIT $3) AS due",
            )
            .bind(account_id)
            .bind(now)
            .bind(bound)
            .fetch_one(pool)
            .await?
        });
        Ok(u64::try_from(due).unwrap_or(0))
    }

    /// What ingesting `item` would answer without storing anything, if its idempotency key or
    /// chosen id was seen before: [`Ingested::Replayed`] or [`Ingested::KeyReused`]; `None`
    /// when both are new. Lets a full backlog still answer the retry of an accepted request.
    pub(crate) async fn ingested_before(
        &self,
        item: &Ingest,
    ) -> Result<Option<Ingested>, StoreError> {
        let existing = on_db!(self, |pool| {
            sqlx::query_as::<_, Event>(&format!(
                "SELECT {} FROM kxp_events e WHERE e.account_id = $1 AND (e.idempotency_key = $2 OR e.id = $3) LIMIT 1",
                event_columns("$4", "$1")
            ))
            .bind(item.account.id.as_str())
            .bind(&item.idempotency)
            .bind(&item.id)
            .bind(now_ms())
            .fetch_optional(pool)
            .await?
        });
        Ok(existing.map(|e| e.answers(item)))
    }

    /// One event of the account.
    pub(crate) async fn event(
        &self,
        account_id: &AccountId,
        id: &EventId,
    ) -> Result<Event, StoreError> {
        on_db!(self, |pool| {
            sqlx::query_as::<_, Event>(EVENT_BY_ID.as_str())
                .bind(account_id)
                .bind(id)
                .bind(now_ms())
                .fetch_optional(pool)
                .await?
        })
        .ok_or(StoreError::NotFound)
    }
}

impl Event {
    /// What a request for `item`, whose idempotency key or chosen id this event of the same
    /// account holds, answers: this event if it is the same request, else a refusal.
    fn answers(self, item: &Ingest) -> Ingested {
        if self.request_hash.as_ref() == Some(&item.request_hash) {
            Ingested::Replayed(self)
        } else {
            Ingested::KeyReused
        }
    }
}

/// The event `item` becomes, created at `now`: its chosen id or a fresh UUIDv4, and the
/// envelope serialized once, with `data` byte for byte as the caller sent it.
fn new_event(item: &Ingest, now: i64) -> Result<Event, StoreError> {
    let id = match &item.id {
        Some(id) => id.as_str().to_owned(),
        None => uuid::Uuid::new_v4().to_string(),
    };
    let created_at = rfc3339(now);
    let payload = serde_json::to_string(&Envelope {
        id: &id,
        event_type: &item.event_type,
        api_version: &item.api_version,
        created_at: &created_at,
        data: &item.data,
    })
    .map_err(|e| StoreError::Database(sqlx::Error::Encode(Box::new(e))))?;
    Ok(Event {
        id: EventId::from(id),
        account_id: item.account.id.clone(),
        event_type: item.event_type.clone(),
        api_version: item.api_version.clone(),
        payload,
        created_at: now,
        request_hash: (item.idempotency.is_some() || item.id.is_some())
            .then(|| item.request_hash.clone()),
        payload_gone: None,
        erasure_id: None,
    })
}

/// The wire envelope, serialized once at ingestion with `data` byte for byte as the caller sent
/// it.
#[derive(Serialize)]
struct Envelope<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    event_type: &'a str,
    api_version: &'a str,
    created_at: &'a str,
    data: &'a RawValue,
}
