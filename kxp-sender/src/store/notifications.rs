//! `kxp_notifications`: the outbox of operational notices. A notice is queued in the
//! transaction of the state change it announces ([`queue_notices`]), so each change is announced
//! exactly once; the notifier claims due rows under a lease and records each try.

use crate::model::{AccountId, EndpointKey, NoticeDetail, NoticeNext, Notification, now_ms};
use crate::policy::notice;
use crate::store::backend::{Backend, NewNotice};
use crate::store::seal::KeyRing;
use crate::store::secrets::open_ops_secret;
use crate::store::shards::every_shard;
use crate::store::{Db, StoreError, on_db};

/// The endpoint, account and statistics a notice describes, read in the state change's
/// transaction. `$1` the endpoint.
pub(crate) const NOTICE_FACTS: &str = "SELECT p.id AS endpoint_id, p.account_id, p.url, p.description, p.status, \
       p.circuit_state, p.circuit_probe_at, a.ops_url, a.contact_email, a.default_api_version, \
       s.consecutive_failures, s.failing_since, s.last_error \
     FROM kxp_endpoints p JOIN kxp_accounts a ON a.id = p.account_id \
     LEFT JOIN kxp_endpoint_stats s ON s.account_id = p.account_id AND s.endpoint_id = p.id \
     WHERE p.account_id = $2 AND p.id = $1";

/// Writes the notice `kind` about the endpoint (and `detail`, for the kinds that say more)
/// to the outbox on the transaction `conn`, one row per configured channel. Answers the rows
/// written (0 when the account configured no channel: the change is still logged).
pub(crate) async fn queue_notices<DB: Backend>(
    conn: &mut DB::Connection,
    kind: &str,
    endpoint: &EndpointKey,
    detail: NoticeDetail<'_>,
    now: i64,
) -> Result<usize, sqlx::Error> {
    let facts = DB::notice_facts(conn, endpoint).await?;
    let (event_id, payload) = notice::envelope(&facts, kind, detail, now);
    let channels = notice::channels(&facts);
    for (channel, target) in &channels {
        let notice = NewNotice {
            facts: &facts,
            kind,
            channel,
            target,
            event_id: &event_id,
            payload: &payload,
            now,
        };
        DB::insert_notice(conn, &notice).await?;
    }
    if channels.is_empty() {
        tracing::warn!(
            target: "kxp_sender", endpoint_id = %facts.endpoint_id, account_id = %facts.account_id,
            kind = kind, "the account has no ops URL or contact address: nobody is notified"
        );
    }
    Ok(channels.len())
}

const NOTIFICATION_COLUMNS: &str = "id, account_id, endpoint_id, kind, channel, target, event_id, payload, status, attempts, last_error, created_at";

/// A notification due at `$1` and unleased, of a channel this process sends (`$2`: 1 when it
/// can send e-mail).
const DUE: &str = "status = 'pending' AND next_attempt_at <= $1 \
     AND (lease_until IS NULL OR lease_until < $1) AND (channel <> 'email' OR $2 = 1)";

/// Leases the first due notification (`$1` now, `$2` the lease's end, `$3` the owner, `$4` as
/// [`DUE`]'s `$2`), or that of one account (`$5`), by its whole key. The lease test is repeated
/// outside the subquery: on PostgreSQL, a second process that waited for the row re-checks it
/// against the row the first one wrote, and skips it.
fn claim_sql(one_account: bool) -> String {
    let account = if one_account {
        "account_id = $5 AND "
    } else {
        ""
    };
    let due = DUE.replace("$2", "$4");
    format!(
        "UPDATE kxp_notifications SET lease_until = $2, lease_owner = $3, updated_at = $1 \
         WHERE {account}(account_id, id) IN (SELECT account_id, id FROM kxp_notifications \
           WHERE {account}{due} ORDER BY next_attempt_at LIMIT 1) \
         AND status = 'pending' AND (lease_until IS NULL OR lease_until < $1) \
         RETURNING {NOTIFICATION_COLUMNS}"
    )
}

pub(crate) static CLAIM: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| claim_sql(false));
pub(crate) static CLAIM_ACCOUNT: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| claim_sql(true));

impl Db {
    /// Leases the next due notification to `owner` for `lease_ms`; e-mail ones only when
    /// `email` (this process can send e-mail), so a process without an SMTP server leaves them
    /// to one that has.
    #[cfg_attr(
        not(feature = "test-util"),
        expect(unreachable_pub, reason = "public with feature test-util only")
    )]
    pub async fn claim_notification(
        &self,
        owner: &str,
        lease_ms: i64,
        email: bool,
    ) -> Result<Option<Notification>, StoreError> {
        let now = now_ms();
        let lease = now.saturating_add(lease_ms);
        if let Db::Citus(pool) = self {
            // The accounts with one due (read on every shard, no lock), then each account's
            // claim on its own shard, the only place Citus takes row locks.
            let mut due: Vec<(String, i64)> = every_shard(
                pool,
                "kxp_notifications",
                &format!(
                    "SELECT jsonb_build_array(account_id, MIN(next_attempt_at)) AS r FROM %%s \
                     WHERE {} GROUP BY account_id",
                    DUE.replace("$1", "%1$L").replace("$2", "%2$L")
                ),
                &[now.to_string(), i64::from(email).to_string()],
            )
            .await?;
            due.sort_unstable_by_key(|(_, at)| *at);
            for (account, _) in due {
                let claimed = sqlx::query_as::<_, Notification>(&CLAIM_ACCOUNT)
                    .bind(now)
                    .bind(lease)
                    .bind(owner)
                    .bind(i64::from(email))
                    .bind(&account)
                    .fetch_optional(pool)
                    .await?;
                if claimed.is_some() {
                    return Ok(claimed);
                }
            }
            return Ok(None);
        }
        Ok(on_db!(self, |pool| {
            sqlx::query_as::<_, Notification>(&CLAIM)
                .bind(now)
                .bind(lease)
                .bind(owner)
                .bind(i64::from(email))
                .fetch_optional(pool)
                .await?
        }))
    }

    /// Records a try of a notification — sent, retried at a time, or failed for good — if
    /// `owner` still holds its lease (else another notifier took it over, and its outcome
    /// stands).
    #[cfg_attr(
        not(feature = "test-util"),
        expect(unreachable_pub, reason = "public with feature test-util only")
    )]
    pub async fn finish_notification(
        &self,
        notification: &Notification,
        owner: &str,
        attempts: i64,
        next: NoticeNext,
        error: Option<&str>,
    ) -> Result<(), StoreError> {
        let now = now_ms();
        let (status, next_at) = match next {
            NoticeNext::Sent => ("sent", now),
            NoticeNext::RetryAt(at) => ("pending", at),
            NoticeNext::Failed => ("failed", now),
        };
        on_db!(self, |pool| {
            sqlx::query(
                "UPDATE kxp_notifications SET status = $1, attempts = $2, next_attempt_at = $3, \
                 lease_until = NULL, lease_owner = NULL, last_error = $4, updated_at = $5 \
                 WHERE account_id = $8 AND id = $6 AND lease_owner = $7",
            )
            .bind(status)
            .bind(attempts)
            .bind(next_at)
            .bind(error)
            .bind(now)
            .bind(&notification.id)
            .bind(owner)
            .bind(&notification.account_id)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// Every account's notifications, newest first, before the id `before` (the operators'
    /// notifications log).
    pub(crate) async fn all_notifications(
        &self,
        before: Option<&str>,
        limit: i64,
    ) -> Result<Vec<Notification>, StoreError> {
        let sql = format!(
            "SELECT {NOTIFICATION_COLUMNS} FROM kxp_notifications \
             WHERE (CAST($1 AS TEXT) IS NULL OR id < $1) ORDER BY id DESC LIMIT $2"
        );
        Ok(on_db!(self, |pool| {
            sqlx::query_as::<_, Notification>(&sql)
                .bind(before)
                .bind(limit)
                .fetch_all(pool)
                .await?
        }))
    }

    /// A page of the account's notifications, oldest first, after `cursor`.
    pub(crate) async fn notifications(
        &self,
        account_id: &AccountId,
        cursor: Option<&str>,
        limit: i64,
    ) -> Result<Vec<Notification>, StoreError> {
        let sql = format!(
            "SELECT {NOTIFICATION_COLUMNS} FROM kxp_notifications WHERE account_id = $1 AND id > $2 \
             ORDER BY id LIMIT $3"
        );
        Ok(on_db!(self, |pool| {
            sqlx::query_as::<_, Notification>(&sql)
                .bind(account_id)
                .bind(cursor.unwrap_or(""))
                .bind(limit)
                .fetch_all(pool)
                .await?
        }))
    }

    /// The account's ops secret, opened with `ring`: what operational webhooks are signed
    /// with.
    pub(crate) async fn ops_secret(
        &self,
        account_id: &AccountId,
        ring: Option<&KeyRing>,
    ) -> Result<Option<String>, StoreError> {
        let stored = on_db!(self, |pool| {
            sqlx::query_scalar::<_, Option<String>>(
                "SELECT ops_secret FROM kxp_accounts WHERE id = $1",
            )
            .bind(account_id)
            .fetch_optional(pool)
            .await?
            .flatten()
        });
        Ok(stored
            .map(|stored| open_ops_secret(ring, account_id, &stored))
            .transpose()?)
    }
}
