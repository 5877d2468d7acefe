//! `kxp_audit` and `kxp_operator_audit`: the changes made through the console or with an
//! operator key. Written beside the change (after it succeeded), read by operators newest
//! first. A change to an account's data is the account's row (`kxp_audit`, keyed by account
//! like the rest of its data); one that acts on no account (creating an account or an
//! operator, listing accounts) is the operators' own (`kxp_operator_audit`).

use crate::model::{AuditEntry, NewAudit, new_id, now_ms};
use crate::store::{Db, StoreError, on_db};

/// The columns of an entry, from either table (`kxp_operator_audit` has no account).
const COLUMNS: &str = "id, at, actor_kind, actor_id, actor_name, via, action, target";

impl Db {
    /// Records a change.
    pub(crate) async fn audit(&self, entry: &NewAudit<'_>) -> Result<(), StoreError> {
        let sql = match entry.account_id {
            Some(_) => {
                "INSERT INTO kxp_audit (id, at, actor_kind, actor_id, actor_name, via, action, target, account_id) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
            }
            None => {
                "INSERT INTO kxp_operator_audit (id, at, actor_kind, actor_id, actor_name, via, action, target) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
            }
        };
        on_db!(self, |pool| {
            let query = sqlx::query(sql)
                .bind(new_id("aud"))
                .bind(now_ms())
                .bind(entry.actor.kind())
                .bind(entry.actor.id())
                .bind(entry.actor.name())
                .bind(entry.action.via())
                .bind(entry.action.text())
                .bind(entry.target);
            match entry.account_id {
                Some(account_id) => query.bind(account_id),
                None => query,
            }
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// Up to `limit` entries before the id `before`, newest first: the newest `limit` of each
    /// table (on its primary key), merged. Ids are UUIDv7s, so their order is time order
    /// across the two tables.
    pub(crate) async fn audit_log(
        &self,
        before: Option<&str>,
        limit: i64,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        let page = |table: &str, account: &str| {
            format!(
                "SELECT {COLUMNS}, {account} AS account_id FROM {table} \
                 WHERE (CAST($1 AS TEXT) IS NULL OR id < $1) ORDER BY id DESC LIMIT $2"
            )
        };
        let (accounts, operators) = (
            page("kxp_audit", "account_id"),
            page("kxp_operator_audit", "CAST(NULL AS TEXT)"),
        );
        let mut entries = Vec::new();
        for sql in [accounts, operators] {
            entries.extend(on_db!(self, |pool| {
                sqlx::query_as::<_, AuditEntry>(&sql)
                    .bind(before)
                    .bind(limit)
                    .fetch_all(pool)
                    .await?
            }));
        }
        entries.sort_unstable_by(|a, b| b.id.cmp(&a.id));
        entries.truncate(usize::try_from(limit).unwrap_or(0));
        Ok(entries)
    }
}
