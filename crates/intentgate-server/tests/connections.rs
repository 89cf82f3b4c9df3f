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

/// The header timeout starts again with the first byte of the next request on a kept-alive
/// connection: a half-sent second head is closed at the header timeout, not the idle one.
#[tokio::test]
async fn a_half_sent_head_on_a_kept_alive_connection_is_closed_at_the_header_timeout() {
    let server = start(ServerOptions {
        header_read_timeout: Duration::from_millis(300),
        // Longer than SAFETY: a connection left to this one fails the test.
        idle_timeout: Duration::from_secs(60),
        ..ServerOptions::default()
    })
    .await;
    let mut stream = connect(&server).await;
    stream.write_all(HEALTHZ).await.unwrap();
    assert_eq!(read_response(&mut stream).await.1, "ok");
    // Past the first head's timer: only the idle timer runs when the second head begins.
    tokio::time::sleep(Duration::from_millis(600)).await;
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n")
        .await
        .unwrap();
    assert!(read_until_closed(&mut stream).await.is_empty());
    assert_eq!(
        server
            .metric(r#"intentgate_connections_dropped_total{reason="header_timeout"}"#)
            .await,
        1
    );
    server.stop().await;
}

/// Past the limit, with every connection handling a request (none to close instead), a
/// connection is answered 503 and closed; once connections close, new ones are served again.
#[tokio::test]
async fn connections_beyond_the_limit_are_answered_503_and_closed() {
    let (route, mut holding) = holding_route();
    let server = common::start_with(
        vec![refund_tool()],
        FaultPlan::none(),
        ServerOptions {
            connection_limit: 2,
            shutdown_grace: Duration::from_millis(200),
            ..ServerOptions::default()
        },
        Some(route),
    )
    .await;
    let mut held = vec![connect(&server).await, connect(&server).await];
    // Both are handling a request (and so counted) before the third arrives.
    for stream in &mut held {
        stream
            .write_all(b"GET /hold HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
            .await
            .unwrap();
        holding.recv().await.unwrap();
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

/// The head of a call whose body is 100 bytes long, and the first 13 of them: what a client
/// that stalls its body sends.
const STALLED_CALL: &[u8] = b"POST /v1/tools/refund_order/call HTTP/1.1\r\nhost: 127.0.0.1\r\n\
content-type: application/json\r\ncontent-length: 100\r\n\r\n{\"arguments\":";

/// A second loopback address to connect from, so that one client's connections can be told
/// from another's (Linux answers on all of 127.0.0.0/8).
const OTHER_CLIENT: [u8; 4] = [127, 0, 0, 2];

async fn connect_from(server: &Server, source: [u8; 4]) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((source, 0))).unwrap();
    socket
        .connect(server.base.trim_start_matches("http://").parse().unwrap())
        .await
        .unwrap()
}

/// Sockets from `source` that each sent a call's head and stalled its body.
async fn stalled_bodies(server: &Server, source: [u8; 4], count: usize) -> Vec<TcpStream> {
    let mut streams = Vec::with_capacity(count);
    for _ in 0..count {
        let mut stream = connect_from(server, source).await;
        stream.write_all(STALLED_CALL).await.unwrap();
        streams.push(stream);
    }
    streams
}

/// Limits under which nothing times out while a test runs, so that only the connection
/// limits close connections.
fn no_timeouts() -> ServerOptions {
    ServerOptions {
        header_read_timeout: Duration::from_secs(600),
        body_read_timeout: Duration::from_secs(600),
        idle_timeout: Duration::from_secs(600),
        shutdown_grace: Duration::from_millis(200),
        ..ServerOptions::default()
    }
}

/// A refund through `client`: its status and outcome.
async fn refund(client: &reqwest::Client, server: &Server, order: &str) -> (u16, String) {
    let response = client
        .post(format!("{}/v1/tools/refund_order/call", server.base))
        .json(&serde_json::json!({"arguments": {"order_id": order, "amount": 5.0}}))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// A refund sent whole on a raw socket from `source`: the status line and body.
async fn refund_from(server: &Server, source: [u8; 4], order: &str) -> (String, String) {
    let body = format!(r#"{{"arguments":{{"order_id":"{order}","amount":5.0}}}}"#);
    let mut stream = connect_from(server, source).await;
    let request = format!(
        "POST /v1/tools/refund_order/call HTTP/1.1\r\nhost: 127.0.0.1\r\n\
content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    read_response(&mut stream).await
}

impl Server {
    /// Waits until the series reaches `value` (a connection's task counts its own close,
    /// a moment after the client sees it).
    async fn wait_for_metric(&self, series: &str, value: i64) {
        let deadline = tokio::time::Instant::now() + SAFETY;
        loop {
            let now = self.metric(series).await;
            if now == value {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{series} is {now}, not {value}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Before, no timer ran once a request head was in: a client that sent a head and stalled
/// its body held the connection forever (20 of 20 still open at 79 s).
#[tokio::test]
async fn a_stalled_request_body_is_answered_408_and_closed_at_the_body_timeout() {
    let server = start(ServerOptions {
        body_read_timeout: Duration::from_millis(300),
        ..ServerOptions::default()
    })
    .await;
    let mut stalled = connect(&server).await;
    stalled.write_all(STALLED_CALL).await.unwrap();
    let answer = String::from_utf8(read_until_closed(&mut stalled).await).unwrap();
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
    assert!(
        answer.contains("urn:intentgate:problem:body-timeout"),
        "{answer}"
    );
    assert!(answer.contains("connection: close\r\n"), "{answer}");
    server
        .wait_for_metric(
            r#"intentgate_connections_dropped_total{reason="body_timeout"}"#,
            1,
        )
        .await;
    assert_eq!(server.provider.effect_count("refund:8812:49.00"), 0);
    server.stop().await;
}

/// A deadline that restarts with every byte would never close a body trickled at a byte a
/// second; the whole body has one deadline.
#[tokio::test]
async fn a_body_trickled_a_byte_a_second_is_still_closed_at_the_body_timeout() {
    let server = start(ServerOptions {
        body_read_timeout: Duration::from_secs(1),
        ..ServerOptions::default()
    })
    .await;
    let stream = connect(&server).await;
    let (mut reader, mut writer) = stream.into_split();
    writer.write_all(STALLED_CALL).await.unwrap();
    // The remaining 87 bytes at one a second would take longer than SAFETY.
    let trickle = tokio::spawn(async move {
        loop {
            if writer.write_all(b" ").await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    let mut received = Vec::new();
    let closed = tokio::time::timeout(SAFETY, reader.read_to_end(&mut received)).await;
    assert!(closed.is_ok(), "a trickling body was never cut off");
    let answer = String::from_utf8_lossy(&received);
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
    trickle.abort();
    server
        .wait_for_metric(
            r#"intentgate_connections_dropped_total{reason="body_timeout"}"#,
            1,
        )
        .await;
    server.stop().await;
}

/// The body timer covers the body only: a handler that runs longer than the body timeout
/// after the body is in is not cut off.
#[tokio::test]
async fn a_request_whose_body_is_in_runs_past_the_body_timeout() {
    let slow = axum::Router::new().route(
        "/slow",
        axum::routing::post(|body: axum::body::Bytes| async move {
            tokio::time::sleep(Duration::from_millis(600)).await;
            body
        }),
    );
    let server = common::start_with(
        vec![refund_tool()],
        FaultPlan::none(),
        ServerOptions {
            body_read_timeout: Duration::from_millis(200),
            ..ServerOptions::default()
        },
        Some(slow),
    )
    .await;
    let mut stream = connect(&server).await;
    stream
        .write_all(
            b"POST /slow HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
content-length: 6\r\n\r\n\"some\"",
        )
        .await
        .unwrap();
    assert_eq!(
        read_response(&mut stream).await,
        ("HTTP/1.1 200 OK".to_owned(), "\"some\"".to_owned())
    );
    assert_eq!(
        server
            .metric(r#"intentgate_connections_dropped_total{reason="body_timeout"}"#)
            .await,
        0
    );
    server.stop().await;
}

/// Before, one address could hold every connection: at `connection_limit: 64`, 64 stalled
/// bodies made every other caller's call a 503. Now an address holds at most its own limit,
/// its oldest stalled connection making room for its newest.
#[tokio::test]
async fn stalled_bodies_from_one_address_are_held_to_its_limit_and_a_call_still_succeeds() {
    let server = start(ServerOptions {
        connection_limit: 64,
        connection_limit_per_address: 8,
        ..no_timeouts()
    })
    .await;
    let stalled = stalled_bodies(&server, OTHER_CLIENT, 64).await;
    // 56 made room for later ones; counted by their own tasks as they close.
    server
        .wait_for_metric(
            r#"intentgate_connections_dropped_total{reason="evicted"}"#,
            56,
        )
        .await;
    let (status, outcome) = refund(&server.client, &server, "8812").await;
    assert_eq!(status, 200, "{outcome}");
    assert!(outcome.contains(r#""status":"done""#), "{outcome}");
    // A caller that shares the stalling address is served too: its connection takes the
    // place of that address's oldest stalled one.
    let (status, outcome) = refund_from(&server, OTHER_CLIENT, "8813").await;
    assert_eq!(status, "HTTP/1.1 200 OK", "{outcome}");
    assert_eq!(
        server
            .metric(r#"intentgate_connections_dropped_total{reason="address_limit"}"#)
            .await,
        0
    );
    drop(stalled);
    server.stop().await;
}

/// Before, at the connection limit every new connection was refused however long the open
/// ones had been stalled; now the one stalled longest is closed to make room.
#[tokio::test]
async fn at_the_connection_limit_the_longest_stalled_connection_makes_room_for_a_call() {
    let server = start(ServerOptions {
        connection_limit: 64,
        connection_limit_per_address: 64,
        ..no_timeouts()
    })
    .await;
    let mut stalled = stalled_bodies(&server, OTHER_CLIENT, 64).await;
    let (status, outcome) = refund(&server.client, &server, "8812").await;
    assert_eq!(status, 200, "{outcome}");
    assert!(outcome.contains(r#""status":"done""#), "{outcome}");
    // The first stalled connection was the one closed, without an answer.
    let first = read_until_closed(&mut stalled[0]).await;
    assert!(first.is_empty(), "{}", String::from_utf8_lossy(&first));
    assert!(
        server
            .metric(r#"intentgate_connections_dropped_total{reason="evicted"}"#)
            .await
            >= 1
    );
    assert_eq!(
        server
            .metric(r#"intentgate_connections_dropped_total{reason="limit"}"#)
            .await,
        0
    );
    drop(stalled);
    server.stop().await;
}

/// A route that holds its request until the test ends, and says when it has one.
fn holding_route() -> (axum::Router, tokio::sync::mpsc::UnboundedReceiver<()>) {
    let (held, holding) = tokio::sync::mpsc::unbounded_channel();
    let route = axum::Router::new().route(
        "/hold",
        axum::routing::get(move || {
            let held = held.clone();
            async move {
                let _ = held.send(());
                std::future::pending::<()>().await
            }
        }),
    );
    (route, holding)
}

/// Connections that are each handling a request are never closed to make room: past the
/// per-address limit a new one from that address is refused, while other addresses are
/// served.
#[tokio::test]
async fn past_the_address_limit_with_every_connection_busy_a_new_one_is_answered_503() {
    let (route, mut holding) = holding_route();
    let server = common::start_with(
        vec![refund_tool()],
        FaultPlan::none(),
        ServerOptions {
            connection_limit_per_address: 2,
            ..no_timeouts()
        },
        Some(route),
    )
    .await;
    let mut busy = Vec::new();
    for _ in 0..2 {
        let mut stream = connect_from(&server, OTHER_CLIENT).await;
        stream
            .write_all(b"GET /hold HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
            .await
            .unwrap();
        holding.recv().await.unwrap();
        busy.push(stream);
    }
    let mut refused = connect_from(&server, OTHER_CLIENT).await;
    let answer = String::from_utf8(read_until_closed(&mut refused).await).unwrap();
    assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
    assert!(answer.contains("retry-after: 1\r\n"), "{answer}");
    assert!(answer.contains("address-connection-limit"), "{answer}");
    let (status, outcome) = refund(&server.client, &server, "8812").await;
    assert_eq!(status, 200, "{outcome}");
    assert_eq!(
        server
            .metric(r#"intentgate_connections_dropped_total{reason="address_limit"}"#)
            .await,
        1
    );
    drop(busy);
    server.stop().await;
}
