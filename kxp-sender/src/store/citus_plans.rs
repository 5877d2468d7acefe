//! Citus's plans of the hot statements: each statement of ingestion and of the delivery path,
//! in the form kxp uses on Citus, runs on one shard (a router plan: every task count 1). A
//! statement sent to every shard takes locks Citus refuses or stalls when any worker is down;
//! one correlated subquery naming the account by a column instead of the parameter once sent
//! the whole claim to every shard. This finds the next one by name. (The cross-account reads
//! are `store/shards.rs`'s, one statement over every shard, and the Citus metrics test's;
//! SQLite's plans are `store/plans.rs`'s test.)

use std::time::Duration;

use kxp_testkit::citus::CitusDatabase;

use crate::store::backend::recording::breakers_postgres;
use crate::store::claim::RELEASE;
use crate::store::claim::citus::{CLAIM_ACCOUNT, CLAIM_FOR_ACCOUNT, RECLAIM_ACCOUNT};
use crate::store::health::STATS_POSTGRES;
use crate::store::record::{ATTEMPTS_ONE, FINISH_ATTEMPTS_ONE, KEY_SHARE_ONE};
use crate::store::{Db, Migrations, backend, notifications, schemas, sequence};

const ACCOUNT: &str = "'acc_0123456789abcdef0123456789abcdef'::text";
const NOW: &str = "1800000000000::bigint";

fn text(value: &str) -> String {
    format!("'{value}'::text")
}

fn texts(values: &[&str]) -> String {
    let quoted: Vec<String> = values.iter().map(|v| format!("'{v}'")).collect();
    format!("ARRAY[{}]::text[]", quoted.join(", "))
}

fn bigints(values: &[i64]) -> String {
    let listed: Vec<String> = values.iter().map(ToString::to_string).collect();
    format!("ARRAY[{}]::bigint[]", listed.join(", "))
}

/// The statements, by name, with a literal for each parameter (`$1` first).
fn hot() -> Vec<(&'static str, String, Vec<String>)> {
    let keys = text(r#"[{"a": "acc_0123456789abcdef0123456789abcdef", "id": "ep_1"}]"#);
    let stats = text(
        r#"[{"a": "acc_0123456789abcdef0123456789abcdef", "id": "ep_1", "cf": 0, "fs": null, "ls": 1, "lf": null, "le": null}]"#,
    );
    let hourly = text(
        r#"[{"a": "acc_0123456789abcdef0123456789abcdef", "id": "ep_1", "hour": 1, "s": 1, "f": 0, "b0": 1, "b1": 0, "b2": 0, "b3": 0, "b4": 0, "b5": 0, "b6": 0, "b7": 0, "b8": 0, "b9": 0, "b10": 0, "b11": 0}]"#,
    );
    let one = || ACCOUNT.to_owned();
    let n = |v: i64| format!("{v}::bigint");
    vec![
        (
            "claim (the scan), one account",
            CLAIM_ACCOUNT.clone(),
            vec![
                n(1000),
                text("wrk"),
                NOW.into(),
                text("{}"),
                n(10),
                n(5),
                text("{}"),
                n(5),
                one(),
            ],
        ),
        (
            "claim for ready endpoints, one account",
            CLAIM_FOR_ACCOUNT.clone(),
            vec![
                n(1000),
                text("wrk"),
                NOW.into(),
                text(r#"[{"a": "acc_0123456789abcdef0123456789abcdef", "id": "ep_1", "cap": 5}]"#),
                text("{}"),
                n(5),
                one(),
            ],
        ),
        (
            "reclaim expired leases, one account",
            RECLAIM_ACCOUNT.clone(),
            vec![NOW.into(), one()],
        ),
        (
            "put a claimed delivery back",
            RELEASE.clone(),
            vec![NOW.into(), text("dlv_1"), text("wrk"), one()],
        ),
        (
            "lock a batch's endpoints",
            KEY_SHARE_ONE.to_owned(),
            vec![texts(&["ep_1"]), one()],
        ),
        (
            "finish a batch's deliveries",
            FINISH_ATTEMPTS_ONE.clone(),
            vec![
                texts(&["dlv_1"]),
                texts(&["delivered"]),
                bigints(&[1]),
                bigints(&[1]),
                bigints(&[1]),
                bigints(&[200]),
                "ARRAY[NULL]::text[]".into(),
                texts(&["wrk"]),
                NOW.into(),
                texts(&["acc_0123456789abcdef0123456789abcdef"]),
                one(),
            ],
        ),
        (
            "write a batch's attempts",
            ATTEMPTS_ONE.clone(),
            vec![
                texts(&["dlv_1"]),
                bigints(&[1]),
                bigints(&[1]),
                bigints(&[5]),
                bigints(&[200]),
                "ARRAY[NULL]::text[]".into(),
                texts(&["ok"]),
                texts(&["1"]),
                "ARRAY[NULL]::text[]".into(),
                texts(&["acc_0123456789abcdef0123456789abcdef"]),
                one(),
            ],
        ),
        (
            "lock statistics",
            STATS_POSTGRES.lock.clone(),
            vec![keys.clone(), NOW.into()],
        ),
        (
            "write statistics, one account",
            STATS_POSTGRES.write_one.clone(),
            vec![stats, NOW.into(), one()],
        ),
        (
            "add hourly tallies",
            STATS_POSTGRES.add_hourly.clone(),
            vec![hourly],
        ),
        (
            "breaker rows, one account",
            concat!(breakers_postgres!(), " WHERE p.account_id = $2").to_owned(),
            vec![keys, one()],
        ),
        (
            "claim a notification, one account",
            notifications::CLAIM_ACCOUNT.clone(),
            vec![NOW.into(), NOW.into(), text("ntf"), n(1), one()],
        ),
        (
            "make sequencer rows, one account",
            sequence::MAKE_ACCOUNT.to_owned(),
            vec![one(), texts(&["ep_1"])],
        ),
        (
            "hold sequencer rows, one account",
            sequence::HOLD_ACCOUNT.to_owned(),
            vec![one(), texts(&["ep_1"])],
        ),
        (
            "number deliveries, one account",
            sequence::NUMBER_ACCOUNT.clone(),
            vec![one(), texts(&["ep_1"]), n(1000)],
        ),
        (
            "ingest: the event of an idempotency key",
            backend::EVENT_BY_KEY.clone(),
            vec![one(), text("key-1"), NOW.into()],
        ),
        (
            "ingest: the schema revision",
            schemas::REVISION.to_owned(),
            vec![one(), text("payment.succeeded"), text("2024-01-01")],
        ),
        (
            "ingest: the subscribed endpoints, locked",
            concat!(backend::subscribers!(), " FOR SHARE").to_owned(),
            vec![one()],
        ),
        (
            "ingest: the event",
            backend::INSERT_EVENT.to_owned(),
            vec![
                text("evt_1"),
                one(),
                text("payment.succeeded"),
                text("2024-01-01"),
                text("{}"),
                NOW.into(),
                text("key-1"),
                text("hash"),
                "NULL::text".into(),
                "NULL::text".into(),
                "NULL::text".into(),
                "NULL::bigint".into(),
            ],
        ),
        (
            "ingest: a delivery",
            backend::INSERT_DELIVERY.to_owned(),
            vec![
                text("dlv_1"),
                one(),
                text("evt_1"),
                text("ep_1"),
                NOW.into(),
                NOW.into(),
                "NULL::bigint".into(),
                text("pending"),
            ],
        ),
    ]
}

/// `sql` with each `$n` replaced by `params[n - 1]`, the highest first (`$10` before `$1`).
fn with_literals(sql: &str, params: &[String]) -> String {
    let mut sql = sql.to_owned();
    for (i, literal) in params.iter().enumerate().rev() {
        sql = sql.replace(&format!("${}", i + 1), literal);
    }
    sql
}

/// The task counts of a Citus plan, and whether it inserts through the coordinator.
fn tasks(plan: &[String]) -> Vec<u64> {
    plan.iter()
        .filter_map(|line| line.trim().strip_prefix("Task Count: "))
        .map(|count| count.trim().parse().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_hot_statement_runs_on_one_shard_on_citus() {
    let Some(database) = CitusDatabase::create("kxp_sender_plans").await else {
        return;
    };
    let db = Db::connect_with(
        database.url(),
        Migrations::Apply {
            lock_timeout: Duration::ZERO,
        },
        Duration::ZERO,
    )
    .await
    .unwrap();
    let Db::Citus(pool) = &db else {
        panic!("a Citus database opens as Citus")
    };
    let mut wrong = Vec::new();
    for (name, sql, params) in hot() {
        let sql = with_literals(&sql, &params);
        assert!(
            !sql.contains("$1"),
            "{name}: a parameter without a literal: {sql}"
        );
        let plan: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN {sql}"))
            .fetch_all(pool)
            .await
            .unwrap_or_else(|e| panic!("{name}: EXPLAIN failed: {e}\n{sql}"));
        let counts = tasks(&plan);
        let through_coordinator = plan.iter().any(|l| l.contains("pull to coordinator"));
        if counts.iter().any(|&c| c != 1) || (counts.is_empty() && !through_coordinator) {
            wrong.push(format!(
                "{name}: task counts {counts:?}\n{}",
                plan.join("\n")
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "statements not on one shard:\n\n{}",
        wrong.join("\n\n")
    );
    db.close().await;
    database.drop().await;
}
