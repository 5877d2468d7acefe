//! Every query the sender runs. Each is written once, for both backends (see `on_db!` in `db`),
//! except the claim, which differs in how PostgreSQL skips rows other workers hold.

use std::sync::LazyLock;

use serde::Serialize;
use serde_json::value::RawValue;
use sqlx::FromRow;

use crate::db::{Db, new_id, now_ms, on_db, random_hex_32, sha256_hex};

/// Inserts a pending delivery created at `$now` and due at `$due` ([`HELD`] for a paused
/// endpoint). A macro: the statement must compile for each backend's transaction type.
macro_rules! insert_delivery {
    ($tx:expr, $id:expr, $account_id:expr, $event_id:expr, $endpoint_id:expr, $now:expr, $due:expr) => {
        sqlx::query(
            "INSERT INTO kxp_deliveries (id, account_id, event_id, endpoint_id, status, attempts, next_attempt_at, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, 'pending', 0, $6, $5, $5)",
        )
        .bind($id)
        .bind($account_id)
        .bind($event_id)
        .bind($endpoint_id)
        .bind($now)
        .bind($due)
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
    /// The request contradicts the row's state (a replay to a deleted endpoint, one rotation
    /// too many): nothing was written.
    #[error("{message}")]
    Conflict {
        /// A stable code for the API's `error` field.
        code: &'static str,
        /// What is wrong, and what to do instead.
        message: String,
    },
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
    /// Where operational webhooks go (an endpoint's circuit opened, an endpoint was disabled).
    pub ops_url: Option<String>,
    /// Where operational e-mails go.
    pub contact_email: Option<String>,
    /// Unix ms.
    #[serde(skip)]
    pub created_at: i64,
}

/// Changes to an account: `None` leaves a field as it is; `Some(None)` clears a nullable one.
#[derive(Debug, Clone, Default)]
pub struct AccountChanges {
    /// A new name.
    pub name: Option<String>,
    /// A new default `api_version`.
    pub default_api_version: Option<String>,
    /// Set (with a new ops secret) or remove the ops URL.
    pub ops_url: Option<Option<String>>,
    /// Set or remove the contact address.
    pub contact_email: Option<Option<String>>,
}

const ACCOUNT_COLUMNS: &str = "id, name, default_api_version, ops_url, contact_email, created_at";

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
    /// `active`; `paused` (deliveries are held, events still queue for it); `disabled` (held
    /// like paused, by the sender, after failing for too long); `deleted` (soft: the row stays
    /// for its deliveries' history, the API answers 404).
    pub status: String,
    /// The schema version pinned for this endpoint, if any.
    pub api_version: Option<String>,
    /// Deliveries per second allowed to this endpoint; `None`: the server's default.
    pub rate_limit_per_second: Option<i64>,
    /// The circuit breaker: `closed`, `open` or `half_open` (see [`crate::circuit`]).
    pub circuit_state: String,
    /// When the circuit opened (Unix ms), while it is not closed.
    pub circuit_opened_at: Option<i64>,
    /// When an open circuit is probed next (Unix ms).
    pub circuit_probe_at: Option<i64>,
    /// Unix ms.
    pub created_at: i64,
    /// Unix ms.
    pub updated_at: i64,
}

/// The `next_attempt_at` of a delivery held for a paused endpoint: past every real time, so
/// held deliveries sit outside the range the claim scans (`next_attempt_at <= now` on the
/// `kxp_deliveries_due` index), however many pile up while the endpoint is paused. Resuming
/// sets them due at once.
pub const HELD: i64 = i64::MAX;

/// What a new endpoint is made of (all checked by the caller).
#[derive(Debug, Clone)]
pub struct NewEndpoint<'a> {
    /// Where deliveries go.
    pub url: &'a str,
    /// Subscribed types.
    pub event_types: &'a [String],
    /// Free text.
    pub description: &'a str,
    /// Per-attempt timeout.
    pub timeout_ms: i64,
    /// Pinned schema version.
    pub api_version: Option<&'a str>,
    /// Rate limit.
    pub rate_limit_per_second: Option<i64>,
}

/// Changes to an endpoint: `None` leaves a field as it is; for the two nullable settings,
/// `Some(None)` clears them.
#[derive(Debug, Clone, Default)]
pub struct EndpointChanges {
    /// A new URL.
    pub url: Option<String>,
    /// New subscribed types.
    pub event_types: Option<Vec<String>>,
    /// A new description.
    pub description: Option<String>,
    /// A new per-attempt timeout.
    pub timeout_ms: Option<i64>,
    /// Pin (`Some(Some)`) or unpin (`Some(None)`) a schema version.
    pub api_version: Option<Option<String>>,
    /// Set (`Some(Some)`) or lift (`Some(None)`) the rate limit.
    pub rate_limit_per_second: Option<Option<i64>>,
}

impl EndpointChanges {
    /// Whether nothing would change.
    pub fn is_empty(&self) -> bool {
        self.url.is_none()
            && self.event_types.is_none()
            && self.description.is_none()
            && self.timeout_ms.is_none()
            && self.api_version.is_none()
            && self.rate_limit_per_second.is_none()
    }
}

/// A secret rotation's result.
#[derive(Debug, Clone)]
pub struct Rotated {
    /// The new secret, shown once.
    pub secret: String,
    /// When the secrets it replaces stop signing (Unix ms; now, for an overlap of zero).
    pub previous_expires_at: i64,
}

impl Endpoint {
    /// The subscribed types.
    pub fn types(&self) -> Vec<String> {
        serde_json::from_str(&self.event_types).unwrap_or_default()
    }

    /// When a new delivery to this endpoint is due: now while it is active with a closed
    /// circuit, else [`HELD`] (paused, disabled, or its circuit not closed: the probe release or
    /// a resume lets it go). The one rule for ingestion and replays alike.
    pub fn due_for_new_delivery(&self, now: i64) -> i64 {
        if self.status == "active" && self.circuit_state == "closed" {
            now
        } else {
            HELD
        }
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
    /// The endpoint's status now: only an `active` endpoint's deliveries are sent.
    pub endpoint_status: String,
    /// The endpoint's own rate limit, if it has one.
    pub rate_limit_per_second: Option<i64>,
    /// The endpoint's circuit now.
    pub circuit_state: String,
    /// The half-open circuit's probe, if there is one.
    pub circuit_probe_id: Option<String>,
}

impl Job {
    /// Whether the delivery may be sent now: its endpoint is active and its circuit closed, or
    /// this is the half-open circuit's probe. The claim checked the same, but an endpoint can
    /// be paused, or its circuit opened, between the claim and the send.
    pub fn sendable(&self) -> bool {
        self.endpoint_status == "active"
            && (self.circuit_state == "closed"
                || self.circuit_probe_id.as_deref() == Some(&self.id))
    }
}

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

/// What [`Db::finish_attempt`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    /// The attempt and its consequences are recorded.
    Recorded {
        /// The change it made to its endpoint's circuit or status, if any.
        transition: Option<crate::circuit::Transition>,
        /// Notifications queued for that change.
        notices: usize,
    },
    /// The lease had been lost: nothing was written.
    LeaseLost,
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
            ops_url: None,
            contact_email: None,
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
        let sql = format!("SELECT {ACCOUNT_COLUMNS} FROM kxp_accounts WHERE api_key_hash = $1");
        Ok(on_db!(self, |pool, _begin| {
            sqlx::query_as::<_, Account>(&sql)
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

    /// Every account, oldest first (`kxp accounts list`). Key hashes are not read.
    pub async fn accounts(&self) -> Result<Vec<Account>, StoreError> {
        let sql = format!("SELECT {ACCOUNT_COLUMNS} FROM kxp_accounts ORDER BY id");
        Ok(on_db!(self, |pool, _begin| {
            sqlx::query_as::<_, Account>(&sql).fetch_all(pool).await?
        }))
    }

    /// Changes an account. Setting an ops URL gives the account a new ops secret, returned
    /// here and shown once: operational webhooks are signed with it. Removing the URL erases
    /// the secret.
    pub async fn update_account(
        &self,
        id: &str,
        changes: &AccountChanges,
    ) -> Result<(Account, Option<String>), StoreError> {
        // Read under a row lock (PostgreSQL): two PATCHes at once apply one after the other,
        // never one over the other's stale read.
        let lock = match self {
            Db::Sqlite(_) => "",
            Db::Postgres(_) => " FOR UPDATE",
        };
        let select = format!("SELECT {ACCOUNT_COLUMNS} FROM kxp_accounts WHERE id = $1{lock}");
        let new_secret = match &changes.ops_url {
            Some(Some(_)) => Some(random_hex_32()),
            _ => None,
        };
        on_db!(self, |pool, begin| {
            let mut tx = pool.begin_with(begin).await?;
            let mut account = sqlx::query_as::<_, Account>(&select)
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?
                .ok_or(StoreError::NotFound)?;
            if let Some(name) = &changes.name {
                account.name.clone_from(name);
            }
            if let Some(version) = &changes.default_api_version {
                account.default_api_version.clone_from(version);
            }
            if let Some(address) = &changes.contact_email {
                account.contact_email.clone_from(address);
            }
            // The secret column changes only with the URL.
            let secret_sql = match &changes.ops_url {
                Some(url) => {
                    account.ops_url.clone_from(url);
                    "$4"
                }
                None => "ops_secret",
            };
            sqlx::query(&format!(
                "UPDATE kxp_accounts SET name = $1, default_api_version = $2, ops_url = $3, \
                 ops_secret = {secret_sql}, contact_email = $5 WHERE id = $6"
            ))
            .bind(&account.name)
            .bind(&account.default_api_version)
            .bind(&account.ops_url)
            .bind(&new_secret)
            .bind(&account.contact_email)
            .bind(id)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok((account, new_secret))
        })
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
        self.create_endpoint_with(
            account,
            &NewEndpoint {
                url,
                event_types,
                description,
                timeout_ms,
                api_version: None,
                rate_limit_per_second: None,
            },
        )
        .await
    }

    /// Creates an endpoint with every setting, and a fresh secret; returns both.
    pub async fn create_endpoint_with(
        &self,
        account: &Account,
        new: &NewEndpoint<'_>,
    ) -> Result<(Endpoint, String), StoreError> {
        let now = now_ms();
        let endpoint = Endpoint {
            id: new_id("ep"),
            account_id: account.id.clone(),
            url: new.url.to_owned(),
            description: new.description.to_owned(),
            event_types: types_json(new.event_types),
            timeout_ms: new.timeout_ms,
            status: "active".to_owned(),
            api_version: new.api_version.map(str::to_owned),
            rate_limit_per_second: new.rate_limit_per_second,
            circuit_state: "closed".to_owned(),
            circuit_opened_at: None,
            circuit_probe_at: None,
            created_at: now,
            updated_at: now,
        };
        let secret = random_hex_32();
        on_db!(self, |pool, begin| {
            let mut tx = pool.begin_with(begin).await?;
            sqlx::query(
                "INSERT INTO kxp_endpoints (id, account_id, url, description, event_types, timeout_ms, status, \
                 api_version, rate_limit_per_second, created_at, updated_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
            )
            .bind(&endpoint.id)
            .bind(&endpoint.account_id)
            .bind(&endpoint.url)
            .bind(&endpoint.description)
            .bind(&endpoint.event_types)
            .bind(endpoint.timeout_ms)
            .bind(&endpoint.status)
            .bind(&endpoint.api_version)
            .bind(endpoint.rate_limit_per_second)
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

    /// One endpoint of the account (a deleted one is not found).
    pub async fn endpoint(&self, account_id: &str, id: &str) -> Result<Endpoint, StoreError> {
        on_db!(self, |pool, _begin| {
            sqlx::query_as::<_, Endpoint>(
                "SELECT * FROM kxp_endpoints WHERE account_id = $1 AND id = $2 AND status <> 'deleted'",
            )
            .bind(account_id)
            .bind(id)
            .fetch_optional(pool)
            .await?
        })
        .ok_or(StoreError::NotFound)
    }

    /// A page of the account's endpoints (deleted ones left out), by id, after `cursor`.
    pub async fn endpoints(
        &self,
        account_id: &str,
        cursor: Option<&str>,
        limit: i64,
    ) -> Result<Vec<Endpoint>, StoreError> {
        Ok(on_db!(self, |pool, _begin| {
            sqlx::query_as::<_, Endpoint>(
                "SELECT * FROM kxp_endpoints WHERE account_id = $1 AND status <> 'deleted' \
                 AND (CAST($2 AS TEXT) IS NULL OR id > $2) ORDER BY id LIMIT $3",
            )
            .bind(account_id)
            .bind(cursor)
            .bind(limit)
            .fetch_all(pool)
            .await?
        }))
    }

    /// Applies `changes` (all checked by the caller) to one of the account's endpoints, in one
    /// statement that sets only the fields given, so concurrent changes to other fields are
    /// kept. Pending deliveries pick up the new URL and timeout at their next try.
    pub async fn update_endpoint(
        &self,
        account_id: &str,
        id: &str,
        changes: &EndpointChanges,
    ) -> Result<Endpoint, StoreError> {
        if changes.is_empty() {
            return self.endpoint(account_id, id).await;
        }
        enum Value<'a> {
            Text(Option<&'a str>),
            Int(Option<i64>),
        }
        let event_types = changes.event_types.as_deref().map(types_json);
        let mut values: Vec<(&str, Value<'_>)> = Vec::new();
        if let Some(url) = &changes.url {
            values.push(("url", Value::Text(Some(url.as_str()))));
        }
        if let Some(types) = &event_types {
            values.push(("event_types", Value::Text(Some(types.as_str()))));
        }
        if let Some(description) = &changes.description {
            values.push(("description", Value::Text(Some(description.as_str()))));
        }
        if let Some(timeout_ms) = changes.timeout_ms {
            values.push(("timeout_ms", Value::Int(Some(timeout_ms))));
        }
        if let Some(api_version) = &changes.api_version {
            values.push(("api_version", Value::Text(api_version.as_deref())));
        }
        if let Some(limit) = changes.rate_limit_per_second {
            values.push(("rate_limit_per_second", Value::Int(limit)));
        }
        values.push(("updated_at", Value::Int(Some(now_ms()))));
        let sets: Vec<String> = values
            .iter()
            .enumerate()
            .map(|(n, (column, _))| format!("{column} = ${}", n + 1))
            .collect();
        let sql = format!(
            "UPDATE kxp_endpoints SET {} WHERE account_id = ${} AND id = ${} AND status <> 'deleted' RETURNING *",
            sets.join(", "),
            values.len() + 1,
            values.len() + 2,
        );
        on_db!(self, |pool, _begin| {
            let mut query = sqlx::query_as::<_, Endpoint>(&sql);
            for (_, value) in &values {
                query = match value {
                    Value::Text(text) => query.bind(*text),
                    Value::Int(n) => query.bind(*n),
                };
            }
            query.bind(account_id).bind(id).fetch_optional(pool).await?
        })
        .ok_or(StoreError::NotFound)
    }

    /// Pauses one of the account's endpoints: its pending deliveries are held (they stay
    /// pending, are not claimed and burn no attempt) until [`resume_endpoint`](Db::resume_endpoint).
    /// Returns the endpoint and how many deliveries were put on hold. Idempotent.
    pub async fn pause_endpoint(
        &self,
        account_id: &str,
        id: &str,
    ) -> Result<(Endpoint, u64), StoreError> {
        let now = now_ms();
        // Changing the endpoint row first locks it (PostgreSQL) or the database (SQLite) until
        // commit, and ingestion and replays read the status under a share lock: no delivery
        // can be queued by the old status after the deliveries below are moved.
        on_db!(self, |pool, begin| {
            let mut tx = pool.begin_with(begin).await?;
            let endpoint = sqlx::query_as::<_, Endpoint>(
                "UPDATE kxp_endpoints SET status = $1, updated_at = $2 \
                 WHERE account_id = $3 AND id = $4 AND status <> 'deleted' RETURNING *",
            )
            .bind("paused")
            .bind(now)
            .bind(account_id)
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or(StoreError::NotFound)?;
            let moved = crate::circuit::hold_pending!(tx, id, now)?.rows_affected();
            tx.commit().await?;
            Ok((endpoint, moved))
        })
    }

    /// Resumes one of the account's endpoints (paused, disabled, or active with an open
    /// circuit: resuming says "try now"): its circuit is closed, its failure period starts
    /// again, and its held deliveries are released spread out at its rate limit, oldest first.
    /// Returns the endpoint and how many deliveries it released. Idempotent.
    pub async fn resume_endpoint(
        &self,
        account_id: &str,
        id: &str,
        protection: &crate::circuit::Protection,
    ) -> Result<(Endpoint, u64), StoreError> {
        let now = now_ms();
        on_db!(self, |pool, begin| {
            let mut tx = pool.begin_with(begin).await?;
            let endpoint = sqlx::query_as::<_, Endpoint>(
                "UPDATE kxp_endpoints SET status = 'active', circuit_state = 'closed', circuit_opened_at = NULL, \
                 circuit_probe_at = NULL, circuit_probe_id = NULL, circuit_failed_probes = 0, updated_at = $1 \
                 WHERE account_id = $2 AND id = $3 AND status <> 'deleted' RETURNING *",
            )
            .bind(now)
            .bind(account_id)
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or(StoreError::NotFound)?;
            // The breaker and auto-disable count from here: a resumed endpoint gets the full
            // threshold and the full period again.
            sqlx::query(
                "UPDATE kxp_endpoint_stats SET failing_since = NULL, consecutive_failures = 0 \
                 WHERE endpoint_id = $1",
            )
            .bind(id)
            .execute(&mut *tx)
            .await?;
            let spacing =
                crate::circuit::spacing_ms(protection.rate_of(endpoint.rate_limit_per_second));
            let moved = crate::circuit::spread_held!(tx, id, now, spacing)?.rows_affected();
            tx.commit().await?;
            Ok((endpoint, moved))
        })
    }

    /// Deletes one of the account's endpoints (softly: the row stays for its deliveries'
    /// history). No delivery is queued for it any more; its pending deliveries become dead with
    /// `last_error = endpoint_deleted`, where the dead-letter queue shows them; its secrets are
    /// erased. Returns how many deliveries it ended.
    pub async fn delete_endpoint(&self, account_id: &str, id: &str) -> Result<u64, StoreError> {
        let now = now_ms();
        on_db!(self, |pool, begin| {
            let mut tx = pool.begin_with(begin).await?;
            let deleted = sqlx::query(
                "UPDATE kxp_endpoints SET status = 'deleted', updated_at = $1 \
                 WHERE account_id = $2 AND id = $3 AND status <> 'deleted'",
            )
            .bind(now)
            .bind(account_id)
            .bind(id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if deleted == 0 {
                return Err(StoreError::NotFound);
            }
            let ended = sqlx::query(
                "UPDATE kxp_deliveries SET status = 'dead', last_error = 'endpoint_deleted', \
                 next_attempt_at = $1, updated_at = $1 WHERE endpoint_id = $2 AND status = 'pending'",
            )
            .bind(now)
            .bind(id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            sqlx::query("DELETE FROM kxp_endpoint_secrets WHERE endpoint_id = $1")
                .bind(id)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(ended)
        })
    }

    /// Gives one of the account's endpoints a new secret. The secrets it had stop signing
    /// `overlap_ms` from now (never later than they were already due to), and meanwhile every
    /// delivery carries one `v1` per live secret, newest first. Refused with
    /// [`StoreError::Conflict`] `too_many_secrets` when the endpoint would have more than
    /// [`kxp_verify::MAX_SECRETS`] live secrets: one more could not be signed with.
    pub async fn rotate_secret(
        &self,
        account_id: &str,
        id: &str,
        overlap_ms: i64,
    ) -> Result<Rotated, StoreError> {
        let now = now_ms();
        let expires_at = now.saturating_add(overlap_ms.max(0));
        let secret = random_hex_32();
        on_db!(self, |pool, begin| {
            let mut tx = pool.begin_with(begin).await?;
            // Touching the endpoint row serializes rotations of one endpoint (PostgreSQL locks
            // the row; SQLite's write lock is already held).
            let found = sqlx::query(
                "UPDATE kxp_endpoints SET updated_at = $1 WHERE account_id = $2 AND id = $3 AND status <> 'deleted'",
            )
            .bind(now)
            .bind(account_id)
            .bind(id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if found == 0 {
                return Err(StoreError::NotFound);
            }
            sqlx::query(
                "DELETE FROM kxp_endpoint_secrets WHERE endpoint_id = $1 AND expires_at IS NOT NULL AND expires_at <= $2",
            )
            .bind(id)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            let live = sqlx::query_scalar::<_, Option<i64>>(
                "SELECT expires_at FROM kxp_endpoint_secrets WHERE endpoint_id = $1",
            )
            .bind(id)
            .fetch_all(&mut *tx)
            .await?;
            let kept = if expires_at > now { live.len() } else { 0 };
            if kept + 1 > kxp_verify::MAX_SECRETS {
                let soonest = live.iter().flatten().min().copied().unwrap_or(now);
                return Err(StoreError::Conflict {
                    code: "too_many_secrets",
                    message: format!(
                        "endpoint {id} already has {} live secrets, the most a signature carries; \
                         the oldest stops signing at {}: rotate after that, or with \
                         \"overlap\": \"0s\" to retire every previous secret now",
                        live.len(),
                        rfc3339(soonest),
                    ),
                });
            }
            sqlx::query(
                "UPDATE kxp_endpoint_secrets SET expires_at = $1 \
                 WHERE endpoint_id = $2 AND (expires_at IS NULL OR expires_at > $1)",
            )
            .bind(expires_at)
            .bind(id)
            .execute(&mut *tx)
            .await?;
            sqlx::query("INSERT INTO kxp_endpoint_secrets (endpoint_id, secret, created_at) VALUES ($1, $2, $3)")
                .bind(id)
                .bind(&secret)
                .bind(now)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(Rotated {
                secret,
                previous_expires_at: expires_at,
            })
        })
    }

    /// `FOR SHARE` on PostgreSQL, for a read whose answer decides what a transaction writes:
    /// it waits for a pause, resume or delete of the same endpoint in progress, and holds the
    /// next one off until commit. (On SQLite the write transaction already holds the lock.)
    fn share_lock(&self) -> &'static str {
        match self {
            Db::Sqlite(_) => "",
            Db::Postgres(_) => " FOR SHARE",
        }
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

    // ---- deliveries: the worker's side ----

    /// Claims up to `limit` due deliveries for `owner`, at most `default_cap` per endpoint, or
    /// what `caps` allows for the endpoints it lists (0: none; this worker keeps them as busy as
    /// their concurrency or rate limit allows). Only deliveries of `active` endpoints with a
    /// closed circuit are claimed, and of a half-open one only its probe.
    ///
    /// The scan stays on the `kxp_deliveries_due` index in due order, with one primary key probe
    /// per candidate, over a window of `4 × limit` candidates; held deliveries (paused, disabled
    /// or open endpoints) are outside its range altogether ([`HELD`]). Each claimed delivery is
    /// leased for its endpoint's timeout plus `lease_extra_ms`: if the worker dies, the delivery
    /// is claimable again soon after any attempt of its could have ended.
    pub async fn claim(
        &self,
        owner: &str,
        lease_extra_ms: i64,
        limit: i64,
        caps: &[(String, usize)],
        default_cap: usize,
    ) -> Result<Vec<String>, StoreError> {
        let now = now_ms();
        let caps = serde_json::to_string(
            &caps
                .iter()
                .cloned()
                .collect::<std::collections::HashMap<_, _>>(),
        )
        .unwrap_or_else(|_| "{}".to_owned());
        let default_cap = i64::try_from(default_cap).unwrap_or(i64::MAX);
        let sql = match self {
            Db::Sqlite(_) => CLAIM_SQLITE.as_str(),
            Db::Postgres(_) => CLAIM_POSTGRES.as_str(),
        };
        Ok(on_db!(self, |pool, _begin| {
            sqlx::query_scalar::<_, String>(sql)
                .bind(lease_extra_ms)
                .bind(owner)
                .bind(now)
                .bind(&caps)
                .bind(limit)
                .bind(default_cap)
                .fetch_all(pool)
                .await?
        }))
    }

    /// What a worker needs to send a claimed delivery.
    pub async fn job(&self, delivery_id: &str) -> Result<Job, StoreError> {
        on_db!(self, |pool, _begin| {
            sqlx::query_as::<_, Job>(
                "SELECT d.id, d.event_id, e.event_type, e.payload, d.endpoint_id, p.url, p.timeout_ms, d.attempts, \
                 p.status AS endpoint_status, p.rate_limit_per_second, p.circuit_state, p.circuit_probe_id \
                 FROM kxp_deliveries d JOIN kxp_events e ON e.id = d.event_id JOIN kxp_endpoints p ON p.id = d.endpoint_id \
                 WHERE d.id = $1",
            )
            .bind(delivery_id)
            .fetch_optional(pool)
            .await?
        })
        .ok_or(StoreError::NotFound)
    }

    /// Records a finished attempt and moves the delivery on, if `owner` still holds its lease;
    /// in the same transaction, updates the endpoint's statistics and its circuit breaker
    /// ([`crate::circuit`]), and queues the notification a state change calls for.
    /// [`Finished::LeaseLost`] when the lease was lost (it expired and another worker took
    /// over): then nothing is written, and that worker's outcome stands.
    pub async fn finish_attempt(
        &self,
        delivery_id: &str,
        owner: &str,
        attempt: i64,
        record: &AttemptRecord,
        next: NextState,
        protection: &crate::circuit::Protection,
    ) -> Result<Finished, StoreError> {
        let now = now_ms();
        let (status, next_at) = match next {
            NextState::Delivered => ("delivered", now),
            NextState::RetryAt(at) => ("pending", at),
            NextState::Dead => ("dead", now),
        };
        let lock_endpoint = matches!(self, Db::Postgres(_)).then_some(
            "SELECT 1 FROM kxp_endpoints WHERE id = (SELECT endpoint_id FROM kxp_deliveries WHERE id = $1) \
             FOR NO KEY UPDATE",
        );
        on_db!(self, |pool, begin| {
            let mut tx = pool.begin_with(begin).await?;
            // The endpoint row first (PostgreSQL), as every transaction that changes an
            // endpoint and its deliveries takes it: one lock order (no deadlock with a resume),
            // and a delete waits for this attempt's outcome instead of missing it.
            if let Some(lock) = lock_endpoint {
                sqlx::query(lock)
                    .bind(delivery_id)
                    .execute(&mut *tx)
                    .await?;
            }
            let updated = sqlx::query(FINISH_ATTEMPT.as_str())
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
                return Ok(Finished::LeaseLost);
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
            // The endpoint's health statistics and its breaker move on in the same transaction.
            crate::health::record_stats!(tx, delivery_id, now, record)?;
            let success = record.error.is_none();
            let changed =
                crate::circuit::after_attempt!(tx, delivery_id, success, now, protection)?;
            let mut notices = 0;
            if let Some((transition, endpoint)) = &changed
                && let Some(kind) = transition.notice()
            {
                notices = crate::notify::queue_notices!(tx, kind, &endpoint.id, now)?;
            }
            tx.commit().await?;
            Ok(Finished::Recorded {
                transition: changed.map(|(transition, _)| transition),
                notices,
            })
        })
    }

    /// Puts a claimed delivery back, untried (shutdown, more claimed than an endpoint may take
    /// at once, or an endpoint paused since the claim); if its endpoint was deleted meanwhile,
    /// it ends dead with `endpoint_deleted` instead.
    pub async fn release(&self, delivery_id: &str, owner: &str) -> Result<(), StoreError> {
        let sql = format!(
            "UPDATE kxp_deliveries SET status = CASE WHEN {ENDPOINT_DELETED} THEN 'dead' ELSE 'pending' END, \
             last_error = CASE WHEN {ENDPOINT_DELETED} THEN 'endpoint_deleted' ELSE last_error END, \
             lease_until = NULL, lease_owner = NULL, updated_at = $1 \
             WHERE id = $2 AND lease_owner = $3 AND status = 'delivering'"
        );
        on_db!(self, |pool, _begin| {
            sqlx::query(&sql)
                .bind(now_ms())
                .bind(delivery_id)
                .bind(owner)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// Makes deliveries whose lease ran out (their worker died) claimable again (or dead with
    /// `endpoint_deleted`, if their endpoint was deleted meanwhile).
    pub async fn reclaim_expired(&self) -> Result<u64, StoreError> {
        let now = now_ms();
        let sql = format!(
            "UPDATE kxp_deliveries SET status = CASE WHEN {ENDPOINT_DELETED} THEN 'dead' ELSE 'pending' END, \
             last_error = CASE WHEN {ENDPOINT_DELETED} THEN 'endpoint_deleted' ELSE last_error END, \
             lease_until = NULL, lease_owner = NULL, next_attempt_at = $1, updated_at = $1 \
             WHERE status = 'delivering' AND lease_until < $1"
        );
        Ok(on_db!(self, |pool, _begin| {
            sqlx::query(&sql)
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
        let endpoint_sql = self.endpoint_shared_sql();
        let now = now_ms();
        on_db!(self, |pool, begin| {
            let mut tx = pool.begin_with(begin).await?;
            let endpoint = sqlx::query_as::<_, Endpoint>(&endpoint_sql)
                .bind(&old.endpoint_id)
                .fetch_optional(&mut *tx)
                .await?;
            let due = replay_due(endpoint.as_ref(), &old.endpoint_id, now)?;
            insert_delivery!(
                tx,
                &new_id,
                account_id,
                &old.event_id,
                &old.endpoint_id,
                now,
                due
            )?;
            mark_replayed!(tx, &old.id, &new_id)?;
            tx.commit().await?;
        });
        self.delivery(account_id, &new_id).await
    }

    /// An endpoint by id, read under [`share_lock`](Db::share_lock), for a transaction that
    /// queues deliveries to it.
    fn endpoint_shared_sql(&self) -> String {
        format!(
            "SELECT * FROM kxp_endpoints WHERE id = $1{}",
            self.share_lock()
        )
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
        let endpoint_sql = self.endpoint_shared_sql();
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
                let endpoint = sqlx::query_as::<_, Endpoint>(&endpoint_sql)
                    .bind(endpoint_id)
                    .fetch_optional(&mut *tx)
                    .await?;
                let due = replay_due(endpoint.as_ref(), endpoint_id, now)?;
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
                        now,
                        due
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

/// When a replay to `endpoint` is due ([`Endpoint::due_for_new_delivery`]); a deleted endpoint
/// takes no deliveries.
fn replay_due(endpoint: Option<&Endpoint>, endpoint_id: &str, now: i64) -> Result<i64, StoreError> {
    match endpoint {
        Some(endpoint) if endpoint.status != "deleted" => Ok(endpoint.due_for_new_delivery(now)),
        _ => Err(StoreError::Conflict {
            code: "endpoint_deleted",
            message: format!("endpoint {endpoint_id} was deleted: nothing can be delivered to it"),
        }),
    }
}

/// The worker's claim ([`Db::claim`]) for one backend; built once each.
fn claim_sql(sqlite: bool) -> String {
    // `cap` is the endpoint's entry in the JSON object `$4`, else `$6`.
    let (cap_d, cap_c, lock) = if sqlite {
        (
            "COALESCE(json_extract($4, '$.' || d.endpoint_id), $6)",
            "COALESCE(json_extract($4, '$.' || c.endpoint_id), $6)",
            "",
        )
    } else {
        // SKIP LOCKED: rows another process is claiming right now are passed over rather
        // than waited for, so workers never hold the same delivery.
        (
            "COALESCE(($4::jsonb ->> d.endpoint_id)::bigint, $6)",
            "COALESCE(($4::jsonb ->> c.endpoint_id)::bigint, $6)",
            " FOR UPDATE OF d SKIP LOCKED",
        )
    };
    format!(
        "UPDATE kxp_deliveries SET status = 'delivering', lease_owner = $2, updated_at = $3, \
           lease_until = $3 + $1 + (SELECT timeout_ms FROM kxp_endpoints p WHERE p.id = endpoint_id) \
         WHERE id IN (SELECT c.id FROM ( \
             SELECT w.id, w.endpoint_id, w.next_attempt_at, \
               ROW_NUMBER() OVER (PARTITION BY w.endpoint_id ORDER BY w.next_attempt_at) AS rn \
             FROM (SELECT d.id, d.endpoint_id, d.next_attempt_at FROM kxp_deliveries d \
               WHERE d.status = 'pending' AND d.next_attempt_at <= $3 AND {cap_d} > 0 \
               AND EXISTS (SELECT 1 FROM kxp_endpoints a WHERE a.id = d.endpoint_id AND a.status = 'active' \
                 AND (a.circuit_state = 'closed' OR (a.circuit_state = 'half_open' AND a.circuit_probe_id = d.id))) \
               ORDER BY d.next_attempt_at LIMIT $5 * 4{lock}) w \
           ) c WHERE c.rn <= {cap_c} ORDER BY c.next_attempt_at LIMIT $5) \
         RETURNING id"
    )
}

static CLAIM_SQLITE: LazyLock<String> = LazyLock::new(|| claim_sql(true));
static CLAIM_POSTGRES: LazyLock<String> = LazyLock::new(|| claim_sql(false));

/// Records an attempt's outcome on its delivery ([`Db::finish_attempt`]): `$1` the new status,
/// … `$8` the delivery, `$9` the lease owner. A retry for an endpoint deleted during the
/// attempt ends the delivery instead. Built once: it runs with every attempt.
static FINISH_ATTEMPT: LazyLock<String> = LazyLock::new(|| {
    format!(
        "UPDATE kxp_deliveries SET status = CASE WHEN $1 = 'pending' AND {ENDPOINT_DELETED} THEN 'dead' ELSE $1 END, \
         attempts = $2, first_attempt_at = COALESCE(first_attempt_at, $3), \
         next_attempt_at = $4, lease_until = NULL, lease_owner = NULL, last_status = $5, \
         last_error = CASE WHEN $1 = 'pending' AND {ENDPOINT_DELETED} THEN 'endpoint_deleted' ELSE $6 END, updated_at = $7 \
         WHERE id = $8 AND lease_owner = $9 AND status = 'delivering'"
    )
});

/// Subscribed types as stored: a JSON array.
fn types_json(types: &[String]) -> String {
    serde_json::to_string(types).unwrap_or_else(|_| "[\"*\"]".to_owned())
}

/// True when the row's endpoint is deleted, in an `UPDATE kxp_deliveries`: a delivery that
/// would go back to pending then ends dead instead, as the deletion made its siblings.
const ENDPOINT_DELETED: &str =
    "(SELECT p.status FROM kxp_endpoints p WHERE p.id = kxp_deliveries.endpoint_id) = 'deleted'";

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
