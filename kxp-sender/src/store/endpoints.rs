//! `kxp_endpoints`: creating, reading and changing endpoints, and the changes of state a
//! merchant makes (pause, resume, delete), each with what it does to the endpoint's deliveries
//! in the same transaction.

use sqlx::{Pool, QueryBuilder};

use crate::model::{
    Account, AccountId, CircuitState, Created, Endpoint, EndpointChanges, EndpointId, EndpointKey,
    EndpointStatus, EventTypes, NewEndpoint, new_id, new_key, new_secret, now_ms, public_key_of,
};
use crate::policy::circuit::{Protection, spacing_ms};
use crate::store::backend::Backend;
use crate::store::credentials::seal_credentials;
use crate::store::seal::KeyRing;
use crate::store::secrets::stored_secret;
use crate::store::{Db, StoreError, on_db};

impl Db {
    /// The account of the endpoint `id`, whatever its status, through the endpoint directory:
    /// for what names an endpoint and no account (the catch-up feed, `/jwks`).
    pub(crate) async fn endpoint_account(
        &self,
        id: &EndpointId,
    ) -> Result<Option<AccountId>, StoreError> {
        Ok(on_db!(self, |pool| {
            sqlx::query_scalar::<_, AccountId>(
                "SELECT account_id FROM kxp_endpoint_directory WHERE endpoint_id = $1",
            )
            .bind(id)
            .fetch_optional(pool)
            .await?
        }))
    }

    /// Creates an endpoint with a fresh secret; returns both. Outside the API's checks: for
    /// the tests that store an endpoint no registration would take (feature `test-util`).
    #[cfg(feature = "test-util")]
    pub async fn create_endpoint(
        &self,
        account: &Account,
        url: &str,
        event_types: &[String],
        description: &str,
        timeout_ms: i64,
    ) -> Result<(Endpoint, String), StoreError> {
        self.create_endpoint_with(
            account,
            &NewEndpoint {
                url,
                mode: kxp_api::EndpointMode::Push,
                temporary: false,
                payload_mode: kxp_api::PayloadMode::Full,
                event_types,
                content_filter: None,
                description,
                timeout_ms,
                api_version: None,
                rate_limit_per_second: None,
                signing: kxp_api::Signing::Hmac,
                format: kxp_api::Format::Kxp,
                encryption_jwk: None,
                trace_propagation: true,
                credentials: None,
            },
            None,
        )
        .await
        .map(|created| {
            let secret = created.secret.unwrap_or_default();
            (created.endpoint, secret)
        })
    }

    /// Creates an endpoint with every setting, and a fresh secret and/or Ed25519 key as its
    /// `signing` asks, in its `format`'s form; returns the endpoint, the secret and the public key. Both are stored
    /// sealed under `ring`, when there is one ([`KeyRing`](crate::KeyRing)).
    pub(crate) async fn create_endpoint_with(
        &self,
        account: &Account,
        new: &NewEndpoint<'_>,
        ring: Option<&KeyRing>,
    ) -> Result<Created, StoreError> {
        let now = now_ms();
        let id: EndpointId = new_id("ep").into();
        let credentials = new
            .credentials
            .as_ref()
            .map(|(c, view)| seal_credentials(ring, &id, c, view))
            .unwrap_or_default();
        let endpoint = Endpoint {
            id,
            account_id: account.id.clone(),
            url: new.url.to_owned(),
            mode: new.mode.clone(),
            temporary: new.temporary,
            payload_mode: new.payload_mode.clone(),
            pull_cursor: 0,
            pull_cursor_at: None,
            pull_read_at: None,
            description: new.description.to_owned(),
            event_types: EventTypes(new.event_types.to_vec()),
            timeout_ms: new.timeout_ms,
            status: EndpointStatus::Active,
            api_version: new.api_version.map(str::to_owned),
            rate_limit_per_second: new.rate_limit_per_second,
            circuit_state: CircuitState::Closed,
            circuit_opened_at: None,
            circuit_probe_at: None,
            created_at: now,
            updated_at: now,
            signing: new.signing.clone(),
            format: new.format.clone(),
            encryption_jwk: new.encryption_jwk.clone(),
            confirm_secret_id: None,
            confirm_needed: None,
            confirmations: 0,
            trace_propagation: new.trace_propagation,
            credentials_view: credentials.view.clone(),
            server_certificate: None,
            content_filter: new.content_filter.clone(),
        };
        let secret = new.signing.hmac().then(|| new_secret(&new.format));
        let seed = new.signing.ed25519().then(|| new_key(&new.format));
        let rows: Vec<(&str, String)> = [("hmac", &secret), ("ed25519", &seed)]
            .into_iter()
            .filter_map(|(kind, plain)| {
                let plain = plain.as_deref()?;
                Some((kind, stored_secret(ring, &endpoint.id, plain)))
            })
            .collect();
        on_db!(self, |pool, DB| {
            let mut tx = pool.begin_with(DB::BEGIN).await?;
            sqlx::query(
                "INSERT INTO kxp_endpoints (id, account_id, url, description, event_types, timeout_ms, status, \
                 api_version, rate_limit_per_second, created_at, updated_at, signing, format, encryption_jwk, trace_propagation, \
                 credentials, credentials_view, content_filter, mode, temporary, payload_mode) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)",
            )
            .bind(&endpoint.id)
            .bind(&endpoint.account_id)
            .bind(&endpoint.url)
            .bind(&endpoint.description)
            .bind(endpoint.event_types.json())
            .bind(endpoint.timeout_ms)
            .bind(endpoint.status.as_str())
            .bind(&endpoint.api_version)
            .bind(endpoint.rate_limit_per_second)
            .bind(now)
            .bind(now)
            .bind(endpoint.signing.as_str())
            .bind(endpoint.format.as_str())
            .bind(&endpoint.encryption_jwk)
            .bind(endpoint.trace_propagation)
            .bind(&credentials.stored)
            .bind(&credentials.view)
            .bind(&endpoint.content_filter)
            .bind(endpoint.mode.as_str())
            .bind(endpoint.temporary)
            .bind(endpoint.payload_mode.as_str())
            .execute(&mut *tx)
            .await?;
            sqlx::query(
                "INSERT INTO kxp_endpoint_directory (endpoint_id, account_id) VALUES ($1, $2)",
            )
            .bind(&endpoint.id)
            .bind(&endpoint.account_id)
            .execute(&mut *tx)
            .await?;
            for (kind, stored) in &rows {
                sqlx::query(crate::store::secrets::INSERT_SECRET)
                    .bind(&endpoint.id)
                    .bind(stored.as_str())
                    .bind(now)
                    .bind(kind)
                    .bind(&endpoint.account_id)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
        });
        let public_key = seed.as_deref().and_then(public_key_of);
        Ok(Created {
            endpoint,
            secret,
            public_key,
        })
    }

    /// How many temporary pull endpoints (`kxp listen`'s) the account has.
    pub(crate) async fn temporary_count(&self, account_id: &AccountId) -> Result<u64, StoreError> {
        let count: i64 = on_db!(self, |pool| {
            sqlx::query_scalar(
                "SELECT COUNT(*) FROM kxp_endpoints WHERE account_id = $1 AND temporary AND status <> 'deleted'",
            )
            .bind(account_id)
            .fetch_one(pool)
            .await?
        });
        Ok(u64::try_from(count).unwrap_or(0))
    }

    /// How many endpoints the account has (deleted ones left out).
    pub(crate) async fn endpoint_count(&self, account_id: &AccountId) -> Result<u64, StoreError> {
        let count: i64 = on_db!(self, |pool| {
            sqlx::query_scalar(
                "SELECT count(*) FROM kxp_endpoints WHERE account_id = $1 AND status <> 'deleted'",
            )
            .bind(account_id)
            .fetch_one(pool)
            .await?
        });
        Ok(u64::try_from(count).unwrap_or(0))
    }

    /// One endpoint of the account (a deleted one is not found).
    pub(crate) async fn endpoint(
        &self,
        account_id: &AccountId,
        id: &EndpointId,
    ) -> Result<Endpoint, StoreError> {
        on_db!(self, |pool| {
            sqlx::query_as::<_, Endpoint>(
                "SELECT * FROM kxp_endpoints WHERE account_id = $1 AND id = $2 AND status <> 'deleted'",
            )
            .bind(account_id)
            .bind(id)
            .fetch_optional(pool)
            .await?
        })
        .ok_or(StoreError::NotFound)
    }

    /// A page of the account's endpoints (deleted ones left out), by id, after `cursor`.
    pub(crate) async fn endpoints(
        &self,
        account_id: &AccountId,
        cursor: Option<&str>,
        limit: i64,
    ) -> Result<Vec<Endpoint>, StoreError> {
        Ok(on_db!(self, |pool| {
            sqlx::query_as::<_, Endpoint>(
                "SELECT * FROM kxp_endpoints WHERE account_id = $1 AND status <> 'deleted' \
                 AND (CAST($2 AS TEXT) IS NULL OR id > $2) ORDER BY id LIMIT $3",
            )
            .bind(account_id)
            .bind(cursor)
            .bind(limit)
            .fetch_all(pool)
            .await?
        }))
    }

    /// Applies `changes` (all checked by the caller) to one of the account's endpoints, in one
    /// statement that sets only the fields given, so concurrent changes to other fields are
    /// kept. New credentials apply only over the ones they were merged onto
    /// ([`EndpointChanges::credentials_were`]): [`StoreError::NotFound`] otherwise. Pending deliveries pick up the new URL and timeout at their next try.
    pub(crate) async fn update_endpoint(
        &self,
        account_id: &AccountId,
        id: &EndpointId,
        changes: &EndpointChanges,
    ) -> Result<Endpoint, StoreError> {
        if changes.is_empty() {
            return self.endpoint(account_id, id).await;
        }
        let event_types = changes
            .event_types
            .as_ref()
            .map(|types| EventTypes(types.clone()).json());
        on_db!(self, |pool, DB| {
            let mut query = QueryBuilder::<DB>::new("UPDATE kxp_endpoints SET ");
            let mut sets = query.separated(", ");
            if let Some(url) = &changes.url {
                sets.push("url = ").push_bind_unseparated(url.as_str());
            }
            if let Some(types) = &event_types {
                sets.push("event_types = ")
                    .push_bind_unseparated(types.as_str());
            }
            if let Some(filter) = &changes.content_filter {
                sets.push("content_filter = ")
                    .push_bind_unseparated(filter.as_deref());
            }
            if let Some(description) = &changes.description {
                sets.push("description = ")
                    .push_bind_unseparated(description.as_str());
            }
            if let Some(timeout_ms) = changes.timeout_ms {
                sets.push("timeout_ms = ").push_bind_unseparated(timeout_ms);
            }
            if let Some(api_version) = &changes.api_version {
                sets.push("api_version = ")
                    .push_bind_unseparated(api_version.as_deref());
            }
            if let Some(limit) = changes.rate_limit_per_second {
                sets.push("rate_limit_per_second = ")
                    .push_bind_unseparated(limit);
            }
            if let Some(jwk) = &changes.encryption_jwk {
                sets.push("encryption_jwk = ")
                    .push_bind_unseparated(jwk.as_deref());
            }
            if let Some(propagate) = changes.trace_propagation {
                sets.push("trace_propagation = ")
                    .push_bind_unseparated(propagate);
            }
            if let Some(mode) = &changes.payload_mode {
                sets.push("payload_mode = ")
                    .push_bind_unseparated(mode.as_str().to_owned());
            }
            if let Some(credentials) = &changes.credentials {
                sets.push("credentials = ")
                    .push_bind_unseparated(credentials.stored.as_deref());
                sets.push("credentials_view = ")
                    .push_bind_unseparated(credentials.view.as_deref());
            }
            sets.push("updated_at = ").push_bind_unseparated(now_ms());
            query
                .push(" WHERE account_id = ")
                .push_bind(account_id)
                .push(" AND id = ")
                .push_bind(id)
                .push(" AND status <> 'deleted'");
            if let Some(were) = &changes.credentials_were {
                query
                    .push(" AND COALESCE(credentials, '') = ")
                    .push_bind(were.as_deref().unwrap_or(""));
            }
            query.push(" RETURNING *");
            query
                .build_query_as::<Endpoint>()
                .fetch_optional(pool)
                .await?
        })
        .ok_or(StoreError::NotFound)
    }

    /// Pauses one of the account's endpoints: its pending deliveries are held (they stay
    /// pending, are not claimed and burn no attempt) until [`resume_endpoint`](Db::resume_endpoint).
    /// Returns the endpoint and how many deliveries were put on hold. Idempotent.
    pub(crate) async fn pause_endpoint(
        &self,
        account_id: &AccountId,
        id: &EndpointId,
    ) -> Result<(Endpoint, u64), StoreError> {
        let now = now_ms();
        on_db!(self, |pool| pause_on(pool, account_id, id, now).await)
    }

    /// Resumes one of the account's endpoints (paused, disabled, or active with an open
    /// circuit: resuming says "try now"): its circuit is closed, its failure period starts
    /// again, and its held deliveries are released spread out at its rate limit, oldest first.
    /// Returns the endpoint and how many deliveries it released. Idempotent.
    pub(crate) async fn resume_endpoint(
        &self,
        account_id: &AccountId,
        id: &EndpointId,
        protection: &Protection,
    ) -> Result<(Endpoint, u64), StoreError> {
        let now = now_ms();
        on_db!(self, |pool| resume_on(
            pool, account_id, id, now, protection
        )
        .await)
    }

    /// Deletes one of the account's endpoints (softly: the row stays for its deliveries'
    /// history). No delivery is queued for it any more; its pending deliveries become dead with
    /// `last_error = endpoint_deleted`, where the dead-letter queue shows them; its secrets are
    /// erased. Returns how many deliveries it ended.
    pub(crate) async fn delete_endpoint(
        &self,
        account_id: &AccountId,
        id: &EndpointId,
    ) -> Result<u64, StoreError> {
        let now = now_ms();
        let ended = on_db!(self, |pool| delete_on(pool, account_id, id, now).await)?;
        // A temporary pull endpoint (`kxp listen`'s) leaves nothing in the dead-letter queue:
        // what its session did not read is discarded with it (never tried, so no attempt goes
        // with it); the events stay, for the account's other endpoints.
        on_db!(self, |pool| {
            sqlx::query(
                "DELETE FROM kxp_deliveries WHERE account_id = $1 AND endpoint_id = $2 \
                 AND status = 'dead' AND attempts = 0 AND EXISTS (SELECT 1 FROM kxp_endpoints p \
                   WHERE p.account_id = $1 AND p.id = $2 AND p.temporary)",
            )
            .bind(account_id)
            .bind(id)
            .execute(pool)
            .await?;
        });
        Ok(ended)
    }
}

/// [`Db::pause_endpoint`] on one database. The endpoint row is locked for the change first
/// ([`Backend::lock_for_change`]), and ingestion and replays read the status under a share
/// lock: no delivery can be queued by the old status after the deliveries are moved.
async fn pause_on<DB: Backend>(
    pool: &Pool<DB>,
    account_id: &AccountId,
    id: &EndpointId,
    now: i64,
) -> Result<(Endpoint, u64), StoreError> {
    let mut tx = pool.begin_with(DB::BEGIN).await?;
    DB::lock_for_change(&mut *tx, account_id, id).await?;
    let endpoint = DB::pause_endpoint(&mut *tx, account_id, id, now)
        .await?
        .ok_or(StoreError::NotFound)?;
    let moved = DB::hold_pending(&mut *tx, &EndpointKey::new(account_id, id), now).await?;
    tx.commit().await?;
    Ok((endpoint, moved))
}

/// [`Db::resume_endpoint`] on one database.
async fn resume_on<DB: Backend>(
    pool: &Pool<DB>,
    account_id: &AccountId,
    id: &EndpointId,
    now: i64,
    protection: &Protection,
) -> Result<(Endpoint, u64), StoreError> {
    let mut tx = pool.begin_with(DB::BEGIN).await?;
    DB::lock_for_change(&mut *tx, account_id, id).await?;
    let endpoint = DB::resume_endpoint(&mut *tx, account_id, id, now)
        .await?
        .ok_or(StoreError::NotFound)?;
    // The breaker and auto-disable count from here: a resumed endpoint gets the full threshold
    // and the full period again.
    DB::reset_failures(&mut *tx, account_id, id).await?;
    let spacing = spacing_ms(protection.rate_of(endpoint.rate_limit_per_second));
    let moved = DB::spread_held(&mut *tx, &EndpointKey::new(account_id, id), now, spacing).await?;
    tx.commit().await?;
    Ok((endpoint, moved))
}

/// [`Db::delete_endpoint`] on one database.
async fn delete_on<DB: Backend>(
    pool: &Pool<DB>,
    account_id: &AccountId,
    id: &EndpointId,
    now: i64,
) -> Result<u64, StoreError> {
    let mut tx = pool.begin_with(DB::BEGIN).await?;
    DB::lock_for_change(&mut *tx, account_id, id).await?;
    if DB::delete_endpoint(&mut *tx, account_id, id, now).await? == 0 {
        return Err(StoreError::NotFound);
    }
    let ended = DB::end_pending(&mut *tx, account_id, id, now).await?;
    DB::erase_secrets(&mut *tx, account_id, id).await?;
    tx.commit().await?;
    Ok(ended)
}
