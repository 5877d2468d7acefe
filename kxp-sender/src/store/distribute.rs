//! Citus: the account tables spread over the workers by account, the directories on every node.
//!
//! A database where the operator has run `CREATE EXTENSION citus` and added workers is
//! distributed by `kxp migrate apply` (and `kxp serve --migrate`) right after its migrations,
//! under the same advisory lock. Every table's place is decided here, once, from what its hot
//! statements look it up by:
//!
//! - [`BY_ACCOUNT`]: read and written by account. Distributed by `account_id` (`kxp_accounts`
//!   by `id`), all co-located with `kxp_accounts`, so one account's rows of every table share a
//!   shard and a statement naming the account runs on one worker.
//! - [`REFERENCE`]: looked up by something that is not an account — an API key's hash, an
//!   endpoint id from a URL, a link's or a session's token, an operator — and small: a copy on
//!   every node. A reference table may not point at a distributed one, so their foreign keys to
//!   `kxp_accounts` are dropped first (accounts are never deleted; the data lifecycle that will
//!   delete them removes their directory rows itself).
//!
//! A table already in Citus's metadata is left as it is: the step runs after every apply and
//! does nothing once done. A `kxp_` table neither list names is refused, by name: a later
//! migration that creates a table distributes it itself (docs/scaling.md has the rule), since
//! only the migration knows whether the table is keyed by account.

use serde::Serialize;
use sqlx::PgConnection;

/// The tables distributed by account, each after the tables its foreign keys point at.
pub(crate) const BY_ACCOUNT: &[&str] = &[
    "kxp_accounts",
    "kxp_endpoints",
    "kxp_endpoint_secrets",
    "kxp_endpoint_stats",
    "kxp_endpoint_stats_hourly",
    "kxp_events",
    "kxp_event_tags",
    "kxp_deliveries",
    "kxp_attempts",
    "kxp_sequences",
    "kxp_schemas",
    "kxp_notifications",
    "kxp_audit",
    "kxp_erasures",
];

/// The tables every node holds whole, each after the tables its foreign keys point at.
pub(crate) const REFERENCE: &[&str] = &[
    "kxp_operators",
    "kxp_operator_audit",
    "kxp_api_keys",
    "kxp_endpoint_directory",
    "kxp_portal_links",
    "kxp_sessions",
    "kxp_listen_tokens",
];

/// How the database's tables are placed over a Citus cluster (`kxp migrate status`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Distribution {
    /// The active worker nodes holding shards.
    pub workers: i64,
    /// Every `kxp_` table, by name.
    pub tables: Vec<TablePlacement>,
}

impl Distribution {
    /// The tables still on the coordinator alone: what `kxp migrate apply` has yet to
    /// distribute.
    pub fn local(&self) -> impl Iterator<Item = &str> {
        self.tables
            .iter()
            .filter(|t| t.placement == Placement::Local)
            .map(|t| t.name.as_str())
    }
}

/// One table's place.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TablePlacement {
    /// The table.
    pub name: String,
    /// Where its rows are.
    #[serde(flatten)]
    pub placement: Placement,
}

/// Where a table's rows are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "placement", rename_all = "snake_case")]
pub enum Placement {
    /// Split into shards by a column's hash.
    Distributed {
        /// The distribution column.
        column: String,
        /// How many shards.
        shards: i64,
    },
    /// Whole on every node.
    Reference,
    /// On the coordinator only: not distributed yet.
    Local,
}

/// Why the database could not be distributed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DistributeError {
    /// A `kxp_` table this version does not place, and no migration distributed.
    #[error(
        "table {0} is neither distributed nor a reference table, and this version does not \
         know where it belongs: the migration that created it must distribute it \
         (docs/scaling.md)"
    )]
    Unplaced(String),
    /// Citus has no active worker to put shards on.
    #[error(
        "the Citus coordinator has no active worker: add them (`SELECT citus_add_node(…)`) \
         before `kxp migrate apply` (docs/operations.md)"
    )]
    NoWorkers,
    /// A statement failed.
    #[error("distributing {table} failed: {source}")]
    Failed {
        /// The table being placed.
        table: String,
        /// The database's error.
        source: sqlx::Error,
    },
    /// The catalog could not be read.
    #[error("{0}")]
    Database(#[from] sqlx::Error),
}

/// Whether the database has the citus extension.
pub(crate) async fn has_citus(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')")
        .fetch_one(conn)
        .await
}

/// How the `kxp_` tables are placed, read from the coordinator's metadata only (never a
/// worker: readiness reads this, and a worker down must not make every replica unready).
pub(crate) async fn read(conn: &mut PgConnection) -> Result<Distribution, sqlx::Error> {
    let workers: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM pg_dist_node WHERE groupid <> 0 AND isactive AND noderole = 'primary'",
    )
    .fetch_one(&mut *conn)
    .await?;
    let rows: Vec<(String, Option<String>, Option<String>, i64)> = sqlx::query_as(
        "SELECT c.relname::text, p.partmethod::text, \
         CASE WHEN p.partmethod = 'h' THEN column_to_column_name(p.logicalrelid, p.partkey) END, \
         (SELECT COUNT(*) FROM pg_dist_shard s WHERE s.logicalrelid = c.oid) \
         FROM pg_class c \
         LEFT JOIN pg_dist_partition p ON p.logicalrelid = c.oid \
         WHERE c.relkind IN ('r', 'p') AND c.relnamespace = current_schema()::regnamespace \
         AND c.relname LIKE 'kxp\\_%' ORDER BY c.relname",
    )
    .fetch_all(&mut *conn)
    .await?;
    let tables = rows
        .into_iter()
        .map(|(name, method, column, shards)| {
            let placement = match (method.as_deref(), column) {
                (Some("h"), Some(column)) => Placement::Distributed { column, shards },
                (Some(_), _) => Placement::Reference,
                (None, _) => Placement::Local,
            };
            TablePlacement { name, placement }
        })
        .collect();
    Ok(Distribution { workers, tables })
}

/// Places every `kxp_` table still local: reference tables first (their foreign keys to
/// account tables dropped), then the account tables, `kxp_accounts` first, each co-located
/// with it; then empties the coordinator's local copies of the rows the shards now hold.
/// Returns the tables placed by this call.
pub(crate) async fn distribute(conn: &mut PgConnection) -> Result<Vec<String>, DistributeError> {
    let before = read(conn).await?;
    let local: Vec<String> = before.local().map(str::to_owned).collect();
    if local.is_empty() {
        return Ok(local);
    }
    if let Some(name) = local
        .iter()
        .find(|name| !BY_ACCOUNT.contains(&name.as_str()) && !REFERENCE.contains(&name.as_str()))
    {
        return Err(DistributeError::Unplaced(name.clone()));
    }
    if before.workers == 0 {
        return Err(DistributeError::NoWorkers);
    }
    let mut placed = Vec::new();
    for &table in REFERENCE.iter().filter(|t| local.iter().any(|l| l == *t)) {
        drop_keys_to_account_tables(conn, table)
            .await
            .map_err(failed(table))?;
        sqlx::query("SELECT create_reference_table($1::regclass)")
            .bind(table)
            .execute(&mut *conn)
            .await
            .map_err(failed(table))?;
        tracing::info!(target: "kxp_sender", table, "made a reference table (a copy on every node)");
        placed.push(table.to_owned());
    }
    let mut distributed = Vec::new();
    for &table in BY_ACCOUNT.iter().filter(|t| local.iter().any(|l| l == *t)) {
        let (column, colocate_with) = match table {
            "kxp_accounts" => ("id", "default"),
            _ => ("account_id", "kxp_accounts"),
        };
        sqlx::query("SELECT create_distributed_table($1::regclass, $2, colocate_with => $3)")
            .bind(table)
            .bind(column)
            .bind(colocate_with)
            .execute(&mut *conn)
            .await
            .map_err(failed(table))?;
        tracing::info!(target: "kxp_sender", table, column, "distributed by account");
        distributed.push(table);
        placed.push(table.to_owned());
    }
    // Distributing copies a table's rows into its shards and leaves the coordinator's own copy,
    // unread from then on: removed once every table is distributed (the call refuses while a
    // table pointing at this one is still local).
    for &table in distributed.iter().rev() {
        sqlx::query("SELECT truncate_local_data_after_distributing_table($1::regclass)")
            .bind(table)
            .execute(&mut *conn)
            .await
            .map_err(failed(table))?;
    }
    Ok(placed)
}

/// The error of a statement placing `table`.
fn failed(table: &str) -> impl FnOnce(sqlx::Error) -> DistributeError + '_ {
    move |source| DistributeError::Failed {
        table: table.to_owned(),
        source,
    }
}

/// Drops `table`'s foreign keys to the account tables: a reference table cannot point at a
/// distributed one. The names come from the catalog; a key already gone is not looked for.
async fn drop_keys_to_account_tables(
    conn: &mut PgConnection,
    table: &str,
) -> Result<(), sqlx::Error> {
    let keys: Vec<String> = sqlx::query_scalar(
        "SELECT conname::text FROM pg_constraint \
         WHERE contype = 'f' AND conrelid = $1::regclass AND confrelid::regclass::text = ANY($2)",
    )
    .bind(table)
    .bind(BY_ACCOUNT)
    .fetch_all(&mut *conn)
    .await?;
    for key in keys {
        // Both names are identifiers: the table is one of ours, the key read from the catalog.
        sqlx::query(&format!("ALTER TABLE {table} DROP CONSTRAINT \"{key}\""))
            .execute(&mut *conn)
            .await?;
        tracing::info!(target: "kxp_sender", table, key, "dropped a foreign key to an account table: a reference table cannot hold one");
    }
    Ok(())
}

#[cfg(test)]
mod tests;
