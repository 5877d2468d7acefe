//! `kxp serve` on Citus under SIGKILL (issue 31): two processes on the coordinator of the local
//! cluster, 20 accounts, 2,000 events sent with an `Idempotency-Key` each, six SIGKILLs at
//! seeded moments (the seed is printed; `KXP_CITUS_KILL_SEED` replays it), each process back
//! at once. A request that got no 2xx is sent again with its key until one comes, and one in
//! ten acknowledged is sent again on purpose: the same key always answers the same event. Then:
//! every acknowledged event delivered (at least once: a kill may repeat one), exactly one event
//! stored per key, and each endpoint's sequence numbers 1..=100 with no hole and no twin.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kxp_testkit::citus::CitusDatabase;
use serde_json::{Value, json};

use crate::accounts::create_account;
use crate::crash::{Rng, Serve, receiver, wait_until_all_arrive};

const ACCOUNTS: usize = 20;
const PER_ACCOUNT: usize = 100;
const KILLS: usize = 6;
const SENDERS: usize = 8;
/// How long a key is retried, and delivery waited for: a liveness bound, never a timing one.
const PATIENCE: Duration = Duration::from_secs(180);

/// The processes' addresses, which change as they are killed and started again.
type Bases = Arc<Mutex<Vec<String>>>;

/// Sends the event of `key` for the account holding `api_key` until a 2xx comes (to either
/// process, whichever is up); its id.
async fn send_until_acknowledged(
    http: &reqwest::Client,
    bases: &Bases,
    api_key: &str,
    key: &str,
    n: usize,
) -> String {
    let started = Instant::now();
    let mut attempt = 0;
    loop {
        let base = {
            let bases = bases.lock().unwrap();
            bases[(n + attempt) % bases.len()].clone()
        };
        attempt += 1;
        let response = http
            .post(format!("{base}/v1/events"))
            .bearer_auth(api_key)
            .header("Idempotency-Key", key)
            .json(&json!({"type": "payment.succeeded", "data": {"key": key}}))
            .send()
            .await;
        if let Ok(response) = response
            && response.status().is_success()
        {
            let body: Value = response.json().await.unwrap();
            return body["id"].as_str().unwrap().to_owned();
        }
        assert!(
            started.elapsed() < PATIENCE,
            "{key}: no 2xx within {PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_on_citus_lose_nothing_and_create_nothing_twice_across_six_kills() {
    let Some(database) = CitusDatabase::create("kxp_cli_citus_kill").await else {
        return;
    };
    let url = database.url().to_owned();
    let seed = std::env::var("KXP_CITUS_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("KXP_CITUS_KILL_SEED={seed}");
    let mut rng = Rng(seed);

    // The first start migrates and distributes; then the accounts, each with an endpoint.
    let (hook, seen) = receiver().await;
    let mut servers: Vec<Serve> = (0..2).map(|_| Serve::start(&url)).collect();
    let mut accounts = Vec::new();
    for a in 0..ACCOUNTS {
        let (id, api_key) = create_account(&url, &format!("merchant {a}")).await;
        let mut endpoint = kxp_api::NewEndpoint::new(&hook);
        endpoint.timeout_ms = Some(1000);
        endpoint.skip_challenge = true;
        kxp_api::Client::new(&servers[0].base, &api_key)
            .unwrap()
            .create_endpoint(&endpoint)
            .await
            .unwrap();
        accounts.push((id, api_key));
    }
    let bases: Bases = Arc::new(Mutex::new(servers.iter().map(|s| s.base.clone()).collect()));

    // Eight senders share the 2,000 keys; every tenth acknowledged key is sent once more.
    let total = ACCOUNTS * PER_ACCOUNT;
    let acknowledged = Arc::new(AtomicUsize::new(0));
    let ids: Arc<Mutex<BTreeMap<String, String>>> = Arc::default();
    let mut senders = tokio::task::JoinSet::new();
    for sender in 0..SENDERS {
        let (bases, acknowledged, ids) = (bases.clone(), acknowledged.clone(), ids.clone());
        let accounts = accounts.clone();
        senders.spawn(async move {
            let http = reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap();
            for n in (sender..total).step_by(SENDERS) {
                let (_, api_key) = &accounts[n % ACCOUNTS];
                let key = format!("k{}-{}", n % ACCOUNTS, n / ACCOUNTS);
                let id = send_until_acknowledged(&http, &bases, api_key, &key, n).await;
                if n % 10 == 0 {
                    let again = send_until_acknowledged(&http, &bases, api_key, &key, n + 1).await;
                    assert_eq!(again, id, "{key}: the key answered another event");
                }
                ids.lock().unwrap().insert(key, id);
                acknowledged.fetch_add(1, Ordering::SeqCst);
            }
        });
    }

    // Six kills, each once the seeded share of the keys is acknowledged; the killed process
    // starts again at once (on another port).
    let mut moments: Vec<usize> = (0..KILLS)
        .map(|_| total / 20 + (rng.next() as usize) % (total * 8 / 10))
        .collect();
    moments.sort_unstable();
    let started = Instant::now();
    for moment in moments {
        while acknowledged.load(Ordering::SeqCst) < moment {
            assert!(started.elapsed() < PATIENCE, "stuck before {moment}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let victim = (rng.next() % 2) as usize;
        let killed = servers.remove(victim);
        tokio::task::spawn_blocking(move || killed.kill())
            .await
            .unwrap();
        let url = url.clone();
        let fresh = tokio::task::spawn_blocking(move || Serve::start(&url))
            .await
            .unwrap();
        bases.lock().unwrap()[victim] = fresh.base.clone();
        servers.insert(victim, fresh);
        eprintln!("killed process {victim} at {moment} acknowledged");
    }
    while let Some(done) = senders.join_next().await {
        done.unwrap();
    }
    let ids = Arc::try_unwrap(ids).unwrap().into_inner().unwrap();
    assert_eq!(ids.len(), total);
    let acknowledged_ids: Vec<String> = ids.values().cloned().collect();
    wait_until_all_arrive(&seen, &acknowledged_ids, PATIENCE).await;

    // No event twice: one stored per key, and each key's event is the one acknowledged.
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let stored: Vec<(String, String)> =
        sqlx::query_as("SELECT idempotency_key, id FROM kxp_events")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(stored.len(), total, "events stored against keys sent");
    let stored: HashMap<String, String> = stored.into_iter().collect();
    assert_eq!(stored.len(), total, "a key stored twice");
    for (key, id) in &ids {
        assert_eq!(stored.get(key), Some(id), "{key}");
    }

    // Each endpoint numbered 1..=100, one number per event, once every delivery has one.
    let numbered_by = Instant::now();
    let sequences: Vec<(String, Vec<i64>)> = loop {
        let unnumbered: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM kxp_deliveries WHERE sequence IS NULL")
                .fetch_one(&pool)
                .await
                .unwrap();
        if unnumbered == 0 {
            break sqlx::query_as(
                "SELECT endpoint_id, array_agg(sequence ORDER BY sequence) FROM kxp_deliveries \
                 GROUP BY endpoint_id",
            )
            .fetch_all(&pool)
            .await
            .unwrap();
        }
        assert!(
            numbered_by.elapsed() < PATIENCE,
            "{unnumbered} deliveries never numbered"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(sequences.len(), ACCOUNTS);
    let expected: Vec<i64> = (1..=PER_ACCOUNT as i64).collect();
    for (endpoint, numbers) in &sequences {
        assert_eq!(numbers, &expected, "{endpoint}: holes or twins");
    }
    let repeated = seen.repeated();
    eprintln!(
        "Citus, 2 processes, {KILLS} kills: {total} events acknowledged, all delivered \
         ({repeated} more than once), none stored twice, every sequence gapless"
    );
    pool.close().await;
    drop(servers);
    database.drop().await;
}
