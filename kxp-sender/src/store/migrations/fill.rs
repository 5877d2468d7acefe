//! Filling in what the account-keyed schema's expand step could not: the account of every row
//! of the five tables that gained one (`20261204000001`), and the directories' rows
//! (`20261204000002`), for the rows written before those migrations and those the previous
//! release writes beside this one during a rolling upgrade. Run after the migrations by
//! `kxp migrate apply` and `kxp serve --migrate` (under their lock, so processes starting at
//! once take turns), in batches of its own transactions, never
//! one statement over a large table; idempotent, and cheap when there is nothing left (the
//! large tables' unfilled rows are found through partial indexes that hold only them).

use crate::store::{Db, on_db};

/// Rows per batch of the large tables: each batch is one short transaction.
const BATCH: i64 = 5_000;

/// The large tables' batches: each fills the account of at most `$1` rows that have none,
/// found through the table's `…_without_account` index, from the row each belongs to (only
/// rows whose parent is there are picked, so a batch that picks rows fills them all and the
/// loop ends).
const BATCHED: [&str; 2] = [
    "UPDATE kxp_attempts SET account_id = \
       (SELECT d.account_id FROM kxp_deliveries d WHERE d.id = kxp_attempts.delivery_id) \
     WHERE id IN (SELECT a.id FROM kxp_attempts a JOIN kxp_deliveries d ON d.id = a.delivery_id \
       WHERE a.account_id IS NULL ORDER BY a.id LIMIT $1)",
    "UPDATE kxp_endpoint_stats_hourly SET account_id = \
       (SELECT p.account_id FROM kxp_endpoints p WHERE p.id = kxp_endpoint_stats_hourly.endpoint_id) \
     WHERE (endpoint_id, hour) IN (SELECT h.endpoint_id, h.hour FROM kxp_endpoint_stats_hourly h \
       JOIN kxp_endpoints p ON p.id = h.endpoint_id WHERE h.account_id IS NULL ORDER BY h.endpoint_id, h.hour LIMIT $1)",
];

/// The small tables (a row or a few per account or endpoint): one statement each.
const WHOLE: [&str; 5] = [
    "UPDATE kxp_endpoint_secrets SET account_id = \
       (SELECT p.account_id FROM kxp_endpoints p WHERE p.id = kxp_endpoint_secrets.endpoint_id) \
     WHERE account_id IS NULL",
    "UPDATE kxp_endpoint_stats SET account_id = \
       (SELECT p.account_id FROM kxp_endpoints p WHERE p.id = kxp_endpoint_stats.endpoint_id) \
     WHERE account_id IS NULL",
    "UPDATE kxp_sequences SET account_id = \
       (SELECT p.account_id FROM kxp_endpoints p WHERE p.id = kxp_sequences.endpoint_id) \
     WHERE account_id IS NULL",
    "INSERT INTO kxp_api_keys (key_hash, account_id, created_at) \
     SELECT a.api_key_hash, a.id, a.created_at FROM kxp_accounts a \
     WHERE NOT EXISTS (SELECT 1 FROM kxp_api_keys k WHERE k.key_hash = a.api_key_hash) \
     ON CONFLICT DO NOTHING",
    "INSERT INTO kxp_endpoint_directory (endpoint_id, account_id) \
     SELECT p.id, p.account_id FROM kxp_endpoints p \
     WHERE NOT EXISTS (SELECT 1 FROM kxp_endpoint_directory e WHERE e.endpoint_id = p.id) \
     ON CONFLICT DO NOTHING",
];

impl Db {
    /// Fills in every row the account-keyed schema's expand step left without its account or
    /// directory entry (see the module's documentation); answers how many rows it wrote.
    #[cfg_attr(
        not(feature = "test-util"),
        expect(unreachable_pub, reason = "public with feature test-util only")
    )]
    pub async fn fill_accounts(&self) -> Result<u64, sqlx::Error> {
        let mut filled = 0;
        for sql in BATCHED {
            loop {
                let rows = on_db!(self, |pool| {
                    sqlx::query(sql)
                        .bind(BATCH)
                        .execute(pool)
                        .await?
                        .rows_affected()
                });
                filled += rows;
                if rows == 0 {
                    break;
                }
            }
        }
        for sql in WHOLE {
            filled += on_db!(self, |pool| {
                sqlx::query(sql).execute(pool).await?.rows_affected()
            });
        }
        Ok(filled)
    }
}
