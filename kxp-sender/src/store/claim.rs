//! The worker's claim: handing out ready-to-send jobs (fairly across endpoints and accounts),
//! putting a claimed delivery back, and reclaiming deliveries whose lease ran out.

use std::collections::HashMap;
use std::sync::LazyLock;

use crate::model::{AccountId, DeliveryId, EndpointId, EndpointKey, Gone, Job, now_ms};
use crate::policy::fairness::AccountCaps;
use crate::store::backend::Backend;
use crate::store::{Db, StoreError, on_db};
use sqlx::Sqlite;
use sqlx::query::QueryAs;

pub(super) mod citus;

impl Db {
    /// Claims up to `limit` due deliveries for `owner`, at most `default_cap` per endpoint, or
    /// what `caps` allows for the endpoints it lists (0: none; this worker keeps them as busy as
    /// their concurrency or rate limit allows), and returns them as jobs: the event, the URL
    /// and the live secrets with each, read in the same round trip (here: their ids). Only deliveries of
    /// `active` endpoints with a closed circuit are claimed, and of a half-open one only its
    /// probe.
    ///
    /// The scan stays on the `kxp_deliveries_due` index in due order, with one primary key probe
    /// per candidate, over a window of `4 × limit` candidates; held deliveries (paused, disabled
    /// or open endpoints) are outside its range altogether (`HELD`). Each claimed delivery is
    /// leased for its endpoint's timeout plus `lease_extra_ms`: if the worker dies, the delivery
    /// is claimable again soon after any attempt of its could have ended.
    ///
    /// Without account bounds: for the claim benchmark and the tests (feature `test-util`);
    /// the workers call [`Db::claim_fair`].
    #[cfg(feature = "test-util")]
    pub async fn claim(
        &self,
        owner: &str,
        lease_extra_ms: i64,
        limit: i64,
        caps: &[(EndpointId, usize)],
        default_cap: usize,
    ) -> Result<Vec<DeliveryId>, StoreError> {
        let claimed = self
            .claim_fair(
                owner,
                lease_extra_ms,
                limit,
                (caps, default_cap),
                &AccountCaps::unbounded(),
            )
            .await?;
        Ok(claimed.into_iter().map(|job| job.id).collect())
    }

    /// [`Db::claim`], with each account's deliveries bounded by `accounts` as well. Accounts at 0 are left out of the scan's window, so
    /// one account's backlog cannot fill it, and the window's deliveries are taken account by
    /// account in turn (each account's oldest first), not in due order alone: the claim's
    /// `limit` goes round the accounts with due work. `endpoints` is `caps` and `default_cap`
    /// of [`Db::claim`].
    pub(crate) async fn claim_fair(
        &self,
        owner: &str,
        lease_extra_ms: i64,
        limit: i64,
        endpoints: (&[(EndpointId, usize)], usize),
        accounts: &AccountCaps,
    ) -> Result<Vec<Job>, StoreError> {
        let (caps, default_cap) = endpoints;
        let now = now_ms();
        let caps = serde_json::to_string(&caps.iter().cloned().collect::<HashMap<_, _>>())
            .unwrap_or_else(|_| "{}".to_owned());
        let default_cap = i64::try_from(default_cap).unwrap_or(i64::MAX);
        let account_caps = accounts.json();
        let args = ClaimArgs {
            lease_extra_ms,
            owner,
            now,
            caps: &caps,
            limit,
            default_cap,
            account_caps: &account_caps,
            other_accounts: accounts.others_i64(),
        };
        Ok(match self {
            // One statement: the claim's UPDATE in a CTE, joined with what each job needs.
            Db::Postgres(pool) => {
                args.bind(sqlx::query_as::<_, Job>(CLAIM_POSTGRES.as_str()))
                    .fetch_all(pool)
                    .await?
            }
            Db::Citus(pool) => citus::claim_fair(pool, args, accounts).await?,
            // SQLite has no UPDATE in a CTE: the claim, then one read of its jobs (in-process,
            // so the second statement costs microseconds, not a round trip).
            Db::Sqlite(pool) => {
                let claimed: Vec<(String, String)> = args
                    .bind(sqlx::query_as(CLAIM_SQLITE.as_str()))
                    .fetch_all(pool)
                    .await?;
                jobs_sqlite(pool, &claimed, now).await?
            }
        })
    }

    /// Claims for `owner` up to `cap` due deliveries of each endpoint in `targets` (the
    /// endpoints this worker knows have work and room for it: new events, a finished attempt),
    /// and returns them as jobs like [`Db::claim_fair`]. Each endpoint is read on the
    /// `kxp_deliveries_endpoint_due` index, from its oldest due delivery, and the read stops
    /// at its cap: the cost is what is claimed, however long any endpoint's backlog is, and an
    /// endpoint at its limit is not in `targets` at all. Only `active` endpoints with a closed
    /// circuit give deliveries, and a half-open one only its probe.
    ///
    /// Each account's deliveries are bounded by `accounts` as well (an
    /// account's endpoints share its cap, oldest due delivery first).
    pub(crate) async fn claim_for_fair(
        &self,
        owner: &str,
        lease_extra_ms: i64,
        targets: &[(EndpointKey, usize)],
        accounts: &AccountCaps,
    ) -> Result<Vec<Job>, StoreError> {
        let targets: Vec<(&EndpointKey, i64)> = targets
            .iter()
            .filter(|(_, cap)| *cap > 0)
            .map(|(key, cap)| (key, i64::try_from(*cap).unwrap_or(i64::MAX)))
            .collect();
        if targets.is_empty() {
            return Ok(Vec::new());
        }
        let now = now_ms();
        Ok(match self {
            Db::Postgres(pool) => {
                let lease = (lease_extra_ms, owner, now);
                claim_for(pool, &CLAIM_FOR_POSTGRES, lease, &targets, accounts, None).await?
            }
            Db::Citus(pool) => {
                citus::claim_for_fair(pool, (lease_extra_ms, owner, now), &targets, accounts)
                    .await?
            }
            // One write transaction, one statement per endpoint (in-process: microseconds
            // each), then one read of the jobs; each statement's limit is what its account
            // has left.
            Db::Sqlite(pool) => {
                let mut tx = pool.begin_with(<Sqlite as Backend>::BEGIN).await?;
                let mut left: HashMap<&AccountId, usize> = HashMap::new();
                let mut claimed = Vec::new();
                for (EndpointKey { account_id, id }, cap) in &targets {
                    let left = left
                        .entry(account_id)
                        .or_insert_with(|| accounts.of(account_id));
                    let cap = (*cap).min(i64::try_from(*left).unwrap_or(i64::MAX));
                    if cap == 0 {
                        continue;
                    }
                    let taken = sqlx::query_as::<_, (String, String)>(CLAIM_FOR_SQLITE.as_str())
                        .bind(lease_extra_ms)
                        .bind(owner)
                        .bind(now)
                        .bind(id)
                        .bind(cap)
                        .bind(account_id)
                        .fetch_all(&mut *tx)
                        .await?;
                    *left = left.saturating_sub(taken.len());
                    claimed.extend(taken);
                }
                tx.commit().await?;
                jobs_sqlite(pool, &claimed, now).await?
            }
        })
    }

    /// Puts a claimed delivery back, untried (shutdown, more claimed than an endpoint may take
    /// at once, or an endpoint paused since the claim); if its endpoint was deleted meanwhile,
    /// it ends dead with `endpoint_deleted` instead.
    pub(crate) async fn release(
        &self,
        account_id: &AccountId,
        delivery_id: &DeliveryId,
        owner: &str,
    ) -> Result<(), StoreError> {
        on_db!(self, |pool| {
            sqlx::query(&RELEASE)
                .bind(now_ms())
                .bind(delivery_id)
                .bind(owner)
                .bind(account_id)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// Ends a claimed delivery untried, as `gone` says: its event's payload was erased or
    /// expired, or is being erased ([`crate::model::Job::withheld`]).
    pub(crate) async fn withhold(
        &self,
        account_id: &AccountId,
        delivery_id: &DeliveryId,
        owner: &str,
        gone: Gone,
    ) -> Result<(), StoreError> {
        let now = now_ms();
        on_db!(self, |pool, DB| {
            let mut tx = pool.begin_with(DB::BEGIN).await?;
            let ended = sqlx::query(
                "UPDATE kxp_deliveries SET status = $5, lease_until = NULL, lease_owner = NULL, updated_at = $1 \
                 WHERE account_id = $4 AND id = $2 AND lease_owner = $3 AND status = 'delivering'",
            )
            .bind(now)
            .bind(delivery_id)
            .bind(owner)
            .bind(account_id)
            .bind(gone.as_str())
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if ended == 1 {
                // A half-open circuit's probe that ends so opens the circuit again: the probe
                // release then picks another delivery, or the endpoint would wait for good.
                sqlx::query(
                    "UPDATE kxp_endpoints SET circuit_state = 'open', circuit_probe_id = NULL, circuit_probe_at = $3 \
                     WHERE account_id = $1 AND circuit_state = 'half_open' AND circuit_probe_id = $2",
                )
                .bind(account_id)
                .bind(delivery_id)
                .bind(now)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
        });
        Ok(())
    }

    /// Makes deliveries whose lease ran out (their worker died) claimable again (or dead with
    /// `endpoint_deleted`, if their endpoint was deleted meanwhile).
    pub(crate) async fn reclaim_expired(&self) -> Result<u64, StoreError> {
        let now = now_ms();
        if let Db::Citus(pool) = self {
            return Ok(citus::reclaim_expired(pool, now).await?);
        }
        // PostgreSQL: rows a batch of attempts is recording right now are left to it (their
        // outcome decides), so the two never wait for each other in opposite orders.
        Ok(on_db!(self, |pool, DB| {
            let sql = format!(
                "UPDATE kxp_deliveries SET {}, next_attempt_at = $1, updated_at = $1 \
                 WHERE (account_id, id) IN (SELECT account_id, id FROM kxp_deliveries \
                   WHERE status = 'delivering' AND lease_until < $1{}) \
                 AND status = 'delivering' AND lease_until < $1",
                put_back("kxp_deliveries.account_id"),
                DB::row_lock(" FOR UPDATE SKIP LOCKED")
            );
            sqlx::query(&sql)
                .bind(now)
                .execute(pool)
                .await?
                .rows_affected()
        }))
    }
}

/// Runs a statement of [`claim_for_postgres`]'s on `pool` for `targets` (each endpoint with its
/// cap), with `lease` its lease's extra ms, its owner and now, and `account` its `$7` if it is
/// the statement of one account.
async fn claim_for(
    pool: &sqlx::PgPool,
    sql: &str,
    (lease_extra_ms, owner, now): (i64, &str, i64),
    targets: &[(&EndpointKey, i64)],
    accounts: &AccountCaps,
    account: Option<&AccountId>,
) -> Result<Vec<Job>, sqlx::Error> {
    let caps: Vec<serde_json::Value> = targets
        .iter()
        .map(|(key, cap)| serde_json::json!({"a": key.account_id, "id": key.id, "cap": cap}))
        .collect();
    let query = sqlx::query_as::<_, Job>(sql)
        .bind(lease_extra_ms)
        .bind(owner)
        .bind(now)
        .bind(serde_json::Value::from(caps).to_string())
        .bind(accounts.json())
        .bind(accounts.others_i64());
    match account {
        Some(account) => query.bind(account).fetch_all(pool).await,
        None => query.fetch_all(pool).await,
    }
}

/// The parameters of [`claim_sql`]'s statement, `$1` to `$8`, the same on both databases.
#[derive(Clone, Copy)]
struct ClaimArgs<'a> {
    lease_extra_ms: i64,
    owner: &'a str,
    now: i64,
    /// Endpoint id → cap, as a JSON object.
    caps: &'a str,
    limit: i64,
    default_cap: i64,
    /// Account id → cap, as a JSON object.
    account_caps: &'a str,
    /// The cap of accounts not in `account_caps`.
    other_accounts: i64,
}

impl<'a> ClaimArgs<'a> {
    /// Binds `$1` to `$8` to `query`, whatever it reads back on whichever database.
    fn bind<DB, O>(
        &self,
        query: QueryAs<'a, DB, O, <DB as sqlx::Database>::Arguments<'a>>,
    ) -> QueryAs<'a, DB, O, <DB as sqlx::Database>::Arguments<'a>>
    where
        DB: sqlx::Database,
        i64: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
        &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    {
        query
            .bind(self.lease_extra_ms)
            .bind(self.owner)
            .bind(self.now)
            .bind(self.caps)
            .bind(self.limit)
            .bind(self.default_cap)
            .bind(self.account_caps)
            .bind(self.other_accounts)
    }
}

/// The jobs of the deliveries a SQLite claim took (`claimed`: account and id), read at `now`.
async fn jobs_sqlite(
    pool: &sqlx::SqlitePool,
    claimed: &[(String, String)],
    now: i64,
) -> Result<Vec<Job>, sqlx::Error> {
    if claimed.is_empty() {
        return Ok(Vec::new());
    }
    let ids = serde_json::to_string(claimed).unwrap_or_else(|_| "[]".to_owned());
    sqlx::query_as::<_, Job>(JOBS_SQLITE.as_str())
        .bind(&ids)
        .bind(now)
        .fetch_all(pool)
        .await
}

/// The worker's claim ([`Db::claim`]) for one backend; built once each. On SQLite it returns
/// the claimed ids ([`JOBS_SQLITE`] reads their jobs); on PostgreSQL the jobs themselves.
fn claim_sql(sqlite: bool) -> String {
    claim_sql_of(sqlite, false)
}

/// [`claim_sql`], of one account's deliveries only (`$9`) when `one_account`: a statement
/// Citus runs on that account's shard alone.
fn claim_sql_of(sqlite: bool, one_account: bool) -> String {
    // `cap` is the endpoint's entry in the JSON object `$4`, else `$6`; the account's is its
    // entry in `$7`, else `$8`.
    let cap = |json: &str, key: &str, default: &str| {
        if sqlite {
            format!("COALESCE(json_extract({json}, '$.' || {key}), {default})")
        } else {
            format!("COALESCE(({json}::jsonb ->> {key})::bigint, {default})")
        }
    };
    let (cap_d, cap_e) = (
        cap("$4", "d.endpoint_id", "$6"),
        cap("$4", "e.endpoint_id", "$6"),
    );
    let (account_d, account_c) = (
        cap("$7", "d.account_id", "$8"),
        cap("$7", "c.account_id", "$8"),
    );
    // SKIP LOCKED: rows another process is claiming right now are passed over rather than
    // waited for, so workers never hold the same delivery.
    let lock = if sqlite {
        ""
    } else {
        " FOR UPDATE OF d SKIP LOCKED"
    };
    let returning = if sqlite {
        "account_id, id"
    } else {
        "id, account_id, event_id, endpoint_id, attempts, sequence"
    };
    // The window: due deliveries in due order, of endpoints and accounts that may take more.
    // Then at most each endpoint's cap (`rn`), then at most each account's (`an`), taken
    // round the accounts: every account's oldest, then every account's second, …
    let (take_account, scan_account, account) = if one_account {
        ("account_id = $9 AND ", "d.account_id = $9 AND ", "$9")
    } else {
        ("", "", "d.account_id")
    };
    let take = take(if one_account {
        "$9"
    } else {
        "kxp_deliveries.account_id"
    });
    let claim = format!(
        "{take} WHERE {take_account}(account_id, id) IN (SELECT c.account_id, c.id FROM ( \
             SELECT e.id, e.account_id, e.next_attempt_at, \
               ROW_NUMBER() OVER (PARTITION BY e.account_id ORDER BY e.next_attempt_at) AS an \
             FROM (SELECT w.id, w.endpoint_id, w.account_id, w.next_attempt_at, \
                 ROW_NUMBER() OVER (PARTITION BY w.endpoint_id ORDER BY w.next_attempt_at) AS rn \
               FROM (SELECT d.id, d.endpoint_id, d.account_id, d.next_attempt_at FROM kxp_deliveries d \
                 WHERE {scan_account}d.status = 'pending' AND d.next_attempt_at <= $3 AND {NUMBERED} AND {cap_d} > 0 AND {account_d} > 0 \
                 AND EXISTS (SELECT 1 FROM kxp_endpoints a WHERE a.account_id = {account} AND a.id = d.endpoint_id AND a.status = 'active' \
                   AND (a.circuit_state = 'closed' OR (a.circuit_state = 'half_open' AND a.circuit_probe_id = d.id))) \
                 ORDER BY d.next_attempt_at LIMIT $5 * 4{lock}) w \
             ) e WHERE e.rn <= {cap_e} \
           ) c WHERE c.an <= {account_c} ORDER BY c.an, c.next_attempt_at LIMIT $5) \
         RETURNING {returning}"
    );
    if sqlite {
        claim
    } else {
        let account = one_account.then_some("$9");
        format!("WITH d AS ({claim}) {}", job_select("d", "$3", account))
    }
}

/// The columns of a [`Job`], from the claimed deliveries `from` (aliased `d`), their events
/// and endpoints, with the endpoint's [`live_secrets`] at `now`.
///
/// `account`, the parameter naming the one account claimed for, is compared with the events'
/// and endpoints' accounts too: the claimed rows come out of a `WITH`, which Citus reads as an
/// intermediate result, and only a constant account keeps the join on that account's shard.
fn job_select(from: &str, now: &str, account: Option<&str>) -> String {
    let (e_account, p_account) = match account {
        Some(account) => (
            format!("{account} AND e.account_id = d.account_id"),
            format!("{account} AND p.account_id = d.account_id"),
        ),
        None => ("d.account_id".to_owned(), "d.account_id".to_owned()),
    };
    format!(
        "SELECT d.id, d.event_id, e.event_type, e.payload, d.endpoint_id, p.account_id, p.url, p.timeout_ms, d.attempts, \
           p.status AS endpoint_status, p.rate_limit_per_second, p.circuit_state, p.circuit_probe_id, \
           {} AS secrets, (p.confirm_secret_id IS NOT NULL) AS confirming, p.encryption_jwk, d.sequence, \
           e.traceparent, e.tracestate, p.trace_propagation, COALESCE(p.credentials, '') AS credentials, \
           (p.payload_mode = 'thin') AS thin, {} AS withheld \
         FROM {from} JOIN kxp_events e ON e.account_id = {e_account} AND e.id = d.event_id \
         JOIN kxp_endpoints p ON p.account_id = {p_account} AND p.id = d.endpoint_id",
        live_secrets(now, account.unwrap_or("p.account_id")),
        withheld(now, account.unwrap_or("e.account_id"))
    )
}

/// Why the claimed delivery's event `e` may not be sent (at `now`), as [`Job::withheld`]
/// reads it: its payload is gone, its retention passed, or a running erasure covers it (one
/// accepted after the event, of a tag it carries: erasures are few, and their partial index
/// is empty nearly always, so the claim pays one probe of an empty index).
///
/// [`Job::withheld`]: crate::model::Job::withheld
///
/// `account` as [`live_secrets`]'s: `e.account_id`, or the parameter naming the one account
/// (on Citus a subquery correlated by a column is refused beside the claim's `WITH`).
pub(crate) fn withheld(now: &str, account: &str) -> String {
    format!(
        "CASE WHEN e.payload_gone IS NOT NULL THEN e.payload_gone \
           WHEN e.payload_expires_at <= {now} THEN 'expired' \
           WHEN EXISTS (SELECT 1 FROM kxp_erasures x JOIN kxp_event_tags t \
             ON t.account_id = x.account_id AND t.tag = x.tag AND t.event_id = e.id \
             WHERE x.account_id = {account} AND t.account_id = {account} AND x.status = 'running' \
             AND t.created_at <= x.created_at) THEN 'erased' \
         END"
    )
}

/// The live secrets of the endpoint `p` at `now`, as [`Secrets`](crate::model::Secrets) reads
/// them: newest first, comma-separated, each after its row id and a colon (an Ed25519 key's
/// stored seed after `ed25519:`). One aggregate, as the claim is the hot path.
/// `account` as [`take`]'s: `p.account_id`, or the one account's parameter.
pub(super) fn live_secrets(now: &str, account: &str) -> String {
    format!(
        "COALESCE((SELECT string_agg(CAST(s.id AS TEXT) || ':' || CASE WHEN s.kind = 'ed25519' THEN 'ed25519:' || s.secret ELSE s.secret END, ',' ORDER BY s.id DESC) \
         FROM kxp_endpoint_secrets s WHERE s.account_id = {account} AND s.endpoint_id = p.id AND (s.expires_at IS NULL OR s.expires_at > {now})), '')"
    )
}

/// Which due deliveries a claim may take: numbered ones, and any older than two seconds. A
/// delivery that committed after the worker's sequencer pass (store/sequence.rs) waits for the
/// next pass, a few ms later, so that nearly every attempt carries its `X-Kxp-Sequence`; a
/// sequencer that stalls delays delivery by two seconds, never more.
const NUMBERED: &str = "(d.sequence IS NOT NULL OR d.created_at <= $3 - 2000)";

/// What a claim sets on each delivery it takes: `$1` the lease's extra ms, `$2` the owner, `$3`
/// now.
///
/// `account` is the deliveries' account in the endpoint's lookup: `kxp_deliveries.account_id`,
/// or the parameter of the one account claimed for, which Citus needs to keep the statement on
/// that account's shard (a subquery correlated by a column sends it to every shard).
fn take(account: &str) -> String {
    format!(
        "UPDATE kxp_deliveries SET status = 'delivering', lease_owner = $2, updated_at = $3, \
         lease_until = $3 + $1 + (SELECT timeout_ms FROM kxp_endpoints p \
           WHERE p.account_id = {account} AND p.id = kxp_deliveries.endpoint_id)"
    )
}

/// [`Db::claim_for_fair`] on SQLite, for one endpoint: `$4` the endpoint, `$5` its cap, `$6` its
/// account.
pub(super) static CLAIM_FOR_SQLITE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "{} WHERE account_id = $6 AND id IN (SELECT d.id FROM kxp_deliveries d \
           JOIN kxp_endpoints p ON p.account_id = d.account_id AND p.id = d.endpoint_id \
           WHERE d.account_id = $6 AND d.endpoint_id = $4 AND d.status = 'pending' AND d.next_attempt_at <= $3 AND {NUMBERED} AND p.status = 'active' \
           AND (p.circuit_state = 'closed' OR (p.circuit_state = 'half_open' AND p.circuit_probe_id = d.id)) \
           ORDER BY d.next_attempt_at LIMIT $5) \
         RETURNING account_id, id",
        take("$6")
    )
});

/// [`Db::claim_for_fair`] on PostgreSQL, every endpoint in one statement: `$4` a JSON array of
/// `{"a": account, "id": endpoint, "cap": cap}`, `$5` a JSON object of account id → cap, `$6` the cap of accounts not in `$5`. Each
/// endpoint's deliveries are read in a `LATERAL` subquery that stops at its cap, skipping rows
/// another process is claiming; then each account keeps its oldest up to its own cap.
static CLAIM_FOR_POSTGRES: LazyLock<String> = LazyLock::new(|| claim_for_postgres(false));

/// [`CLAIM_FOR_POSTGRES`], or with every endpoint of the account `$7` when `one_account` (a
/// statement Citus runs on that account's shard alone).
fn claim_for_postgres(one_account: bool) -> String {
    let (take_account, endpoint_account) = if one_account {
        ("account_id = $7 AND ", "$7")
    } else {
        ("", "t.a")
    };
    let take = take(if one_account {
        "$7"
    } else {
        "kxp_deliveries.account_id"
    });
    format!(
        "WITH t AS (SELECT a, id AS endpoint_id, cap FROM jsonb_to_recordset($4::jsonb) AS r(a text, id text, cap bigint)), \
         picked AS (SELECT x.id, x.next_attempt_at, p.account_id FROM t JOIN kxp_endpoints p ON p.account_id = {endpoint_account} AND p.id = t.endpoint_id \
           CROSS JOIN LATERAL (SELECT d.id, d.next_attempt_at FROM kxp_deliveries d \
             WHERE d.account_id = {endpoint_account} AND d.endpoint_id = t.endpoint_id AND d.status = 'pending' AND d.next_attempt_at <= $3 AND {NUMBERED} \
             AND (p.circuit_state = 'closed' OR d.id = p.circuit_probe_id) \
             ORDER BY d.next_attempt_at LIMIT t.cap FOR UPDATE SKIP LOCKED) x \
           WHERE p.status = 'active' AND p.circuit_state <> 'open' \
           AND COALESCE(($5::jsonb ->> p.account_id)::bigint, $6) > 0), \
         ranked AS (SELECT id, account_id, \
           ROW_NUMBER() OVER (PARTITION BY account_id ORDER BY next_attempt_at) AS an FROM picked), \
         d AS ({take} WHERE {take_account}(account_id, id) IN (SELECT account_id, id FROM ranked \
           WHERE an <= COALESCE(($5::jsonb ->> account_id)::bigint, $6)) \
           RETURNING id, account_id, event_id, endpoint_id, attempts, sequence) \
         {}",
        job_select("d", "$3", one_account.then_some("$7"))
    )
}

pub(super) static CLAIM_SQLITE: LazyLock<String> = LazyLock::new(|| claim_sql(true));
static CLAIM_POSTGRES: LazyLock<String> = LazyLock::new(|| claim_sql(false));
/// The jobs of the deliveries SQLite's claim returned: `$1` their `[account, id]` pairs as a
/// JSON array, `$2` now. By the whole key: a delivery's id alone is no index's first column.
pub(super) static JOBS_SQLITE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "{} WHERE (d.account_id, d.id) IN \
           (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each($1))",
        job_select("kxp_deliveries d", "$2", None)
    )
});

/// [`Db::release`]: `$1` now, `$2` the delivery, `$3` the lease owner, `$4` its account.
pub(super) static RELEASE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "UPDATE kxp_deliveries SET {}, updated_at = $1 \
         WHERE account_id = $4 AND id = $2 AND lease_owner = $3 AND status = 'delivering'",
        put_back("$4")
    )
});

/// What putting a claimed delivery back sets on its row, in an `UPDATE kxp_deliveries`:
/// pending and unleased again, or dead with `endpoint_deleted` if its endpoint was deleted
/// meanwhile. `account` as [`endpoint_deleted`]'s.
pub(super) fn put_back(account: &str) -> String {
    let deleted = endpoint_deleted(account);
    format!(
        "status = CASE WHEN {deleted} THEN 'dead' ELSE 'pending' END, \
         last_error = CASE WHEN {deleted} THEN 'endpoint_deleted' ELSE last_error END, \
         lease_until = NULL, lease_owner = NULL"
    )
}

/// True when the row's endpoint is deleted, in an `UPDATE kxp_deliveries`: a delivery that
/// would go back to pending then ends dead instead, as the deletion made its siblings.
/// `account` is the row's account: `kxp_deliveries.account_id`, or the parameter naming it
/// (a subquery correlated by the column sends the statement to every shard on Citus).
pub(crate) fn endpoint_deleted(account: &str) -> String {
    format!(
        "(SELECT p.status FROM kxp_endpoints p \
         WHERE p.account_id = {account} AND p.id = kxp_deliveries.endpoint_id) = 'deleted'"
    )
}
