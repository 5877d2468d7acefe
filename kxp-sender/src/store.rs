//! Every query the sender runs. Each is written once, for both backends (see `on_db!` in `db`),
//! except the claim, which differs in how PostgreSQL skips rows other workers hold.

use serde::Serialize;
use serde_json::value::RawValue;
use sqlx::FromRow;

use crate::db::{Db, new_id, now_ms, on_db, random_hex_32, sha256_hex};

/// Inserts a pending delivery due now (a macro: the statement must compile for each backend's
/// transaction type).
macro_rules! insert_delivery {
    ($tx:expr, $id:expr, $account_id:expr, $event_id:expr, $endpoint_id:expr, $now:expr) => {
        sqlx::query(
            "INSERT INTO kxp_deliveries (id, account_id, event_id, endpoint_id, status, attempts, next_attempt_at, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, 'pending', 0, $5, $5, $5)",
        )
        .bind($id)
        .bind($account_id)
        .bind($event_id)
        .bind($endpoint_id)
        .bind($now)
        .execute(&mut *$tx)
        .await
    };
}

/// Links a replayed delivery to its replay.
macro_rules! mark_replayed {
    ($tx:expr, $old_id:expr, $new_id:expr) => {
        sqlx::query("UPDATE kxp_deliveries SET replayed_by = $1 WHERE id = $2")
            .bind($new_id)
            .bind($old_id)
            .execute(&mut *$tx)
            .await
    };
}

/// A failed query, or a row the caller's account may not see.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The database failed or is unreachable.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// The row does not exist for this account (another account's ids look the same).
    #[error("not found")]
    NotFound,
}

/// An account: the unit of isolation. Every row below belongs to one.
#[derive(Debug, Clone, FromRow, Serialize)]
pub struct Account {
    /// `acc_…`
    pub id: String,
    /// A human name.
    pub name: String,
    /// The `api_version` events get when they name none.
    pub default_api_version: String,
    /// Unix ms.
    #[serde(skip)]
    pub created_at: i64,
}

/// The API version a new account starts with.
pub const DEFAULT_API_VERSION: &str = "2026-11-01";

/// An endpoint: where one account's events are delivered.
#[derive(Debug, Clone, FromRow)]
pub struct Endpoint {
    /// `ep_…`
    pub id: String,
    /// The owner.
    pub account_id: String,
    /// Where deliveries are POSTed.
    pub url: String,
    /// Free text.
    pub description: String,
    /// JSON array of event types; `["*"]` for all.
    pub event_types: String,
    /// Per-attempt timeout.
    pub timeout_ms: i64,
    /// `active` (only state so far).
    pub status: String,
    /// Unix ms.
    pub created_at: i64,
    /// Unix ms.
    pub updated_at: i64,
}

impl Endpoint {
    /// The subscribed types.
    pub fn types(&self) -> Vec<String> {
        serde_json::from_str(&self.event_types).unwrap_or_default()
    }

    /// Whether an event of `event_type` goes to this endpoint: `*` takes everything, `payment.*`
    /// every type under `payment.`, anything else only itself.
    pub fn subscribes_to(&self, event_type: &str) -> bool {
        self.types()
            .iter()
            .any(|pattern| match pattern.strip_suffix('*') {
                Some(prefix) => event_type.starts_with(prefix),
                None => pattern == event_type,
            })
    }
}

/// A stored event.
#[derive(Debug, Clone, FromRow)]
pub struct Event {
    /// UUIDv4: the receivers' dedup key.
    pub id: String,
    /// The owner.
    pub account_id: String,
    /// `payment.succeeded`, …
    pub event_type: String,
    /// The schema version of `data`.
    pub api_version: String,
    /// The exact envelope bytes every attempt sends.
    pub payload: String,
    /// Unix ms.
    pub created_at: i64,
    /// Hash of the request that created it, when it had an `Idempotency-Key`.
    pub request_hash: Option<String>,
}

/// A delivery: one event to one endpoint, tried until delivered or dead.
#[derive(Debug, Clone, FromRow)]
pub struct Delivery {
    /// `dlv_…`
    pub id: String,
    /// The event.
    pub event_id: String,
    /// The endpoint.
    pub endpoint_id: String,
    /// `pending`, `delivering`, `delivered` or `dead`.
    pub status: String,
    /// Tries so far.
    pub attempts: i64,
    /// Unix ms of the next try (meaningful while pending).
    pub next_attempt_at: i64,
    /// The last try's HTTP status, if it got one.
    pub last_status: Option<i64>,
    /// The last try's error.
    pub last_error: Option<String>,
    /// The delivery that replayed this one, if any.
    pub replayed_by: Option<String>,
    /// Unix ms.
    pub created_at: i64,
    /// Unix ms.
    pub updated_at: i64,
}

/// One HTTP try.
#[derive(Debug, Clone, FromRow)]
pub struct Attempt {
    /// 1-based.
    pub attempt: i64,
    /// Unix ms.
    pub started_at: i64,
    /// How long it took.
    pub duration_ms: i64,
    /// The response status, if a response came.
    pub status_code: Option<i64>,
    /// What went wrong, if it failed.
    pub error: Option<String>,
    /// The start of the response body.
    pub response_snippet: Option<String>,
}

/// A delivery claimed by a worker, with everything needed to send it.
#[derive(Debug, Clone, FromRow)]
pub struct Job {
    /// The delivery.
    pub id: String,
    /// The event.
    pub event_id: String,
    /// The event's type.
    pub event_type: String,
    /// The envelope bytes.
    pub payload: String,
    /// The endpoint.
    pub endpoint_id: String,
    /// Its URL.
    pub url: String,
    /// Its per-attempt timeout.
    pub timeout_ms: i64,
    /// Tries before this one.
    pub attempts: i64,
}

const DELIVERY_COLUMNS: &str = "id, event_id, endpoint_id, status, attempts, next_attempt_at, \
     last_status, last_error, replayed_by, created_at, updated_at";

/// The result of `POST /v1/events`.
#[derive(Debug)]
pub enum Ingested {
    /// A new event, with this many deliveries queued.
    Created(Event, usize),
    /// The `Idempotency-Key` was seen before with the same request: the original event.
    Replayed(Event),
    /// The `Idempotency-Key` was seen before with a different request.
    KeyReused,
}

/// What a finished attempt does to its delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextState {
    /// 2xx: done.
    Delivered,
    /// Failed; try again at this Unix ms.
    RetryAt(i64),
    /// Failed for the last time.
    Dead,
}

/// A new attempt row.
#[derive(Debug, Clone)]
pub struct AttemptRecord {
    /// Unix ms.
    pub started_at: i64,
    /// How long.
    pub duration_ms: i64,
    /// Response status, if any.
    pub status_code: Option<u16>,
    /// Failure description, if any.
    pub error: Option<String>,
    /// Start of the response body.
    pub response_snippet: Option<String>,
}

/// Filters for listing deliveries.
#[derive(Debug, Clone, Default)]
pub struct DeliveryFilter {
    /// Only this status (`dead` lists the dead-letter queue: dead and not yet replayed).
    pub status: Option<String>,
    /// Only this endpoint.
    pub endpoint_id: Option<String>,
    /// Created at or after (Unix ms).
    pub since: Option<i64>,
    /// Created before (Unix ms).
    pub until: Option<i64>,
}

impl Db {
    // ---- accounts ----

    /// Creates an account and returns it with its API key, which is shown once and stored only
    /// as a hash.
    pub async fn create_account(
        &self,
        name: &str,
        key: Option<&str>,
    ) -> Result<(Account, String), StoreError> {
        let key = key.map_or_else(|| format!("kxp_{}", random_hex_32()), str::to_owned);
        let account = Account {
            id: new_id("acc"),
            name: name.to_owned(),
            default_api_version: DEFAULT_API_VERSION.to_owned(),
            created_at: now_ms(),
        };
        on_db!(self, |pool, _begin| {
            sqlx::query(
                "INSERT INTO kxp_accounts (id, name, api_key_hash, default_api_version, created_at) \
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(&account.id)
            .bind(&account.name)
            .bind(sha256_hex(key.as_bytes()))
            .bind(&account.default_api_version)
            .bind(account.created_at)
            .execute(pool)
            .await?;
        });
        Ok((account, key))
    }

    /// The account an API key belongs to.
    pub async fn account_by_key(&self, key: &str) -> Result<Option<Account>, StoreError> {
        let hash = sha256_hex(key.as_bytes());
        Ok(on_db!(self, |pool, _begin| {
            sqlx::query_as::<_, Account>(
                "SELECT id, name, default_api_version, created_at FROM kxp_accounts WHERE api_key_hash = $1",
            )
            .bind(hash)
            .fetch_optional(pool)
            .await?
        }))
    }

    /// How many accounts exist.
    pub async fn account_count(&self) -> Result<i64, StoreError> {
        Ok(on_db!(self, |pool, _begin| {
            sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM kxp_accounts")
                .fetch_one(pool)
                .await?
        }))
    }

    // ---- endpoints ----

    /// Creates an endpoint with a fresh secret; returns both.
    pub async fn create_endpoint(
        &self,
        account: &Account,
        url: &str,
        event_types: &[String],
        description: &str,
        timeout_ms: i64,
    ) -> Result<(Endpoint, String), StoreError> {
        let now = now_ms();
        let endpoint = Endpoint {
            id: new_id("ep"),
            account_id: account.id.clone(),
            url: url.to_owned(),
            description: description.to_owned(),
            event_types: serde_json::to_string(event_types)
                .unwrap_or_else(|_| "[\"*\"]".to_owned()),
            timeout_ms,
            status: "active".to_owned(),
            created_at: now,
            updated_at: now,
        };
        let secret = random_hex_32();
        on_db!(self, |pool, begin| {
            let mut tx = pool.begin_with(begin).await?;
            sqlx::query(
                "INSERT INTO kxp_endpoints (id, account_id, url, description, event_types, timeout_ms, status, created_at, updated_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            )
            .bind(&endpoint.id)
            .bind(&endpoint.account_id)
            .bind(&endpoint.url)
            .bind(&endpoint.description)
            .bind(&endpoint.event_types)
            .bind(endpoint.timeout_ms)
            .bind(&endpoint.status)
            .bind(now)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            sqlx::query("INSERT INTO kxp_endpoint_secrets (endpoint_id, secret, created_at) VALUES ($1, $2, $3)")
                .bind(&endpoint.id)
                .bind(&secret)
                .bind(now)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
        });
        Ok((endpoint, secret))
    }

    /// One endpoint of the account.
    pub async fn endpoint(&self, account_id: &str, id: &str) -> Result<Endpoint, StoreError> {
        on_db!(self, |pool, _begin| {
            sqlx::query_as::<_, Endpoint>(
                "SELECT * FROM kxp_endpoints WHERE account_id = $1 AND id = $2",
            )
            .bind(account_id)
            .bind(id)
            .fetch_optional(pool)
            .await?
        })
        .ok_or(StoreError::NotFound)
    }

    /// A page of the account's endpoints, by id, after `cursor`.
    pub async fn endpoints(
        &self,
        account_id: &str,
        cursor: Option<&str>,
        limit: i64,
    ) -> Result<Vec<Endpoint>, StoreError> {
        Ok(on_db!(self, |pool, _begin| {
            sqlx::query_as::<_, Endpoint>(
                "SELECT * FROM kxp_endpoints WHERE account_id = $1 AND (CAST($2 AS TEXT) IS NULL OR id > $2) \
                 ORDER BY id LIMIT $3",
            )
            .bind(account_id)
            .bind(cursor)
            .bind(limit)
            .fetch_all(pool)
            .await?
        }))
    }

    /// The endpoint's live secrets, newest first: what each attempt signs with.
    pub async fn live_secrets(&self, endpoint_id: &str) -> Result<Vec<String>, StoreError> {
        Ok(on_db!(self, |pool, _begin| {
            sqlx::query_scalar::<_, String>(
                "SELECT secret FROM kxp_endpoint_secrets WHERE endpoint_id = $1 \
                 AND (expires_at IS NULL OR expires_at > $2) ORDER BY id DESC",
            )
            .bind(endpoint_id)
            .bind(now_ms())
            .fetch_all(pool)
            .await?
        }))
    }

    // ---- events ----

    /// Stores an event and one delivery per subscribed endpoint, in one transaction.
    ///
    /// With an idempotency key, a repeat of the same request (same `request_hash`) returns the
    /// original event, and the same key with another request is refused.
    pub async fn ingest(
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
            id,
            account_id: account.id.clone(),
            event_type: event_type.to_owned(),
            api_version: api_version.to_owned(),
            payload,
            created_at: now,
            request_hash: idempotency.map(|(_, hash)| hash.to_owned()),
        };
        on_db!(self, |pool, begin| {
            let mut tx = pool.begin_with(begin).await?;
            if let Some((key, hash)) = idempotency {
                let existing = sqlx::query_as::<_, Event>(
                    "SELECT id, account_id, event_type, api_version, payload, created_at, request_hash \
                     FROM kxp_events WHERE account_id = $1 AND idempotency_key = $2",
                )
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
            let endpoints = sqlx::query_as::<_, Endpoint>(
                "SELECT * FROM kxp_endpoints WHERE account_id = $1 AND status = 'active'",
            )
            .bind(&account.id)
            .fetch_all(&mut *tx)
            .await?;
            let mut queued = 0;
            for endpoint in endpoints.iter().filter(|e| e.subscribes_to(event_type)) {
                insert_delivery!(tx, new_id("dlv"), &account.id, &event.id, &endpoint.id, now)?;
                queued += 1;
            }
            tx.commit().await?;
            Ok(Ingested::Created(event, queued))
        })
    }

    /// One event of the account.
    pub async fn event(&self, account_id: &str, id: &str) -> Result<Event, StoreError> {
        on_db!(self, |pool, _begin| {
            sqlx::query_as::<_, Event>(
                "SELECT id, account_id, event_type, api_version, payload, created_at, request_hash \
                 FROM kxp_events WHERE account_id = $1 AND id = $2",
            )
            .bind(account_id)
            .bind(id)
            .fetch_optional(pool)
            .await?
        })
        .ok_or(StoreError::NotFound)
    }

    // ---- deliveries: the worker's side ----

    /// Claims up to `limit` due deliveries for `owner`, skipping endpoints in `skip` (those this
    /// worker already keeps as busy as allowed). Each is leased for its endpoint's timeout plus
    /// `lease_extra_ms`: if the worker dies, the delivery is claimable again soon after any
    /// attempt of its could have ended.
    pub async fn claim(
        &self,
        owner: &str,
        lease_extra_ms: i64,
        limit: i64,
        skip: &[String],
    ) -> Result<Vec<String>, StoreError> {
        let now = now_ms();
        let ids = match self {
            Db::Sqlite(pool) => {
                let skip = serde_json::to_string(skip).unwrap_or_else(|_| "[]".to_owned());
                sqlx::query_scalar::<_, String>(
                    "UPDATE kxp_deliveries SET status = 'delivering', lease_owner = $2, updated_at = $3, \
                       lease_until = $3 + $1 + (SELECT timeout_ms FROM kxp_endpoints p WHERE p.id = endpoint_id) \
                     WHERE id IN (SELECT id FROM kxp_deliveries WHERE status = 'pending' AND next_attempt_at <= $3 \
                       AND endpoint_id NOT IN (SELECT value FROM json_each($4)) ORDER BY next_attempt_at LIMIT $5) \
                     RETURNING id",
                )
                .bind(lease_extra_ms)
                .bind(owner)
                .bind(now)
                .bind(skip)
                .bind(limit)
                .fetch_all(pool)
                .await?
            }
            Db::Postgres(pool) => {
                // SKIP LOCKED: rows another process is claiming right now are passed over
                // rather than waited for, so workers never hold the same delivery.
                sqlx::query_scalar::<_, String>(
                    "UPDATE kxp_deliveries SET status = 'delivering', lease_owner = $2, updated_at = $3, \
                       lease_until = $3 + $1 + (SELECT timeout_ms FROM kxp_endpoints p WHERE p.id = endpoint_id) \
                     WHERE id IN (SELECT id FROM kxp_deliveries WHERE status = 'pending' AND next_attempt_at <= $3 \
                       AND NOT (endpoint_id = ANY($4)) ORDER BY next_attempt_at LIMIT $5 FOR UPDATE SKIP LOCKED) \
                     RETURNING id",
                )
                .bind(lease_extra_ms)
                .bind(owner)
                .bind(now)
                .bind(skip)
                .bind(limit)
                .fetch_all(pool)
                .await?
            }
        };
        Ok(ids)
    }

    /// What a worker needs to send a claimed delivery.
    pub async fn job(&self, delivery_id: &str) -> Result<Job, StoreError> {
        on_db!(self, |pool, _begin| {
            sqlx::query_as::<_, Job>(
                "SELECT d.id, d.event_id, e.event_type, e.payload, d.endpoint_id, p.url, p.timeout_ms, d.attempts \
                 FROM kxp_deliveries d JOIN kxp_events e ON e.id = d.event_id JOIN kxp_endpoints p ON p.id = d.endpoint_id \
                 WHERE d.id = $1",
            )
            .bind(delivery_id)
            .fetch_optional(pool)
            .await?
        })
        .ok_or(StoreError::NotFound)
    }

    /// Records a finished attempt and moves the delivery on, if `owner` still holds its lease.
    /// Returns `false` when the lease was lost (it expired and another worker took over): then
    /// nothing is written, and that worker's outcome stands.
    pub async fn finish_attempt(
        &self,
        delivery_id: &str,
        owner: &str,
        attempt: i64,
        record: &AttemptRecord,
        next: NextState,
    ) -> Result<bool, StoreError> {
        let now = now_ms();
        let (status, next_at) = match next {
            NextState::Delivered => ("delivered", now),
            NextState::RetryAt(at) => ("pending", at),
            NextState::Dead => ("dead", now),
        };
        on_db!(self, |pool, begin| {
            let mut tx = pool.begin_with(begin).await?;
            let updated = sqlx::query(
                "UPDATE kxp_deliveries SET status = $1, attempts = $2, first_attempt_at = COALESCE(first_attempt_at, $3), \
                 next_attempt_at = $4, lease_until = NULL, lease_owner = NULL, last_status = $5, last_error = $6, updated_at = $7 \
                 WHERE id = $8 AND lease_owner = $9 AND status = 'delivering'",
            )
            .bind(status)
            .bind(attempt)
            .bind(record.started_at)
            .bind(next_at)
            .bind(record.status_code.map(i64::from))
            .bind(&record.error)
            .bind(now)
            .bind(delivery_id)
            .bind(owner)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if updated == 0 {
                tx.rollback().await?;
                return Ok(false);
            }
            sqlx::query(
                "INSERT INTO kxp_attempts (delivery_id, attempt, started_at, duration_ms, status_code, error, response_snippet) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(delivery_id)
            .bind(attempt)
            .bind(record.started_at)
            .bind(record.duration_ms)
            .bind(record.status_code.map(i64::from))
            .bind(&record.error)
            .bind(&record.response_snippet)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(true)
        })
    }

    /// Puts a claimed delivery back, untried (shutdown, or more claimed than an endpoint may
    /// take at once).
    pub async fn release(&self, delivery_id: &str, owner: &str) -> Result<(), StoreError> {
        on_db!(self, |pool, _begin| {
            sqlx::query(
                "UPDATE kxp_deliveries SET status = 'pending', lease_until = NULL, lease_owner = NULL, updated_at = $1 \
                 WHERE id = $2 AND lease_owner = $3 AND status = 'delivering'",
            )
            .bind(now_ms())
            .bind(delivery_id)
            .bind(owner)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// Makes deliveries whose lease ran out (their worker died) claimable again.
    pub async fn reclaim_expired(&self) -> Result<u64, StoreError> {
        let now = now_ms();
        Ok(on_db!(self, |pool, _begin| {
            sqlx::query(
                "UPDATE kxp_deliveries SET status = 'pending', lease_until = NULL, lease_owner = NULL, \
                 next_attempt_at = $1, updated_at = $1 WHERE status = 'delivering' AND lease_until < $1",
            )
            .bind(now)
            .execute(pool)
            .await?
            .rows_affected()
        }))
    }

    // ---- deliveries: the API's side ----

    /// A page of the account's deliveries, oldest first, after `cursor`.
    pub async fn deliveries(
        &self,
        account_id: &str,
        filter: &DeliveryFilter,
        cursor: Option<&str>,
        limit: i64,
    ) -> Result<Vec<Delivery>, StoreError> {
        let sql = format!(
            "SELECT {DELIVERY_COLUMNS} FROM kxp_deliveries WHERE account_id = $1 \
             AND (CAST($2 AS TEXT) IS NULL OR status = $2) \
             AND (CAST($3 AS TEXT) IS NULL OR endpoint_id = $3) \
             AND (CAST($4 AS BIGINT) IS NULL OR created_at >= $4) \
             AND (CAST($5 AS BIGINT) IS NULL OR created_at < $5) \
             AND (CAST($6 AS TEXT) IS NULL OR id > $6) \
             AND (CAST($2 AS TEXT) IS NULL OR $2 <> 'dead' OR replayed_by IS NULL) \
             ORDER BY id LIMIT $7"
        );
        Ok(on_db!(self, |pool, _begin| {
            sqlx::query_as::<_, Delivery>(&sql)
                .bind(account_id)
                .bind(&filter.status)
                .bind(&filter.endpoint_id)
                .bind(filter.since)
                .bind(filter.until)
                .bind(cursor)
                .bind(limit)
                .fetch_all(pool)
                .await?
        }))
    }

    /// One delivery of the account.
    pub async fn delivery(&self, account_id: &str, id: &str) -> Result<Delivery, StoreError> {
        let sql = format!(
            "SELECT {DELIVERY_COLUMNS} FROM kxp_deliveries WHERE account_id = $1 AND id = $2"
        );
        on_db!(self, |pool, _begin| {
            sqlx::query_as::<_, Delivery>(&sql)
                .bind(account_id)
                .bind(id)
                .fetch_optional(pool)
                .await?
        })
        .ok_or(StoreError::NotFound)
    }

    /// Every delivery of one of the account's events, replays included.
    pub async fn event_deliveries(
        &self,
        account_id: &str,
        event_id: &str,
    ) -> Result<Vec<Delivery>, StoreError> {
        self.event(account_id, event_id).await?;
        let sql = format!(
            "SELECT {DELIVERY_COLUMNS} FROM kxp_deliveries WHERE account_id = $1 AND event_id = $2 ORDER BY id"
        );
        Ok(on_db!(self, |pool, _begin| {
            sqlx::query_as::<_, Delivery>(&sql)
                .bind(account_id)
                .bind(event_id)
                .fetch_all(pool)
                .await?
        }))
    }

    /// The attempts of one of the account's deliveries.
    pub async fn attempts(
        &self,
        account_id: &str,
        delivery_id: &str,
    ) -> Result<Vec<Attempt>, StoreError> {
        self.delivery(account_id, delivery_id).await?;
        Ok(on_db!(self, |pool, _begin| {
            sqlx::query_as::<_, Attempt>(
                "SELECT attempt, started_at, duration_ms, status_code, error, response_snippet \
                 FROM kxp_attempts WHERE delivery_id = $1 ORDER BY attempt, id",
            )
            .bind(delivery_id)
            .fetch_all(pool)
            .await?
        }))
    }

    /// Queues the same event to the same endpoint again, as a new delivery.
    pub async fn replay(
        &self,
        account_id: &str,
        delivery_id: &str,
    ) -> Result<Delivery, StoreError> {
        let old = self.delivery(account_id, delivery_id).await?;
        let new_id = new_id("dlv");
        on_db!(self, |pool, begin| {
            let mut tx = pool.begin_with(begin).await?;
            insert_delivery!(
                tx,
                &new_id,
                account_id,
                &old.event_id,
                &old.endpoint_id,
                now_ms()
            )?;
            mark_replayed!(tx, &old.id, &new_id)?;
            tx.commit().await?;
        });
        self.delivery(account_id, &new_id).await
    }

    /// Replays every matching delivery of one endpoint (dead ones by default) that has not been
    /// replayed yet; returns how many were queued.
    pub async fn replay_endpoint(
        &self,
        account_id: &str,
        endpoint_id: &str,
        filter: &DeliveryFilter,
    ) -> Result<u64, StoreError> {
        self.endpoint(account_id, endpoint_id).await?;
        let filter = DeliveryFilter {
            status: Some(filter.status.clone().unwrap_or_else(|| "dead".to_owned())),
            endpoint_id: Some(endpoint_id.to_owned()),
            ..filter.clone()
        };
        let mut queued = 0;
        let mut cursor: Option<String> = None;
        loop {
            let page = self
                .deliveries(account_id, &filter, cursor.as_deref(), 500)
                .await?;
            let Some(last) = page.last() else { break };
            cursor = Some(last.id.clone());
            let now = now_ms();
            on_db!(self, |pool, begin| {
                let mut tx = pool.begin_with(begin).await?;
                for old in page.iter().filter(|d| {
                    d.replayed_by.is_none() && d.status != "delivering" && d.status != "pending"
                }) {
                    let new_id = new_id("dlv");
                    insert_delivery!(
                        tx,
                        &new_id,
                        account_id,
                        &old.event_id,
                        &old.endpoint_id,
                        now
                    )?;
                    mark_replayed!(tx, &old.id, &new_id)?;
                    queued += 1;
                }
                tx.commit().await?;
            });
        }
        Ok(queued)
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

/// An RFC 3339 time as Unix ms; `None` when it is not one.
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    let t =
        time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok()
}

/// Unix ms as RFC 3339 UTC with second precision, the envelope's `created_at` form.
pub fn rfc3339(ms: i64) -> String {
    let seconds = ms.div_euclid(1000);
    time::OffsetDateTime::from_unix_timestamp(seconds)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}
