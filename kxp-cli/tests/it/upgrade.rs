//! Planned upgrades on PostgreSQL: `kxp migrate status|plan|apply`, `kxp serve` refusing a
//! database that lacks its migrations and tolerating one a newer version migrated, and the
//! previous release (`KXP_PREVIOUS_KXP`, built by `.ci/run` from the commit docs/upgrading.md
//! names) working on a database this version migrated, beside this version.

use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use kxp_api::{Client, DeliveryQuery, DeliveryStatus, NewEndpoint, NewEvent, RotateSecret};
use kxp_testkit::db::PgDatabase;
use serde_json::{Value, json};
use sqlx::Connection;

use crate::crash::{KEY, Serve};

fn kxp(args: &[&str], database_url: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kxp"))
        .args(args)
        .env("KXP_DATABASE_URL", database_url)
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn status_json(database_url: &str) -> Value {
    let out = kxp(&["migrate", "status", "--json"], database_url);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `kxp serve` without `--migrate`, run until it exits (it should refuse to start).
fn serve_refused(kxp: &str, database_url: &str) -> String {
    let out = Command::new(kxp)
        .args(["serve", "--dev", "--listen", "127.0.0.1:0"])
        .env("KXP_DATABASE_URL", database_url)
        .env("KXP_API_KEY", KEY)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success(), "kxp serve started: {}", stdout(&out));
    stderr(&out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_shows_plans_and_applies_and_serve_waits_for_it() {
    let Some(database) = PgDatabase::create("kxp_migrate").await else {
        return;
    };
    let url = database.url();

    // A new database: nothing applied, every migration pending, and nothing written by looking.
    let status = status_json(url);
    assert_eq!(status["database"], "postgres");
    assert_eq!(status["applied"], json!([]));
    let pending = status["pending"].as_array().unwrap().clone();
    assert!(pending.len() > 10, "{status}");
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    let table: Option<String> = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations')::text")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(table, None, "`status` created the migrations table");

    // serve and the offline commands refuse it, naming the command to run.
    let refused = serve_refused(env!("CARGO_BIN_EXE_kxp"), url);
    assert!(refused.contains("kxp migrate apply"), "{refused}");
    let out = kxp(&["accounts", "list"], url);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("kxp migrate apply"),
        "{}",
        stderr(&out)
    );

    // plan prints every pending migration's SQL, in order; apply runs them, saying each.
    let plan = stdout(&kxp(&["migrate", "plan"], url));
    let mut at = 0;
    for migration in &pending {
        let header = format!(
            "-- {} {} (",
            migration["version"],
            migration["name"].as_str().unwrap()
        );
        let found = plan[at..]
            .find(&header)
            .unwrap_or_else(|| panic!("{header} missing or out of order"));
        at += found + header.len();
    }
    assert!(plan.contains("CREATE TABLE kxp_events"), "{plan}");
    let out = kxp(&["migrate", "apply"], url);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out).matches("applied ").count(),
        pending.len(),
        "{}",
        stdout(&out)
    );
    let status = status_json(url);
    assert_eq!(status["pending"], json!([]));
    assert_eq!(status["applied"].as_array().unwrap().len(), pending.len());
    let again = kxp(&["migrate", "apply"], url);
    assert_eq!(stdout(&again), "up to date: nothing pending\n");

    // A newer version's migration is tolerated: this version starts and is ready beside it.
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (29991231000001, 'from a newer kxp', true, '\\x00', 0)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let text = stdout(&kxp(&["migrate", "status"], url));
    assert!(
        text.contains("unknown   29991231000001 from a newer kxp"),
        "{text}"
    );
    assert!(text.contains("up to date: nothing pending"), "{text}");
    {
        let serve = Serve::start_with(env!("CARGO_BIN_EXE_kxp"), url, &[]);
        let api = Client::new(&serve.base, KEY).unwrap();
        assert_eq!(api.readyz().await.unwrap().status, "ready");
        assert_eq!(api.livez().await.unwrap().status, "ok");
    }

    // One of this version's, applied with other SQL: refused by serve, plan and apply alike.
    sqlx::query("UPDATE _sqlx_migrations SET checksum = '\\x00' WHERE version = $1")
        .bind(pending[0]["version"].as_i64().unwrap())
        .execute(&mut conn)
        .await
        .unwrap();
    let refused = serve_refused(env!("CARGO_BIN_EXE_kxp"), url);
    assert!(refused.contains("was applied with other SQL"), "{refused}");
    for command in ["plan", "apply"] {
        let out = kxp(&["migrate", command], url);
        assert!(!out.status.success(), "migrate {command} went on");
        assert!(
            stderr(&out).contains("was applied with other SQL"),
            "{}",
            stderr(&out)
        );
    }
    conn.close().await.unwrap();
    database.drop().await;
}

/// A receiver that fails while `failing` is set, and counts what it accepted.
#[derive(Clone, Default)]
struct Flaky {
    failing: Arc<AtomicBool>,
    accepted: Arc<std::sync::Mutex<Vec<String>>>,
}

async fn flaky(State(flaky): State<Flaky>, body: axum::body::Bytes) -> StatusCode {
    if flaky.failing.load(Ordering::SeqCst) {
        return StatusCode::INTERNAL_SERVER_ERROR;
    }
    let event: Value = serde_json::from_slice(&body).unwrap();
    flaky
        .accepted
        .lock()
        .unwrap()
        .push(event["id"].as_str().unwrap().to_owned());
    StatusCode::OK
}

async fn flaky_receiver() -> (String, Flaky) {
    let state = Flaky::default();
    let app = Router::new().fallback(flaky).with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, state)
}

async fn wait_until(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !done().await {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "waited 60 s for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The previous release's `kxp`, built by `.ci/run`; `None` (said loudly) without it.
fn previous_kxp() -> Option<String> {
    match std::env::var("KXP_PREVIOUS_KXP") {
        Ok(path) if !path.is_empty() => Some(path),
        _ if std::env::var("KXP_REQUIRE_PREVIOUS").is_ok_and(|v| v == "1") => {
            panic!("KXP_REQUIRE_PREVIOUS=1 but KXP_PREVIOUS_KXP is not set")
        }
        _ => {
            eprintln!(
                "SKIPPED: the rolling-upgrade test needs the previous release's kxp in \
                 KXP_PREVIOUS_KXP (.ci/run builds it)"
            );
            None
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_previous_release_keeps_working_on_a_database_this_version_migrated() {
    let Some(previous) = previous_kxp() else {
        return;
    };
    let Some(database) = PgDatabase::create("kxp_upgrade").await else {
        return;
    };
    let url = database.url();
    let (receiver, flaky) = flaky_receiver().await;

    // The fleet before the upgrade: the previous release, which migrated at its start.
    let old = Serve::start_with(&previous, url, &["--migrate"]);
    let old_api = Client::new(&old.base, KEY).unwrap();
    let mut endpoint = NewEndpoint::new(&receiver);
    endpoint.skip_challenge = true;
    let endpoint = old_api
        .create_endpoint(&endpoint)
        .await
        .unwrap()
        .endpoint
        .id;

    // This version's migrations, applied under it while it runs.
    let before = status_json(url);
    let newer = before["pending"].as_array().unwrap().len();
    assert!(
        newer > 0,
        "this version has no migration the previous release lacks: {before}"
    );
    let out = kxp(&["migrate", "apply"], url);
    assert!(out.status.success(), "{}", stderr(&out));

    // The previous release, still running: rotates a secret, ingests, delivers, dead-letters
    // (attempts numbered per delivery once the identities are gone) and replays.
    old_api
        .rotate_secret(&endpoint, &RotateSecret::overlap("1h"))
        .await
        .unwrap();
    let first = NewEvent::new("payment.succeeded", &json!({"n": 1})).unwrap();
    let first = old_api
        .create_event(&first, None)
        .await
        .unwrap()
        .id
        .into_string();
    wait_until("the previous release to deliver", async || {
        flaky.accepted.lock().unwrap().contains(&first)
    })
    .await;
    flaky.failing.store(true, Ordering::SeqCst);
    let second = NewEvent::new("payment.succeeded", &json!({"n": 2})).unwrap();
    let second = old_api
        .create_event(&second, None)
        .await
        .unwrap()
        .id
        .into_string();
    let mut dead = Vec::new();
    wait_until("the previous release to dead-letter", async || {
        dead = old_api
            .all_deliveries(&DeliveryQuery::dead())
            .await
            .unwrap();
        !dead.is_empty()
    })
    .await;
    flaky.failing.store(false, Ordering::SeqCst);
    old_api.replay_delivery(&dead[0].id).await.unwrap();
    wait_until("the previous release's replay", async || {
        flaky.accepted.lock().unwrap().contains(&second)
    })
    .await;

    // This version beside it, without --migrate: it rotates and delivers too, and sees what
    // the other did.
    let new = Serve::start_with(env!("CARGO_BIN_EXE_kxp"), url, &[]);
    let new_api = Client::new(&new.base, KEY).unwrap();
    assert_eq!(new_api.readyz().await.unwrap().status, "ready");
    new_api
        .rotate_secret(&endpoint, &RotateSecret::overlap("1h"))
        .await
        .unwrap();
    let third = NewEvent::new("payment.succeeded", &json!({"n": 3})).unwrap();
    let third = new_api
        .create_event(&third, None)
        .await
        .unwrap()
        .id
        .into_string();
    wait_until("this version to deliver", async || {
        flaky.accepted.lock().unwrap().contains(&third)
    })
    .await;
    // A receiver's 200 comes before the sender records it: the three are waited for.
    wait_until("both versions' deliveries to be recorded", async || {
        let deliveries = new_api
            .all_deliveries(&DeliveryQuery::default())
            .await
            .unwrap();
        deliveries
            .iter()
            .filter(|d| d.status == DeliveryStatus::Delivered)
            .count()
            == 3
    })
    .await;

    // A previous-release process (re)started during the rollout serves: it tolerates this
    // version's migrations, and its deliveries go on beside this version's.
    drop(old);
    let old = Serve::start_with(&previous, url, &[]);
    let old_api = Client::new(&old.base, KEY).unwrap();
    let fourth = NewEvent::new("payment.succeeded", &json!({"n": 4})).unwrap();
    let fourth = old_api
        .create_event(&fourth, None)
        .await
        .unwrap()
        .id
        .into_string();
    wait_until("the restarted previous release to deliver", async || {
        flaky.accepted.lock().unwrap().contains(&fourth)
    })
    .await;
    let attempts = new_api
        .all_deliveries(&DeliveryQuery::default())
        .await
        .unwrap();
    assert_eq!(attempts.len(), 5, "four events and a replay: {attempts:?}");
    drop(old);
    drop(new);
    database.drop().await;
}
