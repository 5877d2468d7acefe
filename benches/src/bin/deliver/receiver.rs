//! The loopback receiver: answers at once and records when each event arrived.
//!
//! Routes (`run` is the id of the current run, `ep` the endpoint's index):
//! - `GET /r/{run}/{ep}?challenge=<token>`: the endpoint challenge, 200 with the token.
//! - `POST /r/{run}/{ep}`: a delivery. The body carries `"bench_seq":<n>` (the event's index,
//!   inside `data` or the payload); the arrival instant is recorded against it. A healthy
//!   endpoint answers 200 at once, a failing one 500, a slow one 200 after [`SLOW`].
//! - `POST /floor`: the same parse, counted only: the receiver-alone limit.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;

/// How long a slow endpoint takes to answer: longer than any sender's attempt timeout.
pub const SLOW: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    Healthy,
    Slow,
    Failing,
}

/// One run's record. Instants are nanoseconds since `base`, plus one (0: not yet).
pub struct Run {
    pub id: u64,
    pub base: Instant,
    /// Per event: when the emitter started its request.
    pub emitted: Vec<AtomicU64>,
    /// Per event: when the emitter's request was answered with a 2xx.
    pub accepted: Vec<AtomicU64>,
    /// Per event: the first arrival.
    pub arrived: Vec<AtomicU64>,
    /// Per event: arrivals (more than 1: duplicates).
    pub hits: Vec<AtomicU32>,
    /// Per endpoint.
    pub health: Vec<Health>,
    /// Events whose first arrival was at a healthy endpoint.
    pub healthy_arrived: AtomicUsize,
    /// Requests to slow or failing endpoints.
    pub unhealthy_hits: AtomicU64,
    /// Deliveries whose body had no `bench_seq` in range.
    pub unparsed: AtomicU64,
}

impl Run {
    pub fn new(id: u64, events: usize, health: Vec<Health>) -> Run {
        let zeros = |n: usize| (0..n).map(|_| AtomicU64::new(0)).collect::<Vec<_>>();
        Run {
            id,
            base: Instant::now(),
            emitted: zeros(events),
            accepted: zeros(events),
            arrived: zeros(events),
            hits: (0..events).map(|_| AtomicU32::new(0)).collect(),
            health,
            healthy_arrived: AtomicUsize::new(0),
            unhealthy_hits: AtomicU64::new(0),
            unparsed: AtomicU64::new(0),
        }
    }

    /// Now, as stored: nanoseconds since `base`, plus one.
    pub fn now(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX - 1) + 1
    }

    /// The endpoint an event goes to.
    pub fn endpoint_of(&self, seq: usize) -> usize {
        seq % self.health.len()
    }
}

#[derive(Default)]
pub struct Receiver {
    current: RwLock<Option<Arc<Run>>>,
    floor: AtomicU64,
    stale: AtomicU64,
}

impl Receiver {
    pub fn install(&self, run: Option<Arc<Run>>) {
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = run;
    }

    fn run(&self, id: u64) -> Option<Arc<Run>> {
        let current = self.current.read().unwrap_or_else(|e| e.into_inner());
        current.as_ref().filter(|r| r.id == id).cloned()
    }

    pub fn floor_hits(&self) -> u64 {
        self.floor.load(Ordering::Relaxed)
    }

    /// Deliveries that came for a run that is over (late retries of an earlier run).
    pub fn stale_hits(&self) -> u64 {
        self.stale.load(Ordering::Relaxed)
    }
}

/// The number after `"bench_seq":` in a JSON body (a byte search: no JSON parse).
pub fn bench_seq(body: &[u8]) -> Option<usize> {
    const KEY: &[u8] = b"\"bench_seq\":";
    let at = body.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let rest = body[at..].trim_ascii_start();
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

async fn challenge(Query(query): Query<HashMap<String, String>>) -> Response {
    match query.get("challenge") {
        Some(token) => (
            [(axum::http::header::CONTENT_TYPE, "text/plain")],
            token.clone(),
        )
            .into_response(),
        None => StatusCode::OK.into_response(),
    }
}

async fn deliver(
    State(receiver): State<Arc<Receiver>>,
    Path((run, ep)): Path<(u64, usize)>,
    body: Bytes,
) -> StatusCode {
    let Some(run) = receiver.run(run) else {
        receiver.stale.fetch_add(1, Ordering::Relaxed);
        return StatusCode::OK;
    };
    let health = run.health.get(ep).copied().unwrap_or(Health::Healthy);
    if health != Health::Healthy {
        run.unhealthy_hits.fetch_add(1, Ordering::Relaxed);
        drop(run);
        if health == Health::Slow {
            tokio::time::sleep(SLOW).await;
            return StatusCode::OK;
        }
        return StatusCode::INTERNAL_SERVER_ERROR;
    }
    let now = run.now();
    match bench_seq(&body).filter(|&s| s < run.arrived.len()) {
        Some(seq) => {
            if run.hits[seq].fetch_add(1, Ordering::Relaxed) == 0 {
                run.arrived[seq].store(now, Ordering::Relaxed);
                run.healthy_arrived.fetch_add(1, Ordering::Release);
            }
        }
        None => {
            run.unparsed.fetch_add(1, Ordering::Relaxed);
        }
    }
    StatusCode::OK
}

async fn floor(State(receiver): State<Arc<Receiver>>, body: Bytes) -> StatusCode {
    if bench_seq(&body).is_some() {
        receiver.floor.fetch_add(1, Ordering::Relaxed);
    }
    StatusCode::OK
}

/// Serves on 127.0.0.1 (a free port) until the process ends.
pub async fn start(receiver: Arc<Receiver>) -> std::io::Result<SocketAddr> {
    let app = Router::new()
        .route("/r/{run}/{ep}", post(deliver).get(challenge))
        .route("/floor", post(floor))
        .with_state(receiver);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            eprintln!("receiver stopped: {e}");
        }
    });
    Ok(addr)
}

#[cfg(test)]
mod tests {
    use super::bench_seq;

    #[test]
    fn finds_the_sequence_number() {
        assert_eq!(
            bench_seq(br#"{"id":"x","data":{"bench_seq":42,"pad":"a"}}"#),
            Some(42)
        );
        assert_eq!(bench_seq(br#"{"bench_seq": 7}"#), Some(7));
        assert_eq!(bench_seq(br#"{"seq":7}"#), None);
    }
}
