//! Citus: the reads that look at every account at once (which accounts have due work, expired
//! leases, probes or unnumbered deliveries; the gauges, retention, the operators' list), made
//! so that a worker down costs only the rows of its shards. One statement over a distributed
//! table fails as a whole when a shard does not answer: then `run_command_on_shards` reads
//! shard by shard, and the scan goes on with the shards that answered. These reads take no
//! locks: each account's work is then claimed on its own shard.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::de::DeserializeOwned;
use sqlx::PgPool;

/// PostgreSQL's code for a function that does not exist.
const UNDEFINED_FUNCTION: &str = "42883";

/// How many scans could not read every shard in one statement and went shard by shard since
/// the process started (`kxp_store_scans_by_shard_total`): 0 while every worker answers.
static BY_SHARD: AtomicU64 = AtomicU64::new(0);

/// [`BY_SHARD`]'s count.
pub(crate) fn scans_by_shard() -> u64 {
    BY_SHARD.load(Ordering::Relaxed)
}

/// Runs `select` on every shard of `table` and returns the rows of the shards that answered.
///
/// `select` is a query over `%%s` (the shard's name, or the table's) whose one column, `r`, is
/// each row as a `jsonb` value (`jsonb_build_array(…) AS r`), with a `%L` for each of `args`,
/// which are quoted as literals there (a number compares with a quoted number as a number).
/// It must mean the same over one shard and over the whole table (a window per shard is a
/// window of the whole, merged by the caller; a count per account is the account's count).
///
/// It is first read over the whole table in one statement, which Citus sends to every shard
/// over its cached connections. Only when that fails (a worker down) is each shard read on its
/// own with `run_command_on_shards`, which answers per shard but opens a connection per shard
/// and call (hundreds of milliseconds for 32 shards, the coordinator's CPU and each worker's:
/// too dear for every pass). A shard that does not answer is logged and skipped; when no shard
/// answers, the first failure is the error.
pub(crate) async fn every_shard<T: DeserializeOwned>(
    pool: &PgPool,
    table: &str,
    select: &str,
    args: &[String],
) -> Result<Vec<T>, sqlx::Error> {
    Ok(every_shard_counted(pool, table, select, args).await?.rows)
}

/// What [`every_shard_counted`] read: the rows of the shards that answered, and how many did
/// not (what a reader shows beside a partial answer).
pub(crate) struct Answered<T> {
    pub(crate) rows: Vec<T>,
    pub(crate) unanswered: usize,
}

/// `select` over the whole of `table` in one statement (see [`every_shard`]): its rows.
async fn whole<T: DeserializeOwned>(
    pool: &PgPool,
    table: &str,
    select: &str,
    args: &[String],
) -> Result<Vec<T>, sqlx::Error> {
    let command: String = sqlx::query_scalar("SELECT format($1, VARIADIC $2::text[])")
        .bind(format!(
            "SELECT COALESCE(jsonb_agg(q.r), '[]')::text FROM ({select}) q"
        ))
        .bind(args)
        .fetch_one(pool)
        .await?;
    let result: String = sqlx::query_scalar(&command.replace("%s", table))
        .fetch_one(pool)
        .await?;
    serde_json::from_str(&result).map_err(|e| sqlx::Error::Decode(format!("{table}: {e}").into()))
}

/// [`every_shard`], also saying how many shards did not answer.
pub(crate) async fn every_shard_counted<T: DeserializeOwned>(
    pool: &PgPool,
    table: &str,
    select: &str,
    args: &[String],
) -> Result<Answered<T>, sqlx::Error> {
    let first = match whole(pool, table, select, args).await {
        Ok(rows) => {
            return Ok(Answered {
                rows,
                unanswered: 0,
            });
        }
        Err(e) => e,
    };
    BY_SHARD.fetch_add(1, Ordering::Relaxed);
    tracing::debug!(target: "kxp_sender", table, error = %first, "a scan reads shard by shard");
    let command = format!("SELECT COALESCE(jsonb_agg(q.r), '[]') FROM ({select}) q");
    let answers: Vec<(i64, bool, String)> = match sqlx::query_as(
        "SELECT shardid, success, result FROM run_command_on_shards($1, format($2, VARIADIC $3::text[]))",
    )
    .bind(table)
    .bind(&command)
    .bind(args)
    .fetch_all(pool)
    .await
    {
        Ok(answers) => answers,
        // Not Citus: one PostgreSQL with the per-account forms (`Config::per_account_statements`,
        // for tests and comparisons), whose one statement failed on its own.
        Err(e) if e.as_database_error().and_then(|e| e.code()).as_deref() == Some(UNDEFINED_FUNCTION) => {
            return Err(first);
        }
        Err(e) => return Err(e),
    };
    let shards = answers.len();
    let mut rows = Vec::new();
    let mut failed = Vec::new();
    for (shard, success, result) in answers {
        if !success {
            failed.push((shard, result));
            continue;
        }
        let mut these: Vec<T> = serde_json::from_str(&result)
            .map_err(|e| sqlx::Error::Decode(format!("shard {shard} of {table}: {e}").into()))?;
        rows.append(&mut these);
    }
    match failed.first() {
        None => {}
        Some((shard, error)) if failed.len() == shards => {
            return Err(sqlx::Error::Protocol(format!(
                "no shard of {table} answered (shard {shard}: {error})"
            )));
        }
        Some((shard, error)) => {
            tracing::warn!(target: "kxp_sender", table, shards = failed.len(), first = shard, error = %error, "shards did not answer a scan; their accounts wait until they do");
        }
    }
    Ok(Answered {
        rows,
        unanswered: failed.len(),
    })
}
