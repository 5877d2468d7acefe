//! Retention's SQL: what finished data is deleted, in small batches so no lock is held for
//! long. The rules are in [`crate::engine`]'s retention loop docs.

use std::time::Duration;

use crate::model::{
    AccountId, DAY_MS, DeadLettersNotice, EndpointId, EndpointKey, NoticeDetail, ms, now_ms,
    rfc3339,
};
use crate::policy::health::HOUR_MS;
use crate::policy::notice::DEAD_LETTERS_EXPIRING;
use crate::policy::session::{ABSOLUTE_EXPIRY_MS, IDLE_EXPIRY_MS};
use crate::store::notifications::queue_notices;
use crate::store::shards::every_shard;
use crate::store::{Db, StoreError, on_db};

/// How long hourly statistics are kept: health reads the last 25 hours.
pub(crate) const STATS_KEPT: Duration = Duration::from_secs(48 * 60 * 60);

/// Rows deleted per statement.
const BATCH: i64 = 500;

/// What one purge removes, as of when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Finished deliveries, events and notifications last changed before this (Unix ms) go;
    /// `None` keeps them.
    pub cutoff: Option<i64>,
    /// How long a dead delivery never replayed is kept after it died; `None`: until it is
    /// replayed. Each goes a day after its account was told it would, at the earliest.
    pub dead_letters: Option<Duration>,
    /// Now (Unix ms): payloads whose retention passed by then go.
    pub now: i64,
}

impl Retention {
    /// Finished data before `cutoff` goes, expired payloads are erased, dead letters stay.
    pub fn until(cutoff: Option<i64>) -> Retention {
        Retention {
            cutoff,
            dead_letters: None,
            now: now_ms(),
        }
    }
}

/// What one purge removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Purged {
    /// Events whose payload's own retention passed: their payload erased.
    pub expired_payloads: u64,
    /// Dead deliveries past the dead-letter retention (with their attempts), also counted in
    /// `deliveries`.
    pub dead_letters: u64,
    /// Endpoints told that dead deliveries of theirs go within a day.
    pub dead_letter_notices: u64,
    /// Finished deliveries.
    pub deliveries: u64,
    /// Their attempts.
    pub attempts: u64,
    /// Events with no delivery left.
    pub events: u64,
    /// Sent or failed notifications.
    pub notifications: u64,
    /// Hourly statistics rows.
    pub stats_rows: u64,
    /// Expired endpoint secrets.
    pub secrets: u64,
    /// Expired console portal links, used or not, and expired listen tokens.
    pub portal_links: u64,
    /// Expired console sessions, with the one-time message each may hold.
    pub sessions: u64,
}

/// A finished delivery that may go once `$1` is past: delivered, or dead and replayed (on
/// the `kxp_deliveries_finished` index).
const FINISHED: &str = "(status = 'delivered' OR (status = 'dead' AND replayed_by IS NOT NULL)) \
     AND updated_at < $1";

/// A delivery that ended because its event's payload went (erased or expired), once `$1` is
/// past (on the `kxp_deliveries_gone` index).
const GONE: &str = "status IN ('erased', 'expired') AND updated_at < $1";

/// A dead delivery never replayed that may go: dead since before `$1` (now less the
/// dead-letter retention), its account told a day ago at least (`$1` + `{kept}` less a day).
fn dead_letters_past(kept: i64) -> String {
    format!(
        "status = 'dead' AND replayed_by IS NULL AND updated_at < $1 \
         AND dead_notice_at <= $1 + {kept} - {DAY_MS}"
    )
}

/// The `DELETE` of sessions that are over at `$1` (Unix ms): exactly those
/// [`freshness`](crate::policy::session::freshness) calls expired, which a request would
/// delete on sight; a session nobody comes back to goes here, its `flash` with it.
fn expired_sessions() -> String {
    format!(
        "DELETE FROM kxp_sessions WHERE id_hash IN (SELECT id_hash FROM kxp_sessions \
         WHERE last_seen_at <= $1 - {IDLE_EXPIRY_MS} OR created_at <= $1 - {ABSOLUTE_EXPIRY_MS} \
         LIMIT $2)"
    )
}

/// Which rows one pass of [`Db::purge`] deletes: every account's at once, or (Citus) one
/// account's, each statement naming it (`$3`) so that it runs on the account's shard alone.
#[derive(Clone, Copy)]
enum Scope<'a> {
    All,
    Account(&'a str),
}

impl Scope<'_> {
    /// The condition on the outer `DELETE`, before its own: `account_id = $3 AND `.
    fn outer(self) -> &'static str {
        match self {
            Scope::All => "",
            Scope::Account(_) => "account_id = $3 AND ",
        }
    }

    /// The condition inside its `SELECT`, after the others: ` AND <alias>account_id = $3`.
    fn inner(self, alias: &str) -> String {
        match self {
            Scope::All => String::new(),
            Scope::Account(_) => format!(" AND {alias}account_id = $3"),
        }
    }
}

impl Db {
    /// Removes finished data older than `cutoff` (Unix ms), as the module docs describe.
    /// `None` keeps deliveries, events and notifications forever; statistics, expired secrets,
    /// and expired portal links and console sessions are removed either way.
    ///
    /// On Citus, account by account (the accounts read shard by shard): an account whose shard
    /// does not answer is logged and left for the next pass, and the others are purged.
    #[cfg_attr(
        not(feature = "test-util"),
        expect(unreachable_pub, reason = "public with feature test-util only")
    )]
    pub async fn purge(&self, retention: Retention) -> Result<Purged, StoreError> {
        let now = retention.now;
        let mut purged = Purged::default();
        if let Db::Citus(pool) = self {
            let accounts: Vec<String> = every_shard(
                pool,
                "kxp_accounts",
                "SELECT to_jsonb(id) AS r FROM %%s",
                &[],
            )
            .await?;
            for account in &accounts {
                if let Err(e) = self
                    .purge_scope(Scope::Account(account), retention, &mut purged)
                    .await
                {
                    tracing::warn!(target: "kxp_sender", account = %account, error = %e, "retention skipped an account whose shard did not answer");
                }
            }
        } else {
            self.purge_scope(Scope::All, retention, &mut purged).await?;
        }
        // No link opens a session once expired, used or not (the sign-in's UPDATE asks for
        // `expires_at > now`), and an expired listen token authenticates nothing (its lookup
        // asks the same).
        for table in ["kxp_portal_links", "kxp_listen_tokens"] {
            purged.portal_links += self
                .delete_batches(
                    &format!(
                        "DELETE FROM {table} WHERE token_hash IN (SELECT token_hash \
                         FROM {table} WHERE expires_at <= $1 LIMIT $2)"
                    ),
                    now,
                    Scope::All,
                )
                .await?;
        }
        purged.sessions = self
            .delete_batches(&expired_sessions(), now, Scope::All)
            .await?;
        Ok(purged)
    }

    /// The account-scoped part of [`Db::purge`] for `scope`, added to `purged`.
    async fn purge_scope(
        &self,
        scope: Scope<'_>,
        retention: Retention,
        purged: &mut Purged,
    ) -> Result<(), StoreError> {
        let (outer, inner) = (scope.outer(), scope.inner(""));
        let now = retention.now;
        let account = match scope {
            Scope::All => None,
            Scope::Account(account) => Some(AccountId::from(account)),
        };
        purged.expired_payloads += self.expire_payloads(now, account.as_ref()).await?;
        if let Some(kept) = retention.dead_letters {
            let kept = ms(kept);
            purged.dead_letter_notices += self.notice_dead_letters(now, kept, scope).await?;
            let past = dead_letters_past(kept);
            loop {
                let (attempts, deliveries) = self
                    .purge_deliveries(&past, now.saturating_sub(kept), scope)
                    .await?;
                purged.attempts += attempts;
                purged.deliveries += deliveries;
                purged.dead_letters += deliveries;
                if deliveries < BATCH as u64 {
                    break;
                }
            }
        }
        if let Some(cutoff) = retention.cutoff {
            for which in [FINISHED, GONE] {
                loop {
                    let (attempts, deliveries) =
                        self.purge_deliveries(which, cutoff, scope).await?;
                    purged.attempts += attempts;
                    purged.deliveries += deliveries;
                    if deliveries < BATCH as u64 {
                        break;
                    }
                }
            }
            purged.events += self
                .delete_batches(
                    &format!(
                        "DELETE FROM kxp_events WHERE {outer}(account_id, id) IN (SELECT account_id, id FROM kxp_events e \
                         WHERE e.created_at < $1{} AND NOT EXISTS (SELECT 1 FROM kxp_deliveries d \
                         WHERE d.account_id = e.account_id AND d.event_id = e.id) LIMIT $2)",
                        scope.inner("e.")
                    ),
                    cutoff,
                    scope,
                )
                .await?;
            purged.notifications += self
                .delete_batches(
                    &format!(
                        "DELETE FROM kxp_notifications WHERE {outer}id IN (SELECT id FROM kxp_notifications \
                         WHERE status IN ('sent', 'failed') AND updated_at < $1{inner} LIMIT $2)"
                    ),
                    cutoff,
                    scope,
                )
                .await?;
        }
        let stats_cutoff = (now - ms(STATS_KEPT)).div_euclid(HOUR_MS) * HOUR_MS;
        purged.stats_rows += self
            .delete_batches(
                &format!(
                    "DELETE FROM kxp_endpoint_stats_hourly WHERE {outer}(account_id, endpoint_id, hour) IN \
                     (SELECT account_id, endpoint_id, hour FROM kxp_endpoint_stats_hourly WHERE hour < $1{inner} LIMIT $2)"
                ),
                stats_cutoff,
                scope,
            )
            .await?;
        purged.secrets += self
            .delete_batches(
                &format!(
                    "DELETE FROM kxp_endpoint_secrets WHERE {outer}(account_id, endpoint_id, id) IN \
                     (SELECT account_id, endpoint_id, id FROM kxp_endpoint_secrets \
                     WHERE expires_at IS NOT NULL AND expires_at <= $1{inner} LIMIT $2)"
                ),
                now,
                scope,
            )
            .await?;
        Ok(())
    }

    /// Tells each endpoint's account of its dead deliveries never replayed that reach the
    /// dead-letter retention (`kept` ms) within a day: they go a day after the notice at the
    /// earliest. An endpoint found with such a delivery no notice covered yet is told once of
    /// all those that reach it within two days, each marked (`dead_notice_at`) in the notice's
    /// transaction: so an endpoint that keeps failing is told at most about once a day, not
    /// at every pass. A deleted endpoint's are marked, untold (they cannot be replayed).
    /// Answers how many endpoints were told.
    async fn notice_dead_letters(
        &self,
        now: i64,
        kept: i64,
        scope: Scope<'_>,
    ) -> Result<u64, StoreError> {
        let inner = scope.inner("");
        let due = format!(
            "SELECT DISTINCT account_id, endpoint_id FROM kxp_deliveries WHERE status = 'dead' AND replayed_by IS NULL \
             AND dead_notice_at IS NULL AND updated_at < $1 - {kept} + {DAY_MS}{inner} LIMIT $2"
        );
        let mark = format!(
            "UPDATE kxp_deliveries SET dead_notice_at = $1 WHERE account_id = $2 AND endpoint_id = $3 \
             AND status = 'dead' AND replayed_by IS NULL AND dead_notice_at IS NULL \
             AND updated_at < $1 - {kept} + 2 * {DAY_MS}"
        );
        let notice = DeadLettersNotice {
            count: 0,
            delete_after: rfc3339(now.saturating_add(DAY_MS)),
        };
        let mut told = 0;
        loop {
            let endpoints: Vec<(AccountId, EndpointId)> = on_db!(self, |pool| {
                let mut query = sqlx::query_as(&due).bind(now).bind(BATCH);
                if let Scope::Account(account) = scope {
                    query = query.bind(account);
                }
                query.fetch_all(pool).await?
            });
            for (account_id, endpoint_id) in &endpoints {
                let endpoint = EndpointKey::new(account_id, endpoint_id);
                told += on_db!(self, |pool, DB| {
                    let mut tx = pool.begin_with(DB::BEGIN).await?;
                    let marked = sqlx::query(&mark)
                        .bind(now)
                        .bind(account_id)
                        .bind(endpoint_id)
                        .execute(&mut *tx)
                        .await?
                        .rows_affected();
                    let status: Option<String> = sqlx::query_scalar(
                        "SELECT status FROM kxp_endpoints WHERE account_id = $1 AND id = $2",
                    )
                    .bind(account_id)
                    .bind(endpoint_id)
                    .fetch_optional(&mut *tx)
                    .await?;
                    let tell = marked > 0 && status.as_deref() != Some("deleted");
                    if tell {
                        let notice = DeadLettersNotice {
                            count: marked,
                            ..notice.clone()
                        };
                        queue_notices::<DB>(
                            &mut tx,
                            DEAD_LETTERS_EXPIRING,
                            &endpoint,
                            NoticeDetail::DeadLetters(&notice),
                            now,
                        )
                        .await?;
                    }
                    tx.commit().await?;
                    u64::from(tell)
                });
            }
            if endpoints.len() < BATCH as usize {
                return Ok(told);
            }
        }
    }

    /// One batch of deliveries that may go (`which`, a condition on `$1` = `bound`) and their
    /// attempts, in one transaction: the attempts of the oldest [`BATCH`] first, then those
    /// deliveries (the `NOT EXISTS` keeps the foreign key satisfied whatever happened in
    /// between).
    async fn purge_deliveries(
        &self,
        which: &str,
        bound: i64,
        scope: Scope<'_>,
    ) -> Result<(u64, u64), StoreError> {
        let (outer, inner) = (scope.outer(), scope.inner(""));
        let attempts = format!(
            "DELETE FROM kxp_attempts WHERE {outer}(account_id, delivery_id) IN \
             (SELECT account_id, id FROM kxp_deliveries WHERE {which}{inner} ORDER BY updated_at, id LIMIT $2)"
        );
        let deliveries = format!(
            "DELETE FROM kxp_deliveries WHERE {outer}(account_id, id) IN (SELECT account_id, id FROM kxp_deliveries WHERE {which}{inner} \
             AND NOT EXISTS (SELECT 1 FROM kxp_attempts a WHERE a.account_id = kxp_deliveries.account_id AND a.delivery_id = kxp_deliveries.id) \
             ORDER BY updated_at, id LIMIT $2)"
        );
        Ok(on_db!(self, |pool, DB| {
            let mut tx = pool.begin_with(DB::BEGIN).await?;
            let mut counts = Vec::with_capacity(2);
            for sql in [&attempts, &deliveries] {
                let mut query = sqlx::query(sql).bind(bound).bind(BATCH);
                if let Scope::Account(account) = scope {
                    query = query.bind(account);
                }
                counts.push(query.execute(&mut *tx).await?.rows_affected());
            }
            tx.commit().await?;
            (counts[0], counts[1])
        }))
    }

    /// Runs a `DELETE … LIMIT $2` with `$1` bound (and `$3`, the scope's account) until it
    /// deletes less than a batch.
    async fn delete_batches(
        &self,
        sql: &str,
        bound: i64,
        scope: Scope<'_>,
    ) -> Result<u64, StoreError> {
        let mut total = 0;
        loop {
            let deleted = on_db!(self, |pool| {
                let mut query = sqlx::query(sql).bind(bound).bind(BATCH);
                if let Scope::Account(account) = scope {
                    query = query.bind(account);
                }
                query.execute(pool).await?.rows_affected()
            });
            total += deleted;
            if deleted < BATCH as u64 {
                return Ok(total);
            }
        }
    }
}
