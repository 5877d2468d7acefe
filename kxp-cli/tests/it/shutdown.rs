//! Stopping `kxp serve` with SIGTERM, as a process manager does: `/readyz` answers 503 while
//! the attempt in flight still runs, new work is refused with `shutting_down`, `/livez` still
//! answers, the attempt finishes within `--shutdown-grace` and the process exits 0. An attempt
//! still running when the grace ends is released for another process: never lost, never
//! counted as a failure.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use kxp_api::{
    Client, ClientError, DeliveryQuery, DeliveryStatus, ErrorCode, NewEndpoint, NewEvent,
};
use serde_json::json;
use sqlx::Connection;
use tokio::sync::watch;

use crate::crash::{KEY, Serve};

/// A receiver that holds every request until the test opens its gate, then answers 200.
#[derive(Clone)]
struct Gated {
    gate: watch::Receiver<bool>,
    arrived: Arc<AtomicUsize>,
}

async fn held(State(gated): State<Gated>) -> &'static str {
    gated.arrived.fetch_add(1, Ordering::SeqCst);
    let mut gate = gated.gate.clone();
    let _ = gate.wait_for(|open| *open).await;
    "ok"
}

/// The receiver's URL, its gate and how many requests reached it.
async fn gated_receiver() -> (String, watch::Sender<bool>, Arc<AtomicUsize>) {
    let (open, gate) = watch::channel(false);
    let arrived = Arc::new(AtomicUsize::new(0));
    let app = Router::new().fallback(held).with_state(Gated {
        gate,
        arrived: arrived.clone(),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, open, arrived)
}

/// An endpoint at `url` whose attempts may take 20 s, and one event for it, in flight once
/// the receiver has it.
async fn one_attempt_in_flight(api: &Client, url: &str, arrived: &AtomicUsize) {
    let mut endpoint = NewEndpoint::new(url);
    endpoint.timeout_ms = Some(20_000);
    endpoint.skip_challenge = true;
    api.create_endpoint(&endpoint).await.unwrap();
    let event = NewEvent::new("payment.succeeded", &json!({"n": 1})).unwrap();
    api.create_event(&event, None).await.unwrap();
    wait_for("the attempt to reach the receiver", || async {
        arrived.load(Ordering::SeqCst) == 1
    })
    .await;
}

async fn wait_for<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    while !done().await {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "waited 30 s for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `kxp healthcheck` against `base`'s `/readyz`: whether it exited 0, and what it printed.
async fn healthcheck(base: &str) -> (bool, String) {
    let url = format!("{base}/readyz");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_kxp"))
        .args(["healthcheck", "--url", &url])
        .output()
        .await
        .unwrap();
    let said = [out.stdout, out.stderr].concat();
    (
        out.status.success(),
        String::from_utf8_lossy(&said).into_owned(),
    )
}

/// A sender on a fresh SQLite file, with `--shutdown-grace <grace>`, and the gated receiver
/// holding one attempt of it.
struct InFlight {
    _dir: tempfile::TempDir,
    url: String,
    serve: Serve,
    api: Client,
    open: watch::Sender<bool>,
    arrived: Arc<AtomicUsize>,
}

async fn one_attempt_held(grace: &str) -> InFlight {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("kxp.db").display());
    let (receiver, open, arrived) = gated_receiver().await;
    let serve = Serve::start_with(
        env!("CARGO_BIN_EXE_kxp"),
        &url,
        &["--shutdown-grace", grace],
    );
    let api = Client::new(&serve.base, KEY).unwrap();
    assert_eq!(api.readyz().await.unwrap().status, "ready");
    one_attempt_in_flight(&api, &receiver, &arrived).await;
    InFlight {
        _dir: dir,
        url,
        serve,
        api,
        open,
        arrived,
    }
}

/// Waits for `serve` to exit, off the runtime's threads.
async fn exit_status(mut serve: Serve) -> std::process::ExitStatus {
    tokio::task::spawn_blocking(move || serve.wait())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_turns_readiness_off_refuses_new_work_and_lets_the_attempt_in_flight_finish() {
    let InFlight {
        _dir,
        url,
        serve,
        api,
        open,
        arrived,
    } = one_attempt_held("60s").await;
    // The container image's health check says the same as the probe.
    let (ok, said) = healthcheck(&serve.base).await;
    assert!(ok, "{said}");
    assert_eq!(said.trim(), "200 OK");

    serve.terminate();
    // The attempt is held by the receiver, so all of this happens during the drain.
    wait_for("/readyz to answer 503", || async {
        // 200 until the process has handled the signal, then 503 for good.
        matches!(
            api.readyz().await,
            Err(ClientError::Api {
                code: ErrorCode::ShuttingDown,
                ..
            })
        )
    })
    .await;
    assert_eq!(api.livez().await.unwrap().status, "ok");
    let (ok, said) = healthcheck(&serve.base).await;
    assert!(!ok);
    assert!(
        said.contains("503 Service Unavailable") && said.contains("shutting_down"),
        "{said}"
    );
    let event = NewEvent::new("payment.succeeded", &json!({"n": 2})).unwrap();
    match api.create_event(&event, None).await {
        Err(ClientError::Api {
            status,
            code,
            retry_after,
            ..
        }) => {
            assert_eq!((status, code), (503, ErrorCode::ShuttingDown));
            assert_eq!(retry_after, Some(Duration::from_secs(1)));
        }
        other => panic!("a new event was taken while draining: {other:?}"),
    }
    assert_eq!(
        arrived.load(Ordering::SeqCst),
        1,
        "a new attempt started while draining"
    );

    open.send(true).unwrap();
    let status = exit_status(serve).await;
    assert!(status.success(), "kxp serve exited with {status}");

    // The attempt was recorded before the exit; the refused event was never stored.
    let again = Serve::start(&url);
    let api = Client::new(&again.base, KEY).unwrap();
    let deliveries = api.all_deliveries(&DeliveryQuery::default()).await.unwrap();
    assert_eq!(deliveries.len(), 1, "{deliveries:?}");
    assert_eq!(deliveries[0].status, DeliveryStatus::Delivered);
    assert_eq!(deliveries[0].attempts, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_still_running_after_the_grace_is_released_and_delivered_by_the_next_process() {
    let InFlight {
        _dir,
        url,
        serve,
        open,
        arrived,
        ..
    } = one_attempt_held("500ms").await;

    // The receiver still holds the attempt: the grace ends first, and the process exits 0.
    serve.terminate();
    let status = exit_status(serve).await;
    assert!(status.success(), "kxp serve exited with {status}");

    // Given back before the exit: pending, no lease left to expire, no try counted.
    let mut db = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let row: (String, bool, i64) = sqlx::query_as(
        "SELECT status, lease_owner IS NULL AND lease_until IS NULL, attempts FROM kxp_deliveries",
    )
    .fetch_one(&mut db)
    .await
    .unwrap();
    assert_eq!(row, ("pending".to_owned(), true, 0));
    db.close().await.unwrap();

    // The next process delivers it.
    open.send(true).unwrap();
    let again = Serve::start(&url);
    let api = Client::new(&again.base, KEY).unwrap();
    wait_for("the released delivery to be delivered", || async {
        let deliveries = api.all_deliveries(&DeliveryQuery::default()).await.unwrap();
        deliveries.len() == 1 && deliveries[0].status == DeliveryStatus::Delivered
    })
    .await;
    let deliveries = api.all_deliveries(&DeliveryQuery::default()).await.unwrap();
    assert_eq!(
        deliveries[0].attempts, 1,
        "the cut-off attempt counted as a try"
    );
    assert_eq!(arrived.load(Ordering::SeqCst), 2);
}
