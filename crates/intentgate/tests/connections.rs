//! Slow and half-open clients against the real `intentgate serve`: thousands of sockets that
//! each sent half a request head neither starve a normal call nor stay open past the header
//! read timeout.
#![cfg(unix)]

mod support;

use std::time::{Duration, Instant};

use intentgate_test_support::http::scrape;
use intentgate_test_support::metrics::expect_sample;
use serde_json::json;
use support::{example_config, mock_provider, serve, with_setting};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

/// Half-open sockets opened at once: twice a common default open-file limit (1024), which
/// is what exhausted the gateway before it had a header timeout.
const HALF_OPEN_SOCKETS: usize = 2000;
/// The gateway's header read timeout in this test: short, so the test takes seconds.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(2);
/// Allowed between a socket's header timeout and its close being seen here: the gateway's
/// timer firing and this test's reads being scheduled, with 2,000 of each on a shared
/// machine.
const CLOSE_SLACK: Duration = Duration::from_secs(1);
/// What a normal call may take while the half-open sockets are held.
const CALL_LIMIT: Duration = Duration::from_secs(1);
/// File descriptors the test needs beside the sockets (its client, the child processes'
/// pipes, the runtime).
const FILES_BESIDE_SOCKETS: u64 = 200;

/// The test opens more sockets than the usual soft limit of 1024 allows: raises it to the
/// hard limit, and fails with the fix when even that is too low.
fn raise_own_open_file_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let needed = HALF_OPEN_SOCKETS as u64 + FILES_BESIDE_SOCKETS;
    assert!(
        limit.maximum.is_none_or(|hard| hard >= needed),
        "this test opens {HALF_OPEN_SOCKETS} sockets and needs an open-file hard limit of at \
least {needed} (it is {:?}); raise it with `ulimit -Hn {needed}` (as root) and run it again",
        limit.maximum
    );
    if limit.current.is_some_and(|soft| soft < needed) {
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: limit.maximum.or(Some(needed)),
                maximum: limit.maximum,
            },
        )
        .expect("the soft open-file limit can be raised to the hard one");
    }
}

/// Before, the gateway held every socket that sent half a request head, forever: 3,000 of
/// them under a 1,024 file limit stopped it accepting, and refunds timed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_open_sockets_neither_starve_a_call_nor_outlive_the_header_timeout() {
    raise_own_open_file_limit();
    let folder = tempfile::tempdir().unwrap();
    let mock = mock_provider();
    let config = example_config(folder.path(), |text| {
        let text = with_setting(
            &text,
            "header_read_timeout_ms",
            HEADER_READ_TIMEOUT.as_millis(),
        );
        // Every socket here comes from 127.0.0.1: let one address hold them all, so that the
        // header timeout, not the per-address limit, is what closes them.
        with_setting(
            &text,
            "connection_limit",
            "4096\n  connection_limit_per_address: 4096",
        )
    });
    let ledger = folder.path().join("ledger.db");
    let gateway = serve(
        config.to_str().unwrap(),
        ledger.to_str().unwrap(),
        &[("INTENTGATE_MOCK_URL", &mock.url)],
    );
    let address = gateway.url.trim_start_matches("http://").to_owned();

    let mut sockets = Vec::with_capacity(HALF_OPEN_SOCKETS);
    for _ in 0..HALF_OPEN_SOCKETS {
        let mut socket = TcpStream::connect(&address).await.unwrap();
        socket
            .write_all(b"POST /v1/tools/refund_order/call HTTP/1.1\r\nhost: 127.0.0.1\r\n")
            .await
            .unwrap();
        sockets.push((socket, Instant::now()));
    }

    let client = support::client();
    let started = Instant::now();
    let arguments = json!({"order_id": "8812", "amount": 49.0, "reason": "requested_by_customer"});
    let outcome = support::call(&client, &gateway.url, "refund_order", arguments).await;
    let took = started.elapsed();
    println!("a call beside {HALF_OPEN_SOCKETS} half-open sockets took {took:?}");
    assert_eq!(outcome["status"], "done", "{outcome}");
    assert!(
        took < CALL_LIMIT,
        "a call took {took:?} beside {HALF_OPEN_SOCKETS} half-open sockets"
    );

    // Each socket is closed by the gateway (end of stream or reset), without an answer,
    // within the header timeout of when it was opened.
    let mut closes = JoinSet::new();
    for (mut socket, opened) in sockets {
        closes.spawn(async move {
            let mut buffer = [0u8; 256];
            let limit = HEADER_READ_TIMEOUT + CLOSE_SLACK;
            let read =
                tokio::time::timeout_at((opened + limit).into(), socket.read(&mut buffer)).await;
            match read {
                Err(_) => Err(format!("still open {limit:?} after it was opened")),
                Ok(Ok(0)) | Ok(Err(_)) => Ok(()),
                Ok(Ok(_)) => Err("answered a request head it never received whole".to_owned()),
            }
        });
    }
    let waited = Instant::now();
    let mut still_open = Vec::new();
    while let Some(closed) = closes.join_next().await {
        if let Err(problem) = closed.unwrap() {
            still_open.push(problem);
        }
    }
    println!(
        "the last half-open socket was seen closed {:?} after the call",
        waited.elapsed()
    );
    assert!(
        still_open.is_empty(),
        "{} of {HALF_OPEN_SOCKETS} sockets: {:?}",
        still_open.len(),
        still_open.first()
    );

    let metrics = scrape(&client, &gateway.url).await;
    let dropped: usize = expect_sample(
        &metrics,
        r#"intentgate_connections_dropped_total{reason="header_timeout"}"#,
    );
    assert!(
        dropped >= HALF_OPEN_SOCKETS,
        "{dropped} counted:\n{metrics}"
    );
}

/// The issue's scenario through `intentgate serve`: at `connection_limit: 64`, 64 sockets
/// (on the HTTP API and on MCP's endpoint) that each sent a request head and stalled its
/// body. Before, a normal call got 503 at 1 s and at 71 s, and the sockets stayed open; now
/// the call succeeds at once, and every stalled socket is closed by the body read timeout
/// or to make room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_bodies_at_the_connection_limit_neither_lock_out_a_call_nor_stay_open() {
    const STALLED: usize = 64;
    let folder = tempfile::tempdir().unwrap();
    let mock = mock_provider();
    let config = example_config(folder.path(), |text| {
        let text = with_setting(
            &text,
            "connection_limit",
            "64\n  body_read_timeout_ms: 1000",
        );
        with_setting(&text, "header_read_timeout_ms", 1000)
    });
    let ledger = folder.path().join("ledger.db");
    let gateway = serve(
        config.to_str().unwrap(),
        ledger.to_str().unwrap(),
        &[("INTENTGATE_MOCK_URL", &mock.url)],
    );
    let address = gateway.url.trim_start_matches("http://").to_owned();
    let heads = [
        "POST /v1/tools/refund_order/call HTTP/1.1\r\nhost: 127.0.0.1\r\n\
content-type: application/json\r\ncontent-length: 100\r\n\r\n{\"arguments\":",
        "POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
accept: application/json, text/event-stream\r\ncontent-length: 100\r\n\r\n{\"jsonrpc\":",
    ];
    let mut sockets = Vec::with_capacity(STALLED);
    for n in 0..STALLED {
        let mut socket = TcpStream::connect(&address).await.unwrap();
        socket.write_all(heads[n % 2].as_bytes()).await.unwrap();
        sockets.push(socket);
    }

    let client = support::client();
    let arguments = json!({"order_id": "8812", "amount": 49.0, "reason": "requested_by_customer"});
    let outcome = support::call(&client, &gateway.url, "refund_order", arguments).await;
    assert_eq!(outcome["status"], "done", "{outcome}");

    // Each stalled socket is closed: a 408 at the body timeout, or nothing when it made room.
    let mut answers = JoinSet::new();
    for (n, mut socket) in sockets.into_iter().enumerate() {
        answers.spawn(async move {
            let mut received = Vec::new();
            let read = tokio::time::timeout(Duration::from_secs(15), async {
                let mut buffer = [0u8; 1024];
                loop {
                    match socket.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(read) => received.extend_from_slice(&buffer[..read]),
                    }
                }
            })
            .await;
            (
                n,
                read.is_ok(),
                String::from_utf8_lossy(&received).into_owned(),
            )
        });
    }
    let mut timed_out = [0usize; 2];
    while let Some(answer) = answers.join_next().await {
        let (n, closed, text) = answer.unwrap();
        assert!(closed, "stalled socket {n} is still open");
        if !text.is_empty() {
            assert!(text.starts_with("HTTP/1.1 408 "), "socket {n}: {text}");
            timed_out[n % 2] += 1;
        }
    }
    assert!(
        timed_out.iter().all(|count| *count > 0),
        "408s on the API and on MCP: {timed_out:?}"
    );

    // A connection's task counts its close a moment after the client sees it.
    let dropped = |metrics: &str, reason: &str| -> usize {
        expect_sample(
            metrics,
            &format!("intentgate_connections_dropped_total{{reason=\"{reason}\"}}"),
        )
    };
    let waited = Instant::now();
    let metrics = loop {
        let metrics = scrape(&client, &gateway.url).await;
        let closed = dropped(&metrics, "body_timeout") + dropped(&metrics, "evicted");
        if closed >= STALLED || waited.elapsed() > Duration::from_secs(15) {
            break metrics;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        dropped(&metrics, "body_timeout") + dropped(&metrics, "evicted"),
        STALLED,
        "{metrics}"
    );
    assert_eq!(
        dropped(&metrics, "limit") + dropped(&metrics, "address_limit"),
        0,
        "{metrics}"
    );
}
