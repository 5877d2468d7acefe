//! Schema versions: JSON Schemas registered per (account, event type, `api_version`), and the
//! validators compiled from them.
//!
//! A schema is compiled when it is registered (an invalid one is refused), and again, once, by
//! each process that validates an event against it: [`SchemaCache`] keeps the compiled
//! validator with the row's `revision`, which every PUT changes, and re-reads only that column
//! per event, so a schema replaced or deleted through another process takes effect at once.
//!
//! Remote `$ref`s are never fetched: `jsonschema` is built without its HTTP and file
//! resolvers, so a schema that refers outside itself fails to compile and is refused.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::db::{Db, new_id, now_ms, on_db};
use crate::store::StoreError;

/// A registered schema.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Schema {
    /// `sch_…`.
    pub id: String,
    /// The owner.
    pub account_id: String,
    /// The event type it checks.
    pub event_type: String,
    /// The version it checks.
    pub api_version: String,
    /// The JSON Schema document, as registered.
    pub schema: String,
    /// Changes on every PUT.
    pub revision: String,
    /// Unix milliseconds.
    pub created_at: i64,
    /// Unix milliseconds.
    pub updated_at: i64,
}

const COLUMNS: &str =
    "id, account_id, event_type, api_version, schema, revision, created_at, updated_at";

impl Db {
    /// Registers or replaces the schema of (`event_type`, `api_version`); true when it is new.
    /// The caller checked that `schema` compiles.
    pub async fn put_schema(
        &self,
        account_id: &str,
        event_type: &str,
        api_version: &str,
        schema: &str,
    ) -> Result<(Schema, bool), StoreError> {
        let now = now_ms();
        let revision = new_id("rev");
        on_db!(self, |pool, begin| {
            let mut tx = pool.begin_with(begin).await?;
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
    pub async fn schema(
        &self,
        account_id: &str,
        event_type: &str,
        api_version: &str,
    ) -> Result<Schema, StoreError> {
        on_db!(self, |pool, _begin| {
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
    pub async fn schemas(&self, account_id: &str) -> Result<Vec<Schema>, StoreError> {
        Ok(on_db!(self, |pool, _begin| {
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
    pub async fn delete_schema(
        &self,
        account_id: &str,
        event_type: &str,
        api_version: &str,
    ) -> Result<(), StoreError> {
        let deleted = on_db!(self, |pool, _begin| {
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

    async fn schema_revision(
        &self,
        account_id: &str,
        event_type: &str,
        api_version: &str,
    ) -> Result<Option<String>, StoreError> {
        Ok(on_db!(self, |pool, _begin| {
            sqlx::query_scalar::<_, String>(
                "SELECT revision FROM kxp_schemas \
                 WHERE account_id = $1 AND event_type = $2 AND api_version = $3",
            )
            .bind(account_id)
            .bind(event_type)
            .bind(api_version)
            .fetch_optional(pool)
            .await?
        }))
    }
}

/// Compiles a JSON Schema document; the error names the problem and where it is.
pub fn compile(schema: &Value) -> Result<jsonschema::Validator, String> {
    jsonschema::validator_for(schema).map_err(|e| {
        let at = e.instance_path().to_string();
        if at.is_empty() {
            e.to_string()
        } else {
            format!("at {at}: {e}")
        }
    })
}

/// Why `data` does not fit its schema: the first error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// A JSON Pointer into `data` (`/amount`; empty for `data` itself).
    pub path: String,
    /// What is wrong there.
    pub message: String,
}

type Key = (String, String, String);

/// Compiled validators per (account, type, version), each with the revision it was compiled
/// from.
#[derive(Default)]
pub struct SchemaCache {
    compiled: Mutex<HashMap<Key, (String, Arc<jsonschema::Validator>)>>,
}

impl std::fmt::Debug for SchemaCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchemaCache").finish_non_exhaustive()
    }
}

impl SchemaCache {
    /// Checks `data` against the schema of (`event_type`, `api_version`), if there is one:
    /// `Ok(None)` when it fits or no schema is registered (then `data` is not even parsed).
    pub async fn check(
        &self,
        db: &Db,
        account_id: &str,
        event_type: &str,
        api_version: &str,
        data: &serde_json::value::RawValue,
    ) -> Result<Option<Violation>, StoreError> {
        let Some(validator) = self
            .validator(db, account_id, event_type, api_version)
            .await?
        else {
            return Ok(None);
        };
        let data: Value = match serde_json::from_str(data.get()) {
            Ok(data) => data,
            Err(e) => {
                return Ok(Some(Violation {
                    path: String::new(),
                    message: e.to_string(),
                }));
            }
        };
        Ok(validator.validate(&data).err().map(|e| Violation {
            path: e.instance_path().to_string(),
            message: e.to_string(),
        }))
    }

    /// Forgets the validator of (`account_id`, `event_type`, `api_version`).
    pub fn forget(&self, account_id: &str, event_type: &str, api_version: &str) {
        self.lock()
            .remove(&key(account_id, event_type, api_version));
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<Key, (String, Arc<jsonschema::Validator>)>> {
        // A panic while holding the lock leaves the map whole: use it anyway.
        self.compiled
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    async fn validator(
        &self,
        db: &Db,
        account_id: &str,
        event_type: &str,
        api_version: &str,
    ) -> Result<Option<Arc<jsonschema::Validator>>, StoreError> {
        let key = key(account_id, event_type, api_version);
        let Some(revision) = db
            .schema_revision(account_id, event_type, api_version)
            .await?
        else {
            self.lock().remove(&key);
            return Ok(None);
        };
        if let Some((cached, validator)) = self.lock().get(&key)
            && *cached == revision
        {
            return Ok(Some(validator.clone()));
        }
        let stored = match db.schema(account_id, event_type, api_version).await {
            Ok(stored) => stored,
            // Deleted in between: no schema.
            Err(StoreError::NotFound) => return Ok(None),
            Err(e) => return Err(e),
        };
        let document: Value = serde_json::from_str(&stored.schema)
            .map_err(|e| StoreError::Database(sqlx::Error::Decode(Box::new(e))))?;
        let validator = Arc::new(compile(&document).map_err(|e| {
            StoreError::Database(sqlx::Error::Decode(
                format!("stored schema {} does not compile: {e}", stored.id).into(),
            ))
        })?);
        self.lock()
            .insert(key, (stored.revision, validator.clone()));
        Ok(Some(validator))
    }
}

fn key(account_id: &str, event_type: &str, api_version: &str) -> Key {
    (
        account_id.to_owned(),
        event_type.to_owned(),
        api_version.to_owned(),
    )
}
