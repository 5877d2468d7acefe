//! `kxp_listen_tokens`: the credentials of `kxp listen` that are not API keys. Only a token's
//! SHA-256 is kept; a token names its account and when it expires.

use crate::model::{Account, AccountId, KeyKind, now_ms, sha256_hex};
use crate::store::{Db, StoreError, on_db};

impl Db {
    /// A new listen token of `account`, valid for `ttl_ms`: the token (shown once) and when it
    /// expires (Unix ms).
    pub(crate) async fn create_listen_token(
        &self,
        account: &AccountId,
        ttl_ms: i64,
    ) -> Result<(String, i64), StoreError> {
        let token = KeyKind::Listen.new_key();
        let now = now_ms();
        let expires_at = now.saturating_add(ttl_ms);
        on_db!(self, |pool| {
            sqlx::query(
                "INSERT INTO kxp_listen_tokens (token_hash, account_id, created_at, expires_at) \
                 VALUES ($1, $2, $3, $4)",
            )
            .bind(sha256_hex(token.as_bytes()))
            .bind(account)
            .bind(now)
            .bind(expires_at)
            .execute(pool)
            .await?;
        });
        Ok((token, expires_at))
    }

    /// The account of the listen token `token`, unless it does not exist or has expired.
    pub(crate) async fn account_by_listen_token(
        &self,
        token: &str,
    ) -> Result<Option<Account>, StoreError> {
        let account: Option<AccountId> = on_db!(self, |pool| {
            sqlx::query_scalar(
                "SELECT account_id FROM kxp_listen_tokens WHERE token_hash = $1 AND expires_at > $2",
            )
            .bind(sha256_hex(token.as_bytes()))
            .bind(now_ms())
            .fetch_optional(pool)
            .await?
        });
        match account {
            Some(id) => self.account(&id).await,
            None => Ok(None),
        }
    }
}
