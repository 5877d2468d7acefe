//! The API server's bounds against slow and idle clients: a header-read and idle timeout, a
//! cap on open connections, and a shutdown that ends however many requests hang half-sent.

use std::time::Duration;

use kxp_axum::ServeLimits;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::sender_with;

/// Reads until the server closes the connection; `None` if it is still open after `wait` (a
/// bound on the test, not a measurement).
async fn closed_within(stream: &mut TcpStream, wait: Duration) -> Option<Vec<u8>> {
    let mut read = Vec::new();
    tokio::time::timeout(wait, stream.read_to_end(&mut read))
        .await
        .ok()
        .map(|_| read)
}

#[tokio::test]
async fn idle_and_half_sent_connections_are_closed_after_the_header_timeout() {
    let s = sender_with("0s", |config| {
        config.api_limits = ServeLimits::default().header_timeout(Duration::from_millis(300));
    })
    .await;
    let addr = s.server.addr();

    // Nothing sent at all.
    let mut idle = TcpStream::connect(addr).await.unwrap();
    // Half a request header, never finished.
    let mut half = TcpStream::connect(addr).await.unwrap();
    half.write_all(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n")
        .await
        .unwrap();
    // A whole request, then silence on the kept-alive connection.
    let mut kept = TcpStream::connect(addr).await.unwrap();
    kept.write_all(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();

    for (name, stream) in [
        ("idle", &mut idle),
        ("half-sent", &mut half),
        ("kept-alive", &mut kept),
    ] {
        let read = closed_within(stream, Duration::from_secs(20)).await;
        let read = read.unwrap_or_else(|| panic!("the {name} connection is still open"));
        if name == "kept-alive" {
            let text = String::from_utf8_lossy(&read);
            assert!(
                text.starts_with("HTTP/1.1 200"),
                "its request was answered: {text}"
            );
        }
    }
    s.server.shutdown().await;
}

#[tokio::test]
async fn beyond_the_cap_connections_wait_their_turn() {
    let s = sender_with("0s", |config| {
        config.api_limits = ServeLimits::default()
            .header_timeout(Duration::from_secs(60))
            .max_connections(3);
    })
    .await;
    let addr = s.server.addr();
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(TcpStream::connect(addr).await.unwrap());
    }
    let url = format!("http://{addr}/healthz");
    let waiting = tokio::spawn(async move { reqwest::get(url).await.map(|r| r.status()) });
    // Not served while the three idle connections hold every slot (only an answer could make
    // this fail, and a slow machine only delays answers).
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "a fourth connection was served beyond the cap of 3"
    );
    // One slot frees: the waiting request is accepted and answered.
    drop(held.pop());
    let status = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("the waiting request was never served")
        .unwrap()
        .unwrap();
    assert_eq!(status, 200);
    s.server.shutdown().await;
}

#[tokio::test]
async fn shutdown_ends_although_a_request_hangs_half_sent() {
    let s = sender_with("0s", |config| {
        config.api_limits = ServeLimits::default()
            .header_timeout(Duration::from_secs(120))
            .shutdown_grace(Duration::from_millis(200));
    })
    .await;
    let mut half = TcpStream::connect(s.server.addr()).await.unwrap();
    half.write_all(b"POST /v1/events HTTP/1.1\r\nhost: 127.0.0.1\r\n")
        .await
        .unwrap();
    // Without a bound the graceful shutdown waits for this request for as long as the client
    // keeps the connection (over a minute before this was fixed).
    tokio::time::timeout(Duration::from_secs(30), s.server.shutdown())
        .await
        .expect("shutdown waited on a half-sent request");
    assert!(
        closed_within(&mut half, Duration::from_secs(20))
            .await
            .is_some(),
        "the connection was left open"
    );
}
