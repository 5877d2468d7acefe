//! `kxp_endpoint_secrets`: rotation with an overlap, and the live secrets each attempt signs
//! with.

use crate::model::{Rotated, now_ms, random_hex_32, rfc3339};
use crate::store::{Db, StoreError, on_db};

impl Db {
    /// Gives one of the account's endpoints a new secret. The secrets it had stop signing
    /// `overlap_ms` from now (never later than they were already due to), and meanwhile every
    /// delivery carries one `v1` per live secret, newest first. Refused with
    /// [`StoreError::Conflict`] `too_many_secrets` when the endpoint would have more than
    /// [`kxp_verify::MAX_SECRETS`] live secrets: one more could not be signed with.
    pub async fn rotate_secret(
        &self,
        account_id: &str,
        id: &str,
        overlap_ms: i64,
    ) -> Result<Rotated, StoreError> {
        let now = now_ms();
        let expires_at = now.saturating_add(overlap_ms.max(0));
        let secret = random_hex_32();
        on_db!(self, |pool, begin| {
            let mut tx = pool.begin_with(begin).await?;
            // Touching the endpoint row serializes rotations of one endpoint (PostgreSQL locks
            // the row; SQLite's write lock is already held).
            let found = sqlx::query(
                "UPDATE kxp_endpoints SET updated_at = $1 WHERE account_id = $2 AND id = $3 AND status <> 'deleted'",
            )
            .bind(now)
            .bind(account_id)
            .bind(id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if found == 0 {
                return Err(StoreError::NotFound);
            }
            sqlx::query(
                "DELETE FROM kxp_endpoint_secrets WHERE endpoint_id = $1 AND expires_at IS NOT NULL AND expires_at <= $2",
            )
            .bind(id)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            let live = sqlx::query_scalar::<_, Option<i64>>(
                "SELECT expires_at FROM kxp_endpoint_secrets WHERE endpoint_id = $1",
            )
            .bind(id)
            .fetch_all(&mut *tx)
            .await?;
            let kept = if expires_at > now { live.len() } else { 0 };
            if kept + 1 > kxp_verify::MAX_SECRETS {
                let soonest = live.iter().flatten().min().copied().unwrap_or(now);
                return Err(StoreError::Conflict {
                    code: kxp_api::ErrorCode::TooManySecrets,
                    message: format!(
                        "endpoint {id} already has {} live secrets, the most a signature carries; \
                         the oldest stops signing at {}: rotate after that, or with \
                         \"overlap\": \"0s\" to retire every previous secret now",
                        live.len(),
                        rfc3339(soonest),
                    ),
                });
            }
            sqlx::query(
                "UPDATE kxp_endpoint_secrets SET expires_at = $1 \
                 WHERE endpoint_id = $2 AND (expires_at IS NULL OR expires_at > $1)",
            )
            .bind(expires_at)
            .bind(id)
            .execute(&mut *tx)
            .await?;
            sqlx::query("INSERT INTO kxp_endpoint_secrets (endpoint_id, secret, created_at) VALUES ($1, $2, $3)")
                .bind(id)
                .bind(&secret)
                .bind(now)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(Rotated {
                secret: secret.into(),
                previous_expires_at: expires_at,
            })
        })
    }

    /// The endpoint's live secrets, newest first: what each attempt signs with.
    pub async fn live_secrets(&self, endpoint_id: &str) -> Result<Vec<String>, StoreError> {
        Ok(on_db!(self, |pool, _begin| {
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
}
