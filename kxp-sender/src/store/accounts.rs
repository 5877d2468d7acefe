//! `kxp_accounts`: accounts and their API keys (stored hashed).

use std::collections::HashMap;

use sqlx::PgPool;

use crate::model::{
    Account, AccountChanges, AccountId, AccountOverview, AccountsOverview, DEFAULT_API_VERSION,
    KeyKind, new_id, now_ms, random_hex_32, sha256_hex,
};
use crate::store::seal::KeyRing;
use crate::store::secrets::stored_ops_secret;
use crate::store::shards::every_shard_counted;
use crate::store::{Db, StoreError, on_db};

const ACCOUNT_COLUMNS: &str = "id, name, default_api_version, ops_url, contact_email, created_at";

/// The account whose key hashes to `$1`, through the key directory.
static BY_KEY: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT {} FROM kxp_api_keys k JOIN kxp_accounts a ON a.id = k.account_id WHERE k.key_hash = $1",
        ACCOUNT_COLUMNS
            .split(", ")
            .map(|c| format!("a.{c}"))
            .collect::<Vec<_>>()
            .join(", ")
    )
});

/// One shard's accounts, each as `[id, name, default_api_version, ops_url, contact_email,
/// created_at]`.
const ACCOUNTS_OF_SHARD: &str = "SELECT jsonb_build_array(id, name, default_api_version, ops_url, \
     contact_email, created_at) AS r FROM %%s";

/// One shard's endpoint counts by account: all but deleted, and those with a circuit not closed.
const ENDPOINTS_OF_SHARD: &str = "SELECT jsonb_build_array(account_id, COUNT(*), \
     COUNT(*) FILTER (WHERE circuit_state <> 'closed')) AS r \
     FROM %%s WHERE status <> 'deleted' GROUP BY account_id";

/// One shard's dead deliveries not replayed, by account.
const DEAD_OF_SHARD: &str = "SELECT jsonb_build_array(account_id, COUNT(*)) AS r \
     FROM %%s WHERE status = 'dead' AND replayed_by IS NULL GROUP BY account_id";

/// The accounts' count of a shard (or of the whole table): a read every shard must answer.
const ONE_PER_SHARD: &str = "SELECT to_jsonb(COUNT(*)) AS r FROM %%s";

impl Db {
    /// Creates an account and returns it with its API key, which is shown once and stored only
    /// as a hash.
    #[cfg_attr(
        not(feature = "test-util"),
        expect(unreachable_pub, reason = "public with feature test-util only")
    )]
    pub async fn create_account(
        &self,
        name: &str,
        key: Option<&str>,
    ) -> Result<(Account, String), StoreError> {
        let key = key.map_or_else(|| KeyKind::Account.new_key(), str::to_owned);
        let account = Account {
            id: AccountId::from(new_id("acc")),
            name: name.to_owned(),
            default_api_version: DEFAULT_API_VERSION.to_owned(),
            ops_url: None,
            contact_email: None,
            created_at: now_ms(),
        };
        let hash = sha256_hex(key.as_bytes());
        on_db!(self, |pool, DB| {
            let mut tx = pool.begin_with(DB::BEGIN).await?;
            sqlx::query(
                "INSERT INTO kxp_accounts (id, name, default_api_version, created_at) \
                 VALUES ($1, $2, $3, $4)",
            )
            .bind(&account.id)
            .bind(&account.name)
            .bind(&account.default_api_version)
            .bind(account.created_at)
            .execute(&mut *tx)
            .await?;
            sqlx::query(
                "INSERT INTO kxp_api_keys (key_hash, account_id, created_at) VALUES ($1, $2, $3)",
            )
            .bind(&hash)
            .bind(&account.id)
            .bind(account.created_at)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
        });
        Ok((account, key))
    }

    /// The account an API key belongs to, found by the key's hash in `kxp_api_keys`.
    #[cfg_attr(
        not(feature = "test-util"),
        expect(unreachable_pub, reason = "public with feature test-util only")
    )]
    pub async fn account_by_key(&self, key: &str) -> Result<Option<Account>, StoreError> {
        let hash = sha256_hex(key.as_bytes());
        if let Db::Citus(pool) = self {
            // The key directory is a reference table and the accounts are spread by id: joined,
            // they would be read on every shard. The account's id first, then its one shard.
            let id: Option<String> =
                sqlx::query_scalar("SELECT account_id FROM kxp_api_keys WHERE key_hash = $1")
                    .bind(&hash)
                    .fetch_optional(pool)
                    .await?;
            return match id {
                Some(id) => self.account(&AccountId::from(id)).await,
                None => Ok(None),
            };
        }
        Ok(on_db!(self, |pool| {
            sqlx::query_as::<_, Account>(&BY_KEY)
                .bind(&hash)
                .fetch_optional(pool)
                .await?
        }))
    }

    /// The account with this id: the one an operator key acts for (`X-Kxp-Account`).
    pub(crate) async fn account(&self, id: &AccountId) -> Result<Option<Account>, StoreError> {
        let sql = format!("SELECT {ACCOUNT_COLUMNS} FROM kxp_accounts WHERE id = $1");
        Ok(on_db!(self, |pool| {
            sqlx::query_as::<_, Account>(&sql)
                .bind(id)
                .fetch_optional(pool)
                .await?
        }))
    }

    /// How many accounts exist.
    pub(crate) async fn account_count(&self) -> Result<i64, StoreError> {
        Ok(on_db!(self, |pool| {
            sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM kxp_accounts")
                .fetch_one(pool)
                .await?
        }))
    }

    /// Whether the database answers (`/healthz`). On Citus it is read shard by shard, so a
    /// worker down is told apart from a database down: how many shards of the accounts did
    /// not answer (`None` elsewhere); an error when none did.
    pub(crate) async fn reachable(&self) -> Result<Option<usize>, StoreError> {
        if let Db::Citus(pool) = self {
            let answered =
                every_shard_counted::<i64>(pool, "kxp_accounts", ONE_PER_SHARD, &[]).await?;
            return Ok(Some(answered.unanswered));
        }
        self.account_count().await.map(|_| None)
    }

    /// Every account, oldest first (`kxp accounts list`). Key hashes are not read.
    pub(crate) async fn accounts(&self) -> Result<Vec<Account>, StoreError> {
        self.accounts_after(None, i64::MAX).await
    }

    /// Every account with its counts, oldest first (the operators' console): the counts are
    /// read on the endpoints' and the deliveries' account indexes, never by a scan. On Citus,
    /// shard by shard: a worker down leaves its accounts out, and says so.
    pub(crate) async fn account_overviews(&self) -> Result<AccountsOverview, StoreError> {
        if let Db::Citus(pool) = self {
            return Ok(overviews_by_shard(pool).await?);
        }
        let accounts = self.accounts().await?;
        let counts: Vec<(String, i64, i64, i64)> = on_db!(self, |pool| {
            sqlx::query_as(
                "SELECT a.id, \
                 (SELECT COUNT(*) FROM kxp_endpoints e WHERE e.account_id = a.id AND e.status <> 'deleted'), \
                 (SELECT COUNT(*) FROM kxp_endpoints e WHERE e.account_id = a.id AND e.status <> 'deleted' \
                     AND e.circuit_state <> 'closed'), \
                 (SELECT COUNT(*) FROM kxp_deliveries d WHERE d.account_id = a.id AND d.status = 'dead' \
                     AND d.replayed_by IS NULL) \
                 FROM kxp_accounts a",
            )
            .fetch_all(pool)
            .await?
        });
        let counts = counts
            .into_iter()
            .map(|(id, e, o, d)| (id, (e, o, d)))
            .collect();
        Ok(AccountsOverview {
            accounts: with_counts(accounts, &counts),
            unanswered_shards: 0,
        })
    }

    /// Up to `limit` accounts after the id `cursor`, oldest first (`GET /v1/accounts`).
    pub(crate) async fn accounts_after(
        &self,
        cursor: Option<&str>,
        limit: i64,
    ) -> Result<Vec<Account>, StoreError> {
        let sql = format!(
            "SELECT {ACCOUNT_COLUMNS} FROM kxp_accounts WHERE (CAST($1 AS TEXT) IS NULL OR id > $1) \
             ORDER BY id LIMIT $2"
        );
        Ok(on_db!(self, |pool| {
            sqlx::query_as::<_, Account>(&sql)
                .bind(cursor)
                .bind(limit)
                .fetch_all(pool)
                .await?
        }))
    }

    /// Changes an account. Setting an ops URL gives the account a new ops secret, returned
    /// here and shown once: operational webhooks are signed with it. Removing the URL erases
    /// the secret. The secret is stored sealed under `ring`, when there is one.
    pub(crate) async fn update_account(
        &self,
        id: &AccountId,
        changes: &AccountChanges,
        ring: Option<&KeyRing>,
    ) -> Result<(Account, Option<String>), StoreError> {
        // Read under a row lock (PostgreSQL): two PATCHes at once apply one after the other,
        // never one over the other's stale read.
        let new_secret = match &changes.ops_url {
            Some(Some(_)) => Some(random_hex_32()),
            _ => None,
        };
        let stored = new_secret
            .as_deref()
            .map(|secret| stored_ops_secret(ring, id, secret));
        on_db!(self, |pool, DB| {
            let mut tx = pool.begin_with(DB::BEGIN).await?;
            let select = format!(
                "SELECT {ACCOUNT_COLUMNS} FROM kxp_accounts WHERE id = $1{}",
                DB::row_lock(" FOR UPDATE")
            );
            let mut account = sqlx::query_as::<_, Account>(&select)
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?
                .ok_or(StoreError::NotFound)?;
            if let Some(name) = &changes.name {
                account.name.clone_from(name);
            }
            if let Some(version) = &changes.default_api_version {
                account.default_api_version.clone_from(version);
            }
            if let Some(address) = &changes.contact_email {
                account.contact_email.clone_from(address);
            }
            // The secret column changes only with the URL.
            let secret_sql = match &changes.ops_url {
                Some(url) => {
                    account.ops_url.clone_from(url);
                    "$4"
                }
                None => "ops_secret",
            };
            sqlx::query(&format!(
                "UPDATE kxp_accounts SET name = $1, default_api_version = $2, ops_url = $3, \
                 ops_secret = {secret_sql}, contact_email = $5 WHERE id = $6"
            ))
            .bind(&account.name)
            .bind(&account.default_api_version)
            .bind(&account.ops_url)
            .bind(&stored)
            .bind(&account.contact_email)
            .bind(id)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok((account, new_secret))
        })
    }
}

/// `accounts`, in order, each with its `(endpoints, open circuits, dead)` counts by account id
/// (0 where it has none).
fn with_counts(
    accounts: Vec<Account>,
    counts: &HashMap<String, (i64, i64, i64)>,
) -> Vec<AccountOverview> {
    accounts
        .into_iter()
        .map(|account| {
            let (endpoints, open_circuits, dead) =
                counts.get(account.id.as_str()).copied().unwrap_or_default();
            AccountOverview {
                account,
                endpoints,
                open_circuits,
                dead,
            }
        })
        .collect()
}

/// [`Db::account_overviews`] on Citus: the accounts, their endpoints and their dead deliveries
/// read shard by shard. A shard missing from any of the three reads is counted unanswered
/// (an account's shards of the three tables are on one worker, so they fail together).
async fn overviews_by_shard(pool: &PgPool) -> Result<AccountsOverview, sqlx::Error> {
    type Row = (String, String, String, Option<String>, Option<String>, i64);
    let read = every_shard_counted::<Row>(pool, "kxp_accounts", ACCOUNTS_OF_SHARD, &[]).await?;
    let endpoints =
        every_shard_counted::<(String, i64, i64)>(pool, "kxp_endpoints", ENDPOINTS_OF_SHARD, &[])
            .await?;
    let dead =
        every_shard_counted::<(String, i64)>(pool, "kxp_deliveries", DEAD_OF_SHARD, &[]).await?;
    let mut counts: HashMap<String, (i64, i64, i64)> = HashMap::new();
    for (id, all, open) in endpoints.rows {
        let c = counts.entry(id).or_default();
        (c.0, c.1) = (all, open);
    }
    for (id, n) in dead.rows {
        counts.entry(id).or_default().2 = n;
    }
    let mut accounts: Vec<Account> = read
        .rows
        .into_iter()
        .map(
            |(id, name, default_api_version, ops_url, contact_email, created_at)| Account {
                id: AccountId::from(id),
                name,
                default_api_version,
                ops_url,
                contact_email,
                created_at,
            },
        )
        .collect();
    accounts.sort_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
    Ok(AccountsOverview {
        accounts: with_counts(accounts, &counts),
        unanswered_shards: read
            .unanswered
            .max(endpoints.unanswered)
            .max(dead.unanswered),
    })
}
