//! The `Host` header through a real server on a loopback port, written as raw bytes: an HTTP
//! client sends one well-formed `Host` and nothing else, and these requests are exactly what
//! a client must not send.

mod common;

use std::time::Duration;

use common::{Server, refund_tool};
use intentgate_mock::FaultPlan;
use intentgate_server::ServerOptions;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longest a wait may take before the test fails; it bounds a broken server, measures nothing.
const SAFETY: Duration = Duration::from_secs(15);

async fn start() -> Server {
    common::start(
        vec![refund_tool()],
        FaultPlan::none(),
        ServerOptions::default(),
    )
    .await
}

/// Sends `head` (a request head without its final blank line, `Connection: close` added) and
/// returns the response's status line and body.
async fn send(server: &Server, head: &str) -> (String, String) {
    let mut stream = TcpStream::connect(server.base.trim_start_matches("http://"))
        .await
        .unwrap();
    let request = format!("{head}\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut received = Vec::new();
    tokio::time::timeout(SAFETY, stream.read_to_end(&mut received))
        .await
        .expect("an answer")
        .unwrap();
    let text = String::from_utf8_lossy(&received).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("a whole response");
    (head.lines().next().unwrap().to_owned(), body.to_owned())
}

/// Regression: the loopback Host check accepted `127.0.0.1:99999`, a port no server can
/// have. Now a port out of range, not decimal, or empty is a 400 naming the problem.
#[tokio::test]
async fn a_host_with_an_invalid_port_is_a_400_naming_the_port() {
    let server = start().await;
    for host in ["127.0.0.1:99999", "localhost:0x50", "127.0.0.1:", "[::1]:0"] {
        let (status, body) = send(&server, &format!("GET /healthz HTTP/1.1\r\nhost: {host}")).await;
        assert!(status.contains(" 400 "), "{host}: {status} {body}");
        assert!(body.contains("bad-host"), "{host}: {body}");
        assert!(body.contains("invalid port"), "{host}: {body}");
    }
    let (status, body) = send(&server, "GET /healthz HTTP/1.1\r\nhost: 127.0.0.1:8080").await;
    assert!(status.contains(" 200 "), "{status} {body}");
}

/// Regression: with two `Host` headers the first was judged (a loopback name) while a proxy
/// or a later reader might take the second. Now two are a 400, on every route.
#[tokio::test]
async fn a_request_with_two_host_headers_is_a_400() {
    let server = start().await;
    for (first, second) in [
        ("127.0.0.1", "rebind.evil.example"),
        ("localhost", "localhost"),
    ] {
        for path in ["/healthz", "/v1/tools", "/v1/admin/flags"] {
            let (status, body) = send(
                &server,
                &format!("GET {path} HTTP/1.1\r\nhost: {first}\r\nhost: {second}"),
            )
            .await;
            assert!(status.contains(" 400 "), "{path}: {status} {body}");
            assert!(body.contains("more than one Host"), "{path}: {body}");
        }
    }
}
