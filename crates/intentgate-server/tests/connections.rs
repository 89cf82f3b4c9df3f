//! The limits on connections, through a real server on a loopback port and raw sockets that
//! behave as slow, half-open or idle clients: the header read timeout, the idle timeout, the
//! connection limit, their metrics, the peer address every request carries, and shutdown
//! with connections still open.
//!
//! Waits are bounded by [`SAFETY`], far beyond every timeout used here: a bound only keeps a
//! broken server from hanging the test, it measures nothing.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::ConnectInfo;
use common::{Server, refund_tool};
use intentgate_mock::FaultPlan;
use intentgate_server::ServerOptions;
use intentgate_test_support::http::scrape;
use intentgate_test_support::metrics::expect_sample;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longest any wait in these tests may take before the test fails.
const SAFETY: Duration = Duration::from_secs(15);
/// A request for `/healthz` on a kept-alive connection.
const HEALTHZ: &[u8] = b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n";

async fn start(options: ServerOptions) -> Server {
    common::start(vec![refund_tool()], FaultPlan::none(), options).await
}

async fn connect(server: &Server) -> TcpStream {
    TcpStream::connect(server.base.trim_start_matches("http://"))
        .await
        .unwrap()
}

/// Reads until the server closes the connection (or resets it); what it sent before.
async fn read_until_closed(stream: &mut TcpStream) -> Vec<u8> {
    let mut received = Vec::new();
    let closed = tokio::time::timeout(SAFETY, async {
        let mut buffer = [0u8; 4096];
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(read) => received.extend_from_slice(&buffer[..read]),
            }
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "the server kept the connection open for {SAFETY:?}"
    );
    received
}

/// Reads one response with a `content-length` body; its status line and body.
async fn read_response(stream: &mut TcpStream) -> (String, String) {
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let read = tokio::time::timeout(SAFETY, stream.read(&mut buffer))
            .await
            .expect("an answer")
            .unwrap();
        assert!(read > 0, "closed before a whole response");
        received.extend_from_slice(&buffer[..read]);
        let text = String::from_utf8_lossy(&received).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse().unwrap())
                })
                .unwrap_or(0);
            if body.len() >= length {
                let status = head.lines().next().unwrap().to_owned();
                return (status, body[..length].to_owned());
            }
        }
    }
}

impl Server {
    /// The value of one series of `GET /metrics` (name with labels), as an integer.
    async fn metric(&self, series: &str) -> i64 {
        expect_sample(&scrape(&self.client, &self.base).await, series)
    }
}

/// Before, a socket that sent half a request head was held forever: a few thousand of them
/// used up the process's file descriptors and the gateway stopped accepting calls.
#[tokio::test]
async fn a_half_sent_request_head_is_closed_at_the_header_timeout() {
    let server = start(ServerOptions {
        header_read_timeout: Duration::from_millis(300),
        ..ServerOptions::default()
    })
    .await;
    let mut slow = connect(&server).await;
    slow.write_all(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n")
        .await
        .unwrap();
    let answered = read_until_closed(&mut slow).await;
    assert!(
        answered.is_empty(),
        "{}",
        String::from_utf8_lossy(&answered)
    );
    // A socket that sent nothing at all is closed too.
    let mut silent = connect(&server).await;
    read_until_closed(&mut silent).await;
    assert_eq!(
        server
            .metric(r#"intentgate_connections_dropped_total{reason="header_timeout"}"#)
            .await,
        2
    );
    server.stop().await;
}

/// A timeout that restarts with every byte would never close a client that trickles its
/// head a byte at a time, which is what slowloris does.
#[tokio::test]
async fn a_head_trickled_a_byte_at_a_time_is_still_closed_at_the_header_timeout() {
    let server = start(ServerOptions {
        header_read_timeout: Duration::from_millis(500),
        ..ServerOptions::default()
    })
    .await;
    let stream = connect(&server).await;
    let (mut reader, mut writer) = stream.into_split();
    // 100 ms a byte: the whole head would take 40 s, longer than SAFETY.
    let head = format!(
        "GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nx-pad: {}\r\n\r\n",
        "a".repeat(350)
    );
    let trickle = tokio::spawn(async move {
        for byte in head.as_bytes() {
            if writer.write_all(&[*byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let mut buffer = [0u8; 1024];
    let closed = tokio::time::timeout(SAFETY, reader.read(&mut buffer)).await;
    match closed {
        Ok(Ok(0)) | Ok(Err(_)) => {}
        Ok(Ok(_)) => panic!("the server answered a head it had not received whole"),
        Err(_) => panic!("a trickling client was never dropped"),
    }
    trickle.abort();
    server.stop().await;
}

/// The idle timeout is its own: a kept-alive connection may wait longer than the header
/// timeout between requests, and is closed once it has waited the idle timeout.
#[tokio::test]
async fn a_kept_alive_connection_is_closed_after_the_idle_timeout_not_the_header_timeout() {
    let server = start(ServerOptions {
        header_read_timeout: Duration::from_millis(200),
        idle_timeout: Duration::from_millis(1500),
        ..ServerOptions::default()
    })
    .await;
    let mut stream = connect(&server).await;
    stream.write_all(HEALTHZ).await.unwrap();
    assert_eq!(
        read_response(&mut stream).await,
        ("HTTP/1.1 200 OK".to_owned(), "ok".to_owned())
    );
    // Longer than the header timeout, well within the idle timeout.
    tokio::time::sleep(Duration::from_millis(600)).await;
    stream.write_all(HEALTHZ).await.unwrap();
    assert_eq!(read_response(&mut stream).await.1, "ok");
    read_until_closed(&mut stream).await;
    assert_eq!(
        server
            .metric(r#"intentgate_connections_dropped_total{reason="idle"}"#)
            .await,
        1
    );
    server.stop().await;
}

/// Past the limit a connection is answered 503 and closed; once connections close, new ones
/// are served again.
#[tokio::test]
async fn connections_beyond_the_limit_are_answered_503_and_closed() {
    let server = start(ServerOptions {
        connection_limit: 2,
        ..ServerOptions::default()
    })
    .await;
    let mut held = vec![connect(&server).await, connect(&server).await];
    // Both are served (and so counted) before the third arrives.
    for stream in &mut held {
        stream.write_all(HEALTHZ).await.unwrap();
        assert_eq!(read_response(stream).await.1, "ok");
    }
    let mut refused = connect(&server).await;
    let answer = String::from_utf8(read_until_closed(&mut refused).await).unwrap();
    assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
    assert!(answer.contains("retry-after: 1\r\n"), "{answer}");
    assert!(answer.contains("Too many open connections"), "{answer}");
    drop(held);
    // Once the server has seen the two close it answers again: here, the metrics, on a
    // connection it closes after answering, so that it holds no slot afterwards.
    let deadline = tokio::time::Instant::now() + SAFETY;
    let metrics = loop {
        let mut stream = connect(&server).await;
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let answer = String::from_utf8(read_until_closed(&mut stream).await).unwrap();
        if answer.starts_with("HTTP/1.1 200") {
            break answer;
        }
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        assert!(tokio::time::Instant::now() < deadline, "never served again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let refused: i64 = expect_sample(
        &metrics,
        r#"intentgate_connections_dropped_total{reason="limit"}"#,
    );
    assert!(refused >= 1, "{metrics}");
    server.stop().await;
}

#[tokio::test]
async fn open_connections_are_counted_while_open() {
    let server = start(ServerOptions::default()).await;
    let open = "intentgate_connections_open";
    // The metrics client's own connection is open while it asks.
    let before = server.metric(open).await;
    let mut streams = Vec::new();
    for _ in 0..3 {
        let mut stream = connect(&server).await;
        stream.write_all(HEALTHZ).await.unwrap();
        read_response(&mut stream).await;
        streams.push(stream);
    }
    assert_eq!(server.metric(open).await, before + 3);
    drop(streams);
    let deadline = tokio::time::Instant::now() + SAFETY;
    while server.metric(open).await != before {
        assert!(
            tokio::time::Instant::now() < deadline,
            "closed connections still counted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.stop().await;
}

#[tokio::test]
async fn every_request_carries_the_peer_address() {
    let peer = axum::Router::new().route(
        "/peer",
        axum::routing::get(|ConnectInfo(address): ConnectInfo<SocketAddr>| async move {
            address.to_string()
        }),
    );
    let server = common::start_with(
        vec![refund_tool()],
        FaultPlan::none(),
        ServerOptions::default(),
        Some(peer),
    )
    .await;
    let mut stream = connect(&server).await;
    let local = stream.local_addr().unwrap();
    stream
        .write_all(b"GET /peer HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let (status, body) = read_response(&mut stream).await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert_eq!(body, local.to_string());
    server.stop().await;
}

/// Shutdown closes idle kept-alive connections at once, and does not wait past the grace
/// period for a client that never finishes its head.
#[tokio::test]
async fn shutdown_closes_idle_connections_and_stops_within_the_grace_period() {
    let server = start(ServerOptions {
        header_read_timeout: Duration::from_secs(600),
        idle_timeout: Duration::from_secs(600),
        shutdown_grace: Duration::from_millis(500),
        ..ServerOptions::default()
    })
    .await;
    let mut idle = connect(&server).await;
    idle.write_all(HEALTHZ).await.unwrap();
    read_response(&mut idle).await;
    let mut half = connect(&server).await;
    half.write_all(b"GET /healthz HTTP/1.1\r\n").await.unwrap();
    tokio::time::timeout(SAFETY, server.stop())
        .await
        .expect("the server stopped");
    read_until_closed(&mut idle).await;
    read_until_closed(&mut half).await;
}
