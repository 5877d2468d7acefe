//! `kxp_events`: ingestion (the event and one delivery per subscribed endpoint, in one
//! transaction, idempotent by key) and reading events back.

use serde::Serialize;
use serde_json::value::RawValue;

use crate::model::{Account, Endpoint, Event, EventId, Ingested, new_id, now_ms, rfc3339};
use crate::store::deliveries::insert_delivery;
use crate::store::{Db, StoreError, on_db};

/// `SELECT` of an [`Event`]'s columns from `kxp_events`, then `$where`: a `&'static str`.
macro_rules! select_event {
    ($where:literal) => {
        concat!(
            "SELECT id, account_id, event_type, api_version, payload, created_at, request_hash \
             FROM kxp_events ",
            $where
        )
    };
}

impl Db {
    /// Stores an event and one delivery per subscribed endpoint, in one transaction.
    ///
    /// With an idempotency key, a repeat of the same request (same `request_hash`) returns the
    /// original event, and the same key with another request is refused.
    pub(crate) async fn ingest(
        &self,
        account: &Account,
        event_type: &str,
        api_version: &str,
        data: &RawValue,
        idempotency: Option<(&str, &str)>,
    ) -> Result<Ingested, StoreError> {
        // Two requests with one new key can race past the lookup; the unique index stops the
        // second insert, and the retry then finds the first one's event.
        for _ in 0..2 {
            match self
                .try_ingest(account, event_type, api_version, data, idempotency)
                .await
            {
                Err(StoreError::Database(sqlx::Error::Database(e))) if e.is_unique_violation() => {
                    continue;
                }
                other => return other,
            }
        }
        self.try_ingest(account, event_type, api_version, data, idempotency)
            .await
    }

    async fn try_ingest(
        &self,
        account: &Account,
        event_type: &str,
        api_version: &str,
        data: &RawValue,
        idempotency: Option<(&str, &str)>,
    ) -> Result<Ingested, StoreError> {
        let now = now_ms();
        let id = uuid::Uuid::new_v4().to_string();
        let created_at = rfc3339(now);
        let payload = serde_json::to_string(&Envelope {
            id: &id,
            event_type,
            api_version,
            created_at: &created_at,
            data,
        })
        .map_err(|e| StoreError::Database(sqlx::Error::Encode(Box::new(e))))?;
        let event = Event {
            id: EventId::from(id),
            account_id: account.id.clone(),
            event_type: event_type.to_owned(),
            api_version: api_version.to_owned(),
            payload,
            created_at: now,
            request_hash: idempotency.map(|(_, hash)| hash.to_owned()),
        };
        let subscribers = format!(
            "SELECT * FROM kxp_endpoints WHERE account_id = $1 AND status IN ('active', 'paused', 'disabled'){}",
            self.share_lock()
        );
        on_db!(self, |pool, begin| {
            let mut tx = pool.begin_with(begin).await?;
            if let Some((key, hash)) = idempotency {
                let existing = sqlx::query_as::<_, Event>(select_event!(
                    "WHERE account_id = $1 AND idempotency_key = $2"
                ))
                .bind(&account.id)
                .bind(key)
                .fetch_optional(&mut *tx)
                .await?;
                if let Some(existing) = existing {
                    return Ok(if existing.request_hash.as_deref() == Some(hash) {
                        Ingested::Replayed(existing)
                    } else {
                        Ingested::KeyReused
                    });
                }
            }
            sqlx::query(
                "INSERT INTO kxp_events (id, account_id, event_type, api_version, payload, created_at, idempotency_key, request_hash) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            )
            .bind(&event.id)
            .bind(&event.account_id)
            .bind(&event.event_type)
            .bind(&event.api_version)
            .bind(&event.payload)
            .bind(event.created_at)
            .bind(idempotency.map(|(key, _)| key))
            .bind(&event.request_hash)
            .execute(&mut *tx)
            .await?;
            // A paused or disabled endpoint, or one whose circuit is open, gets its deliveries
            // too, held: nothing is lost while it rests.
            let endpoints = sqlx::query_as::<_, Endpoint>(&subscribers)
                .bind(&account.id)
                .fetch_all(&mut *tx)
                .await?;
            let mut queued = 0;
            // A pinned endpoint takes only events of its version; an unpinned one takes all.
            let takes = |e: &&Endpoint| {
                e.subscribes_to(event_type)
                    && e.api_version.as_deref().is_none_or(|v| v == api_version)
            };
            for endpoint in endpoints.iter().filter(takes) {
                let due = endpoint.due_for_new_delivery(now);
                insert_delivery!(
                    tx,
                    new_id("dlv"),
                    &account.id,
                    &event.id,
                    &endpoint.id,
                    now,
                    due
                )?;
                queued += 1;
            }
            tx.commit().await?;
            Ok(Ingested::Created(event, queued))
        })
    }

    /// The account's due backlog, counted up to `bound`: its pending deliveries whose time has
    /// come (held ones, at [`HELD`](crate::HELD), and retries scheduled later are past `now`).
    /// The count stops at `bound` on the `kxp_deliveries_account_due` index, so it costs at
    /// most `bound` index entries however large the backlog is.
    pub(crate) async fn due_backlog(
        &self,
        account_id: &str,
        bound: u64,
    ) -> Result<u64, StoreError> {
        let now = now_ms();
        let bound = i64::try_from(bound).unwrap_or(i64::MAX);
        let due = on_db!(self, |pool, _begin| {
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

    /// What an ingestion with this idempotency key would answer without storing anything:
    /// [`Ingested::Replayed`] or [`Ingested::KeyReused`] when the key was used before, `None`
    /// when it is new. Lets a full backlog still answer the retry of an accepted request.
    pub(crate) async fn ingested_before(
        &self,
        account_id: &str,
        key: &str,
        hash: &str,
    ) -> Result<Option<Ingested>, StoreError> {
        let existing = on_db!(self, |pool, _begin| {
            sqlx::query_as::<_, Event>(select_event!(
                "WHERE account_id = $1 AND idempotency_key = $2"
            ))
            .bind(account_id)
            .bind(key)
            .fetch_optional(pool)
            .await?
        });
        Ok(existing.map(|e| {
            if e.request_hash.as_deref() == Some(hash) {
                Ingested::Replayed(e)
            } else {
                Ingested::KeyReused
            }
        }))
    }

    /// One event of the account.
    pub async fn event(&self, account_id: &str, id: &str) -> Result<Event, StoreError> {
        on_db!(self, |pool, _begin| {
            sqlx::query_as::<_, Event>(select_event!("WHERE account_id = $1 AND id = $2"))
                .bind(account_id)
                .bind(id)
                .fetch_optional(pool)
                .await?
        })
        .ok_or(StoreError::NotFound)
    }
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
