//! `kxp_schemas`: JSON Schemas registered per (account, event type, `api_version`).

use crate::model::{AccountId, Schema, new_id, now_ms};
use crate::store::{Db, StoreError, on_db};

const COLUMNS: &str =
    "id, account_id, event_type, api_version, schema, revision, created_at, updated_at";

/// The revision of the schema account `$1` registered for event type `$2` at version `$3`:
/// read for every event ingested.
pub(crate) const REVISION: &str = "SELECT revision FROM kxp_schemas WHERE account_id = $1 AND event_type = $2 AND api_version = $3";

impl Db {
    /// Registers or replaces the schema of (`event_type`, `api_version`); true when it is new.
    /// The caller checked that `schema` compiles.
    pub(crate) async fn put_schema(
        &self,
        account_id: &AccountId,
        event_type: &str,
        api_version: &str,
        schema: &str,
    ) -> Result<(Schema, bool), StoreError> {
        let now = now_ms();
        let revision = new_id("rev");
        on_db!(self, |pool, DB| {
            let mut tx = pool.begin_with(DB::BEGIN).await?;
            let existed = sqlx::query_scalar::<_, String>(
                "SELECT id FROM kxp_schemas WHERE account_id = $1 AND event_type = $2 AND api_version = $3",
            )
            .bind(account_id)
            .bind(event_type)
            .bind(api_version)
            .fetch_optional(&mut *tx)
            .await?
            .is_some();
            // ON CONFLICT: two first registrations racing on PostgreSQL both succeed, the
            // later one winning, as two PUTs one after the other would.
            let stored = sqlx::query_as::<_, Schema>(&format!(
                "INSERT INTO kxp_schemas ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $7) \
                 ON CONFLICT (account_id, event_type, api_version) DO UPDATE SET \
                   schema = excluded.schema, revision = excluded.revision, updated_at = excluded.updated_at \
                 RETURNING {COLUMNS}"
            ))
            .bind(new_id("sch"))
            .bind(account_id)
            .bind(event_type)
            .bind(api_version)
            .bind(schema)
            .bind(&revision)
            .bind(now)
            .fetch_one(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok((stored, !existed))
        })
    }

    /// One schema of the account.
    pub(crate) async fn schema(
        &self,
        account_id: &AccountId,
        event_type: &str,
        api_version: &str,
    ) -> Result<Schema, StoreError> {
        on_db!(self, |pool| {
            sqlx::query_as::<_, Schema>(&format!(
                "SELECT {COLUMNS} FROM kxp_schemas \
                 WHERE account_id = $1 AND event_type = $2 AND api_version = $3"
            ))
            .bind(account_id)
            .bind(event_type)
            .bind(api_version)
            .fetch_optional(pool)
            .await?
        })
        .ok_or(StoreError::NotFound)
    }

    /// Every schema of the account, by type then version.
    pub(crate) async fn schemas(&self, account_id: &AccountId) -> Result<Vec<Schema>, StoreError> {
        Ok(on_db!(self, |pool| {
            sqlx::query_as::<_, Schema>(&format!(
                "SELECT {COLUMNS} FROM kxp_schemas WHERE account_id = $1 \
                 ORDER BY event_type, api_version"
            ))
            .bind(account_id)
            .fetch_all(pool)
            .await?
        }))
    }

    /// Deletes one schema of the account: events of its type and version are accepted unchecked
    /// again.
    pub(crate) async fn delete_schema(
        &self,
        account_id: &AccountId,
        event_type: &str,
        api_version: &str,
    ) -> Result<(), StoreError> {
        let deleted = on_db!(self, |pool| {
            sqlx::query(
                "DELETE FROM kxp_schemas WHERE account_id = $1 AND event_type = $2 AND api_version = $3",
            )
            .bind(account_id)
            .bind(event_type)
            .bind(api_version)
            .execute(pool)
            .await?
            .rows_affected()
        });
        if deleted == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }

    /// The revision of one schema of the account: what the validator cache compares.
    pub(crate) async fn schema_revision(
        &self,
        account_id: &AccountId,
        event_type: &str,
        api_version: &str,
    ) -> Result<Option<String>, StoreError> {
        Ok(on_db!(self, |pool| {
            sqlx::query_scalar::<_, String>(REVISION)
                .bind(account_id)
                .bind(event_type)
                .bind(api_version)
                .fetch_optional(pool)
                .await?
        }))
    }
}
