//! Citus under faults, with events flowing (issue 31): a worker crashes and comes back; the
//! shard of an account moves to the other worker. These tests stop nodes of the shared local
//! cluster and move shards, so `.ci/run` runs them on their own, one at a time
//! (`citus_faults::`, `--test-threads=1`), after the other Citus tests; they run only where
//! `KXP_TEST_CITUS_DIR` names the cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kxp_testkit::citus::{CitusDatabase, Cluster};
use serde_json::{Value, json};

use crate::support::{Receiver, Sender, sender_with};

/// How long the tests wait for what must happen (a liveness bound, not a timing assertion).
const WITHIN: Duration = Duration::from_secs(120);

/// What the producers saw, per account.
#[derive(Default, Debug)]
struct Produced {
    /// The ids of the events answered 2xx: each must be delivered.
    acknowledged: BTreeMap<String, Vec<String>>,
    /// When each 2xx came, per account: the longest gap is how long ingestion stalled.
    acknowledged_at: BTreeMap<String, Vec<Instant>>,
    /// 503 answers, and how many of them lacked `Retry-After`.
    unavailable: BTreeMap<String, usize>,
    without_retry_after: usize,
    /// Any other answer (a 500, a timeout of the client): never allowed.
    other: Vec<String>,
}

/// One producer per account: an event every 20 ms until `stop`, with a client that gives up
/// after 30 s (a hang is reported as such, never waited out).
fn produce(
    s: &Sender,
    accounts: &[(String, String)],
    produced: &Arc<Mutex<Produced>>,
    stop: &Arc<std::sync::atomic::AtomicBool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    accounts
        .iter()
        .map(|(name, key)| {
            let (base, name, key) = (s.api.base.clone(), name.clone(), key.clone());
            let (produced, stop) = (produced.clone(), stop.clone());
            tokio::spawn(async move {
                let http = reqwest::Client::builder()
                    .timeout(Duration::from_secs(30))
                    .build()
                    .unwrap();
                let mut n = 0;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    n += 1;
                    let response = http
                        .post(format!("{base}/v1/events"))
                        .bearer_auth(&key)
                        .json(&json!({"type": "crash.test", "data": {"account": name, "n": n}}))
                        .send()
                        .await;
                    let acknowledged = match response {
                        Ok(r) if r.status().is_success() => {
                            let body: Value = r.json().await.unwrap();
                            Ok(body["id"].as_str().unwrap().to_owned())
                        }
                        other => Err(other),
                    };
                    {
                        let mut seen = produced.lock().unwrap();
                        match acknowledged {
                            Ok(id) => {
                                seen.acknowledged.entry(name.clone()).or_default().push(id);
                                seen.acknowledged_at
                                    .entry(name.clone())
                                    .or_default()
                                    .push(Instant::now());
                            }
                            Err(Ok(r)) if r.status().as_u16() == 503 => {
                                *seen.unavailable.entry(name.clone()).or_default() += 1;
                                if r.headers().get("retry-after").is_none() {
                                    seen.without_retry_after += 1;
                                }
                            }
                            Err(Ok(r)) => seen.other.push(format!("{name}: {}", r.status())),
                            Err(Err(e)) => seen.other.push(format!("{name}: {e}")),
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        })
        .collect()
}

/// The events the receiver got, by account (from the delivered body's data).
fn delivered(receiver: &Receiver) -> BTreeMap<String, BTreeSet<String>> {
    let mut by_account: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for seen in receiver.seen() {
        let body: Value = serde_json::from_slice(&seen.body).unwrap();
        by_account
            .entry(body["data"]["account"].as_str().unwrap().to_owned())
            .or_default()
            .insert(body["id"].as_str().unwrap().to_owned());
    }
    by_account
}

fn count(delivered: &BTreeMap<String, BTreeSet<String>>, accounts: &[String]) -> usize {
    accounts
        .iter()
        .map(|a| delivered.get(a).map_or(0, BTreeSet::len))
        .sum()
}

/// A sender on a fresh database of the cluster, a receiver, and accounts (each with an endpoint
/// to the receiver) until each of the two workers holds at least `per_worker`: the accounts'
/// names and keys, and the worker port of each.
struct Setup {
    database: CitusDatabase,
    s: Sender,
    receiver: Receiver,
    accounts: Vec<(String, String)>,
    ports: BTreeMap<String, u16>,
    /// Each account's id, by name.
    ids: BTreeMap<String, String>,
}

async fn setup(name: &str, per_worker: usize) -> Option<Setup> {
    let database = CitusDatabase::create(name).await?;
    let url = database.url().to_owned();
    let s = sender_with("0s,1s,2s,3s,5s,5s,5s,5s,5s,5s,5s,5s,5s,5s,5s,5s", |c| {
        c.database_url = url;
        c.statement_timeout = Duration::from_secs(2);
    })
    .await;
    let receiver = Receiver::start(Vec::new()).await;
    let coordinator = database.coordinator_port();
    let (mut accounts, mut ports, mut ids) = (Vec::new(), BTreeMap::new(), BTreeMap::new());
    for n in 0..40 {
        let on = |port: u16| ports.values().filter(|p| **p == port).count();
        if on(coordinator + 1) >= per_worker && on(coordinator + 2) >= per_worker {
            break;
        }
        let name = format!("a{n}");
        let (account, key) = s.server.db().create_account(&name, None).await.unwrap();
        s.api
            .with_key(&key)
            .endpoint(&receiver.url, json!({"event_types": ["crash.*"]}))
            .await;
        ports.insert(
            name.clone(),
            database.worker_port_of(account.id.as_str()).await,
        );
        ids.insert(name.clone(), account.id.to_string());
        accounts.push((name, key));
    }
    for worker in [coordinator + 1, coordinator + 2] {
        assert!(
            ports.values().filter(|p| **p == worker).count() >= per_worker,
            "40 accounts left worker {worker} with fewer than {per_worker}: {ports:?}"
        );
    }
    Some(Setup {
        database,
        s,
        receiver,
        accounts,
        ports,
        ids,
    })
}

/// Stops the producers and returns what they saw.
async fn stop_producing(
    stop: &std::sync::atomic::AtomicBool,
    producers: Vec<tokio::task::JoinHandle<()>>,
    produced: Arc<Mutex<Produced>>,
) -> Produced {
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for producer in producers {
        producer.await.unwrap();
    }
    Arc::try_unwrap(produced).unwrap().into_inner().unwrap()
}

/// Waits until every acknowledged event has reached the receiver.
async fn wait_all_delivered(produced: &Produced, receiver: &Receiver) {
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let got = &delivered(receiver);
        let missing: Vec<&String> = produced
            .acknowledged
            .iter()
            .flat_map(|(account, ids)| {
                ids.iter()
                    .filter(move |id| !got.get(account).is_some_and(|g| g.contains(*id)))
            })
            .collect();
        if missing.is_empty() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} acknowledged events were never delivered, e.g. {:?}",
            missing.len(),
            missing.first()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Checks that no event was created twice (as many stored as acknowledged, each id
/// acknowledged once) and that every answer was a 2xx or a 503; how many were acknowledged.
async fn created_once(coordinator: &sqlx::PgPool, produced: &Produced) -> usize {
    let stored: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM kxp_events")
        .fetch_one(coordinator)
        .await
        .unwrap();
    let acknowledged: usize = produced.acknowledged.values().map(Vec::len).sum();
    assert_eq!(
        stored,
        i64::try_from(acknowledged).unwrap(),
        "events stored against acknowledged"
    );
    let unique: BTreeSet<&String> = produced.acknowledged.values().flatten().collect();
    assert_eq!(unique.len(), acknowledged, "an event id acknowledged twice");
    assert!(
        produced.other.is_empty(),
        "answers other than 2xx and 503: {:?}",
        produced.other
    );
    acknowledged
}

/// Moves the shard group of `account_id` (every table's shard of it: they are co-located)
/// from the worker at port `from` to the one at `to`, with logical replication.
async fn move_shard_group(coordinator: &sqlx::PgPool, account_id: &str, from: u16, to: u16) {
    sqlx::query(
        "SELECT citus_move_shard_placement(get_shard_id_for_distribution_column('kxp_accounts', $1), \
         '127.0.0.1', $2, '127.0.0.1', $3)",
    )
    .bind(account_id)
    .bind(i32::from(from))
    .bind(i32::from(to))
    .execute(coordinator)
    .await
    .unwrap();
}

/// `Ok` when `POST path` (with `key`) answers 503 `store_unavailable` with `Retry-After`
/// within the client's 30 s; what came instead otherwise.
async fn unavailable(base: &str, path: &str, key: &str, body: &Value) -> Result<(), String> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let started = Instant::now();
    let response = http
        .post(format!("{base}{path}"))
        .bearer_auth(key)
        .json(body)
        .send()
        .await
        .map_err(|e| format!("no answer: {e}"))?;
    let (status, retry_after) = (
        response.status(),
        response.headers().get("retry-after").cloned(),
    );
    let body: Value = response.json().await.unwrap_or_default();
    eprintln!(
        "POST {path} with a worker down: {status} in {:?}",
        started.elapsed()
    );
    if status == 503 && retry_after.is_some() && body["error"] == "store_unavailable" {
        Ok(())
    } else {
        Err(format!("{status}, Retry-After {retry_after:?}: {body}"))
    }
}

/// When the receiver got each event of `accounts`, in order.
fn delivered_at(receiver: &Receiver, accounts: &[String]) -> Vec<Instant> {
    let mut at: Vec<Instant> = receiver
        .seen()
        .iter()
        .filter(|seen| {
            let body: Value = serde_json::from_slice(&seen.body).unwrap();
            accounts
                .iter()
                .any(|a| body["data"]["account"] == a.as_str())
        })
        .map(|seen| seen.at)
        .collect();
    at.sort_unstable();
    at
}

/// The longest wait between two of `account`'s acknowledged events, from `from` on.
fn ingestion_pause(produced: &Produced, account: &str, from: Instant) -> Duration {
    let at = produced.acknowledged_at.get(account);
    longest_gap(at.map_or(&[][..], Vec::as_slice), from)
}

/// The longest gap between consecutive instants, from `from` on.
fn longest_gap(at: &[Instant], from: Instant) -> Duration {
    at.iter()
        .filter(|t| **t >= from)
        .collect::<Vec<_>>()
        .windows(2)
        .map(|w| w[1].duration_since(*w[0]))
        .max()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_worker_stops_only_its_accounts_and_loses_nothing() {
    let Some(cluster) = Cluster::from_env() else {
        return;
    };
    let Some(Setup {
        database,
        s,
        receiver,
        accounts,
        ports,
        ..
    }) = setup("kxp_citus_crash", 2).await
    else {
        return;
    };
    let crashed_port = database.coordinator_port() + 2;
    let on_crashed: Vec<String> = ports
        .iter()
        .filter(|(_, p)| **p == crashed_port)
        .map(|(a, _)| a.clone())
        .collect();
    let on_other: Vec<String> = ports
        .iter()
        .filter(|(_, p)| **p != crashed_port)
        .map(|(a, _)| a.clone())
        .collect();

    // An operator, made while every node is up (operators are a reference table).
    let (_, operator) = s.server.db().create_operator("ops").await.unwrap();

    let produced = Arc::new(Mutex::new(Produced::default()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producers = produce(&s, &accounts, &produced, &stop);
    tokio::time::sleep(Duration::from_secs(2)).await;

    cluster.crash(2);
    // Let what was in flight to the crashed worker fail, then watch the others.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let others_before = count(&delivered(&receiver), &on_other);
    tokio::time::sleep(Duration::from_secs(6)).await;
    let others_during = count(&delivered(&receiver), &on_other);
    let refused_during: usize = {
        let seen = produced.lock().unwrap();
        on_crashed
            .iter()
            .map(|a| seen.unavailable.get(a).copied().unwrap_or(0))
            .sum()
    };
    // Writes of the tables every node holds (an account's key, an endpoint's directory row)
    // fail cleanly while one is down, even for an account on the other worker.
    let other_key = &accounts
        .iter()
        .find(|(a, _)| on_other.contains(a))
        .unwrap()
        .1;
    let writes = [
        ("/v1/accounts", &operator, json!({"name": "late"})),
        (
            "/v1/endpoints",
            other_key,
            json!({"url": receiver.url, "skip_challenge": true}),
        ),
    ];
    for (path, key, body) in writes {
        let refused = unavailable(&s.api.base, path, key, &body).await;
        assert!(
            refused.is_ok(),
            "POST {path} while a worker is down: {refused:?}"
        );
    }
    // /healthz tells a worker down from a database down; /metrics counts what answered.
    let (status, health) = s.api.call("GET", "/healthz", None).await;
    assert_eq!(status, 200, "{health}");
    assert_eq!(health["status"], "degraded", "{health}");
    assert!(health["unanswered_shards"].as_u64() > Some(0), "{health}");
    let metrics = s
        .api
        .http
        .get(format!("{}/metrics", s.api.base))
        .send()
        .await
        .unwrap();
    assert_eq!(metrics.status(), 200);
    let metrics = metrics.text().await.unwrap();
    for counted in [
        "kxp_store_shards_unanswered ",
        "kxp_store_scans_by_shard_total ",
    ] {
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with(counted) && !l.ends_with(" 0")),
            "{counted}in {metrics}"
        );
    }
    cluster.start(2);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let produced = stop_producing(&stop, producers, produced).await;
    let (status, health) = s.api.call("GET", "/healthz", None).await;
    assert_eq!((status, &health["status"]), (200, &json!("ok")), "{health}");

    eprintln!(
        "worker crash: {} acknowledged, 503s by account {:?}; the other worker's accounts got \
         {} deliveries during the outage",
        produced.acknowledged.values().map(Vec::len).sum::<usize>(),
        produced.unavailable,
        others_during - others_before
    );
    assert!(
        produced.other.is_empty(),
        "answers other than 2xx and 503: {:?}",
        produced.other
    );
    assert_eq!(
        produced.without_retry_after, 0,
        "every 503 carries Retry-After"
    );
    assert!(
        refused_during > 0,
        "the crashed worker's accounts were never refused: was it down?"
    );
    assert!(
        others_during > others_before,
        "the other worker's accounts were not delivered during the outage"
    );
    // Everything acknowledged is delivered once the worker is back.
    wait_all_delivered(&produced, &receiver).await;
    s.server.shutdown().await;
    database.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_moved_under_load_loses_nothing_and_creates_nothing_twice() {
    if Cluster::from_env().is_none() {
        return;
    }
    let Some(Setup {
        database,
        s,
        receiver,
        accounts,
        ports,
        ids,
    }) = setup("kxp_citus_move", 1).await
    else {
        return;
    };
    let (moved, from) = ports.iter().map(|(a, p)| (a.clone(), *p)).next().unwrap();
    let to = if from == database.coordinator_port() + 1 {
        from + 1
    } else {
        from - 1
    };
    let account_id = ids[&moved].clone();

    let produced = Arc::new(Mutex::new(Produced::default()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producers = produce(&s, &accounts, &produced, &stop);
    tokio::time::sleep(Duration::from_secs(2)).await;

    // The account's shard group (every table's shard of it: they are co-located) moves to the
    // other worker with logical replication while its events flow.
    let started = Instant::now();
    let coordinator = sqlx::PgPool::connect(database.url()).await.unwrap();
    move_shard_group(&coordinator, &account_id, from, to).await;
    let took = started.elapsed();
    assert_eq!(
        database.worker_port_of(&account_id).await,
        to,
        "the shard moved"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let produced = stop_producing(&stop, producers, produced).await;
    wait_all_delivered(&produced, &receiver).await;

    // None created twice: as many events stored as acknowledged, each acknowledged once.
    let acknowledged = created_once(&coordinator, &produced).await;
    let delivered_at = delivered_at(&receiver, std::slice::from_ref(&moved));
    eprintln!(
        "shard move: {took:?} for the move; the moved account's longest pause in ingestion {:?}, \
         in delivery {:?}; {} 503s; {acknowledged} events acknowledged, all delivered",
        ingestion_pause(&produced, &moved, started),
        longest_gap(&delivered_at, started),
        produced.unavailable.values().sum::<usize>(),
    );
    coordinator.close().await;
    s.server.shutdown().await;
    database.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whale_isolated_then_moved_under_load_loses_nothing_and_stalls_no_one_else() {
    if Cluster::from_env().is_none() {
        return;
    }
    let Some(Setup {
        database,
        s,
        receiver,
        accounts,
        ids,
        ..
    }) = setup("kxp_citus_whale", 2).await
    else {
        return;
    };
    // The whale sends four times as much as any other account: four producers.
    let whale = accounts[0].0.clone();
    let whale_id = ids[&whale].clone();
    let others: Vec<String> = accounts[1..].iter().map(|(a, _)| a.clone()).collect();
    let mut producing = accounts.clone();
    producing.extend(std::iter::repeat_n(accounts[0].clone(), 3));

    let produced = Arc::new(Mutex::new(Produced::default()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producers = produce(&s, &producing, &produced, &stop);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let coordinator = sqlx::PgPool::connect(database.url()).await.unwrap();
    let shard_of = async |id: &str| -> i64 {
        sqlx::query_scalar("SELECT get_shard_id_for_distribution_column('kxp_accounts', $1)")
            .bind(id)
            .fetch_one(&coordinator)
            .await
            .unwrap()
    };
    let shared = shard_of(&whale_id).await;

    // Isolated: the whale's rows of every co-located table move to shards of their own. With
    // writes to the shard blocked while it splits: a split without blocking them decodes the
    // shard's changes with Citus's own plugin, which hangs under concurrent updates
    // (citusdata/citus#6790: "publisher did not send replica identity column", seen here).
    let started = Instant::now();
    let isolated: i64 = sqlx::query_scalar(
        "SELECT isolate_tenant_to_new_shard('kxp_accounts', $1::text, 'CASCADE', 'block_writes')",
    )
    .bind(&whale_id)
    .fetch_one(&coordinator)
    .await
    .unwrap();
    let isolating = started.elapsed();
    assert_eq!(shard_of(&whale_id).await, isolated);
    assert_ne!(isolated, shared, "the whale has a shard of its own");

    // Then moved to the other worker.
    let from = database.worker_port_of(&whale_id).await;
    let to = if from == database.coordinator_port() + 1 {
        from + 1
    } else {
        from - 1
    };
    let moving_at = Instant::now();
    move_shard_group(&coordinator, &whale_id, from, to).await;
    let moving = moving_at.elapsed();
    assert_eq!(
        database.worker_port_of(&whale_id).await,
        to,
        "the shard moved"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let produced = stop_producing(&stop, producers, produced).await;
    wait_all_delivered(&produced, &receiver).await;

    // The others were delivered while each step ran (or within a second of its end, for a
    // step quicker than a delivery's round).
    let others_at = delivered_at(&receiver, &others);
    let during = |from: Instant, took: Duration| {
        let until = from + took + Duration::from_secs(1);
        others_at
            .iter()
            .filter(|t| **t >= from && **t <= until)
            .count()
    };
    let (while_isolating, while_moving) = (during(started, isolating), during(moving_at, moving));
    assert!(
        while_isolating > 0 && while_moving > 0,
        "the other accounts' deliveries stalled: {while_isolating} while isolating, \
         {while_moving} while moving"
    );
    let acknowledged = created_once(&coordinator, &produced).await;
    eprintln!(
        "whale: isolated in {isolating:?}, moved in {moving:?}; the whale's longest pause in \
         ingestion {:?}, the others' longest pause in delivery {:?}; the others delivered \
         {while_isolating} while isolating and {while_moving} while moving; {} 503s; \
         {acknowledged} events acknowledged, all delivered",
        ingestion_pause(&produced, &whale, started),
        longest_gap(&others_at, started),
        produced.unavailable.values().sum::<usize>(),
    );
    coordinator.close().await;
    s.server.shutdown().await;
    database.drop().await;
}
