//! `kxp_audit`: the changes made through the console or with an operator key. Written beside
//! the change (after it succeeded), read by operators newest first.

use crate::model::{AuditEntry, NewAudit, new_id, now_ms};
use crate::store::{Db, StoreError, on_db};

impl Db {
    /// Records a change.
    pub(crate) async fn audit(&self, entry: &NewAudit<'_>) -> Result<(), StoreError> {
        on_db!(self, |pool| {
            sqlx::query(
                "INSERT INTO kxp_audit (id, at, actor_kind, actor_id, actor_name, via, account_id, action, target) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            )
            .bind(new_id("aud"))
            .bind(now_ms())
            .bind(entry.actor.kind())
            .bind(entry.actor.id())
            .bind(entry.actor.name())
            .bind(entry.action.via())
            .bind(entry.account_id)
            .bind(entry.action.text())
            .bind(entry.target)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// Up to `limit` entries before the id `before`, newest first (on the primary key).
    pub(crate) async fn audit_log(
        &self,
        before: Option<&str>,
        limit: i64,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        Ok(on_db!(self, |pool| {
            sqlx::query_as::<_, AuditEntry>(
                "SELECT id, at, actor_kind, actor_id, actor_name, via, account_id, action, target \
                 FROM kxp_audit WHERE (CAST($1 AS TEXT) IS NULL OR id < $1) ORDER BY id DESC LIMIT $2",
            )
            .bind(before)
            .bind(limit)
            .fetch_all(pool)
            .await?
        }))
    }
}
