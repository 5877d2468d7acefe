//! The statements the store's multi-statement transactions run, for each database: a sealed
//! [`Backend`] trait over sqlx's `Sqlite` and `Postgres`, one method per statement, and one
//! generator (`backend!`) that implements it for both. The transactions themselves (recording
//! attempts, ingestion, the breaker, notices, replays, endpoint changes) are ordinary generic
//! functions over `DB: Backend` that call these methods: their logic is written and compiled
//! once, and each statement is type-checked here, where it is written, for both databases.
//!
//! Where the databases differ (how a write transaction begins, the share lock, JSON functions,
//! how a batch of attempts is written), the generator takes the difference as a parameter.

use std::future::Future;

use crate::model::{
    DeliveryId, Endpoint, Event, FinishAttempt, Ingest, NoticeFacts, Subscriber, Transition,
};
use crate::store::circuit::{BREAKER_ROW, BreakerRow, CLOSE, DISABLE, OPEN, REOPEN};
use crate::store::health::{STATS_POSTGRES, STATS_SQLITE, StatsRow};
use crate::store::notifications::NOTICE_FACTS;
use crate::store::record::{FINISH_ATTEMPT, FINISH_ATTEMPTS_POSTGRES, Finishing};

mod sealed {
    pub(crate) trait Sealed {}
}

/// A new pending delivery, as [`Backend::insert_delivery`] writes it.
pub(crate) struct NewDelivery<'a> {
    /// Its id (`dlv_…`).
    pub id: &'a str,
    /// The event's account.
    pub account_id: &'a str,
    /// The event.
    pub event_id: &'a str,
    /// The endpoint.
    pub endpoint_id: &'a str,
    /// Its creation time.
    pub now: i64,
    /// When it is due ([`HELD`](crate::model::HELD) for a resting endpoint).
    pub due: i64,
    /// The sequence number of the delivery it replays; `None` for a new one (the sequencer
    /// numbers it once it commits).
    pub sequence: Option<i64>,
}

/// One row of the notification outbox, as [`Backend::insert_notice`] writes it.
pub(crate) struct NewNotice<'a> {
    /// What the notice is about.
    pub facts: &'a NoticeFacts,
    /// The notice's kind.
    pub kind: &'a str,
    /// `webhook` or `email`.
    pub channel: &'a str,
    /// The URL or address.
    pub target: &'a str,
    /// The notice's own event id.
    pub event_id: &'a str,
    /// The envelope it sends.
    pub payload: &'a str,
    /// When it is queued (and due).
    pub now: i64,
}

/// A database the store's transactions run on. Sealed: its methods are the store's
/// statements, implemented for `sqlx::Sqlite` and `sqlx::Postgres` by `backend!`. Each takes
/// the transaction's connection (a `Transaction` derefs to it) and returns a `Send` future, so
/// generic code over it needs no sqlx `Executor` bounds and the engine can spawn it.
pub(crate) trait Backend: sqlx::Database + sealed::Sealed {
    /// The statement that opens a write transaction.
    const BEGIN: &'static str;

    /// Writes a batch's finished attempts to their delivery rows and attempt rows, each only
    /// if its owner still holds the lease; answers, per item, whether it did.
    fn finish_deliveries(
        conn: &mut Self::Connection,
        batch: &[FinishAttempt],
        finishing: &[Finishing<'_>],
        now: i64,
    ) -> impl Future<Output = Result<Vec<bool>, sqlx::Error>> + Send;

    /// [`StatsSql::lock`](crate::store::health::StatsSql::lock): `ids` a JSON array.
    fn lock_stats(
        conn: &mut Self::Connection,
        ids: &str,
        now: i64,
    ) -> impl Future<Output = Result<Vec<StatsRow>, sqlx::Error>> + Send;

    /// [`StatsSql::write`](crate::store::health::StatsSql::write).
    fn write_stats(
        conn: &mut Self::Connection,
        stats: String,
        now: i64,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// [`StatsSql::add_hourly`](crate::store::health::StatsSql::add_hourly).
    fn add_hourly(
        conn: &mut Self::Connection,
        tallies: String,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// The [`BreakerRow`]s of the endpoints in `ids`, a JSON array.
    fn breaker_rows(
        conn: &mut Self::Connection,
        ids: &str,
    ) -> impl Future<Output = Result<Vec<BreakerRow>, sqlx::Error>> + Send;

    /// One endpoint's [`BreakerRow`].
    fn breaker_row(
        conn: &mut Self::Connection,
        endpoint_id: &str,
    ) -> impl Future<Output = Result<BreakerRow, sqlx::Error>> + Send;

    /// Makes `transition` on the endpoint (`probe_at`: the next probe, for the two that open
    /// the circuit), if it still leaves the state it is made from; answers whether it did.
    /// Nothing for [`Transition::Stay`].
    fn transition(
        conn: &mut Self::Connection,
        transition: Transition,
        endpoint_id: &str,
        now: i64,
        probe_at: Option<i64>,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    /// Holds one pending delivery (a half-open circuit's failed probe).
    fn hold_delivery(
        conn: &mut Self::Connection,
        delivery_id: &str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// Releases an endpoint's held deliveries: the oldest due at `now`, each next one
    /// `spacing` ms later, so a backlog drains at the endpoint's rate limit. One statement;
    /// `UPDATE … FROM` with a window function works on both backends. Answers how many.
    fn spread_held(
        conn: &mut Self::Connection,
        endpoint_id: &str,
        now: i64,
        spacing: i64,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send;

    /// Holds every pending delivery of an endpoint (they keep their attempt counts;
    /// [`spread_held`](Backend::spread_held) releases them). Answers how many.
    fn hold_pending(
        conn: &mut Self::Connection,
        endpoint_id: &str,
        now: i64,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send;

    /// Moves an open circuit whose cool-down has passed to `half_open`; answers how many rows
    /// it moved (0 when another process did it first).
    fn half_open(
        conn: &mut Self::Connection,
        endpoint_id: &str,
        now: i64,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send;

    /// Releases the held delivery with the most tries left (the oldest of those) as the
    /// endpoint's probe.
    fn release_probe(
        conn: &mut Self::Connection,
        endpoint_id: &str,
        now: i64,
    ) -> impl Future<Output = Result<Option<DeliveryId>, sqlx::Error>> + Send;

    /// Records the endpoint's probe.
    fn set_probe(
        conn: &mut Self::Connection,
        probe: &str,
        endpoint_id: &str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// The facts a notice about the endpoint describes.
    fn notice_facts(
        conn: &mut Self::Connection,
        endpoint_id: &str,
    ) -> impl Future<Output = Result<NoticeFacts, sqlx::Error>> + Send;

    /// Queues one notice on one channel.
    fn insert_notice(
        conn: &mut Self::Connection,
        notice: &NewNotice<'_>,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// The account's event with this idempotency key.
    fn event_by_key(
        conn: &mut Self::Connection,
        account_id: &str,
        key: &str,
    ) -> impl Future<Output = Result<Option<Event>, sqlx::Error>> + Send;

    /// The account's event with this id.
    fn event_by_id(
        conn: &mut Self::Connection,
        account_id: &str,
        id: &str,
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
        account_id: &str,
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
        endpoint_id: &str,
    ) -> impl Future<Output = Result<Option<Endpoint>, sqlx::Error>> + Send;

    /// Links a replayed delivery to its replay.
    fn mark_replayed(
        conn: &mut Self::Connection,
        old_id: &str,
        new_id: &str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// Links a replayed delivery to its replay unless another replay did: answers whether
    /// this one did.
    fn claim_replay(
        conn: &mut Self::Connection,
        old_id: &str,
        new_id: &str,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    /// Locks one of the account's endpoints for a change of its status, before the change:
    /// `FOR UPDATE` on PostgreSQL, which waits for every ingestion, replay and batch of
    /// attempts holding the row under [`endpoint_shared`](Backend::endpoint_shared)'s lock, so
    /// none of them can queue or record by the old status after the change moves the
    /// endpoint's deliveries. Nothing on SQLite, whose write transaction already excludes them.
    fn lock_for_change(
        conn: &mut Self::Connection,
        account_id: &str,
        id: &str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// Pauses one of the account's endpoints, unless deleted; answers it.
    fn pause_endpoint(
        conn: &mut Self::Connection,
        account_id: &str,
        id: &str,
        now: i64,
    ) -> impl Future<Output = Result<Option<Endpoint>, sqlx::Error>> + Send;

    /// Makes one of the account's endpoints active with a closed circuit, unless deleted;
    /// answers it.
    fn resume_endpoint(
        conn: &mut Self::Connection,
        account_id: &str,
        id: &str,
        now: i64,
    ) -> impl Future<Output = Result<Option<Endpoint>, sqlx::Error>> + Send;

    /// Starts the endpoint's failure period and consecutive failures again.
    fn reset_failures(
        conn: &mut Self::Connection,
        id: &str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// Marks one of the account's endpoints deleted, unless it is; answers how many rows.
    fn delete_endpoint(
        conn: &mut Self::Connection,
        account_id: &str,
        id: &str,
        now: i64,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send;

    /// Ends the endpoint's pending deliveries dead with `endpoint_deleted`; answers how many.
    fn end_pending(
        conn: &mut Self::Connection,
        id: &str,
        now: i64,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send;

    /// Erases the endpoint's secrets.
    fn erase_secrets(
        conn: &mut Self::Connection,
        id: &str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;
}

/// The statement that makes `transition`, if it makes one: `$1` the endpoint, `$2` now, and
/// for the two that open the circuit `$3` the next probe time.
fn transition_sql(transition: Transition) -> Option<&'static str> {
    match transition {
        Transition::Stay => None,
        Transition::Open => Some(OPEN),
        Transition::Reopen => Some(REOPEN),
        Transition::Close => Some(CLOSE),
        Transition::Disable => Some(DISABLE),
    }
}

/// Implements [`Backend`] for `$db`. One body for both databases; the differences are the
/// parameters: `$share` the share lock's clause ([`Backend::endpoint_shared`]), `$tags` the
/// tags' insert, `$breakers` the breaker rows' read by a JSON array, `$stats` the
/// [`StatsSql`](crate::store::health::StatsSql), and `$own` the methods written per database
/// (`BEGIN`, [`Backend::finish_deliveries`], [`Backend::lock_for_change`]).
macro_rules! backend {
    (
        $db:ty,
        share: $share:literal,
        tags: $tags:literal,
        breakers: $breakers:expr,
        stats: $stats:expr,
        { $($own:tt)* }
    ) => {
        impl sealed::Sealed for $db {}

        impl Backend for $db {
            $($own)*

            async fn lock_stats(
                conn: &mut Self::Connection,
                ids: &str,
                now: i64,
            ) -> Result<Vec<StatsRow>, sqlx::Error> {
                sqlx::query_as::<_, StatsRow>(&$stats.lock)
                    .bind(ids)
                    .bind(now)
                    .fetch_all(&mut *conn)
                    .await
            }

            async fn write_stats(
                conn: &mut Self::Connection,
                stats: String,
                now: i64,
            ) -> Result<(), sqlx::Error> {
                sqlx::query(&$stats.write)
                    .bind(stats)
                    .bind(now)
                    .execute(&mut *conn)
                    .await?;
                Ok(())
            }

            async fn add_hourly(
                conn: &mut Self::Connection,
                tallies: String,
            ) -> Result<(), sqlx::Error> {
                sqlx::query(&$stats.add_hourly)
                    .bind(tallies)
                    .execute(&mut *conn)
                    .await?;
                Ok(())
            }

            async fn breaker_rows(
                conn: &mut Self::Connection,
                ids: &str,
            ) -> Result<Vec<BreakerRow>, sqlx::Error> {
                sqlx::query_as::<_, BreakerRow>($breakers)
                    .bind(ids)
                    .fetch_all(&mut *conn)
                    .await
            }

            async fn breaker_row(
                conn: &mut Self::Connection,
                endpoint_id: &str,
            ) -> Result<BreakerRow, sqlx::Error> {
                sqlx::query_as::<_, BreakerRow>(BREAKER_ROW)
                    .bind(endpoint_id)
                    .fetch_one(&mut *conn)
                    .await
            }

            async fn transition(
                conn: &mut Self::Connection,
                transition: Transition,
                endpoint_id: &str,
                now: i64,
                probe_at: Option<i64>,
            ) -> Result<bool, sqlx::Error> {
                let Some(sql) = transition_sql(transition) else {
                    return Ok(false);
                };
                let query = sqlx::query(sql).bind(endpoint_id).bind(now);
                let query = match probe_at {
                    Some(at) => query.bind(at),
                    None => query,
                };
                Ok(query.execute(&mut *conn).await?.rows_affected() == 1)
            }

            async fn hold_delivery(
                conn: &mut Self::Connection,
                delivery_id: &str,
            ) -> Result<(), sqlx::Error> {
                sqlx::query(
                    "UPDATE kxp_deliveries SET next_attempt_at = $1 \
                     WHERE id = $2 AND status = 'pending'",
                )
                .bind(crate::model::HELD)
                .bind(delivery_id)
                .execute(&mut *conn)
                .await?;
                Ok(())
            }

            async fn spread_held(
                conn: &mut Self::Connection,
                endpoint_id: &str,
                now: i64,
                spacing: i64,
            ) -> Result<u64, sqlx::Error> {
                Ok(sqlx::query(
                    "UPDATE kxp_deliveries SET next_attempt_at = $1 + s.rn * $2, updated_at = $1 \
                     FROM (SELECT id, ROW_NUMBER() OVER (ORDER BY id) - 1 AS rn FROM kxp_deliveries \
                           WHERE endpoint_id = $3 AND status = 'pending' AND next_attempt_at = $4) AS s \
                     WHERE kxp_deliveries.id = s.id",
                )
                .bind(now)
                .bind(spacing)
                .bind(endpoint_id)
                .bind(crate::model::HELD)
                .execute(&mut *conn)
                .await?
                .rows_affected())
            }

            async fn hold_pending(
                conn: &mut Self::Connection,
                endpoint_id: &str,
                now: i64,
            ) -> Result<u64, sqlx::Error> {
                Ok(sqlx::query(
                    "UPDATE kxp_deliveries SET next_attempt_at = $1, updated_at = $2 \
                     WHERE endpoint_id = $3 AND status = 'pending' AND next_attempt_at <> $1",
                )
                .bind(crate::model::HELD)
                .bind(now)
                .bind(endpoint_id)
                .execute(&mut *conn)
                .await?
                .rows_affected())
            }

            async fn half_open(
                conn: &mut Self::Connection,
                endpoint_id: &str,
                now: i64,
            ) -> Result<u64, sqlx::Error> {
                Ok(sqlx::query(
                    "UPDATE kxp_endpoints SET circuit_state = 'half_open', updated_at = $2 \
                     WHERE id = $1 AND circuit_state = 'open' AND circuit_probe_at <= $2 AND status = 'active'",
                )
                .bind(endpoint_id)
                .bind(now)
                .execute(&mut *conn)
                .await?
                .rows_affected())
            }

            async fn release_probe(
                conn: &mut Self::Connection,
                endpoint_id: &str,
                now: i64,
            ) -> Result<Option<DeliveryId>, sqlx::Error> {
                sqlx::query_scalar::<_, DeliveryId>(
                    "UPDATE kxp_deliveries SET next_attempt_at = $1, updated_at = $1 WHERE id = \
                     (SELECT id FROM kxp_deliveries WHERE endpoint_id = $2 AND status = 'pending' \
                      AND next_attempt_at = $3 ORDER BY attempts, id LIMIT 1) RETURNING id",
                )
                .bind(now)
                .bind(endpoint_id)
                .bind(crate::model::HELD)
                .fetch_optional(&mut *conn)
                .await
            }

            async fn set_probe(
                conn: &mut Self::Connection,
                probe: &str,
                endpoint_id: &str,
            ) -> Result<(), sqlx::Error> {
                sqlx::query("UPDATE kxp_endpoints SET circuit_probe_id = $1 WHERE id = $2")
                    .bind(probe)
                    .bind(endpoint_id)
                    .execute(&mut *conn)
                    .await?;
                Ok(())
            }

            async fn notice_facts(
                conn: &mut Self::Connection,
                endpoint_id: &str,
            ) -> Result<NoticeFacts, sqlx::Error> {
                sqlx::query_as::<_, NoticeFacts>(NOTICE_FACTS)
                    .bind(endpoint_id)
                    .fetch_one(&mut *conn)
                    .await
            }

            async fn insert_notice(
                conn: &mut Self::Connection,
                notice: &NewNotice<'_>,
            ) -> Result<(), sqlx::Error> {
                sqlx::query(
                    "INSERT INTO kxp_notifications (id, account_id, endpoint_id, kind, channel, target, \
                     event_id, payload, status, attempts, next_attempt_at, created_at, updated_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'pending', 0, $9, $9, $9)",
                )
                .bind(crate::model::new_id("ntf"))
                .bind(&notice.facts.account_id)
                .bind(&notice.facts.endpoint_id)
                .bind(notice.kind)
                .bind(notice.channel)
                .bind(notice.target)
                .bind(notice.event_id)
                .bind(notice.payload)
                .bind(notice.now)
                .execute(&mut *conn)
                .await?;
                Ok(())
            }

            async fn event_by_key(
                conn: &mut Self::Connection,
                account_id: &str,
                key: &str,
            ) -> Result<Option<Event>, sqlx::Error> {
                sqlx::query_as::<_, Event>(
                    "SELECT id, account_id, event_type, api_version, payload, created_at, request_hash \
                     FROM kxp_events WHERE account_id = $1 AND idempotency_key = $2",
                )
                .bind(account_id)
                .bind(key)
                .fetch_optional(&mut *conn)
                .await
            }

            async fn event_by_id(
                conn: &mut Self::Connection,
                account_id: &str,
                id: &str,
            ) -> Result<Option<Event>, sqlx::Error> {
                sqlx::query_as::<_, Event>(crate::store::events::EVENT_BY_ID)
                    .bind(account_id)
                    .bind(id)
                    .fetch_optional(&mut *conn)
                    .await
            }

            async fn insert_event(
                conn: &mut Self::Connection,
                event: &Event,
                item: &Ingest,
            ) -> Result<(), sqlx::Error> {
                sqlx::query(
                    "INSERT INTO kxp_events (id, account_id, event_type, api_version, payload, created_at, idempotency_key, request_hash, ordering_key) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                )
                .bind(&event.id)
                .bind(&event.account_id)
                .bind(&event.event_type)
                .bind(&event.api_version)
                .bind(&event.payload)
                .bind(event.created_at)
                .bind(&item.idempotency)
                .bind(&event.request_hash)
                .bind(&item.ordering_key)
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
                account_id: &str,
            ) -> Result<Vec<Subscriber>, sqlx::Error> {
                sqlx::query_as::<_, Subscriber>(concat!(
                    "SELECT id, status, circuit_state, event_types, api_version FROM kxp_endpoints \
                     WHERE account_id = $1 AND status IN ('active', 'paused', 'disabled')",
                    $share
                ))
                .bind(account_id)
                .fetch_all(&mut *conn)
                .await
            }

            async fn insert_delivery(
                conn: &mut Self::Connection,
                delivery: &NewDelivery<'_>,
            ) -> Result<(), sqlx::Error> {
                sqlx::query(
                    "INSERT INTO kxp_deliveries (id, account_id, event_id, endpoint_id, status, attempts, next_attempt_at, created_at, updated_at, sequence) \
                     VALUES ($1, $2, $3, $4, 'pending', 0, $6, $5, $5, $7)",
                )
                .bind(delivery.id)
                .bind(delivery.account_id)
                .bind(delivery.event_id)
                .bind(delivery.endpoint_id)
                .bind(delivery.now)
                .bind(delivery.due)
                .bind(delivery.sequence)
                .execute(&mut *conn)
                .await?;
                Ok(())
            }

            async fn endpoint_shared(
                conn: &mut Self::Connection,
                endpoint_id: &str,
            ) -> Result<Option<Endpoint>, sqlx::Error> {
                sqlx::query_as::<_, Endpoint>(concat!("SELECT * FROM kxp_endpoints WHERE id = $1", $share))
                    .bind(endpoint_id)
                    .fetch_optional(&mut *conn)
                    .await
            }

            async fn mark_replayed(
                conn: &mut Self::Connection,
                old_id: &str,
                new_id: &str,
            ) -> Result<(), sqlx::Error> {
                sqlx::query("UPDATE kxp_deliveries SET replayed_by = $1 WHERE id = $2")
                    .bind(new_id)
                    .bind(old_id)
                    .execute(&mut *conn)
                    .await?;
                Ok(())
            }

            async fn claim_replay(
                conn: &mut Self::Connection,
                old_id: &str,
                new_id: &str,
            ) -> Result<bool, sqlx::Error> {
                let claimed = sqlx::query(
                    "UPDATE kxp_deliveries SET replayed_by = $1 \
                     WHERE id = $2 AND replayed_by IS NULL",
                )
                .bind(new_id)
                .bind(old_id)
                .execute(&mut *conn)
                .await?
                .rows_affected();
                Ok(claimed != 0)
            }

            async fn pause_endpoint(
                conn: &mut Self::Connection,
                account_id: &str,
                id: &str,
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
                account_id: &str,
                id: &str,
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
                id: &str,
            ) -> Result<(), sqlx::Error> {
                sqlx::query(
                    "UPDATE kxp_endpoint_stats SET failing_since = NULL, consecutive_failures = 0 \
                     WHERE endpoint_id = $1",
                )
                .bind(id)
                .execute(&mut *conn)
                .await?;
                Ok(())
            }

            async fn delete_endpoint(
                conn: &mut Self::Connection,
                account_id: &str,
                id: &str,
                now: i64,
            ) -> Result<u64, sqlx::Error> {
                Ok(sqlx::query(
                    "UPDATE kxp_endpoints SET status = 'deleted', updated_at = $1 \
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
                id: &str,
                now: i64,
            ) -> Result<u64, sqlx::Error> {
                Ok(sqlx::query(
                    "UPDATE kxp_deliveries SET status = 'dead', last_error = 'endpoint_deleted', \
                     next_attempt_at = $1, updated_at = $1 WHERE endpoint_id = $2 AND status = 'pending'",
                )
                .bind(now)
                .bind(id)
                .execute(&mut *conn)
                .await?
                .rows_affected())
            }

            async fn erase_secrets(
                conn: &mut Self::Connection,
                id: &str,
            ) -> Result<(), sqlx::Error> {
                sqlx::query("DELETE FROM kxp_endpoint_secrets WHERE endpoint_id = $1")
                    .bind(id)
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
    breakers: "SELECT id, status, circuit_state, circuit_failed_probes, \
       circuit_probe_id, rate_limit_per_second FROM kxp_endpoints WHERE id IN (SELECT value FROM json_each($1))",
    stats: STATS_SQLITE,
    {
        // BEGIN IMMEDIATE: a deferred transaction that reads first and writes later can fail
        // with SQLITE_BUSY when two of them race to upgrade; taking the write lock up front
        // makes them queue on the busy timeout instead.
        const BEGIN: &'static str = "BEGIN IMMEDIATE";

        // In-process: one small statement per delivery costs microseconds.
        async fn finish_deliveries(
            conn: &mut Self::Connection,
            batch: &[FinishAttempt],
            finishing: &[Finishing<'_>],
            now: i64,
        ) -> Result<Vec<bool>, sqlx::Error> {
            let mut recorded = vec![false; batch.len()];
            for (i, (item, f)) in batch.iter().zip(finishing).enumerate() {
                let record = &item.record;
                let updated = sqlx::query(FINISH_ATTEMPT.as_str())
                    .bind(f.status)
                    .bind(item.attempt)
                    .bind(record.started_at)
                    .bind(f.next_at)
                    .bind(f.status_code)
                    .bind(f.error)
                    .bind(now)
                    .bind(&item.delivery_id)
                    .bind(&item.owner)
                    .execute(&mut *conn)
                    .await?
                    .rows_affected();
                if updated == 0 {
                    continue;
                }
                sqlx::query(
                    "INSERT INTO kxp_attempts (delivery_id, attempt, started_at, duration_ms, status_code, error, response_snippet, signed_with, verified_key) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                )
                .bind(&item.delivery_id)
                .bind(item.attempt)
                .bind(record.started_at)
                .bind(record.duration_ms)
                .bind(f.status_code)
                .bind(f.error)
                .bind(&record.response_snippet)
                .bind(&record.signed_with)
                .bind(&record.verified_key)
                .execute(&mut *conn)
                .await?;
                recorded[i] = true;
            }
            Ok(recorded)
        }

        async fn lock_for_change(
            _conn: &mut Self::Connection,
            _account_id: &str,
            _id: &str,
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
    breakers: "SELECT id, status, circuit_state, circuit_failed_probes, \
       circuit_probe_id, rate_limit_per_second FROM kxp_endpoints \
     WHERE id IN (SELECT jsonb_array_elements_text($1::jsonb))",
    stats: STATS_POSTGRES,
    {
        const BEGIN: &'static str = "BEGIN";

        // Over the network: every delivery of the batch in one statement, and every attempt
        // row in another, whatever the batch's size.
        async fn finish_deliveries(
            conn: &mut Self::Connection,
            batch: &[FinishAttempt],
            finishing: &[Finishing<'_>],
            now: i64,
        ) -> Result<Vec<bool>, sqlx::Error> {
            let mut endpoints: Vec<&str> = batch.iter().map(|f| f.endpoint_id.as_str()).collect();
            endpoints.sort_unstable();
            endpoints.dedup();
            // The endpoint rows under KEY SHARE: a pause, resume or delete (FOR UPDATE)
            // waits for this batch's outcome instead of missing it, and batches, ingestion
            // (FOR SHARE) and the breaker's own updates never wait for each other.
            sqlx::query("SELECT 1 FROM kxp_endpoints WHERE id = ANY($1) ORDER BY id FOR KEY SHARE")
                .bind(&endpoints)
                .execute(&mut *conn)
                .await?;
            let column = |f: fn(&FinishAttempt) -> String| batch.iter().map(f).collect::<Vec<_>>();
            let updated: std::collections::HashSet<String> =
                sqlx::query_scalar::<_, String>(FINISH_ATTEMPTS_POSTGRES)
                    .bind(column(|item| item.delivery_id.to_string()))
                    .bind(finishing.iter().map(|f| f.status).collect::<Vec<_>>())
                    .bind(batch.iter().map(|item| item.attempt).collect::<Vec<_>>())
                    .bind(batch.iter().map(|item| item.record.started_at).collect::<Vec<_>>())
                    .bind(finishing.iter().map(|f| f.next_at).collect::<Vec<_>>())
                    .bind(finishing.iter().map(|f| f.status_code).collect::<Vec<_>>())
                    .bind(finishing.iter().map(|f| f.error).collect::<Vec<_>>())
                    .bind(column(|item| item.owner.clone()))
                    .bind(now)
                    .fetch_all(&mut *conn)
                    .await?
                    .into_iter()
                    .collect();
            let recorded: Vec<bool> = batch
                .iter()
                .map(|item| updated.contains(item.delivery_id.as_str()))
                .collect();
            let rows: Vec<(&FinishAttempt, &Finishing)> = batch
                .iter()
                .zip(finishing)
                .zip(&recorded)
                .filter(|(_, recorded)| **recorded)
                .map(|(pair, _)| pair)
                .collect();
            if !rows.is_empty() {
                sqlx::query(
                    "INSERT INTO kxp_attempts (delivery_id, attempt, started_at, duration_ms, status_code, error, response_snippet, signed_with, verified_key) \
                     SELECT * FROM UNNEST($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[], $6::text[], $7::text[], $8::text[], $9::text[])",
                )
                .bind(rows.iter().map(|(item, _)| item.delivery_id.as_str()).collect::<Vec<_>>())
                .bind(rows.iter().map(|(item, _)| item.attempt).collect::<Vec<_>>())
                .bind(rows.iter().map(|(item, _)| item.record.started_at).collect::<Vec<_>>())
                .bind(rows.iter().map(|(item, _)| item.record.duration_ms).collect::<Vec<_>>())
                .bind(rows.iter().map(|(_, f)| f.status_code).collect::<Vec<_>>())
                .bind(rows.iter().map(|(_, f)| f.error).collect::<Vec<_>>())
                .bind(
                    rows.iter()
                        .map(|(item, _)| item.record.response_snippet.as_deref())
                        .collect::<Vec<_>>(),
                )
                .bind(
                    rows.iter()
                        .map(|(item, _)| item.record.signed_with.as_str())
                        .collect::<Vec<_>>(),
                )
                .bind(
                    rows.iter()
                        .map(|(item, _)| item.record.verified_key.as_deref())
                        .collect::<Vec<_>>(),
                )
                .execute(&mut *conn)
                .await?;
            }
            Ok(recorded)
        }

        async fn lock_for_change(
            conn: &mut Self::Connection,
            account_id: &str,
            id: &str,
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
