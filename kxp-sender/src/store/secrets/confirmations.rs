//! What receivers' confirmations (`X-Kxp-Verified-Key`) say about an endpoint's secrets: each
//! secret's latest verification, and the count that ends a `when_confirmed` rotation.

use std::collections::BTreeMap;

use crate::model::{EndpointKey, KeyCheck, now_ms};
use crate::store::{Db, StoreError, on_db};

impl Db {
    /// Records what delivered attempts said about their endpoints' secrets, in the order they
    /// were made (`at`, Unix ms): each secret's latest verification, and for a `when_confirmed`
    /// rotation its count of consecutive deliveries verified with the new secret (anything
    /// else, a 2xx without a confirmation included, starts it again). A count that reaches
    /// the rotation's need ends the older secrets now. Answers the endpoints whose rotation
    /// that ended.
    pub(crate) async fn record_key_checks(
        &self,
        checks: &[(EndpointKey, i64, KeyCheck)],
    ) -> Result<Vec<EndpointKey>, StoreError> {
        // By secret id, then endpoint: the order the rows are locked in, which is the previous
        // release's (by id alone) while ids are unique, so the two never lock in opposite orders.
        let mut latest: BTreeMap<(i64, &EndpointKey), i64> = BTreeMap::new();
        let mut confirming: BTreeMap<&EndpointKey, Vec<Option<i64>>> = BTreeMap::new();
        for (endpoint, at, check) in checks {
            if let Some(secret) = check.verified {
                let seen = latest.entry((secret, endpoint)).or_insert(*at);
                *seen = (*seen).max(*at);
            }
            if check.confirming {
                confirming.entry(endpoint).or_default().push(check.verified);
            }
        }
        let now = now_ms();
        on_db!(self, |pool, DB| {
            // NO KEY UPDATE: compatible with the KEY SHARE a batch of attempts holds on its
            // endpoints.
            let read = format!(
                "SELECT confirm_secret_id, confirm_needed, confirmations FROM kxp_endpoints \
                 WHERE account_id = $2 AND id = $1{}",
                DB::row_lock(" FOR NO KEY UPDATE")
            );
            let mut tx = pool.begin_with(DB::BEGIN).await?;
            // A secret's id is its endpoint's: the account-keyed schema numbers them per endpoint.
            for ((secret, endpoint), at) in &latest {
                sqlx::query(
                    "UPDATE kxp_endpoint_secrets SET last_verified_at = $1 \
                     WHERE account_id = $4 AND endpoint_id = $3 AND id = $2 \
                     AND (last_verified_at IS NULL OR last_verified_at < $1)",
                )
                .bind(at)
                .bind(secret)
                .bind(&endpoint.id)
                .bind(&endpoint.account_id)
                .execute(&mut *tx)
                .await?;
            }
            let mut ended = Vec::new();
            // Endpoints in key order: two recorders lock their rows in the same order.
            for (endpoint, seen) in confirming {
                let row = sqlx::query_as::<_, (Option<i64>, Option<i64>, i64)>(&read)
                    .bind(&endpoint.id)
                    .bind(&endpoint.account_id)
                    .fetch_optional(&mut *tx)
                    .await?;
                let Some((Some(secret), Some(needed), mut count)) = row else {
                    continue;
                };
                for verified in seen {
                    // The rotation's new material: every row from its first on.
                    count = if verified.is_some_and(|v| v >= secret) {
                        count.saturating_add(1)
                    } else {
                        0
                    };
                }
                let older = sqlx::query_scalar::<_, i64>(
                    "SELECT COUNT(*) FROM kxp_endpoint_secrets WHERE account_id = $4 AND endpoint_id = $1 \
                     AND id < $2 AND (expires_at IS NULL OR expires_at > $3)",
                )
                .bind(&endpoint.id)
                .bind(secret)
                .bind(now)
                .bind(&endpoint.account_id)
                .fetch_one(&mut *tx)
                .await?;
                if count < needed && older > 0 {
                    sqlx::query(
                        "UPDATE kxp_endpoints SET confirmations = $1 WHERE account_id = $3 AND id = $2",
                    )
                    .bind(count)
                    .bind(&endpoint.id)
                    .bind(&endpoint.account_id)
                        .execute(&mut *tx)
                        .await?;
                    continue;
                }
                // Confirmed, or the overlap ran out first: the rotation is over either way.
                sqlx::query(
                    "UPDATE kxp_endpoint_secrets SET expires_at = $1 WHERE account_id = $4 AND endpoint_id = $2 \
                     AND id < $3 AND (expires_at IS NULL OR expires_at > $1)",
                )
                .bind(now)
                .bind(&endpoint.id)
                .bind(secret)
                .bind(&endpoint.account_id)
                .execute(&mut *tx)
                .await?;
                sqlx::query(
                    "UPDATE kxp_endpoints SET confirm_secret_id = NULL, confirm_needed = NULL, confirmations = 0 \
                     WHERE account_id = $2 AND id = $1",
                )
                .bind(&endpoint.id)
                .bind(&endpoint.account_id)
                .execute(&mut *tx)
                .await?;
                if older > 0 {
                    ended.push(endpoint.clone());
                }
            }
            tx.commit().await?;
            Ok(ended)
        })
    }
}
