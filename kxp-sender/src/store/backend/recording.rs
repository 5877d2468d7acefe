//! The statements of the attempt-recording path (finished attempts, endpoint statistics, the
//! circuit breaker, held deliveries and probes, the notification outbox), for each database: a
//! sealed [`RecordingSql`] trait, a supertrait of [`Backend`](super::Backend), and its
//! generator (`recording_sql!`), one method per statement as there.

use std::future::Future;

use crate::model::{
    AccountId, DeliveryId, EndpointKey, EventId, FinishAttempt, NoticeFacts, Transition,
};
use crate::store::circuit::{BREAKER_ROW, BreakerRow, CLOSE, DISABLE, OPEN, REOPEN};
use crate::store::health::{STATS_POSTGRES, STATS_SQLITE, StatsRow};
use crate::store::notifications::NOTICE_FACTS;
use crate::store::record::{
    ATTEMPTS_ONE, ATTEMPTS_POSTGRES, FINISH_ATTEMPT, FINISH_ATTEMPTS_ONE, FINISH_ATTEMPTS_POSTGRES,
    Finishing, KEY_SHARE_ONE, one_account,
};

use super::sealed;

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
    pub event_id: &'a EventId,
    /// The envelope it sends.
    pub payload: &'a str,
    /// When it is queued (and due).
    pub now: i64,
}

/// The attempt-recording path's statements on a database; every [`Backend`](super::Backend)
/// is one. Sealed, and implemented for `sqlx::Sqlite` and `sqlx::Postgres` by
/// `recording_sql!`, with the same conventions as [`Backend`](super::Backend).
pub(crate) trait RecordingSql: sqlx::Database + sealed::Sealed {
    /// Writes a batch's finished attempts to their delivery rows and attempt rows, each only
    /// if its owner still holds the lease; answers, per item, whether it did.
    fn finish_deliveries(
        conn: &mut Self::Connection,
        batch: &[FinishAttempt],
        finishing: &[Finishing<'_>],
        now: i64,
    ) -> impl Future<Output = Result<Vec<bool>, sqlx::Error>> + Send;

    /// [`StatsSql::lock`](crate::store::health::StatsSql::lock): `keys` the endpoints'
    /// [`keys_json`](crate::store::record::keys_json).
    fn lock_stats(
        conn: &mut Self::Connection,
        keys: &str,
        now: i64,
    ) -> impl Future<Output = Result<Vec<StatsRow>, sqlx::Error>> + Send;

    /// [`StatsSql::write`](crate::store::health::StatsSql::write), or its `write_one` when
    /// every endpoint is of `one`'s account.
    fn write_stats(
        conn: &mut Self::Connection,
        stats: String,
        now: i64,
        one: Option<&AccountId>,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// [`StatsSql::add_hourly`](crate::store::health::StatsSql::add_hourly).
    fn add_hourly(
        conn: &mut Self::Connection,
        tallies: String,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// The [`BreakerRow`]s of the endpoints `keys`, a
    /// [`keys_json`](crate::store::record::keys_json), all of `one`'s account if it is named.
    fn breaker_rows(
        conn: &mut Self::Connection,
        keys: &str,
        one: Option<&AccountId>,
    ) -> impl Future<Output = Result<Vec<BreakerRow>, sqlx::Error>> + Send;

    /// One endpoint's [`BreakerRow`].
    fn breaker_row(
        conn: &mut Self::Connection,
        endpoint: &EndpointKey,
    ) -> impl Future<Output = Result<BreakerRow, sqlx::Error>> + Send;

    /// Makes `transition` on the endpoint (`probe_at`: the next probe, for the two that open
    /// the circuit), if it still leaves the state it is made from; answers whether it did.
    /// Nothing for [`Transition::Stay`].
    fn transition(
        conn: &mut Self::Connection,
        transition: Transition,
        endpoint: &EndpointKey,
        now: i64,
        probe_at: Option<i64>,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    /// Holds one pending delivery of the account (a half-open circuit's failed probe).
    fn hold_delivery(
        conn: &mut Self::Connection,
        account_id: &AccountId,
        delivery_id: &DeliveryId,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// Releases an endpoint's held deliveries: the oldest due at `now`, each next one
    /// `spacing` ms later, so a backlog drains at the endpoint's rate limit. One statement;
    /// `UPDATE … FROM` with a window function works on both backends. Answers how many.
    fn spread_held(
        conn: &mut Self::Connection,
        endpoint: &EndpointKey,
        now: i64,
        spacing: i64,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send;

    /// Holds every pending delivery of an endpoint (they keep their attempt counts;
    /// [`spread_held`](Backend::spread_held) releases them). Answers how many.
    fn hold_pending(
        conn: &mut Self::Connection,
        endpoint: &EndpointKey,
        now: i64,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send;

    /// Moves an open circuit whose cool-down has passed to `half_open`; answers how many rows
    /// it moved (0 when another process did it first).
    fn half_open(
        conn: &mut Self::Connection,
        endpoint: &EndpointKey,
        now: i64,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send;

    /// Releases the held delivery with the most tries left (the oldest of those) as the
    /// endpoint's probe.
    fn release_probe(
        conn: &mut Self::Connection,
        endpoint: &EndpointKey,
        now: i64,
    ) -> impl Future<Output = Result<Option<DeliveryId>, sqlx::Error>> + Send;

    /// Records the endpoint's probe.
    fn set_probe(
        conn: &mut Self::Connection,
        probe: &str,
        endpoint: &EndpointKey,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// The facts a notice about the endpoint describes.
    fn notice_facts(
        conn: &mut Self::Connection,
        endpoint: &EndpointKey,
    ) -> impl Future<Output = Result<NoticeFacts, sqlx::Error>> + Send;

    /// Queues one notice on one channel.
    fn insert_notice(
        conn: &mut Self::Connection,
        notice: &NewNotice<'_>,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;
}

/// The statement that makes `transition`, if it makes one: `$1` the endpoint, `$2` now, `$3`
/// its account, and for the two that open the circuit `$4` the next probe time.
fn transition_sql(transition: Transition) -> Option<&'static str> {
    match transition {
        Transition::Stay => None,
        Transition::Open => Some(OPEN),
        Transition::Reopen => Some(REOPEN),
        Transition::Close => Some(CLOSE),
        Transition::Disable => Some(DISABLE),
    }
}

/// Implements [`RecordingSql`] for `$db`. One body for both databases; the differences are the
/// parameters: `$breakers` the breaker rows' read by a JSON array, `$stats` the
/// [`StatsSql`](crate::store::health::StatsSql), and `$own` what is written per database
/// ([`RecordingSql::finish_deliveries`]).
macro_rules! recording_sql {
    (
        $db:ty,
        breakers: $breakers:expr,
        stats: $stats:expr,
        { $($own:tt)* }
    ) => {
        impl RecordingSql for $db {
            $($own)*

            async fn lock_stats(
                conn: &mut Self::Connection,
                keys: &str,
                now: i64,
            ) -> Result<Vec<StatsRow>, sqlx::Error> {
                sqlx::query_as::<_, StatsRow>(&$stats.lock)
                    .bind(keys)
                    .bind(now)
                    .fetch_all(&mut *conn)
                    .await
            }

            async fn write_stats(
                conn: &mut Self::Connection,
                stats: String,
                now: i64,
                one: Option<&AccountId>,
            ) -> Result<(), sqlx::Error> {
                match one {
                    Some(account) => sqlx::query(&$stats.write_one).bind(stats).bind(now).bind(account),
                    None => sqlx::query(&$stats.write).bind(stats).bind(now),
                }
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
                keys: &str,
                one: Option<&AccountId>,
            ) -> Result<Vec<BreakerRow>, sqlx::Error> {
                match one {
                    Some(account) => sqlx::query_as::<_, BreakerRow>(concat!($breakers, " WHERE p.account_id = $2"))
                        .bind(keys)
                        .bind(account),
                    None => sqlx::query_as::<_, BreakerRow>($breakers).bind(keys),
                }
                .fetch_all(&mut *conn)
                .await
            }

            async fn breaker_row(
                conn: &mut Self::Connection,
                endpoint: &EndpointKey,
            ) -> Result<BreakerRow, sqlx::Error> {
                sqlx::query_as::<_, BreakerRow>(BREAKER_ROW)
                    .bind(&endpoint.id)
                    .bind(&endpoint.account_id)
                    .fetch_one(&mut *conn)
                    .await
            }

            async fn transition(
                conn: &mut Self::Connection,
                transition: Transition,
                endpoint: &EndpointKey,
                now: i64,
                probe_at: Option<i64>,
            ) -> Result<bool, sqlx::Error> {
                let Some(sql) = transition_sql(transition) else {
                    return Ok(false);
                };
                let query = sqlx::query(sql)
                    .bind(&endpoint.id)
                    .bind(now)
                    .bind(&endpoint.account_id);
                let query = match probe_at {
                    Some(at) => query.bind(at),
                    None => query,
                };
                Ok(query.execute(&mut *conn).await?.rows_affected() == 1)
            }

            async fn hold_delivery(
                conn: &mut Self::Connection,
                account_id: &AccountId,
                delivery_id: &DeliveryId,
            ) -> Result<(), sqlx::Error> {
                sqlx::query(
                    "UPDATE kxp_deliveries SET next_attempt_at = $1 \
                     WHERE account_id = $3 AND id = $2 AND status = 'pending'",
                )
                .bind(crate::model::HELD)
                .bind(delivery_id)
                .bind(account_id)
                .execute(&mut *conn)
                .await?;
                Ok(())
            }

            async fn spread_held(
                conn: &mut Self::Connection,
                endpoint: &EndpointKey,
                now: i64,
                spacing: i64,
            ) -> Result<u64, sqlx::Error> {
                Ok(sqlx::query(
                    "UPDATE kxp_deliveries SET next_attempt_at = $1 + s.rn * $2, updated_at = $1 \
                     FROM (SELECT id, ROW_NUMBER() OVER (ORDER BY id) - 1 AS rn FROM kxp_deliveries \
                           WHERE account_id = $5 AND endpoint_id = $3 AND status = 'pending' AND next_attempt_at = $4) AS s \
                     WHERE kxp_deliveries.account_id = $5 AND kxp_deliveries.id = s.id",
                )
                .bind(now)
                .bind(spacing)
                .bind(&endpoint.id)
                .bind(crate::model::HELD)
                .bind(&endpoint.account_id)
                .execute(&mut *conn)
                .await?
                .rows_affected())
            }

            async fn hold_pending(
                conn: &mut Self::Connection,
                endpoint: &EndpointKey,
                now: i64,
            ) -> Result<u64, sqlx::Error> {
                Ok(sqlx::query(
                    "UPDATE kxp_deliveries SET next_attempt_at = $1, updated_at = $2 \
                     WHERE account_id = $4 AND endpoint_id = $3 AND status = 'pending' AND next_attempt_at <> $1",
                )
                .bind(crate::model::HELD)
                .bind(now)
                .bind(&endpoint.id)
                .bind(&endpoint.account_id)
                .execute(&mut *conn)
                .await?
                .rows_affected())
            }

            async fn half_open(
                conn: &mut Self::Connection,
                endpoint: &EndpointKey,
                now: i64,
            ) -> Result<u64, sqlx::Error> {
                Ok(sqlx::query(
                    "UPDATE kxp_endpoints SET circuit_state = 'half_open', updated_at = $2 \
                     WHERE account_id = $3 AND id = $1 AND circuit_state = 'open' AND circuit_probe_at <= $2 AND status = 'active'",
                )
                .bind(&endpoint.id)
                .bind(now)
                .bind(&endpoint.account_id)
                .execute(&mut *conn)
                .await?
                .rows_affected())
            }

            async fn release_probe(
                conn: &mut Self::Connection,
                endpoint: &EndpointKey,
                now: i64,
            ) -> Result<Option<DeliveryId>, sqlx::Error> {
                sqlx::query_scalar::<_, DeliveryId>(
                    "UPDATE kxp_deliveries SET next_attempt_at = $1, updated_at = $1 WHERE account_id = $4 AND id = \
                     (SELECT id FROM kxp_deliveries WHERE account_id = $4 AND endpoint_id = $2 AND status = 'pending' \
                      AND next_attempt_at = $3 ORDER BY attempts, id LIMIT 1) RETURNING id",
                )
                .bind(now)
                .bind(&endpoint.id)
                .bind(crate::model::HELD)
                .bind(&endpoint.account_id)
                .fetch_optional(&mut *conn)
                .await
            }

            async fn set_probe(
                conn: &mut Self::Connection,
                probe: &str,
                endpoint: &EndpointKey,
            ) -> Result<(), sqlx::Error> {
                sqlx::query("UPDATE kxp_endpoints SET circuit_probe_id = $1 WHERE account_id = $3 AND id = $2")
                    .bind(probe)
                    .bind(&endpoint.id)
                    .bind(&endpoint.account_id)
                    .execute(&mut *conn)
                    .await?;
                Ok(())
            }

            async fn notice_facts(
                conn: &mut Self::Connection,
                endpoint: &EndpointKey,
            ) -> Result<NoticeFacts, sqlx::Error> {
                sqlx::query_as::<_, NoticeFacts>(NOTICE_FACTS)
                    .bind(&endpoint.id)
                    .bind(&endpoint.account_id)
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
        }
    };
}

recording_sql!(
    sqlx::Sqlite,
    breakers: "SELECT p.id, p.account_id, p.status, p.circuit_state, p.circuit_failed_probes, \
       p.circuit_probe_id, p.rate_limit_per_second FROM json_each($1) k \
     JOIN kxp_endpoints p ON p.account_id = k.value ->> '$.a' AND p.id = k.value ->> '$.id'",
    stats: STATS_SQLITE,
    {
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
                    .bind(&item.account_id)
                    .execute(&mut *conn)
                    .await?
                    .rows_affected();
                if updated == 0 {
                    continue;
                }
                sqlx::query(
                    "INSERT INTO kxp_attempts (id, delivery_id, attempt, started_at, duration_ms, status_code, error, response_snippet, signed_with, verified_key, account_id) \
                     SELECT COALESCE(MAX(id), 0) + 1, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10 \
                     FROM kxp_attempts WHERE account_id = $10 AND delivery_id = $1",
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
                .bind(&item.account_id)
                .execute(&mut *conn)
                .await?;
                recorded[i] = true;
            }
            Ok(recorded)
        }
    }
);

/// PostgreSQL's breaker rows of a batch's endpoints (`$1` a
/// [`keys_json`](crate::store::record::keys_json)); a macro, so that the one-account form can
/// `concat!` its filter.
macro_rules! breakers_postgres {
    () => {
        "SELECT p.id, p.account_id, p.status, p.circuit_state, p.circuit_failed_probes, \
           p.circuit_probe_id, p.rate_limit_per_second FROM jsonb_to_recordset($1::jsonb) AS k(a text, id text) \
         JOIN kxp_endpoints p ON p.account_id = k.a AND p.id = k.id"
    };
}
#[cfg(test)]
pub(crate) use breakers_postgres;

recording_sql!(
    sqlx::Postgres,
    breakers: breakers_postgres!(),
    stats: STATS_POSTGRES,
    {
        // Over the network: every delivery of the batch in one statement, and every attempt
        // row in another, whatever the batch's size.
        async fn finish_deliveries(
            conn: &mut Self::Connection,
            batch: &[FinishAttempt],
            finishing: &[Finishing<'_>],
            now: i64,
        ) -> Result<Vec<bool>, sqlx::Error> {
            let mut endpoints: Vec<(&str, &str)> = batch
                .iter()
                .map(|f| (f.endpoint_id.as_str(), f.account_id.as_str()))
                .collect();
            endpoints.sort_unstable();
            endpoints.dedup();
            let (ids, accounts): (Vec<&str>, Vec<&str>) = endpoints.into_iter().unzip();
            // The endpoint rows under KEY SHARE: a pause, resume or delete (FOR UPDATE)
            // waits for this batch's outcome instead of missing it, and batches, ingestion
            // (FOR SHARE) and the breaker's own updates never wait for each other. A batch of
            // one account (every batch on Citus, which locks rows only in a statement of one
            // shard) names it once.
            let one = one_account(accounts.iter().copied());
            let lock = match one {
                Some(account) => sqlx::query(KEY_SHARE_ONE).bind(&ids).bind(account),
                None => sqlx::query(
                    "SELECT 1 FROM kxp_endpoints p JOIN UNNEST($1::text[], $2::text[]) AS k(id, a) \
                     ON p.account_id = k.a AND p.id = k.id ORDER BY p.id FOR KEY SHARE OF p",
                )
                .bind(&ids)
                .bind(&accounts),
            };
            lock.execute(&mut *conn).await?;
            let column = |f: fn(&FinishAttempt) -> String| batch.iter().map(f).collect::<Vec<_>>();
            let finish = match one {
                Some(_) => FINISH_ATTEMPTS_ONE.as_str(),
                None => FINISH_ATTEMPTS_POSTGRES.as_str(),
            };
            let mut finished = sqlx::query_scalar::<_, String>(finish)
                    .bind(column(|item| item.delivery_id.to_string()))
                    .bind(finishing.iter().map(|f| f.status).collect::<Vec<_>>())
                    .bind(batch.iter().map(|item| item.attempt).collect::<Vec<_>>())
                    .bind(batch.iter().map(|item| item.record.started_at).collect::<Vec<_>>())
                    .bind(finishing.iter().map(|f| f.next_at).collect::<Vec<_>>())
                    .bind(finishing.iter().map(|f| f.status_code).collect::<Vec<_>>())
                    .bind(finishing.iter().map(|f| f.error).collect::<Vec<_>>())
                    .bind(column(|item| item.owner.clone()))
                    .bind(now)
                    .bind(column(|item| item.account_id.to_string()))
                    ;
            if let Some(account) = one {
                finished = finished.bind(account);
            }
            let updated: std::collections::HashSet<String> =
                finished.fetch_all(&mut *conn).await?.into_iter().collect();
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
                let mut attempts = sqlx::query(match one {
                    Some(_) => ATTEMPTS_ONE.as_str(),
                    None => ATTEMPTS_POSTGRES.as_str(),
                })
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
                .bind(rows.iter().map(|(item, _)| item.account_id.as_str()).collect::<Vec<_>>())
                ;
                if let Some(account) = one {
                    attempts = attempts.bind(account);
                }
                attempts.execute(&mut *conn).await?;
            }
            Ok(recorded)
        }
    }
);
