//! Logs an operator can read at `info`, through the real binary: `intentgate serve` with
//! `RUST_LOG=info` in front of the mock provider with injected faults (timeouts, dropped
//! connections, 5xx, 429/503), and a storm of retried calls over HTTP and MCP, some of them
//! abandoned by an impatient MCP client. Such a storm once wrote thousands of lines: one per
//! MCP request from rmcp, an `ERROR` per abandoned call, a line per upstream answer and per
//! lookup, a warning per intent from the duplicate-call alerts. Now a call that goes well
//! writes nothing at `info`, and alerts are one line per rule and window.
//!
//! The storm test prints `log lines N (limit N), calls N, abandoned N, alerts N, webhooks N`,
//! then the lines.

mod support;

use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{
    Running, Webhook, example_config, intentgate, mock_provider, set_faults, until, with_setting,
};
use tokio::sync::Semaphore;

/// Lines the gateway may write (stdout and stderr, startup and shutdown included) for the
/// whole storm: its startup lines, a few alert and sweep lines, and room to spare.
const LOG_LINES_MAX: usize = 100;
/// Intents, and calls of each: every intent is asked for by several retry layers. Six calls
/// are five repeats, so each intent crosses the default per-intent alert threshold (5).
const INTENTS: usize = 150;
const CALLS_PER_INTENT: usize = 6;
/// Intents worked on at once.
const CONCURRENT_INTENTS: usize = 32;
/// The tool's timeout in the test config: short, so an ambiguous outcome takes a second.
const TOOL_TIMEOUT_MS: u64 = 700;
/// How long the mock holds a "timeout" answer: past the tool's timeout.
const TIMEOUT_HOLD_MS: u64 = 1_500;
/// The patience of the MCP client that gives up: less than a timed-out call takes (the
/// tool's timeout, then a lookup). Whether a quick answer beats it on a loaded machine does
/// not matter: the test needs some calls given up on, not a number of them.
const IMPATIENT: Duration = Duration::from_millis(300);
/// Longest wait for one patient call.
const PATIENT: Duration = Duration::from_secs(30);
/// MCP calls given up on in the abandoned-call test, and how long the provider takes for
/// each of them there.
const ABANDONED_CALLS: usize = 6;
const SLOW_PROVIDER_MS: u64 = 1_000;
/// Longest wait for the alerts' webhooks to be posted after the storm.
const WEBHOOKS_MAX: Duration = Duration::from_secs(30);
/// How long the gateway gets to start listening.
const LISTEN_MAX: Duration = Duration::from_secs(30);
/// How long the gateway gets to stop after SIGTERM before the test fails.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// Every fault shape that makes an outcome ambiguous or not processed, per thousand.
const STORM_FAULTS: &str = r#"{"seed": 7, "reject": 30, "rate_limited": 50, "unavailable": 30,
    "timeout": 80, "dropped": 60, "server_error": 60, "commit_when_ambiguous": 500,
    "lookup_failure": 100, "latency_p50_ms": 5, "latency_p95_ms": 60}"#;

/// `intentgate serve` with stdout and stderr both going to `log`, and its URL once it
/// listens.
fn serve_logging_to(config: &Path, ledger: &Path, log: &Path, env: &[(&str, &str)]) -> Running {
    let file = File::create(log).unwrap();
    let mut command = intentgate();
    command
        .args(["serve", "--config", config.to_str().unwrap()])
        .args([
            "--listen",
            "127.0.0.1:0",
            "--ledger",
            ledger.to_str().unwrap(),
        ])
        .stdout(Stdio::from(file.try_clone().unwrap()))
        .stderr(Stdio::from(file));
    for (name, value) in env {
        command.env(name, value);
    }
    // Killed when dropped, should it not start.
    let mut gateway = Running {
        child: command.spawn().expect("intentgate starts"),
        url: String::new(),
    };
    let deadline = Instant::now() + LISTEN_MAX;
    loop {
        let text = std::fs::read_to_string(log).unwrap();
        if let Some(url) = text
            .lines()
            .find_map(|line| {
                line.split_once("intentgate listening on ")
                    .map(|(_, url)| url.trim())
            })
            .filter(|url| url.starts_with("http://127.0.0.1:"))
        {
            gateway.url = url.to_owned();
            return gateway;
        }
        if let Some(status) = gateway.child.try_wait().unwrap() {
            panic!("the gateway exited ({status}):\n{text}");
        }
        assert!(
            Instant::now() < deadline,
            "the gateway did not listen:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn refund(intent: usize) -> Value {
    json!({"order_id": format!("q{intent}"), "amount": 25.0, "reason": "requested_by_customer"})
}

/// What the clients of the storm saw.
#[derive(Default)]
struct Seen {
    /// Calls sent, over either interface.
    calls: AtomicU64,
    /// MCP calls the impatient client gave up on.
    abandoned: AtomicU64,
}

/// One client of the gateway, over its HTTP API or over MCP (Streamable HTTP, stateless).
#[derive(Clone)]
struct Clients {
    url: String,
    http: reqwest::Client,
    seen: Arc<Seen>,
}

impl Clients {
    /// A call over the HTTP API; its outcome's status.
    async fn http(&self, arguments: Value) -> String {
        self.seen.calls.fetch_add(1, Ordering::Relaxed);
        let response = self
            .http
            .post(format!("{}/v1/tools/refund_order/call", self.url))
            .timeout(PATIENT)
            .json(&json!({ "arguments": arguments }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        let outcome: Value = response.json().await.unwrap();
        outcome["status"].as_str().unwrap().to_owned()
    }

    /// A `tools/call` over MCP that waits at most `patience` for the whole answer; its
    /// outcome's status, or None when the client gave up and closed the connection.
    async fn mcp(&self, id: u64, arguments: Value, patience: Duration) -> Option<String> {
        self.seen.calls.fetch_add(1, Ordering::Relaxed);
        let request = json!({
            "jsonrpc": "2.0",
            "id": id,
            "method": "tools/call",
            "params": {"name": "refund_order", "arguments": arguments},
        });
        let sent = self
            .http
            .post(format!("{}/mcp", self.url))
            .timeout(patience)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .json(&request)
            .send()
            .await;
        let body = match sent {
            Ok(response) => {
                assert_eq!(response.status().as_u16(), 200);
                response.text().await
            }
            Err(error) => Err(error),
        };
        let body = match body {
            Ok(body) => body,
            Err(error) if error.is_timeout() && patience < PATIENT => {
                self.seen.abandoned.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            Err(error) => panic!("MCP call {id} failed: {error}"),
        };
        // One server-sent event, or a JSON body: the JSON-RPC answer either way.
        let answer: Value = body
            .lines()
            .find_map(|line| line.strip_prefix("data:"))
            .map_or_else(
                || serde_json::from_str(&body),
                |data| serde_json::from_str(data.trim()),
            )
            .unwrap_or_else(|error| panic!("MCP answer {body:?}: {error}"));
        let status = answer["result"]["structuredContent"]["status"]
            .as_str()
            .unwrap_or_else(|| panic!("no outcome in the MCP answer {answer}"));
        Some(status.to_owned())
    }

    /// The calls of one intent, the way stacked retry layers make them: an MCP client that
    /// gives up and, at the same time, the HTTP client of another layer; then four more
    /// calls, alternating HTTP and a patient MCP client.
    async fn intent(&self, intent: usize) {
        let id = (intent * CALLS_PER_INTENT) as u64;
        let (_, _) = tokio::join!(
            self.mcp(id, refund(intent), IMPATIENT),
            self.http(refund(intent))
        );
        for repeat in 2..CALLS_PER_INTENT {
            if repeat % 2 == 0 {
                self.http(refund(intent)).await;
            } else {
                let status = self.mcp(id + repeat as u64, refund(intent), PATIENT).await;
                assert!(status.is_some(), "a patient MCP call was answered");
            }
        }
    }
}

/// The sum of every sample of the metric `name` in a `/metrics` text.
fn metric_sum(metrics: &str, name: &str) -> f64 {
    intentgate_test_support::metrics::samples(metrics, name)
        .iter()
        .filter_map(|sample| sample.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_storm_of_retried_and_abandoned_calls_writes_few_log_lines_at_info() {
    let folder = tempfile::tempdir().unwrap();
    let mock = mock_provider();
    let webhook = Webhook::start().await;
    let config = example_config(folder.path(), |text| {
        let text = with_setting(&text, "timeout_ms", TOOL_TIMEOUT_MS);
        let text = with_setting(&text, "retry_budget", 1);
        let owner = "payments-team: {log: true}";
        assert!(text.contains(owner), "the example config has {owner}");
        text.replace(
            owner,
            &format!("payments-team: {{webhook: \"{}\", log: true}}", webhook.url),
        )
    });
    let log = folder.path().join("gateway.log");
    let mut gateway = serve_logging_to(
        &config,
        &folder.path().join("ledger.db"),
        &log,
        &[("INTENTGATE_MOCK_URL", &mock.url), ("RUST_LOG", "info")],
    );
    let http = support::client();
    let plan: Value = serde_json::from_str(STORM_FAULTS).unwrap();
    set_faults(&http, &mock, Some(TIMEOUT_HOLD_MS), plan).await;

    let clients = Clients {
        url: gateway.url.clone(),
        http: http.clone(),
        seen: Arc::default(),
    };
    let slots = Arc::new(Semaphore::new(CONCURRENT_INTENTS));
    let storm: Vec<_> = (0..INTENTS)
        .map(|intent| {
            let (clients, slots) = (clients.clone(), slots.clone());
            tokio::spawn(async move {
                let _slot = slots.acquire_owned().await.unwrap();
                clients.intent(intent).await;
            })
        })
        .collect();
    for call in storm {
        call.await.unwrap();
    }
    // Every alert is posted to the owner's webhook: only the log line is aggregated. The
    // alert engine takes the last repeats a few milliseconds after their answers, so the
    // alerts are counted again until the webhooks have caught up with them.
    let duplicate_call_notices = || {
        webhook
            .notices()
            .iter()
            .filter(|(_, body)| body["kind"] == "duplicate_calls")
            .count()
    };
    let ((webhooks, alerts), _) = until(WEBHOOKS_MAX, Duration::from_millis(50), async || {
        let metrics = intentgate_test_support::http::scrape(&http, &gateway.url).await;
        let alerts = metric_sum(&metrics, "intentgate_alerts_fired_total");
        let posted = duplicate_call_notices();
        if posted as f64 == alerts {
            Ok((posted, alerts))
        } else {
            Err(format!("{posted} webhooks posted for {alerts} alerts"))
        }
    })
    .await;
    gateway.terminate(STOP_TIMEOUT);

    let mut text = String::new();
    File::open(&log).unwrap().read_to_string(&mut text).unwrap();
    let lines = text.lines().count();
    let (calls, abandoned) = (
        clients.seen.calls.load(Ordering::Relaxed),
        clients.seen.abandoned.load(Ordering::Relaxed),
    );
    println!(
        "log lines {lines} (limit {LOG_LINES_MAX}), calls {calls}, abandoned {abandoned}, \
         alerts {alerts}, webhooks {webhooks}"
    );
    print!("{text}");
    assert_eq!(calls as usize, INTENTS * CALLS_PER_INTENT);
    // The storm was what it is meant to be: calls given up on, and an alert for most
    // intents (a call that found the intent's first attempt still running, or that started
    // a new attempt after `not_executed`, is not a repeat).
    assert!(
        abandoned > 0,
        "no MCP call was abandoned; the test proves nothing"
    );
    assert!(
        alerts >= (INTENTS / 2) as f64,
        "{alerts} alerts for {INTENTS} intents called {CALLS_PER_INTENT} times each"
    );
    assert_eq!(webhooks as f64, alerts, "one webhook per alert");
    assert!(
        lines < LOG_LINES_MAX,
        "{lines} log lines at info for one storm:\n{text}"
    );
    // The alerts are one line per rule as it first fires, and a summary of the rest, written
    // when the window ends or, as here, when the gateway stops.
    let alert_lines: Vec<&str> = text
        .lines()
        .filter(|line| line.contains("kind=duplicate_calls"))
        .collect();
    assert!(
        alert_lines.len() <= 4,
        "two lines at most for each of the two rules:\n{text}"
    );
    assert!(
        alert_lines
            .iter()
            .any(|line| line.contains("more intents were each called 5 more times")),
        "a summary line with the count of the per-intent alerts:\n{text}"
    );
    assert!(
        !text.contains("ERROR"),
        "an ERROR line in a storm the gateway handles as designed:\n{text}"
    );
}

/// An MCP client that gave up on a call made rmcp write an `ERROR` ("failed to send pending
/// response during drain") although nothing went wrong: the call finished, and a repeat gets
/// its outcome. It is a `debug` line of the gateway's own now, shown when asked for.
#[tokio::test]
async fn an_abandoned_mcp_call_is_a_debug_line_not_an_error() {
    let folder = tempfile::tempdir().unwrap();
    let mock = mock_provider();
    let log = folder.path().join("gateway.log");
    let mut gateway = serve_logging_to(
        Path::new(support::EXAMPLE_CONFIG),
        &folder.path().join("ledger.db"),
        &log,
        &[
            ("INTENTGATE_MOCK_URL", &mock.url),
            ("RUST_LOG", "info,intentgate::abandoned=debug"),
        ],
    );
    let http = support::client();
    // Every refund takes a second at the provider: the impatient client surely gives up.
    let slow = json!({"latency_p50_ms": SLOW_PROVIDER_MS, "latency_p95_ms": SLOW_PROVIDER_MS});
    set_faults(&http, &mock, None, slow).await;
    let clients = Clients {
        url: gateway.url.clone(),
        http,
        seen: Arc::default(),
    };
    for intent in 0..ABANDONED_CALLS {
        let answer = clients.mcp(intent as u64, refund(intent), IMPATIENT).await;
        assert_eq!(
            answer, None,
            "the client gave up before the provider answered"
        );
    }
    // Each call finishes at the gateway after its client has gone: a repeat is answered
    // from the ledger.
    for intent in 0..ABANDONED_CALLS {
        assert_eq!(clients.http(refund(intent)).await, "already_done");
    }
    gateway.terminate(STOP_TIMEOUT);

    let text = std::fs::read_to_string(&log).unwrap();
    let abandoned = text
        .lines()
        .filter(|line| {
            line.contains("DEBUG")
                && line.contains("intentgate::abandoned")
                && line.contains("an MCP client went away before its answer was sent")
        })
        .count();
    println!("abandoned calls {ABANDONED_CALLS}, debug lines {abandoned}");
    assert!(
        abandoned >= 1,
        "no debug line for an abandoned call:\n{text}"
    );
    assert!(abandoned <= ABANDONED_CALLS, "{text}");
    assert!(!text.contains("ERROR"), "{text}");
}
