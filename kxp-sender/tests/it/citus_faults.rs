//! Citus under faults, with events flowing (issue 31): a worker crashes and comes back. These
//! tests stop nodes of the shared local cluster, so `.ci/run` runs them on their own, one at a
//! time (`citus_faults::`, `--test-threads=1`), after the other Citus tests; they run only where
//! `KXP_TEST_CITUS_DIR` names the cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
                            Ok(id) => seen.acknowledged.entry(name.clone()).or_default().push(id),
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_worker_stops_only_its_accounts_and_loses_nothing() {
    let Some(cluster) = Cluster::from_env() else {
        return;
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .try_init();
    let Some(database) = CitusDatabase::create("kxp_citus_crash").await else {
        return;
    };
    let url = database.url().to_owned();
    let s = sender_with("0s,1s,2s,3s,5s,5s,5s,5s,5s,5s,5s,5s,5s,5s,5s,5s", |c| {
        c.database_url = url;
        c.statement_timeout = Duration::from_secs(2);
    })
    .await;
    let receiver = Receiver::start(Vec::new()).await;

    // Accounts until each worker holds at least two.
    let coordinator = database.coordinator_port();
    let crashed_port = coordinator + 2;
    let mut accounts: Vec<(String, String)> = Vec::new();
    let (mut on_crashed, mut on_other) = (Vec::new(), Vec::new());
    for n in 0..40 {
        if on_crashed.len() >= 2 && on_other.len() >= 2 {
            break;
        }
        let (account, key) = s
            .server
            .db()
            .create_account(&format!("a{n}"), None)
            .await
            .unwrap();
        let name = format!("a{n}");
        s.api
            .with_key(&key)
            .endpoint(&receiver.url, json!({"event_types": ["crash.*"]}))
            .await;
        if database.worker_port_of(account.id.as_str()).await == crashed_port {
            on_crashed.push(name.clone());
        } else {
            on_other.push(name.clone());
        }
        accounts.push((name, key));
    }
    assert!(
        on_crashed.len() >= 2 && on_other.len() >= 2,
        "40 accounts left a worker with fewer than two: {on_crashed:?} {on_other:?}"
    );

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
    cluster.start(2);
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for producer in producers {
        producer.await.unwrap();
    }

    let produced = Arc::try_unwrap(produced).unwrap().into_inner().unwrap();
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
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let got = &delivered(&receiver);
        let missing: Vec<&String> = produced
            .acknowledged
            .iter()
            .flat_map(|(account, ids)| {
                ids.iter()
                    .filter(move |id| !got.get(account).is_some_and(|g| g.contains(*id)))
            })
            .collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} acknowledged events were never delivered, e.g. {:?}",
            missing.len(),
            missing.first()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    s.server.shutdown().await;
    database.drop().await;
}
