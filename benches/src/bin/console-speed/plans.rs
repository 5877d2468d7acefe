//! The query plans of the statements behind the timed pages, with the parameters those pages
//! send. The SQL is copied from `kxp-sender/src/store/{endpoints,health,deliveries,events}.rs`
//! (crate-private there): keep it in step when the store changes.
//!
//! PostgreSQL: `EXPLAIN (ANALYZE, BUFFERS)` of a prepared statement, three ways: a custom plan
//! (planned for these values), the generic plan (planned for any values), and what
//! `plan_cache_mode = auto` uses after 6 executions, which is what `kxp serve` gets: sqlx
//! prepares each statement once per connection and executes it again and again, so after the
//! fifth execution PostgreSQL may switch that connection to the generic plan. SQLite:
//! `EXPLAIN QUERY PLAN` with the values bound (SQLite plans without looking at them, and kxp
//! never runs `ANALYZE`, so there are no statistics either), and the statement's time.

use std::time::Instant;

use sqlx::Row;

use crate::seed::Seeded;
use crate::{Conn, Result};

/// A parameter: its PostgreSQL type and value.
#[derive(Clone)]
enum P {
    T(Option<String>),
    I(Option<i64>),
}

fn t(v: &str) -> P {
    P::T(Some(v.to_owned()))
}

impl P {
    fn pg_type(&self) -> &'static str {
        match self {
            P::T(_) => "text",
            P::I(_) => "bigint",
        }
    }
    /// The literal, shortened for the report.
    fn shown(&self) -> String {
        let full = self.literal();
        if full.len() > 80 {
            format!("{}…'", &full[..60])
        } else {
            full
        }
    }
    fn literal(&self) -> String {
        match self {
            P::T(Some(v)) => format!("'{}'", v.replace('\'', "''")),
            P::I(Some(v)) => v.to_string(),
            _ => "NULL".to_owned(),
        }
    }
}

struct Q {
    name: &'static str,
    sql: String,
    params: Vec<P>,
    /// Run before the plan and after it (a proposal's index, created and dropped again).
    around: Option<(&'static str, &'static str)>,
}

const DELIVERY_COLUMNS: &str = "id, event_id, endpoint_id, status, attempts, next_attempt_at, \
     last_status, last_error, replayed_by, created_at, updated_at";

const HOUR_MS: i64 = 3_600_000;

/// `Db::deliveries`' statement and parameters for a page of 51 (it holds only the filters
/// that are set, the status bound like the others, `replayed_by IS NULL` with `dead`).
fn deliveries(account: &str, status: Option<&str>, endpoint: Option<&str>) -> (String, Vec<P>) {
    let mut sql = format!("SELECT {DELIVERY_COLUMNS} FROM kxp_deliveries WHERE account_id = $1");
    let mut params = vec![t(account)];
    if let Some(status) = status {
        params.push(t(status));
        sql.push_str(&format!(" AND status = ${}", params.len()));
    }
    if let Some(endpoint) = endpoint {
        params.push(t(endpoint));
        sql.push_str(&format!(" AND endpoint_id = ${}", params.len()));
    }
    if status == Some("dead") {
        sql.push_str(" AND replayed_by IS NULL");
    }
    params.push(P::I(Some(51)));
    sql.push_str(&format!(" ORDER BY id LIMIT ${}", params.len()));
    (sql, params)
}

/// A [`Q`] of `Db::deliveries`.
fn deliveries_q(
    name: &'static str,
    account: &str,
    status: Option<&str>,
    endpoint: Option<&str>,
) -> Q {
    let (sql, params) = deliveries(account, status, endpoint);
    Q {
        name,
        sql,
        params,
        around: None,
    }
}

const COUNT_DEAD: &str = "SELECT COUNT(*) FROM kxp_deliveries d JOIN kxp_endpoints e ON e.id = d.endpoint_id \
     WHERE d.account_id = $1 AND d.status = 'dead' AND d.replayed_by IS NULL \
     AND e.status <> 'deleted' \
     AND (CAST($2 AS TEXT) IS NULL OR d.endpoint_id = $2) \
     AND (CAST($3 AS BIGINT) IS NULL OR d.created_at >= $3) \
     AND (CAST($4 AS BIGINT) IS NULL OR d.created_at < $4) \
     AND (CAST($5 AS BIGINT) IS NULL OR d.updated_at <= $5)";

const EVENTS_BY_TAG: &str = "SELECT e.id, e.event_type, e.api_version, e.created_at \
     FROM kxp_event_tags t JOIN kxp_events e ON e.account_id = t.account_id AND e.id = t.event_id \
     WHERE t.account_id = $1 AND t.tag = $2 AND t.created_at >= $3 AND t.created_at <= $4 \
     AND (t.created_at, t.event_id) < ($5, $6) \
     AND (CAST($7 AS TEXT) IS NULL OR e.event_type = $7) \
     ORDER BY t.created_at DESC, t.event_id DESC LIMIT $8";

fn tag_params(account: &str, tag: &str) -> Vec<P> {
    vec![
        t(account),
        t(tag),
        P::I(Some(i64::MIN)),
        P::I(Some(i64::MAX)),
        P::I(Some(i64::MAX)),
        t(""),
        P::T(None),
        P::I(Some(51)),
    ]
}

fn queries(
    account: &str,
    s: &Seeded,
    now: i64,
    page_ids: &str,
    dead_delivery: &str,
    cursor: &str,
    sqlite: bool,
) -> Vec<Q> {
    let ep = s.failing.as_str();
    let since = now.div_euclid(HOUR_MS) * HOUR_MS - 24 * HOUR_MS;
    let tags_sql = if sqlite {
        "SELECT event_id, tag FROM kxp_event_tags WHERE account_id = $2 AND event_id IN (SELECT value FROM json_each($1))"
    } else {
        "SELECT event_id, tag FROM kxp_event_tags WHERE account_id = $2 AND event_id IN (SELECT jsonb_array_elements_text($1::jsonb))"
    };
    vec![
        Q {
            name: "endpoints page: the account's endpoints (Db::endpoints)",
            sql: "SELECT * FROM kxp_endpoints WHERE account_id = $1 AND status <> 'deleted' \
                  AND (CAST($2 AS TEXT) IS NULL OR id > $2) ORDER BY id LIMIT $3"
                .to_owned(),
            params: vec![t(account), P::T(None), P::I(Some(500))],
            around: None,
        },
        Q {
            name: "endpoints page, per endpoint: the endpoint (Db::endpoint)",
            sql: "SELECT * FROM kxp_endpoints WHERE account_id = $1 AND id = $2 AND status <> 'deleted'".to_owned(),
            params: vec![t(account), t(ep)],
            around: None,
        },
        Q {
            name: "endpoints page, per endpoint: its stats row",
            sql: "SELECT consecutive_failures, last_success_at, last_failure_at, last_error, failing_since \
                  FROM kxp_endpoint_stats WHERE endpoint_id = $1"
                .to_owned(),
            params: vec![t(ep)],
            around: None,
        },
        Q {
            name: "endpoints page, per endpoint: 24 h of hourly rows",
            sql: "SELECT hour, successes, failures, le_10, le_25, le_50, le_100, le_250, le_500, le_1000, \
                  le_2500, le_5000, le_10000, le_30000, le_inf FROM kxp_endpoint_stats_hourly \
                  WHERE endpoint_id = $1 AND hour >= $2"
                .to_owned(),
            params: vec![t(ep), P::I(Some(since))],
            around: None,
        },
        Q {
            name: "endpoints page, per endpoint: pending and dead counts (failing endpoint)",
            sql: "SELECT status, COUNT(*) FROM kxp_deliveries \
                  WHERE endpoint_id = $1 AND status IN ('pending', 'delivering', 'dead') GROUP BY status"
                .to_owned(),
            params: vec![t(ep)],
            around: None,
        },
        Q {
            name: "endpoints page, per endpoint: due backlog",
            sql: "SELECT COUNT(*), MIN(next_attempt_at) FROM kxp_deliveries \
                  WHERE endpoint_id = $1 AND status = 'pending' AND next_attempt_at <= $2"
                .to_owned(),
            params: vec![t(ep), P::I(Some(now))],
            around: None,
        },
        deliveries_q(
            "dead-letter queue: a page, all endpoints (Db::deliveries, status dead)",
            account,
            Some("dead"),
            None,
        ),
        deliveries_q(
            "dead-letter queue: a page, the failing endpoint",
            account,
            Some("dead"),
            Some(ep),
        ),
        deliveries_q(
            "dead-letter queue: a page, a healthy endpoint",
            account,
            Some("dead"),
            Some(&s.healthy),
        ),
        Q {
            name: "dead-letter queue: a page in the middle, all endpoints",
            sql: format!(
                "SELECT {DELIVERY_COLUMNS} FROM kxp_deliveries WHERE account_id = $1 AND status = $2 \
                 AND id > $3 AND replayed_by IS NULL ORDER BY id LIMIT $4"
            ),
            params: vec![t(account), t("dead"), t(cursor), P::I(Some(51))],
            around: None,
        },
        Q {
            name: "dead-letter queue: the count, all endpoints (Db::count_dead)",
            sql: COUNT_DEAD.to_owned(),
            params: vec![t(account), P::T(None), P::I(None), P::I(None), P::I(None)],
            around: None,
        },
        Q {
            name: "dead-letter queue: the count, a healthy endpoint",
            sql: COUNT_DEAD.to_owned(),
            params: vec![t(account), t(&s.healthy), P::I(None), P::I(None), P::I(None)],
            around: None,
        },
        Q {
            name: "search: events by a unique tag (Db::events)",
            sql: EVENTS_BY_TAG.to_owned(),
            params: tag_params(account, &s.mid_tag),
            around: None,
        },
        Q {
            name: "search: events by a customer tag (250 events)",
            sql: EVENTS_BY_TAG.to_owned(),
            params: tag_params(account, &s.customer_tag),
            around: None,
        },
        Q {
            name: "search: events by the tag of 10 % of events",
            sql: EVENTS_BY_TAG.to_owned(),
            params: tag_params(account, "plan:enterprise"),
            around: None,
        },
        Q {
            name: "search: the tags of a page of 51 events",
            sql: tags_sql.to_owned(),
            params: vec![t(page_ids), t(account)],
            around: None,
        },
        deliveries_q(
            "search: deliveries of an endpoint, any status (console filter)",
            account,
            None,
            Some(&s.healthy),
        ),
        Q {
            name: "search / event page: an event by id (Db::event)",
            sql: "SELECT id, account_id, event_type, api_version, payload, created_at, request_hash \
                  FROM kxp_events WHERE account_id = $1 AND id = $2"
                .to_owned(),
            params: vec![t(account), t(&s.dead_event)],
            around: None,
        },
        Q {
            name: "event page: its deliveries (Db::event_deliveries)",
            sql: format!(
                "SELECT {DELIVERY_COLUMNS} FROM kxp_deliveries WHERE account_id = $1 AND event_id = $2 ORDER BY id"
            ),
            params: vec![t(account), t(&s.dead_event)],
            around: None,
        },
        Q {
            name: "search / event page: a delivery by id (Db::delivery)",
            sql: format!("SELECT {DELIVERY_COLUMNS} FROM kxp_deliveries WHERE account_id = $1 AND id = $2"),
            params: vec![t(account), t(dead_delivery)],
            around: None,
        },
        Q {
            name: "event page: a delivery's attempts (Db::attempts)",
            sql: "SELECT attempt, started_at, duration_ms, status_code, error, response_snippet, signed_with, verified_key \
                  FROM kxp_attempts WHERE delivery_id = $1 ORDER BY attempt, id"
                .to_owned(),
            params: vec![t(dead_delivery)],
            around: None,
        },
        // A proposal (not what kxp runs today): an index for the console's delivery filter
        // by endpoint with any status, which otherwise sorts the endpoint's deliveries.
        Q {
            name: "PROPOSED deliveries of an endpoint, any status, with an index on (endpoint_id, id)",
            sql: format!(
                "SELECT {DELIVERY_COLUMNS} FROM kxp_deliveries WHERE account_id = $1 AND endpoint_id = $2 \
                 ORDER BY id LIMIT $3"
            ),
            params: vec![t(account), t(&s.healthy), P::I(Some(51))],
            around: Some((
                "CREATE INDEX bench_deliveries_endpoint_id ON kxp_deliveries (endpoint_id, id)",
                "DROP INDEX bench_deliveries_endpoint_id",
            )),
        },
    ]
}

/// A plan without its figures, to tell whether two plans are the same.
fn shape(plan: &[String]) -> Vec<String> {
    plan.iter()
        .filter(|l| {
            let l = l.trim_start();
            !(l.starts_with("Buffers:")
                || l.starts_with("Planning")
                || l.starts_with("Execution")
                || l.starts_with("I/O Timings")
                || l.starts_with("Heap Fetches")
                || l.starts_with("Rows Removed")
                || l.starts_with("Sort Method")
                || l.starts_with("Memory"))
        })
        .map(|l| l.split(" (actual").next().unwrap_or(l).to_owned())
        .collect()
}

fn execution_ms(plan: &[String]) -> f64 {
    plan.iter()
        .find_map(|l| l.trim().strip_prefix("Execution Time: "))
        .and_then(|v| v.trim_end_matches(" ms").parse().ok())
        .unwrap_or(f64::NAN)
}

async fn pg_explain(c: &mut sqlx::PgConnection, sql: &str) -> Result<Vec<String>> {
    let rows = sqlx::raw_sql(sql)
        .fetch_all(&mut *c)
        .await
        .map_err(|e| format!("{e}: {sql}"))?;
    rows.iter()
        .map(|r| r.try_get::<String, _>(0).map_err(|e| e.to_string()))
        .collect()
}

pub async fn print(conn: &mut Conn, account: &str, s: &Seeded, now: i64) -> Result<()> {
    let sqlite = matches!(conn, Conn::Sqlite(_));
    let ids_sql = format!(
        "SELECT event_id FROM kxp_event_tags WHERE account_id = '{account}' AND tag = 'plan:enterprise' \
         ORDER BY created_at DESC, event_id DESC LIMIT 51"
    );
    let dead_sql = format!(
        "SELECT id FROM kxp_deliveries WHERE event_id = '{}' AND status = 'dead' LIMIT 1",
        s.dead_event
    );
    let (ids, dead): (Vec<String>, String) = match conn {
        Conn::Sqlite(c) => (
            sqlx::query_scalar(&ids_sql)
                .fetch_all(&mut *c)
                .await
                .map_err(|e| e.to_string())?,
            sqlx::query_scalar(&dead_sql)
                .fetch_one(&mut *c)
                .await
                .map_err(|e| e.to_string())?,
        ),
        Conn::Postgres(c) => (
            sqlx::query_scalar(&ids_sql)
                .fetch_all(&mut *c)
                .await
                .map_err(|e| e.to_string())?,
            sqlx::query_scalar(&dead_sql)
                .fetch_one(&mut *c)
                .await
                .map_err(|e| e.to_string())?,
        ),
    };
    let ids = serde_json::to_string(&ids).map_err(|e| e.to_string())?;
    // A cursor in the middle of the dead-letter queue.
    let cursor_sql = format!(
        "SELECT id FROM kxp_deliveries WHERE account_id = '{account}' AND status = 'dead' AND replayed_by IS NULL \
         ORDER BY id LIMIT 1 OFFSET {}",
        s.dead_unreplayed / 2
    );
    let cursor: String = match conn {
        Conn::Sqlite(c) => sqlx::query_scalar(&cursor_sql).fetch_one(&mut *c).await,
        Conn::Postgres(c) => sqlx::query_scalar(&cursor_sql).fetch_one(&mut *c).await,
    }
    .map_err(|e| e.to_string())?;
    println!("#### Query plans\n");
    for (n, q) in queries(account, s, now, &ids, &dead, &cursor, sqlite)
        .iter()
        .enumerate()
    {
        if let Some((before, _)) = q.around {
            match conn {
                Conn::Sqlite(c) => sqlx::raw_sql(before).execute(&mut *c).await.map(drop),
                Conn::Postgres(c) => sqlx::raw_sql(before).execute(&mut *c).await.map(drop),
            }
            .map_err(|e| format!("{e}: {before}"))?;
        }
        match conn {
            Conn::Postgres(c) => {
                let types = q
                    .params
                    .iter()
                    .map(P::pg_type)
                    .collect::<Vec<_>>()
                    .join(", ");
                let values = q
                    .params
                    .iter()
                    .map(P::literal)
                    .collect::<Vec<_>>()
                    .join(", ");
                let name = format!("q{n}");
                let prepare = if q.params.is_empty() {
                    format!("PREPARE {name} AS {}", q.sql)
                } else {
                    format!("PREPARE {name}({types}) AS {}", q.sql)
                };
                sqlx::raw_sql(&prepare)
                    .execute(&mut *c)
                    .await
                    .map_err(|e| format!("{e}: {prepare}"))?;
                let explain =
                    format!("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) EXECUTE {name}({values})");
                let execute = format!("EXECUTE {name}({values})");
                sqlx::raw_sql("SET plan_cache_mode = force_custom_plan")
                    .execute(&mut *c)
                    .await
                    .map_err(|e| e.to_string())?;
                pg_explain(c, &explain).await?; // warm the cache
                let custom = pg_explain(c, &explain).await?;
                sqlx::raw_sql("SET plan_cache_mode = force_generic_plan")
                    .execute(&mut *c)
                    .await
                    .map_err(|e| e.to_string())?;
                let generic = pg_explain(c, &explain).await?;
                sqlx::raw_sql("SET plan_cache_mode = auto")
                    .execute(&mut *c)
                    .await
                    .map_err(|e| e.to_string())?;
                sqlx::raw_sql(&format!("DEALLOCATE {name}"))
                    .execute(&mut *c)
                    .await
                    .map_err(|e| e.to_string())?;
                sqlx::raw_sql(&prepare)
                    .execute(&mut *c)
                    .await
                    .map_err(|e| e.to_string())?;
                for _ in 0..6 {
                    sqlx::raw_sql(&execute)
                        .execute(&mut *c)
                        .await
                        .map_err(|e| e.to_string())?;
                }
                let auto = pg_explain(c, &explain).await?;
                sqlx::raw_sql(&format!("DEALLOCATE {name}"))
                    .execute(&mut *c)
                    .await
                    .map_err(|e| e.to_string())?;
                let auto_is = if shape(&auto) == shape(&custom) {
                    "custom"
                } else if shape(&auto) == shape(&generic) {
                    "generic"
                } else {
                    "other"
                };
                let values = q.params.iter().map(P::shown).collect::<Vec<_>>().join(", ");
                println!(
                    "**{}**: custom plan {:.3} ms, generic plan {:.3} ms; after 6 executions `auto` uses the {auto_is} plan ({:.3} ms). Parameters: ({values})\n",
                    q.name,
                    execution_ms(&custom),
                    execution_ms(&generic),
                    execution_ms(&auto)
                );
                println!("```\n-- custom\n{}", custom.join("\n"));
                if shape(&generic) != shape(&custom) {
                    println!("-- generic\n{}", generic.join("\n"));
                }
                println!("```\n");
            }
            Conn::Sqlite(c) => {
                macro_rules! bound {
                    ($sql:expr) => {{
                        let mut query = sqlx::query::<sqlx::Sqlite>($sql);
                        for p in &q.params {
                            query = match p {
                                P::T(v) => query.bind(v.clone()),
                                P::I(v) => query.bind(*v),
                            };
                        }
                        query
                    }};
                }
                let explain = format!("EXPLAIN QUERY PLAN {}", q.sql);
                let rows = bound!(&explain)
                    .fetch_all(&mut *c)
                    .await
                    .map_err(|e| format!("{e}: {explain}"))?;
                let mut depth: Vec<(i64, usize)> = Vec::new();
                let mut lines = Vec::new();
                for r in &rows {
                    let id: i64 = r.try_get(0).map_err(|e| e.to_string())?;
                    let parent: i64 = r.try_get(1).map_err(|e| e.to_string())?;
                    let detail: String = r.try_get(3).map_err(|e| e.to_string())?;
                    let level = depth
                        .iter()
                        .find(|(i, _)| *i == parent)
                        .map_or(0, |(_, l)| l + 1);
                    depth.push((id, level));
                    lines.push(format!("{}{detail}", "  ".repeat(level)));
                }
                let mut times = Vec::new();
                let mut n_rows = 0;
                let budget = Instant::now();
                for _ in 0..21 {
                    let t0 = Instant::now();
                    n_rows = bound!(&q.sql)
                        .fetch_all(&mut *c)
                        .await
                        .map_err(|e| e.to_string())?
                        .len();
                    times.push(t0.elapsed().as_secs_f64() * 1000.0);
                    if budget.elapsed().as_secs() > 10 && times.len() >= 3 {
                        break;
                    }
                }
                times.sort_by(f64::total_cmp);
                let values = q.params.iter().map(P::shown).collect::<Vec<_>>().join(", ");
                println!(
                    "**{}**: {:.3} ms (median of {}), {n_rows} rows. Parameters: ({values})\n",
                    q.name,
                    times[times.len() / 2],
                    times.len()
                );
                println!("```\n{}\n```\n", lines.join("\n"));
            }
        }
        if let Some((_, after)) = q.around {
            match conn {
                Conn::Sqlite(c) => sqlx::raw_sql(after).execute(&mut *c).await.map(drop),
                Conn::Postgres(c) => sqlx::raw_sql(after).execute(&mut *c).await.map(drop),
            }
            .map_err(|e| format!("{e}: {after}"))?;
        }
    }
    Ok(())
}
