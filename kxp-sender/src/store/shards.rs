//! Citus: the reads that look at every account at once (which accounts have due work, expired
//! leases, probes or unnumbered deliveries) made shard by shard, so that a worker down costs
//! only the rows of its shards. One statement over a distributed table fails as a whole when a
//! shard does not answer; `run_command_on_shards` answers per shard, and the scan goes on with
//! the shards that answered. These reads take no locks: each account's work is then claimed
//! on its own shard.

use serde::de::DeserializeOwned;
use sqlx::PgPool;

/// PostgreSQL's code for a function that does not exist.
const UNDEFINED_FUNCTION: &str = "42883";

/// Runs `select` on every shard of `table` and returns the rows of the shards that answered.
///
/// `select` is a query over `%%s` (the shard's name) whose one column, `r`, is each row as a
/// `jsonb` value (`jsonb_build_array(…) AS r`), with a `%L` for each of `args`, which are
/// quoted as literals there (a number compares with a quoted number as a number). A shard that
/// does not answer is logged and skipped; when no shard answers, the first failure is the
/// error.
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

/// [`every_shard`], also saying how many shards did not answer.
pub(crate) async fn every_shard_counted<T: DeserializeOwned>(
    pool: &PgPool,
    table: &str,
    select: &str,
    args: &[String],
) -> Result<Answered<T>, sqlx::Error> {
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
        // One PostgreSQL with the per-account forms (`Config::per_account_statements`, for
        // tests and comparisons): no shards, the table read whole, as one shard.
        Err(e) if e.as_database_error().and_then(|e| e.code()).as_deref() == Some(UNDEFINED_FUNCTION) => {
            let command: String = sqlx::query_scalar("SELECT format($1, VARIADIC $2::text[])")
                .bind(&command)
                .bind(args)
                .fetch_one(pool)
                .await?;
            let result: String = sqlx::query_scalar(&format!("SELECT ({})::text", command.replace("%s", table)))
                .fetch_one(pool)
                .await?;
            vec![(0, true, result)]
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
