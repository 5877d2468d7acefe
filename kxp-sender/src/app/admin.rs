//! The offline commands' door to the database: what `kxp accounts`, `kxp operators`,
//! `kxp replay --database-url` and `kxp secrets-key reseal|census` do without a running server.
//! The store's own methods stay the crate's business; this is the short list another crate
//! may call, each a single store call with the same effect as the API's.

use std::collections::BTreeMap;

use crate::model::{
    Account, AccountId, Delivery, DeliveryFilter, DeliveryId, EndpointId, Operator, OperatorId,
};
use crate::store::seal::KeyRing;
use crate::store::{Db, StoreError};

/// A connection pool for the offline commands. A running `kxp serve` picks up what they write
/// (a replayed delivery is due now) by its usual polling.
#[derive(Debug, Clone)]
pub struct Admin {
    db: Db,
}

impl Admin {
    /// Connects and runs the migrations, as `kxp serve` does (`sqlite://path` creates the
    /// file; `postgres://…` needs the database to exist).
    pub async fn connect(url: &str) -> Result<Admin, sqlx::Error> {
        Ok(Admin {
            db: Db::connect(url).await?,
        })
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
