//! SQLite's plans of the hot statements: none reads a whole table. With the account leading
//! every key, a statement that names a row by its id alone scans the table; once, the claim's
//! jobs read by delivery id alone cost SQLite 40% of its delivery rate. This finds the next one
//! before a benchmark does. (PostgreSQL's and Citus's plans are the Citus issue's test.)

use std::time::Duration;

use crate::store::health::STATS_SQLITE;
use crate::store::record::FINISH_ATTEMPT;
use crate::store::{Db, Migrations, claim, notifications, sequence};

/// The statements of every claim, attempt and sequencer pass, by name.
fn hot() -> Vec<(&'static str, String)> {
    vec![
        ("claim", claim::CLAIM_SQLITE.clone()),
        ("claim for ready endpoints", claim::CLAIM_FOR_SQLITE.clone()),
        ("the claimed jobs", claim::JOBS_SQLITE.clone()),
        ("finish an attempt", FINISH_ATTEMPT.clone()),
        ("lock statistics", STATS_SQLITE.lock.clone()),
        ("write statistics", STATS_SQLITE.write.clone()),
        ("add hourly tallies", STATS_SQLITE.add_hourly.clone()),
        ("number deliveries", sequence::NUMBER_SQLITE.to_owned()),
        ("move sequences", sequence::MOVE_SQLITE.to_owned()),
        ("claim a notification", notifications::CLAIM.clone()),
    ]
}

/// The steps of `plan` that read a table or an index whole, or all of an account's deliveries
/// or attempts: `SCAN` of anything but a JSON
/// parameter (`json_each`), a subquery's rows (a `CO-ROUTINE` or `MATERIALIZE` step of the
/// plan), or one of the `partial` indexes (they hold only the rows the statement wants, such
/// as the due deliveries).
fn scans<'a>(plan: &'a [String], partial: &[String]) -> Vec<&'a String> {
    let derived: Vec<String> = plan
        .iter()
        .filter_map(|step| {
            let name = step
                .strip_prefix("CO-ROUTINE ")
                .or_else(|| step.strip_prefix("MATERIALIZE "))?;
            Some(format!("SCAN {}", name.split_whitespace().next()?))
        })
        .collect();
    // A search by the account alone reads all its deliveries or attempts: a scan too.
    let by_account = |step: &str| {
        step.starts_with("SEARCH ")
            && step.ends_with("(account_id=?)")
            && (step.contains("kxp_deliveries") || step.contains("kxp_attempts"))
    };
    plan.iter()
        .filter(|step| step.starts_with("SCAN ") || by_account(step))
        .filter(|step| {
            let index = step
                .split_once("USING INDEX ")
                .or_else(|| step.split_once("USING COVERING INDEX "))
                .and_then(|(_, rest)| rest.split_whitespace().next());
            !(step.contains("json_each")
                || step.contains("VIRTUAL TABLE")
                || index.is_some_and(|index| partial.iter().any(|p| p == index))
                || derived.iter().any(|d| step.as_str() == d))
        })
        .collect()
}

#[tokio::test]
async fn no_hot_statement_reads_a_whole_table_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("kxp.db").display());
    let db = Db::connect_with(
        &url,
        Migrations::Apply {
            lock_timeout: Duration::ZERO,
        },
        Duration::ZERO,
    )
    .await
    .unwrap();
    let Db::Sqlite(pool) = &db else {
        unreachable!("a sqlite:// URL opens SQLite")
    };
    let partial: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND sql LIKE '% WHERE %'",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    for (name, sql) in hot() {
        // Every parameter NULL: the plan does not depend on the values.
        let parameters = (1..=20)
            .rev()
            .find(|n| sql.contains(&format!("${n}")))
            .unwrap_or(0);
        let explained = format!("EXPLAIN QUERY PLAN {sql}");
        let mut explain = sqlx::query_as::<_, (i64, i64, i64, String)>(&explained);
        for _ in 0..parameters {
            explain = explain.bind(None::<String>);
        }
        let plan: Vec<String> = explain
            .fetch_all(pool)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .into_iter()
            .map(|(_, _, _, step)| step)
            .collect();
        let scans = scans(&plan, &partial);
        assert!(scans.is_empty(), "{name} reads {scans:?} whole: {plan:#?}");
    }
    db.close().await;
}
