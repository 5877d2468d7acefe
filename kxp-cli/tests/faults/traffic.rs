//! What the suite sends and what it points the sender at: a merchant's stream of events through
//! the API, a connection flood (idle and slowloris), and endpoints that accept a connection and
//! never answer.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::Rng;

/// Wall-clock milliseconds: the one clock the suite, the receiver's `recorded_at` and the
/// hanging endpoints share.
pub(crate) fn now_ms() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    i64::try_from(since.as_millis()).unwrap()
}

/// An event the sender acknowledged (202): it owes a delivery of it.
#[derive(Debug, Clone)]
pub(crate) struct Acked {
    pub id: String,
    /// When the acknowledgement arrived.
    pub at_ms: i64,
}

#[derive(Default)]
struct Counts {
    acked: Mutex<Vec<Acked>>,
    refused: AtomicUsize,
}

/// Clients emitting `payment.succeeded` events one after another, each at a seeded pace (20 to
/// 80 ms apart: some 35 events a second from two), until stopped; a refused or cut-off request
/// is counted and the next one follows.
pub(crate) struct Emitter {
    stop: Arc<AtomicBool>,
    counts: Arc<Counts>,
    tasks: Vec<JoinHandle<()>>,
}

impl Emitter {
    pub(crate) fn start(base: &str, key: &str, clients: usize, rng: &mut Rng) -> Emitter {
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(Counts::default());
        let tasks = (0..clients)
            .map(|_| {
                let client = kxp_api::Client::new(base, key).unwrap().with_http(
                    reqwest::Client::builder()
                        .timeout(Duration::from_secs(2))
                        .build()
                        .unwrap(),
                );
                let (stop, counts, mut rng) = (stop.clone(), counts.clone(), rng.fork());
                tokio::spawn(async move {
                    let mut n = 0u64;
                    while !stop.load(Ordering::SeqCst) {
                        n += 1;
                        let data = json!({"amount": n, "currency": "eur"});
                        let event = kxp_api::NewEvent::new("payment.succeeded", &data).unwrap();
                        match client.create_event(&event, None).await {
                            Ok(event) => counts.acked.lock().unwrap().push(Acked {
                                id: event.id.into_string(),
                                at_ms: now_ms(),
                            }),
                            Err(_) => {
                                counts.refused.fetch_add(1, Ordering::SeqCst);
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            }
                        }
                        tokio::time::sleep(Duration::from_millis(20 + rng.below(61))).await;
                    }
                })
            })
            .collect();
        Emitter {
            stop,
            counts,
            tasks,
        }
    }

    /// The events acknowledged so far.
    pub(crate) fn acked(&self) -> Vec<Acked> {
        self.counts.acked.lock().unwrap().clone()
    }

    /// Requests refused or cut off so far.
    pub(crate) fn refused(&self) -> usize {
        self.counts.refused.load(Ordering::SeqCst)
    }

    /// Stops emitting; every acknowledged event.
    pub(crate) async fn stop(self) -> Vec<Acked> {
        self.stop.store(true, Ordering::SeqCst);
        let acked = self.counts.clone();
        for task in self.tasks {
            task.await.unwrap();
        }
        acked.acked.lock().unwrap().clone()
    }
}

/// Connections opened to a server and left idle, or sending a request header a line a second
/// (slowloris), until released.
pub(crate) struct Flood {
    /// Connections that were established.
    pub opened: usize,
    closed: Arc<AtomicUsize>,
    tasks: Vec<JoinHandle<()>>,
}

impl Flood {
    pub(crate) async fn open(port: u16, idle: usize, slow: usize) -> Flood {
        let closed = Arc::new(AtomicUsize::new(0));
        let connecting: Vec<_> = (0..idle + slow)
            .map(|n| {
                let connect = tokio::time::timeout(
                    Duration::from_secs(3),
                    TcpStream::connect(("127.0.0.1", port)),
                );
                (tokio::spawn(connect), n >= idle)
            })
            .collect();
        let mut tasks = Vec::new();
        let mut opened = 0;
        for (connect, slow) in connecting {
            let Ok(Ok(Ok(stream))) = connect.await else {
                continue;
            };
            opened += 1;
            let closed = closed.clone();
            tasks.push(tokio::spawn(hold(stream, slow, closed)));
        }
        Flood {
            opened,
            closed,
            tasks,
        }
    }

    /// Connections the server has closed so far (its header-read timeout).
    pub(crate) fn closed_by_server(&self) -> usize {
        self.closed.load(Ordering::SeqCst)
    }

    /// Closes every connection still open.
    pub(crate) fn release(self) {
        for task in self.tasks {
            task.abort();
        }
    }
}

/// Holds a flood connection until the server closes it; a slow one writes a header line a
/// second and never ends the header.
async fn hold(mut stream: TcpStream, slow: bool, closed: Arc<AtomicUsize>) {
    let mut buf = [0u8; 512];
    if slow {
        if stream
            .write_all(b"POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            .await
            .is_err()
        {
            closed.fetch_add(1, Ordering::SeqCst);
            return;
        }
        loop {
            tokio::select! {
                read = stream.read(&mut buf) => {
                    if matches!(read, Ok(0) | Err(_)) {
                        break;
                    }
                }
                () = tokio::time::sleep(Duration::from_secs(1)) => {
                    if stream.write_all(b"x-slow: 1\r\n").await.is_err() {
                        break;
                    }
                }
            }
        }
    } else {
        while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
    }
    closed.fetch_add(1, Ordering::SeqCst);
}

/// Endpoints that accept every connection, read the request and never answer: the sender can
/// only time out. Records when it first does (the sender closing a connection).
pub(crate) struct Hanging {
    pub port: u16,
    accepted: Arc<AtomicUsize>,
    first_close_ms: Arc<Mutex<Option<i64>>>,
    task: JoinHandle<()>,
}

impl Hanging {
    pub(crate) async fn start() -> Hanging {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let first_close_ms = Arc::new(Mutex::new(None));
        let task = tokio::spawn({
            let (accepted, first_close_ms) = (accepted.clone(), first_close_ms.clone());
            async move {
                while let Ok((mut stream, _)) = listener.accept().await {
                    accepted.fetch_add(1, Ordering::SeqCst);
                    let first_close_ms = first_close_ms.clone();
                    tokio::spawn(async move {
                        let mut buf = [0u8; 4096];
                        while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
                        first_close_ms.lock().unwrap().get_or_insert_with(now_ms);
                    });
                }
            }
        });
        Hanging {
            port,
            accepted,
            first_close_ms,
            task,
        }
    }

    pub(crate) fn url(&self, n: usize) -> String {
        format!("http://127.0.0.1:{}/hang/{n}", self.port)
    }

    /// Connections accepted so far: deliveries that started.
    pub(crate) fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// When the sender first gave up on one (its timeout), if it has.
    pub(crate) fn first_close_ms(&self) -> Option<i64> {
        *self.first_close_ms.lock().unwrap()
    }
}

impl Drop for Hanging {
    fn drop(&mut self) {
        self.task.abort();
    }
}
