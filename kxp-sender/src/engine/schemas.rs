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

use crate::model::AccountId;
use crate::store::{Db, StoreError};

/// Compiles a JSON Schema document; the error names the problem and where it is.
pub(crate) fn compile(schema: &Value) -> Result<jsonschema::Validator, String> {
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
pub(crate) struct Violation {
    /// A JSON Pointer into `data` (`/amount`; empty for `data` itself).
    pub path: String,
    /// What is wrong there.
    pub message: String,
}

type Key = (AccountId, String, String);

/// Compiled validators per (account, type, version), each with the revision it was compiled
/// from.
#[derive(Default)]
pub(crate) struct SchemaCache {
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
    pub(crate) async fn check(
        &self,
        db: &Db,
        account_id: &AccountId,
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
    pub(crate) fn forget(&self, account_id: &AccountId, event_type: &str, api_version: &str) {
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
        account_id: &AccountId,
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

fn key(account_id: &AccountId, event_type: &str, api_version: &str) -> Key {
    (
        account_id.clone(),
        event_type.to_owned(),
        api_version.to_owned(),
    )
}
