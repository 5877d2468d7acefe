//! The statements the store's multi-statement transactions run, for each database: a sealed
//! [`Backend`] trait over sqlx's `Sqlite` and `Postgres`, one method per statement, and one
//! generator per trait that implements it for both (`backend!` here; `recording_sql!` for the
//! attempt-recording path's statements, in [`recording`]). The transactions themselves
//! (recording attempts, ingestion, the breaker, notices, replays, endpoint changes) are ordinary
//! generic functions over `DB: Backend` that call these methods: their logic is written and
//! compiled once, and each statement is type-checked where it is written, for both databases.
//!
//! Where the databases differ (how a write transaction begins, row locks, JSON functions, how a
//! batch of attempts is written), the generator takes the difference as a parameter, or the
//! trait as a constant ([`Backend::BEGIN`], [`Backend::LOCKS_ROWS`]).

pub(super) mod recording;

use std::future::Future;
use std::sync::LazyLock;

use crate::model::{
    AccountId, DeliveryId, Endpoint, EndpointId, Event, EventId, Ingest, Subscriber,
};

pub(crate) use recording::{NewNotice, RecordingSql};

mod sealed {
    pub(crate) trait Sealed {}
}

/// A new delivery, as [`Backend::insert_delivery`] writes it.
pub(crate) struct NewDelivery<'a> {
    /// Its id (`dlv_…`).
    pub id: &'a DeliveryId,
    /// The event's account.
    pub account_id: &'a AccountId,
    /// The event.
    pub event_id: &'a EventId,
    /// The endpoint.
    pub endpoint_id: &'a EndpointId,
    /// `pending`, or [`UNREAD`](crate::model::UNREAD) for a pull endpoint.
    pub status: &'static str,
    /// Its creation time.
    pub now: i64,
    /// When it is due ([`HELD`](crate::model::HELD) for a resting endpoint).
    pub due: i64,
    /// The sequence number of the delivery it replays; `None` for a new one (the sequencer
    /// numbers it once it commits).
    pub sequence: Option<i64>,
}

/// A database the store's transactions run on. Sealed: its methods are the store's
/// statements, implemented for `sqlx::Sqlite` and `sqlx::Postgres` by `backend!` (and those of
/// the attempt-recording path by [`RecordingSql`]'s generator). Each takes the transaction's
/// connection (a `Transaction` derefs to it) and returns a `Send` future, so generic code over
/// it needs no sqlx `Executor` bounds and the engine can spawn it.
pub(crate) trait Backend: sqlx::Database + sealed::Sealed + RecordingSql {
    /// The statement that opens a write transaction.
    const BEGIN: &'static str;

    /// Whether a transaction locks the rows it reads only when told to: PostgreSQL's do, with
    /// `FOR UPDATE` and its kin; SQLite's write transaction holds the database's one write
    /// lock from its `BEGIN IMMEDIATE`, so there is nothing more to lock (nor a clause for it).
    const LOCKS_ROWS: bool;

    /// `clause` (` FOR UPDATE`, ` FOR NO KEY UPDATE`, ` FOR UPDATE SKIP LOCKED`…) where the
    /// database locks rows, nothing where it does not ([`Backend::LOCKS_ROWS`]).
    fn row_lock(clause: &'static str) -> &'static str {
        if Self::LOCKS_ROWS { clause } else { "" }
    }

    /// The account's event with this idempotency key.
    fn event_by_key(
        conn: &mut Self::Connection,
        account_id: &AccountId,
        key: &str,
    ) -> impl Future<Output = Result<Option<Event>, sqlx::Error>> + Send;

    /// The account's event with this id.
    fn event_by_id(
        conn: &mut Self::Connection,
        account_id: &AccountId,
        id: &EventId,
    ) -> impl Future<Output = Result<Option<Event>, sqlx::Error>> + Send;

    /// Inserts a new event of `item`.
    fn insert_event(
        conn: &mut Self::Connection,
        event: &Event,
        item: &Ingest,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// Stores an event's tags in one multi-row insert: `tags` a JSON array of strings (checked
    /// and deduplicated by the API), taken apart in SQL.
    fn insert_tags(
        conn: &mut Self::Connection,
        event: &Event,
        tags: String,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// The account's subscribable endpoints, for ingestion, read under the share lock
    /// ([`Backend::endpoint_shared`]).
    fn subscribers(
        conn: &mut Self::Connection,
        account_id: &AccountId,
    ) -> impl Future<Output = Result<Vec<Subscriber>, sqlx::Error>> + Send;

    /// Inserts a pending delivery.
    fn insert_delivery(
        conn: &mut Self::Connection,
        delivery: &NewDelivery<'_>,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// An endpoint by id, for a transaction that queues deliveries to it: `FOR SHARE` on
    /// PostgreSQL, so it waits for any uncommitted change of the row — a pause, resume or
    /// delete ([`Backend::lock_for_change`]), or a breaker transition that holds or releases
    /// the endpoint's deliveries — and holds the next one off until commit: a new delivery is
    /// never queued by a state that is being left (held on a circuit that is closing, due on
    /// one that is opening). It does not conflict with itself or with recording attempts
    /// (`FOR KEY SHARE`), and the breaker writes the row only on transitions, so events and
    /// attempts of one endpoint do not wait for each other. (On SQLite the write transaction
    /// already holds the lock.)
    fn endpoint_shared(
        conn: &mut Self::Connection,
        account_id: &AccountId,
        endpoint_id: &EndpointId,
    ) -> impl Future<Output = Result<Option<Endpoint>, sqlx::Error>> + Send;

    /// Links one of the account's replayed deliveries to its replay.
    fn mark_replayed(
        conn: &mut Self::Connection,
        account_id: &AccountId,
        old_id: &DeliveryId,
        new_id: &DeliveryId,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// Links one of the account's replayed deliveries to its replay unless another replay
    /// did: answers whether this one did.
    fn claim_replay(
        conn: &mut Self::Connection,
        account_id: &AccountId,
        old_id: &DeliveryId,
        new_id: &DeliveryId,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    /// Locks one of the account's endpoints for a change of its status, before the change:
    /// `FOR UPDATE` on PostgreSQL, which waits for every ingestion, replay and batch of
    /// attempts holding the row under [`endpoint_shared`](Backend::endpoint_shared)'s lock, so
    /// none of them can queue or record by the old status after the change moves the
    /// endpoint's deliveries. Nothing on SQLite, whose write transaction already excludes them.
    fn lock_for_change(
        conn: &mut Self::Connection,
        account_id: &AccountId,
        id: &EndpointId,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// Pauses one of the account's endpoints, unless deleted; answers it.
    fn pause_endpoint(
        conn: &mut Self::Connection,
        account_id: &AccountId,
        id: &EndpointId,
        now: i64,
    ) -> impl Future<Output = Result<Option<Endpoint>, sqlx::Error>> + Send;

    /// Makes one of the account's endpoints active with a closed circuit, unless deleted;
    /// answers it.
    fn resume_endpoint(
        conn: &mut Self::Connection,
        account_id: &AccountId,
        id: &EndpointId,
        now: i64,
    ) -> impl Future<Output = Result<Option<Endpoint>, sqlx::Error>> + Send;

    /// Starts the account's endpoint's failure period and consecutive failures again.
    fn reset_failures(
        conn: &mut Self::Connection,
        account_id: &AccountId,
        id: &EndpointId,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// Marks one of the account's endpoints deleted, unless it is; answers how many rows.
    fn delete_endpoint(
        conn: &mut Self::Connection,
        account_id: &AccountId,
        id: &EndpointId,
        now: i64,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send;

    /// Ends the account's endpoint's pending deliveries (and a pull endpoint's unread ones)
    /// dead with `endpoint_deleted`; answers how many.
    fn end_pending(
        conn: &mut Self::Connection,
        account_id: &AccountId,
        id: &EndpointId,
        now: i64,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send;

    /// Erases the account's endpoint's secrets.
    fn erase_secrets(
        conn: &mut Self::Connection,
        account_id: &AccountId,
        id: &EndpointId,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;
}

/// Ingestion's statements, each naming its account (`$1` or `$2`): on Citus each runs on the
/// account's shard (`store/citus_plans.rs` checks the plans).
///
/// The account's event with idempotency key `$2`.
pub(crate) static EVENT_BY_KEY: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {} FROM kxp_events e WHERE e.account_id = $1 AND e.idempotency_key = $2",
        crate::store::events::event_columns("$3", "$1")
    )
});

/// A new event.
pub(crate) const INSERT_EVENT: &str = "INSERT INTO kxp_events (id, account_id, event_type, api_version, payload, created_at, idempotency_key, request_hash, ordering_key, traceparent, tracestate, payload_expires_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)";

/// A new delivery.
pub(crate) const INSERT_DELIVERY: &str = "INSERT INTO kxp_deliveries (id, account_id, event_id, endpoint_id, status, attempts, next_attempt_at, created_at, updated_at, sequence) \
     VALUES ($1, $2, $3, $4, $8, 0, $6, $5, $5, $7)";

/// The endpoints of account `$1` that get deliveries (a backend's row lock follows).
macro_rules! subscribers {
    () => {
        "SELECT id, status, circuit_state, event_types, api_version, content_filter, mode FROM kxp_endpoints \
         WHERE account_id = $1 AND status IN ('active', 'paused', 'disabled')"
    };
}
#[cfg(test)]
pub(crate) use subscribers;

/// Implements [`Backend`] for `$db`. One body for both databases; the differences are the
/// parameters: `$share` the share lock's clause ([`Backend::endpoint_shared`]), `$tags` the
/// tags' insert, and `$own` what is written per database (`BEGIN`, `LOCKS_ROWS`,
/// [`Backend::lock_for_change`]).
macro_rules! backend {
    (
        $db:ty,
        share: $share:literal,
        tags: $tags:literal,
        { $($own:tt)* }
    ) => {
        impl sealed::Sealed for $db {}

        impl Backend for $db {
            $($own)*

            async fn event_by_key(
                conn: &mut Self::Connection,
                account_id: &AccountId,
                key: &str,
            ) -> Result<Option<Event>, sqlx::Error> {
                sqlx::query_as::<_, Event>(EVENT_BY_KEY.as_str())
                .bind(account_id)
                .bind(key)
                .bind(crate::model::now_ms())
                .fetch_optional(&mut *conn)
                .await
            }

            async fn event_by_id(
                conn: &mut Self::Connection,
                account_id: &AccountId,
                id: &EventId,
            ) -> Result<Option<Event>, sqlx::Error> {
                sqlx::query_as::<_, Event>(crate::store::events::EVENT_BY_ID.as_str())
                    .bind(account_id)
                    .bind(id)
                    .bind(crate::model::now_ms())
                    .fetch_optional(&mut *conn)
                    .await
            }

            async fn insert_event(
                conn: &mut Self::Connection,
                event: &Event,
                item: &Ingest,
            ) -> Result<(), sqlx::Error> {
                sqlx::query(INSERT_EVENT)
                .bind(&event.id)
                .bind(&event.account_id)
                .bind(&event.event_type)
                .bind(&event.api_version)
                .bind(&event.payload)
                .bind(event.created_at)
                .bind(&item.idempotency)
                .bind(&event.request_hash)
                .bind(&item.ordering_key)
                .bind(item.trace.as_ref().map(|t| t.parent.to_string()))
                .bind(item.trace.as_ref().and_then(|t| t.state.as_deref()))
                .bind(item.retention_days.map(|days| event.created_at.saturating_add(i64::from(days) * crate::model::DAY_MS)))
                .execute(&mut *conn)
                .await?;
                Ok(())
            }

            async fn insert_tags(
                conn: &mut Self::Connection,
                event: &Event,
                tags: String,
            ) -> Result<(), sqlx::Error> {
                sqlx::query($tags)
                    .bind(&event.id)
                    .bind(&event.account_id)
                    .bind(event.created_at)
                    .bind(tags)
                    .execute(&mut *conn)
                    .await?;
                Ok(())
            }

            async fn subscribers(
                conn: &mut Self::Connection,
                account_id: &AccountId,
            ) -> Result<Vec<Subscriber>, sqlx::Error> {
                sqlx::query_as::<_, Subscriber>(concat!(subscribers!(), $share))
                .bind(account_id)
                .fetch_all(&mut *conn)
                .await
            }

            async fn insert_delivery(
                conn: &mut Self::Connection,
                delivery: &NewDelivery<'_>,
            ) -> Result<(), sqlx::Error> {
                sqlx::query(INSERT_DELIVERY)
                .bind(delivery.id)
                .bind(delivery.account_id)
                .bind(delivery.event_id)
                .bind(delivery.endpoint_id)
                .bind(delivery.now)
                .bind(delivery.due)
                .bind(delivery.sequence)
                .bind(delivery.status)
                .execute(&mut *conn)
                .await?;
                Ok(())
            }

            async fn endpoint_shared(
                conn: &mut Self::Connection,
                account_id: &AccountId,
                endpoint_id: &EndpointId,
            ) -> Result<Option<Endpoint>, sqlx::Error> {
                sqlx::query_as::<_, Endpoint>(concat!(
                    "SELECT * FROM kxp_endpoints WHERE account_id = $2 AND id = $1",
                    $share
                ))
                .bind(endpoint_id)
                .bind(account_id)
                    .fetch_optional(&mut *conn)
                    .await
            }

            async fn mark_replayed(
                conn: &mut Self::Connection,
                account_id: &AccountId,
                old_id: &DeliveryId,
                new_id: &DeliveryId,
            ) -> Result<(), sqlx::Error> {
                sqlx::query("UPDATE kxp_deliveries SET replayed_by = $1 WHERE account_id = $3 AND id = $2")
                    .bind(new_id)
                    .bind(old_id)
                    .bind(account_id)
                    .execute(&mut *conn)
                    .await?;
                Ok(())
            }

            async fn claim_replay(
                conn: &mut Self::Connection,
                account_id: &AccountId,
                old_id: &DeliveryId,
                new_id: &DeliveryId,
            ) -> Result<bool, sqlx::Error> {
                let claimed = sqlx::query(
                    "UPDATE kxp_deliveries SET replayed_by = $1 \
                     WHERE account_id = $3 AND id = $2 AND replayed_by IS NULL",
                )
                .bind(new_id)
                .bind(old_id)
                .bind(account_id)
                .execute(&mut *conn)
                .await?
                .rows_affected();
                Ok(claimed != 0)
            }

            async fn pause_endpoint(
                conn: &mut Self::Connection,
                account_id: &AccountId,
                id: &EndpointId,
                now: i64,
            ) -> Result<Option<Endpoint>, sqlx::Error> {
                sqlx::query_as::<_, Endpoint>(
                    "UPDATE kxp_endpoints SET status = $1, updated_at = $2 \
                     WHERE account_id = $3 AND id = $4 AND status <> 'deleted' RETURNING *",
                )
                .bind("paused")
                .bind(now)
                .bind(account_id)
                .bind(id)
                .fetch_optional(&mut *conn)
                .await
            }

            async fn resume_endpoint(
                conn: &mut Self::Connection,
                account_id: &AccountId,
                id: &EndpointId,
                now: i64,
            ) -> Result<Option<Endpoint>, sqlx::Error> {
                sqlx::query_as::<_, Endpoint>(
                    "UPDATE kxp_endpoints SET status = 'active', circuit_state = 'closed', circuit_opened_at = NULL, \
                     circuit_probe_at = NULL, circuit_probe_id = NULL, circuit_failed_probes = 0, updated_at = $1 \
                     WHERE account_id = $2 AND id = $3 AND status <> 'deleted' RETURNING *",
                )
                .bind(now)
                .bind(account_id)
                .bind(id)
                .fetch_optional(&mut *conn)
                .await
            }

            async fn reset_failures(
                conn: &mut Self::Connection,
                account_id: &AccountId,
                id: &EndpointId,
            ) -> Result<(), sqlx::Error> {
                sqlx::query(
                    "UPDATE kxp_endpoint_stats SET failing_since = NULL, consecutive_failures = 0 \
                     WHERE account_id = $2 AND endpoint_id = $1",
                )
                .bind(id)
                .bind(account_id)
                .execute(&mut *conn)
                .await?;
                Ok(())
            }

            async fn delete_endpoint(
                conn: &mut Self::Connection,
                account_id: &AccountId,
                id: &EndpointId,
                now: i64,
            ) -> Result<u64, sqlx::Error> {
                Ok(sqlx::query(
                    "UPDATE kxp_endpoints SET status = 'deleted', updated_at = $1, \
                     credentials = NULL, credentials_view = NULL \
                     WHERE account_id = $2 AND id = $3 AND status <> 'deleted'",
                )
                .bind(now)
                .bind(account_id)
                .bind(id)
                .execute(&mut *conn)
                .await?
                .rows_affected())
            }

            async fn end_pending(
                conn: &mut Self::Connection,
                account_id: &AccountId,
                id: &EndpointId,
                now: i64,
            ) -> Result<u64, sqlx::Error> {
                Ok(sqlx::query(
                    "UPDATE kxp_deliveries SET status = 'dead', last_error = 'endpoint_deleted', \
                     next_attempt_at = $1, updated_at = $1 WHERE account_id = $3 AND endpoint_id = $2 AND status IN ('pending', 'unread')",
                )
                .bind(now)
                .bind(id)
                .bind(account_id)
                .execute(&mut *conn)
                .await?
                .rows_affected())
            }

            async fn erase_secrets(
                conn: &mut Self::Connection,
                account_id: &AccountId,
                id: &EndpointId,
            ) -> Result<(), sqlx::Error> {
                sqlx::query("DELETE FROM kxp_endpoint_secrets WHERE account_id = $2 AND endpoint_id = $1")
                    .bind(id)
                    .bind(account_id)
                    .execute(&mut *conn)
                    .await?;
                Ok(())
            }
        }
    };
}

backend!(
    sqlx::Sqlite,
    share: "",
    tags: "INSERT INTO kxp_event_tags (event_id, tag, account_id, created_at) \
           SELECT $1, value, $2, $3 FROM json_each($4)",
    {
        // BEGIN IMMEDIATE: a deferred transaction that reads first and writes later can fail
        // with SQLITE_BUSY when two of them race to upgrade; taking the write lock up front
        // makes them queue on the busy timeout instead.
        const BEGIN: &'static str = "BEGIN IMMEDIATE";
        const LOCKS_ROWS: bool = false;
        async fn lock_for_change(
            _conn: &mut Self::Connection,
            _account_id: &AccountId,
            _id: &EndpointId,
        ) -> Result<(), sqlx::Error> {
            Ok(())
        }
    }
);

backend!(
    sqlx::Postgres,
    share: " FOR SHARE",
    tags: "INSERT INTO kxp_event_tags (event_id, tag, account_id, created_at) \
           SELECT $1, t.tag, $2, $3 FROM jsonb_array_elements_text($4::jsonb) AS t(tag)",
    {
        const BEGIN: &'static str = "BEGIN";
        const LOCKS_ROWS: bool = true;
        async fn lock_for_change(
            conn: &mut Self::Connection,
            account_id: &AccountId,
            id: &EndpointId,
        ) -> Result<(), sqlx::Error> {
            sqlx::query("SELECT 1 FROM kxp_endpoints WHERE account_id = $1 AND id = $2 FOR UPDATE")
                .bind(account_id)
                .bind(id)
                .execute(&mut *conn)
                .await?;
            Ok(())
        }
    }
);
