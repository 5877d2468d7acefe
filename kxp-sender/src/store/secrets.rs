//! `kxp_endpoint_secrets`: rotation with an overlap, and the live secrets each attempt signs
//! with. With a key ring (`KXP_SECRETS_KEY`) each secret is stored sealed under it
//! ([`seal`](crate::store::seal)), bound to its endpoint, and opened only where it is used: by
//! the worker that signs with it, and to show its fingerprint.

use std::collections::BTreeMap;

use crate::model::{
    AccountId, EndpointId, EndpointKey, LiveSecret, Rotated, new_key, new_secret, now_ms,
    public_key_of, rfc3339,
};
use crate::store::credentials::credentials_context;
use crate::store::seal::{KeyRing, OpenError, Stored, open_stored, to_stored};
use crate::store::{Db, StoreError, on_db};

mod confirmations;

/// Inserts one of an endpoint's secrets and returns its id: `$1` the endpoint, `$2` the secret
/// as stored, `$3` now, `$4` its kind, `$5` the account. The id is the endpoint's next (newest
/// = highest): the caller holds the endpoint's row (PostgreSQL) or the database's write lock
/// (SQLite), so no other transaction takes the same.
pub(crate) const INSERT_SECRET: &str = "INSERT INTO kxp_endpoint_secrets \
     (id, endpoint_id, secret, created_at, kind, account_id) \
     SELECT COALESCE(MAX(id), 0) + 1, $1, $2, $3, $4, $5 FROM kxp_endpoint_secrets \
     WHERE account_id = $5 AND endpoint_id = $1 RETURNING id";

/// What a secret of `endpoint_id` is sealed with beside the key: a sealed secret copied onto
/// another endpoint's row does not open.
fn context(endpoint_id: &EndpointId) -> Vec<u8> {
    format!("kxp/endpoint-secret/{endpoint_id}").into_bytes()
}

/// The same for an account's ops secret (operational webhooks).
fn ops_context(account_id: &AccountId) -> Vec<u8> {
    format!("kxp/ops-secret/{account_id}").into_bytes()
}

/// `secret` as the ops secret of `account_id` is stored.
pub(crate) fn stored_ops_secret(
    ring: Option<&KeyRing>,
    account_id: &AccountId,
    secret: &str,
) -> String {
    to_stored(ring, secret, &ops_context(account_id)).to_string()
}

/// The ops secret of `account_id` as stored, opened.
pub(crate) fn open_ops_secret(
    ring: Option<&KeyRing>,
    account_id: &AccountId,
    stored: &str,
) -> Result<String, OpenError> {
    let bytes = open_stored(ring, stored, &ops_context(account_id))?;
    String::from_utf8(bytes.to_vec()).map_err(|_| OpenError::Malformed)
}

/// A stored secret, by its owner: an endpoint's signing secret, an endpoint's credentials, or an
/// account's ops secret.
enum Row {
    Endpoint(EndpointKey),
    Credentials(EndpointKey),
    Ops(AccountId),
}

impl Row {
    fn context(&self) -> Vec<u8> {
        match self {
            Row::Endpoint(key) => context(&key.id),
            Row::Credentials(key) => credentials_context(&key.id),
            Row::Ops(id) => ops_context(id),
        }
    }

    /// The UPDATE that replaces `stored` with `sealed`, only if the row still holds `stored`.
    fn rewrite<'q, DB: sqlx::Database>(
        &'q self,
        stored: &'q str,
        sealed: &'q str,
    ) -> sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments<'q>>
    where
        &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    {
        match self {
            Row::Endpoint(key) => sqlx::query(
                "UPDATE kxp_endpoint_secrets SET secret = $1 \
                 WHERE account_id = $2 AND endpoint_id = $3 AND secret = $4",
            )
            .bind(sealed)
            .bind(key.account_id.as_str())
            .bind(key.id.as_str()),
            Row::Credentials(key) => sqlx::query(
                "UPDATE kxp_endpoints SET credentials = $1 \
                 WHERE account_id = $2 AND id = $3 AND credentials = $4",
            )
            .bind(sealed)
            .bind(key.account_id.as_str())
            .bind(key.id.as_str()),
            Row::Ops(id) => sqlx::query(
                "UPDATE kxp_accounts SET ops_secret = $1 WHERE id = $2 AND ops_secret = $3",
            )
            .bind(sealed)
            .bind(id.as_str()),
        }
        .bind(stored)
    }
}

/// `secret` as `endpoint_id`'s row stores it: sealed under `ring`, or as it is without one.
pub(crate) fn stored_secret(
    ring: Option<&KeyRing>,
    endpoint_id: &EndpointId,
    secret: &str,
) -> String {
    to_stored(ring, secret, &context(endpoint_id)).to_string()
}

/// A secret of `endpoint_id` as its row stores it, opened: what signs.
pub(crate) fn open_secret(
    ring: Option<&KeyRing>,
    endpoint_id: &EndpointId,
    stored: &str,
) -> Result<String, OpenError> {
    let bytes = open_stored(ring, stored, &context(endpoint_id))?;
    String::from_utf8(bytes.to_vec()).map_err(|_| OpenError::Malformed)
}

impl Db {
    /// Gives one of the account's endpoints a new secret, and a new Ed25519 key if it signs
    /// with Ed25519 (one of each for `both`). The secrets and keys it had stop signing
    /// `overlap_ms` from now (never later than they were already due to), and meanwhile every
    /// delivery carries one `v1` per live secret and one `v1a` per live key, newest first.
    /// Refused with [`StoreError::Conflict`] `TooManySecrets` when the endpoint would have more
    /// than [`kxp_verify::MAX_SECRETS`] live secrets (or keys): one more could not be signed
    /// with.
    ///
    /// With `confirmations`, the older ones stop signing sooner: once that many consecutive
    /// deliveries were verified with a new one ([`Db::record_key_checks`]). A rotation
    /// replaces any such rotation under way.
    ///
    /// With `into`, the endpoint changes format: the new secrets and keys take that format's
    /// form, and each older one keeps signing its own format's headers until it expires.
    pub(crate) async fn rotate_secret(
        &self,
        account_id: &AccountId,
        id: &EndpointId,
        overlap_ms: i64,
        confirmations: Option<u32>,
        ring: Option<&KeyRing>,
        into: Option<&kxp_api::Format>,
    ) -> Result<Rotated, StoreError> {
        let now = now_ms();
        let expires_at = now.saturating_add(overlap_ms.max(0));
        on_db!(self, |pool, DB| {
            let mut tx = pool.begin_with(DB::BEGIN).await?;
            // Touching the endpoint row serializes rotations of one endpoint (PostgreSQL locks
            // the row; SQLite's write lock is already held).
            let (signing, format) = sqlx::query_as::<_, (String, String)>(
                "UPDATE kxp_endpoints SET updated_at = $1, format = COALESCE($4, format) \
                 WHERE account_id = $2 AND id = $3 AND status <> 'deleted' RETURNING signing, format",
            )
            .bind(now)
            .bind(account_id)
            .bind(id)
            .bind(into.map(kxp_api::Format::as_str))
            .fetch_optional(&mut *tx)
            .await?
            .ok_or(StoreError::NotFound)?;
            let signing = kxp_api::Signing::parse(&signing);
            let format = kxp_api::Format::parse(&format);
            sqlx::query(
                "DELETE FROM kxp_endpoint_secrets WHERE account_id = $3 AND endpoint_id = $1 \
                 AND expires_at IS NOT NULL AND expires_at <= $2",
            )
            .bind(id)
            .bind(now)
            .bind(account_id)
            .execute(&mut *tx)
            .await?;
            let live = sqlx::query_as::<_, (String, Option<i64>)>(
                "SELECT kind, expires_at FROM kxp_endpoint_secrets WHERE account_id = $2 AND endpoint_id = $1",
            )
            .bind(id)
            .bind(account_id)
            .fetch_all(&mut *tx)
            .await?;
            let secret = signing.hmac().then(|| new_secret(&format));
            let seed = signing.ed25519().then(|| new_key(&format));
            let fresh: Vec<(&str, &str)> = [("hmac", &secret), ("ed25519", &seed)]
                .into_iter()
                .filter_map(|(kind, plain)| Some((kind, plain.as_deref()?)))
                .collect();
            let kept = if expires_at > now { live.len() } else { 0 };
            for (kind, _) in &fresh {
                let of_kind: Vec<i64> = live
                    .iter()
                    .filter(|(k, _)| k == kind)
                    .map(|(_, at)| at.unwrap_or(i64::MAX))
                    .collect();
                let kept_of_kind = if expires_at > now { of_kind.len() } else { 0 };
                if kept_of_kind + 1 > kxp_verify::MAX_SECRETS {
                    let soonest = of_kind.iter().min().copied().unwrap_or(now);
                    return Err(StoreError::Conflict {
                        kind: super::StoreConflict::TooManySecrets,
                        message: format!(
                            "endpoint {id} already has {} live {}, the most a signature carries; \
                             the oldest stops signing at {}: rotate after that, or with \
                             \"overlap\": \"0s\" to retire every previous one now",
                            of_kind.len(),
                            if *kind == "hmac" {
                                "secrets"
                            } else {
                                "Ed25519 keys"
                            },
                            rfc3339(soonest),
                        ),
                    });
                }
            }
            sqlx::query(
                "UPDATE kxp_endpoint_secrets SET expires_at = $1 \
                 WHERE account_id = $3 AND endpoint_id = $2 AND (expires_at IS NULL OR expires_at > $1)",
            )
            .bind(expires_at)
            .bind(id)
            .bind(account_id)
            .execute(&mut *tx)
            .await?;
            let mut first_new = None;
            for (kind, plain) in &fresh {
                let row = sqlx::query_scalar::<_, i64>(INSERT_SECRET)
                    .bind(id)
                    .bind(stored_secret(ring, id, plain))
                    .bind(now)
                    .bind(kind)
                    .bind(account_id)
                    .fetch_one(&mut *tx)
                    .await?;
                first_new.get_or_insert(row);
            }
            // Only a rotation that keeps older secrets has anything to wait for.
            let confirm = confirmations.filter(|_| kept > 0).map(i64::from);
            sqlx::query(
                "UPDATE kxp_endpoints SET confirm_secret_id = $1, confirm_needed = $2, confirmations = 0 \
                 WHERE account_id = $4 AND id = $3",
            )
            .bind(confirm.and(first_new))
            .bind(confirm)
            .bind(id)
            .bind(account_id)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(Rotated {
                secret: secret.map(Into::into),
                public_key: seed.as_deref().and_then(public_key_of),
                previous_expires_at: expires_at,
            })
        })
    }

    /// Changes what one of the account's endpoints signs with, in one transaction: moving to
    /// Ed25519 (`hmac` → `both` or `ed25519`) makes its first key; dropping a kind (`both` →
    /// `ed25519` or `hmac`) ends that kind's secrets or keys now, so whoever still holds a
    /// dropped HMAC secret can no longer forge. Taking up HMAC again would need a new secret,
    /// shown once, which a change cannot answer: refused with [`StoreError::Conflict`]
    /// `SharedSecretRetired` (register a new endpoint instead).
    pub(crate) async fn change_signing(
        &self,
        account_id: &AccountId,
        id: &EndpointId,
        to: &kxp_api::Signing,
        ring: Option<&KeyRing>,
    ) -> Result<(), StoreError> {
        let now = now_ms();
        on_db!(self, |pool, DB| {
            let mut tx = pool.begin_with(DB::BEGIN).await?;
            let (from, format) = sqlx::query_as::<_, (String, String)>(
                "UPDATE kxp_endpoints SET updated_at = $1 WHERE account_id = $2 AND id = $3 AND status <> 'deleted' RETURNING signing, format",
            )
            .bind(now)
            .bind(account_id)
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or(StoreError::NotFound)?;
            let from = kxp_api::Signing::parse(&from);
            if to.hmac() && !from.hmac() {
                return Err(StoreError::Conflict {
                    kind: super::StoreConflict::SharedSecretRetired,
                    message: format!(
                        "endpoint {id} signs with ed25519 only and cannot take up a shared secret \
                         again (it would have to be shown once): register a new endpoint"
                    ),
                });
            }
            if to.ed25519() && !from.ed25519() {
                let key = new_key(&kxp_api::Format::parse(&format));
                sqlx::query(INSERT_SECRET)
                    .bind(id)
                    .bind(stored_secret(ring, id, &key))
                    .bind(now)
                    .bind("ed25519")
                    .bind(account_id)
                    .execute(&mut *tx)
                    .await?;
            }
            for (kind, dropped) in [
                ("hmac", from.hmac() && !to.hmac()),
                ("ed25519", from.ed25519() && !to.ed25519()),
            ] {
                if dropped {
                    sqlx::query(
                        "UPDATE kxp_endpoint_secrets SET expires_at = $1 WHERE account_id = $4 AND endpoint_id = $2 \
                         AND kind = $3 AND (expires_at IS NULL OR expires_at > $1)",
                    )
                    .bind(now)
                    .bind(id)
                    .bind(kind)
                    .bind(account_id)
                    .execute(&mut *tx)
                    .await?;
                }
            }
            sqlx::query("UPDATE kxp_endpoints SET signing = $1 WHERE account_id = $3 AND id = $2")
                .bind(to.as_str())
                .bind(id)
                .bind(account_id)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(())
        })
    }

    /// The endpoint's live secrets, newest first, as stored: what each attempt signs with, once
    /// opened with [`open_secret`] (a no-op without a key ring). For the rotation tests
    /// (feature `test-util`).
    #[cfg(feature = "test-util")]
    pub async fn live_secrets(&self, endpoint_id: &EndpointId) -> Result<Vec<String>, StoreError> {
        Ok(on_db!(self, |pool| {
            sqlx::query_scalar::<_, String>(
                "SELECT secret FROM kxp_endpoint_secrets WHERE endpoint_id = $1 \
                 AND (expires_at IS NULL OR expires_at > $2) ORDER BY id DESC",
            )
            .bind(endpoint_id)
            .bind(now_ms())
            .fetch_all(pool)
            .await?
        }))
    }

    /// The endpoint's live secrets, newest first (opened with `ring`), with when receivers last
    /// verified with each.
    pub(crate) async fn live_secret_states(
        &self,
        endpoint: &EndpointKey,
        ring: Option<&KeyRing>,
    ) -> Result<Vec<LiveSecret>, StoreError> {
        let endpoint_id = &endpoint.id;
        let rows = on_db!(self, |pool| {
            sqlx::query_as::<_, LiveSecret>(
                "SELECT id, kind, secret, created_at, expires_at, last_verified_at FROM kxp_endpoint_secrets \
                 WHERE account_id = $3 AND endpoint_id = $1 AND (expires_at IS NULL OR expires_at > $2) ORDER BY id DESC",
            )
            .bind(endpoint_id)
            .bind(now_ms())
            .bind(&endpoint.account_id)
            .fetch_all(pool)
            .await?
        });
        rows.into_iter()
            .map(|mut row| {
                row.secret = open_secret(ring, endpoint_id, &row.secret)?;
                Ok(row)
            })
            .collect()
    }

    /// Checks that `ring` opens every stored secret (endpoints' secrets and credentials,
    /// accounts' ops secrets), before a server starts with it: a missing key is found at start,
    /// by its id, rather than by the first delivery that needs it. Answers how many endpoints'
    /// credentials are stored in the clear, which the server warns about.
    pub(crate) async fn check_sealed(&self, ring: Option<&KeyRing>) -> Result<u64, StoreError> {
        let mut clear = 0;
        for (row, stored) in self.stored_secrets().await? {
            open_stored(ring, &stored, &row.context())?;
            if matches!(row, Row::Credentials(_)) && matches!(Stored::of(&stored), Stored::Plain(_))
            {
                clear += 1;
            }
        }
        Ok(clear)
    }

    /// Rewrites every stored secret that is plaintext or sealed under an older key of `ring`,
    /// sealed under its newest key; answers how many were rewritten. Each row is rewritten only
    /// if it still holds what was read, so a server running meanwhile loses nothing.
    ///
    /// On SQLite an UPDATE leaves the old value's bytes in the page's free space, and the WAL
    /// keeps old copies of the page: a plaintext secret would stay in the file a backup copies.
    /// So the rewrite runs with `secure_delete` on, which zeroes what it frees, and ends with a
    /// truncating checkpoint. (PostgreSQL keeps old row versions until vacuum reuses their
    /// space; see docs/security.md.)
    #[cfg_attr(
        not(feature = "test-util"),
        expect(unreachable_pub, reason = "public with feature test-util only")
    )]
    pub async fn reseal(&self, ring: &KeyRing) -> Result<u64, StoreError> {
        let mut rewrites = Vec::new();
        for (row, stored) in self.stored_secrets().await? {
            if let Some(sealed) = ring.reseal(&stored, &row.context())? {
                rewrites.push((row, stored, sealed));
            }
        }
        let mut rewritten = 0;
        match self {
            Db::Sqlite(pool) => {
                let mut conn = pool.acquire().await?;
                sqlx::query("PRAGMA secure_delete = ON")
                    .execute(&mut *conn)
                    .await?;
                let mut outcome = Ok(());
                for (row, stored, sealed) in &rewrites {
                    match row.rewrite(stored, sealed).execute(&mut *conn).await {
                        Ok(done) => rewritten += done.rows_affected(),
                        Err(e) => {
                            outcome = Err(e);
                            break;
                        }
                    }
                }
                // Back to the default before the connection serves the pool again.
                sqlx::query("PRAGMA secure_delete = OFF")
                    .execute(&mut *conn)
                    .await?;
                outcome?;
                sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
                    .execute(&mut *conn)
                    .await?;
            }
            Db::Postgres(pool) | Db::Citus(pool) => {
                for (row, stored, sealed) in &rewrites {
                    rewritten += row
                        .rewrite(stored, sealed)
                        .execute(pool)
                        .await?
                        .rows_affected();
                }
            }
        }
        Ok(rewritten)
    }

    /// How many stored secrets are plaintext (`None`), and how many are sealed under each key
    /// id.
    #[cfg_attr(
        not(feature = "test-util"),
        expect(unreachable_pub, reason = "public with feature test-util only")
    )]
    pub async fn sealing_census(&self) -> Result<BTreeMap<Option<String>, u64>, StoreError> {
        let mut census = BTreeMap::new();
        for (_, stored) in self.stored_secrets().await? {
            let key = Stored::of(&stored).key_id().map(str::to_owned);
            *census.entry(key).or_insert(0) += 1;
        }
        Ok(census)
    }

    /// Every stored secret with its row: endpoints' (expired ones included, until retention
    /// deletes them), endpoints' credentials and accounts' ops secrets.
    async fn stored_secrets(&self) -> Result<Vec<(Row, String)>, StoreError> {
        let (endpoints, credentials, ops) = on_db!(self, |pool| {
            let endpoints = sqlx::query_as::<_, (AccountId, EndpointId, String)>(
                "SELECT account_id, endpoint_id, secret FROM kxp_endpoint_secrets ORDER BY account_id, endpoint_id, id",
            )
            .fetch_all(pool)
            .await?;
            let credentials = sqlx::query_as::<_, (AccountId, EndpointId, String)>(
                "SELECT account_id, id, credentials FROM kxp_endpoints \
                 WHERE credentials IS NOT NULL ORDER BY account_id, id",
            )
            .fetch_all(pool)
            .await?;
            let ops = sqlx::query_as::<_, (AccountId, String)>(
                "SELECT id, ops_secret FROM kxp_accounts WHERE ops_secret IS NOT NULL ORDER BY id",
            )
            .fetch_all(pool)
            .await?;
            (endpoints, credentials, ops)
        });
        let endpoints = endpoints
            .into_iter()
            .map(|(account_id, id, s)| (Row::Endpoint(EndpointKey { account_id, id }), s));
        let credentials = credentials
            .into_iter()
            .map(|(account_id, id, s)| (Row::Credentials(EndpointKey { account_id, id }), s));
        let ops = ops.into_iter().map(|(id, s)| (Row::Ops(id), s));
        Ok(endpoints.chain(credentials).chain(ops).collect())
    }
}
