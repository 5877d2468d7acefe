//! The offline commands' door to the database: what `kxp accounts`, `kxp operators`,
//! `kxp replay --database-url`, `kxp secrets-key reseal|census` and `kxp migrate` do without a
//! running server.
//! The store's own methods stay the crate's business; this is the short list another crate
//! may call, each a single store call with the same effect as the API's.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::model::{
    Account, AccountId, Delivery, DeliveryFilter, DeliveryId, EndpointId, Operator, OperatorId,
};
use crate::store::seal::KeyRing;
use crate::store::{Db, Migrations, PendingMigration, SchemaError, SchemaStatus, StoreError};

/// A connection pool for the offline commands. A running `kxp serve` picks up what they write
/// (a replayed delivery is due now) by its usual polling.
#[derive(Debug, Clone)]
pub struct Admin {
    db: Db,
}

impl Admin {
    /// Connects, as `kxp serve` does: SQLite's migrations are applied (`sqlite://path`
    /// creates the file), and a PostgreSQL database must have all of this version's
    /// ([`SchemaError::Pending`] otherwise: `kxp migrate apply` first).
    pub async fn connect(url: &str) -> Result<Admin, SchemaError> {
        Ok(Admin {
            db: Db::connect_with(url, Migrations::Require, Duration::ZERO).await?,
        })
    }

    /// Connects and leaves the schema as it is, for `kxp migrate`.
    pub async fn connect_unmigrated(url: &str) -> Result<Admin, sqlx::Error> {
        Ok(Admin {
            db: Db::open(url).await?,
        })
    }

    /// The database's migrations against this version's: applied, pending, modified. Reads
    /// only (a database never migrated stays without a migrations table).
    pub async fn schema_status(&self) -> Result<SchemaStatus, sqlx::Error> {
        self.db.schema_status().await
    }

    /// Applies the pending migrations in order, calling `applied` after each with how long it
    /// took, and returns them. On PostgreSQL each statement waits at most
    /// `lock_timeout` for a lock (zero: no limit); a migration that waits longer is rolled back
    /// ([`SchemaError::LockTimeout`]) and the ones after it are not run.
    pub async fn apply_migrations(
        &self,
        lock_timeout: Duration,
        applied: impl FnMut(&PendingMigration, Duration),
    ) -> Result<Vec<PendingMigration>, SchemaError> {
        self.db.apply_migrations(lock_timeout, applied).await
    }

    /// Closes the pool: a command closes it before it exits, so SQLite checkpoints its WAL.
    pub async fn close(&self) {
        self.db.close().await;
    }

    /// A new account named `name`, and its API key (shown once; only its hash is stored).
    pub async fn create_account(&self, name: &str) -> Result<(Account, String), StoreError> {
        self.db.create_account(name, None).await
    }

    /// Every account, oldest first.
    pub async fn accounts(&self) -> Result<Vec<Account>, StoreError> {
        self.db.accounts().await
    }

    /// The account an API key belongs to, if any.
    pub async fn account_by_key(&self, key: &str) -> Result<Option<Account>, StoreError> {
        self.db.account_by_key(key).await
    }

    /// A new operator named `name`, and its key (shown once).
    pub async fn create_operator(&self, name: &str) -> Result<(Operator, String), StoreError> {
        self.db.create_operator(name).await
    }

    /// Every operator, by id.
    pub async fn operators(&self) -> Result<Vec<Operator>, StoreError> {
        self.db.operators().await
    }

    /// Deletes an operator and ends its console sessions: the operator and how many sessions
    /// ended, or `None` when there is no such operator.
    pub async fn delete_operator(
        &self,
        id: &OperatorId,
    ) -> Result<Option<(Operator, u64)>, StoreError> {
        self.db.delete_operator(id).await
    }

    /// A page of `account_id`'s deliveries that `filter` selects, oldest first, after `cursor`
    /// (the last delivery id of the previous page).
    pub async fn deliveries(
        &self,
        account_id: &AccountId,
        filter: &DeliveryFilter,
        cursor: Option<&str>,
        limit: i64,
    ) -> Result<Vec<Delivery>, StoreError> {
        self.db.deliveries(account_id, filter, cursor, limit).await
    }

    /// Queues a delivery of `account_id` again, as `POST /v1/deliveries/{id}/replay` does: the
    /// new delivery.
    pub async fn replay(
        &self,
        account_id: &AccountId,
        delivery_id: &DeliveryId,
    ) -> Result<Delivery, StoreError> {
        self.db.replay(account_id, delivery_id).await
    }

    /// Queues again an endpoint's deliveries that `filter` selects, as
    /// `POST /v1/endpoints/{id}/replay` does: how many.
    pub async fn replay_endpoint(
        &self,
        account_id: &AccountId,
        endpoint_id: &EndpointId,
        filter: &DeliveryFilter,
    ) -> Result<u64, StoreError> {
        self.db
            .replay_endpoint(account_id, endpoint_id, filter)
            .await
    }

    /// Seals every stored secret under `ring`'s current key (after `KXP_SECRETS_KEY` gained a
    /// new first key): how many were rewritten.
    pub async fn reseal(&self, ring: &KeyRing) -> Result<u64, StoreError> {
        self.db.reseal(ring).await
    }

    /// How many stored secrets each key id seals (`None`: stored in the clear).
    pub async fn sealing_census(&self) -> Result<BTreeMap<Option<String>, u64>, StoreError> {
        self.db.sealing_census().await
    }
}
