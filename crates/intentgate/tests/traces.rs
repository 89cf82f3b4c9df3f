//! Traces through the real binary, exported to a loopback OTLP/HTTP receiver that decodes
//! the protobuf: a call under a caller's `traceparent` is one trace, from the HTTP server
//! span through each phase to the upstream request, whose `traceparent` carries the same
//! trace on to the provider; and a slow or dead collector neither slows nor fails a call.

mod support;

use std::collections::HashSet;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::otlp::{Receiver, Recorder, Span};
use support::{EXAMPLE_CONFIG, mock_provider, serve_with_stderr};

/// How long the test waits for spans: the exporter sends a batch at least every second.
const SPANS_WAIT: Duration = Duration::from_secs(20);
/// The caller's trace and span, as an agent framework that traces would send them.
const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

fn refund() -> Value {
    json!({"order_id": "8812", "amount": 49.0, "reason": "requested_by_customer"})
}

/// Calls refund_order with `traceparent`, when given; the outcome.
async fn call(client: &reqwest::Client, gateway: &str, traceparent: Option<&str>) -> Value {
    post(
        client,
        &format!("{gateway}/v1/tools/refund_order/call"),
        traceparent,
        json!({"arguments": refund()}),
    )
    .await
}

/// POSTs `body` to `url` with `traceparent`, when given; the answer, which must be a 200.
async fn post(
    client: &reqwest::Client,
    url: &str,
    traceparent: Option<&str>,
    body: Value,
) -> Value {
    let mut request = client.post(url);
    if let Some(traceparent) = traceparent {
        request = request.header("traceparent", traceparent);
    }
    let response = request.json(&body).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    response.json().await.unwrap()
}

fn named<'s>(spans: &'s [Span], name: &str) -> Vec<&'s Span> {
    spans.iter().filter(|span| span.name == name).collect()
}

fn one<'s>(spans: &'s [Span], name: &str) -> &'s Span {
    let found = named(spans, name);
    assert_eq!(found.len(), 1, "one `{name}` span in {spans:#?}");
    found[0]
}

#[tokio::test]
async fn a_call_is_one_trace_under_the_callers_span_down_to_the_upstream_request() {
    let receiver = Receiver::start().await;
    let mock = mock_provider();
    let recorder = Recorder::start(&mock.url).await;
    let folder = tempfile::tempdir().unwrap();
    let ledger = folder.path().join("ledger.db");
    let gateway = serve_with_stderr(
        EXAMPLE_CONFIG,
        ledger.to_str().unwrap(),
        &[
            ("INTENTGATE_MOCK_URL", &recorder.url),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.url),
            ("OTEL_SERVICE_NAME", "gateway-under-test"),
        ],
        Stdio::null(),
    );
    let client = support::client();
    let traceparent = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let outcome = call(&client, &gateway.url, Some(&traceparent)).await;
    assert_eq!(outcome["status"], "done", "{outcome}");

    let spans = receiver
        .wait_for(SPANS_WAIT, |spans| {
            spans
                .iter()
                .any(|span| span.name == "POST /v1/tools/{name}/call")
        })
        .await;
    let server = one(&spans, "POST /v1/tools/{name}/call");
    assert_eq!(server.trace_id, CALLER_TRACE);
    assert_eq!(
        server.parent_span_id, CALLER_SPAN,
        "the caller's span is the parent"
    );
    assert_eq!(server.service, "gateway-under-test");
    assert_eq!(server.attribute("http.request.method"), Some("POST"));
    assert_eq!(server.attribute("http.response.status_code"), Some("200"));

    let call_span = one(&spans, "call");
    assert_eq!(call_span.parent_span_id, server.span_id);
    assert_eq!(
        call_span.attribute("gen_ai.operation.name"),
        Some("execute_tool")
    );
    assert_eq!(
        call_span.attribute("gen_ai.tool.name"),
        Some("refund_order")
    );
    assert_eq!(
        call_span.attribute("intentgate.effect"),
        Some("side_effect")
    );
    assert_eq!(call_span.attribute("intentgate.tenant"), Some("default"));
    // The key (`refund:8812:49.00`) is rendered from arguments: only its hash is exported.
    assert_eq!(call_span.attribute("intentgate.key"), None);
    assert_eq!(call_span.attribute("key"), None);
    let key_hash = call_span.attribute("intentgate.key_hash").unwrap();
    assert_eq!(
        key_hash,
        intentgate_gate::trace::key_hash("default", "refund:8812:49.00")
    );
    assert!(
        key_hash.len() == 16 && key_hash.bytes().all(|b| b.is_ascii_hexdigit()),
        "{key_hash}"
    );
    assert_eq!(call_span.attribute("intentgate.decision"), Some("execute"));
    assert_eq!(call_span.attribute("intentgate.status"), Some("done"));
    assert_eq!(call_span.attribute("intentgate.attempt"), Some("1"));

    // Every phase, in the caller's trace, under the call.
    let in_call: HashSet<&str> = spans
        .iter()
        .filter(|span| span.parent_span_id == call_span.span_id)
        .map(|span| span.name.as_str())
        .collect();
    for phase in [
        "validate",
        "kill_switch",
        "key_and_fingerprint",
        // A new intent's read and insert, in one trip to the ledger's writer.
        "ledger.create",
        "upstream.request",
        "classify",
        "settle",
    ] {
        assert!(
            in_call.contains(phase),
            "no `{phase}` under the call: {in_call:?}"
        );
    }
    for span in &spans {
        assert_eq!(span.trace_id, CALLER_TRACE, "{span:#?}");
        // Regression: the call span's `intentgate.key` (and the `key` field the OpenTelemetry
        // layer exported beside it) carried the order id. No argument value becomes an
        // attribute of any span: not the reason, not the order id the key is made of.
        assert_no_argument_in(span, &["requested_by_customer", "8812"]);
    }
    let request = one(&spans, "upstream.request");
    assert_eq!(request.attribute("http.request.method"), Some("POST"));
    assert_eq!(request.attribute("http.response.status_code"), Some("200"));
    assert_eq!(request.attribute("server.address"), Some("127.0.0.1"));
    assert_eq!(
        one(&spans, "classify").attribute("intentgate.class"),
        Some("done")
    );

    // The provider saw the same trace, with the upstream request's span as the parent.
    let sent: Vec<_> = recorder
        .seen()
        .into_iter()
        .filter(|(path, _)| path.contains("refund"))
        .collect();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(
        sent[0].1.as_deref(),
        Some(format!("00-{CALLER_TRACE}-{}-01", request.span_id).as_str())
    );
}

#[tokio::test]
async fn without_a_collector_named_no_traceparent_goes_upstream() {
    let mock = mock_provider();
    let recorder = Recorder::start(&mock.url).await;
    let folder = tempfile::tempdir().unwrap();
    let ledger = folder.path().join("ledger.db");
    let gateway = serve_with_stderr(
        EXAMPLE_CONFIG,
        ledger.to_str().unwrap(),
        &[("INTENTGATE_MOCK_URL", &recorder.url)],
        Stdio::null(),
    );
    let traceparent = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let outcome = call(&support::client(), &gateway.url, Some(&traceparent)).await;
    assert_eq!(outcome["status"], "done", "{outcome}");
    let seen = recorder.seen();
    assert!(!seen.is_empty());
    assert!(
        seen.iter().all(|(_, traceparent)| traceparent.is_none()),
        "{seen:?}"
    );
}

#[tokio::test]
async fn a_slow_collector_slows_no_call_and_a_dead_one_fails_none_and_drops_are_counted() {
    // A collector that takes 30 s to answer each export: calls don't wait for it.
    let slow = Receiver::start_answering_after(Duration::from_secs(30)).await;
    let mock = mock_provider();
    let folder = tempfile::tempdir().unwrap();
    let ledger = folder.path().join("slow.db");
    let gateway = serve_with_stderr(
        EXAMPLE_CONFIG,
        ledger.to_str().unwrap(),
        &[
            ("INTENTGATE_MOCK_URL", &mock.url),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &slow.url),
        ],
        Stdio::null(),
    );
    let client = support::client();
    for _ in 0..3 {
        let started = Instant::now();
        let outcome = call(&client, &gateway.url, None).await;
        assert!(
            ["done", "already_done"].contains(&outcome["status"].as_str().unwrap()),
            "{outcome}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "a call took {:?} with a slow collector",
            started.elapsed()
        );
        // Past the batch delay, so an export is under way while the next call runs.
        tokio::time::sleep(Duration::from_millis(1200)).await;
    }
    drop(gateway);

    // A collector that is not there at all: calls succeed, lost spans are counted.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let ledger = folder.path().join("dead.db");
    let gateway = serve_with_stderr(
        EXAMPLE_CONFIG,
        ledger.to_str().unwrap(),
        &[
            ("INTENTGATE_MOCK_URL", &mock.url),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                &format!("{dead_url}/v1/traces"),
            ),
        ],
        Stdio::null(),
    );
    let outcome = call(&client, &gateway.url, None).await;
    assert_eq!(outcome["status"], "done", "{outcome}");
    let deadline = Instant::now() + SPANS_WAIT;
    loop {
        let metrics = intentgate_test_support::http::scrape(&client, &gateway.url).await;
        let dropped: f64 = metrics
            .lines()
            .find_map(|line| line.strip_prefix("intentgate_trace_spans_dropped_total "))
            .unwrap_or_else(|| panic!("no drop counter in:\n{metrics}"))
            .trim()
            .parse()
            .unwrap();
        if dropped > 0.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no dropped span counted:\n{metrics}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Sends one JSON-RPC message to an MCP server on stdio.
fn send(stdin: &mut std::process::ChildStdin, message: Value) {
    use std::io::Write;
    writeln!(stdin, "{message}").unwrap();
    stdin.flush().unwrap();
}

/// Reads stdout lines until the answer to request `id`.
fn answer_to(lines: &mut impl Iterator<Item = std::io::Result<String>>, id: u64) -> Value {
    for line in lines {
        let message: Value = serde_json::from_str(&line.unwrap()).unwrap();
        if message["id"] == id {
            return message;
        }
    }
    panic!("the MCP server ended before answering request {id}");
}

#[tokio::test]
async fn an_mcp_call_on_stdio_continues_the_trace_its_meta_names() {
    use std::io::BufRead;

    let receiver = Receiver::start().await;
    let mock = mock_provider();
    let recorder = Recorder::start(&mock.url).await;
    let folder = tempfile::tempdir().unwrap();
    let ledger = folder.path().join("ledger.db");
    let mut child = support::intentgate()
        .args(["mcp", "--config", EXAMPLE_CONFIG, "--ledger"])
        .arg(&ledger)
        .env("INTENTGATE_MOCK_URL", &recorder.url)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let traceparent = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let answer = tokio::task::spawn_blocking(move || {
        let mut lines = std::io::BufReader::new(stdout).lines();
        send(
            &mut stdin,
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "traces-test", "version": "1"}}}),
        );
        answer_to(&mut lines, 1);
        send(
            &mut stdin,
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        );
        send(
            &mut stdin,
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                "name": "refund_order", "arguments": refund(),
                "_meta": {"traceparent": traceparent}}}),
        );
        let answer = answer_to(&mut lines, 2);
        // Closing stdin ends the server, which sends its last spans as it stops.
        drop(stdin);
        answer
    })
    .await
    .unwrap();
    assert_eq!(
        answer["result"]["structuredContent"]["status"], "done",
        "{answer}"
    );
    let spans = receiver
        .wait_for(SPANS_WAIT, |spans| {
            spans.iter().any(|span| span.name == "tools/call")
                && spans.iter().any(|span| span.name == "settle")
        })
        .await;
    let server = one(&spans, "tools/call");
    assert_eq!(server.trace_id, CALLER_TRACE);
    assert_eq!(server.parent_span_id, CALLER_SPAN);
    assert_eq!(server.attribute("gen_ai.tool.name"), Some("refund_order"));
    let call_span = one(&spans, "call");
    assert_eq!(call_span.parent_span_id, server.span_id);
    let request = one(&spans, "upstream.request");
    assert_eq!(request.trace_id, CALLER_TRACE);
    let sent: Vec<_> = recorder
        .seen()
        .into_iter()
        .filter(|(path, _)| path.contains("refund"))
        .collect();
    assert_eq!(
        sent[0].1.as_deref(),
        Some(format!("00-{CALLER_TRACE}-{}-01", request.span_id).as_str())
    );
    let _ = child.wait();
}

/// A gateway exporting to `receiver`, in front of the mock provider, on the example config
/// with its tools' timeouts at `tool_timeout_ms`.
struct Traced {
    mock: support::Running,
    gateway: support::Running,
    client: reqwest::Client,
    _folder: tempfile::TempDir,
}

impl Traced {
    /// Has the provider hold every answer for 2 s, past a 700 ms tool timeout, having made
    /// the refund (`committed`) or not.
    async fn answer_late(&self, committed: bool) {
        let commit = if committed { 1000 } else { 0 };
        support::set_faults(
            &self.client,
            &self.mock,
            Some(2_000),
            json!({"timeout": 1000, "commit_when_ambiguous": commit}),
        )
        .await;
    }
}

fn traced(receiver: &Receiver, tool_timeout_ms: u64) -> Traced {
    let folder = tempfile::tempdir().unwrap();
    let mock = mock_provider();
    let config = support::example_config(folder.path(), |text| {
        support::with_setting(&text, "timeout_ms", tool_timeout_ms)
    });
    let ledger = folder.path().join("ledger.db");
    let gateway = serve_with_stderr(
        config.to_str().unwrap(),
        ledger.to_str().unwrap(),
        &[
            ("INTENTGATE_MOCK_URL", &mock.url),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.url),
        ],
        Stdio::null(),
    );
    Traced {
        mock,
        gateway,
        client: support::client(),
        _folder: folder,
    }
}

#[tokio::test]
async fn a_repeat_links_to_the_call_that_executed_the_intent() {
    let receiver = Receiver::start().await;
    let stack = traced(&receiver, 10_000);
    let first = call(
        &stack.client,
        &stack.gateway.url,
        Some(&format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01")),
    )
    .await;
    assert_eq!(first["status"], "done", "{first}");
    // "Did my refund go through?": the same intent, asked again from another trace.
    let repeat_trace = "0af7651916cd43dd8448eb211c80319c";
    let repeat = call(
        &stack.client,
        &stack.gateway.url,
        Some(&format!("00-{repeat_trace}-b7ad6b7169203331-01")),
    )
    .await;
    assert_eq!(repeat["status"], "already_done", "{repeat}");

    let spans = receiver
        .wait_for(SPANS_WAIT, |spans| named(spans, "call").len() == 2)
        .await;
    let calls = named(&spans, "call");
    let executing = calls
        .iter()
        .find(|span| span.trace_id == CALLER_TRACE)
        .expect("the first call's span");
    let repeated = calls
        .iter()
        .find(|span| span.trace_id == repeat_trace)
        .expect("the repeat's span");
    assert_eq!(
        repeated.attribute("intentgate.decision"),
        Some("answer_from_ledger")
    );
    assert_eq!(
        repeated.attribute("intentgate.status"),
        Some("already_done")
    );
    assert_eq!(
        repeated.links,
        vec![(executing.trace_id.clone(), executing.span_id.clone())],
        "the repeat links to the executing call"
    );
    // Nothing was sent for the repeat.
    assert_eq!(named(&spans, "upstream.request").len(), 1);
}

#[tokio::test]
async fn the_sweepers_re_send_is_a_trace_of_its_own_linked_to_the_original_call() {
    let receiver = Receiver::start().await;
    // Short timeouts: the first request times out, and nothing was committed.
    let stack = traced(&receiver, 700);
    stack.answer_late(false).await;
    let first = call(
        &stack.client,
        &stack.gateway.url,
        Some(&format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01")),
    )
    .await;
    assert_eq!(first["status"], "pending_unknown", "{first}");
    // The provider is healthy again: the sweeper looks the intent up, finds nothing, and
    // sends the same request with the same key.
    support::set_faults(&stack.client, &stack.mock, None, json!({})).await;
    let spans = receiver
        .wait_for(Duration::from_secs(40), |spans| {
            spans
                .iter()
                .any(|span| span.name == "upstream.request" && span.trace_id != CALLER_TRACE)
        })
        .await;
    let original = one(
        &spans
            .iter()
            .filter(|span| span.trace_id == CALLER_TRACE)
            .cloned()
            .collect::<Vec<_>>(),
        "call",
    )
    .clone();
    let resend = spans
        .iter()
        .find(|span| span.name == "upstream.request" && span.trace_id != CALLER_TRACE)
        .unwrap();
    let sweep = spans
        .iter()
        .find(|span| span.name == "sweep" && span.trace_id == resend.trace_id)
        .unwrap_or_else(|| panic!("no sweep span in the re-send's trace: {spans:#?}"));
    assert_eq!(sweep.parent_span_id, "", "the sweep is a root span");
    assert!(
        sweep
            .links
            .contains(&(original.trace_id.clone(), original.span_id.clone())),
        "the sweep links to the original call: {sweep:#?}"
    );
    assert_eq!(
        sweep.attribute("intentgate.key_hash"),
        Some(intentgate_gate::trace::key_hash("default", "refund:8812:49.00").as_str())
    );
    for span in &spans {
        assert_no_argument_in(span, &["requested_by_customer", "8812"]);
    }
}

/// Asserts that no attribute of `span`, by name or value, holds one of `arguments`.
fn assert_no_argument_in(span: &Span, arguments: &[&str]) {
    for (name, value) in &span.attributes {
        for argument in arguments {
            assert!(
                !value.contains(argument) && !name.contains(argument),
                "{name}={value:?} holds the argument {argument:?}: {span:#?}"
            );
        }
    }
}

/// The spans of `trace_id` as an indented tree (name, then the attributes that tell the
/// story), roots first, children in the order they were received (the order they ended).
fn tree(spans: &[Span], trace_id: &str) -> String {
    fn walk(spans: &[&Span], parent: &str, depth: usize, text: &mut String) {
        for span in spans.iter().filter(|span| span.parent_span_id == parent) {
            let mut told: Vec<String> = [
                "intentgate.decision",
                "intentgate.status",
                "intentgate.found",
                "intentgate.attempt",
                "http.response.status_code",
            ]
            .iter()
            .filter_map(|name| span.attribute(name).map(|value| format!("{name}={value}")))
            .collect();
            if !span.links.is_empty() {
                told.push(format!("links to {:?}", span.links));
            }
            text.push_str(&format!(
                "{}{} {}\n",
                "  ".repeat(depth),
                span.name,
                told.join(" ")
            ));
            walk(spans, &span.span_id, depth + 1, text);
        }
    }
    let ours: Vec<&Span> = spans
        .iter()
        .filter(|span| span.trace_id == trace_id)
        .collect();
    let ids: HashSet<&str> = ours.iter().map(|span| span.span_id.as_str()).collect();
    let mut text = format!("trace {trace_id}\n");
    // Roots: no parent, or a parent outside the export (the caller's own span).
    let mut roots: Vec<&str> = ours
        .iter()
        .map(|span| span.parent_span_id.as_str())
        .filter(|parent| !ids.contains(parent))
        .collect();
    roots.dedup();
    for root in roots {
        walk(&ours, root, 1, &mut text);
    }
    text
}

/// The story of "my refund never came": the provider made the refund but its answer timed
/// out, so the gateway looked the intent up, found the refund and answered `done` without
/// sending it again, all in the caller's trace. Printed as a tree (`cargo test --test traces
/// -- --nocapture a_refund_that`).
#[tokio::test]
async fn a_refund_that_timed_out_and_was_found_by_its_lookup_is_one_trace() {
    let receiver = Receiver::start().await;
    let stack = traced(&receiver, 700);
    // The provider commits the refund, then holds its answer past the tool's timeout.
    stack.answer_late(true).await;
    let traceparent = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let answer = call(&stack.client, &stack.gateway.url, Some(&traceparent)).await;
    assert_eq!(answer["status"], "done", "{answer}");
    let spans = receiver
        .wait_for(SPANS_WAIT, |spans| {
            spans
                .iter()
                .any(|span| span.trace_id == CALLER_TRACE && span.name == "call")
        })
        .await;
    println!("{}", tree(&spans, CALLER_TRACE));
    let ours: Vec<Span> = spans
        .iter()
        .filter(|span| span.trace_id == CALLER_TRACE)
        .cloned()
        .collect();
    let call_span = one(&ours, "call");
    assert_eq!(call_span.attribute("intentgate.status"), Some("done"));
    let sent = one(&ours, "upstream.request");
    let lookup = one(&ours, "lookup");
    assert_eq!(lookup.attribute("intentgate.found"), Some("found"));
    // The request and the lookup both belong to this call (under its phases).
    let ids: HashSet<&str> = ours.iter().map(|span| span.span_id.as_str()).collect();
    assert!(ids.contains(sent.parent_span_id.as_str()), "{ours:#?}");
    assert!(ids.contains(lookup.parent_span_id.as_str()), "{ours:#?}");
}

#[tokio::test]
async fn json_log_lines_about_a_call_carry_its_trace_and_span_ids() {
    use std::io::Read;

    let receiver = Receiver::start().await;
    let mock = mock_provider();
    let folder = tempfile::tempdir().unwrap();
    let ledger = folder.path().join("ledger.db");
    let mut gateway = serve_with_stderr(
        EXAMPLE_CONFIG,
        ledger.to_str().unwrap(),
        &[
            ("INTENTGATE_MOCK_URL", &mock.url),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.url),
            ("INTENTGATE_LOG_FORMAT", "json"),
            ("RUST_LOG", "info,intentgate_gate=debug"),
        ],
        Stdio::piped(),
    );
    let traceparent = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let outcome = call(&support::client(), &gateway.url, Some(&traceparent)).await;
    assert_eq!(outcome["status"], "done", "{outcome}");
    let spans = receiver
        .wait_for(SPANS_WAIT, |spans| {
            spans.iter().any(|span| span.name == "call")
        })
        .await;
    let call_span = one(&spans, "call");

    let mut stderr = gateway.child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        stderr.read_to_string(&mut text).unwrap();
        text
    });
    gateway.terminate(Duration::from_secs(20));
    let stderr = reader.join().unwrap();
    let answered: Value = stderr
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|line| line["message"] == "upstream answered")
        .unwrap_or_else(|| panic!("no \"upstream answered\" line in:\n{stderr}"));
    assert_eq!(answered["trace_id"], CALLER_TRACE, "{answered}");
    assert_eq!(
        answered["span_id"],
        call_span.span_id.as_str(),
        "{answered}"
    );
    // Still the call's span, not a phase's: the tool and key as before.
    assert_eq!(answered["span"]["name"], "call", "{answered}");
    assert_eq!(answered["span"]["key"], "refund:8812:49.00", "{answered}");
}

#[tokio::test]
async fn a_grant_of_the_intent_api_continues_the_callers_trace() {
    let receiver = Receiver::start().await;
    let stack = traced(&receiver, 10_000);
    let grant = post(
        &stack.client,
        &format!("{}/v1/tools/refund_order_sdk/intents", stack.gateway.url),
        Some(&format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01")),
        json!({"arguments": {"order_id": "8812", "amount": "49.00"}}),
    )
    .await;
    assert_eq!(grant["action"], "execute", "{grant}");
    let spans = receiver
        .wait_for(SPANS_WAIT, |spans| {
            spans.iter().any(|span| span.name == "grant")
        })
        .await;
    let server = one(&spans, "POST /v1/tools/{name}/intents");
    assert_eq!(server.trace_id, CALLER_TRACE);
    assert_eq!(server.parent_span_id, CALLER_SPAN);
    let granted = one(&spans, "grant");
    assert_eq!(granted.parent_span_id, server.span_id);
    assert!(
        spans
            .iter()
            .any(|span| span.name == "ledger.create" && span.parent_span_id == granted.span_id),
        "{spans:#?}"
    );
}

#[tokio::test]
async fn a_reconciliation_run_is_a_trace_of_its_own() {
    let receiver = Receiver::start().await;
    let folder = tempfile::tempdir().unwrap();
    let mock = mock_provider();
    let config = support::example_config(folder.path(), |text| {
        format!(
            "{text}\nreconcile: {{every_seconds: 1, window_seconds: 3600, settle_seconds: 0}}\n"
        )
    });
    let ledger = folder.path().join("ledger.db");
    let gateway = serve_with_stderr(
        config.to_str().unwrap(),
        ledger.to_str().unwrap(),
        &[
            ("INTENTGATE_MOCK_URL", &mock.url),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.url),
        ],
        Stdio::null(),
    );
    let outcome = call(&support::client(), &gateway.url, None).await;
    assert_eq!(outcome["status"], "done", "{outcome}");
    let spans = receiver
        .wait_for(SPANS_WAIT, |spans| {
            spans.iter().any(|span| span.name == "reconcile")
                && spans.iter().any(|span| span.name == "reconcile.tool")
        })
        .await;
    let run = spans.iter().find(|span| span.name == "reconcile").unwrap();
    assert_eq!(run.parent_span_id, "", "a root span");
    assert!(run.attribute("intentgate.actor").is_some(), "{run:#?}");
    let tools: Vec<&Span> = spans
        .iter()
        .filter(|span| span.name == "reconcile.tool" && span.parent_span_id == run.span_id)
        .collect();
    assert!(
        tools
            .iter()
            .any(|span| span.attribute("intentgate.tool") == Some("refund_order")),
        "{tools:#?}"
    );
    // Not in any call's trace.
    let call_span = one(&spans, "call");
    assert_ne!(run.trace_id, call_span.trace_id);
}

#[tokio::test]
async fn sensitive_arguments_never_become_attributes() {
    let receiver = Receiver::start().await;
    let stack = traced(&receiver, 10_000);
    let (to, subject, body) = (
        "dana.customer@example.com",
        "Your refund of 49.00",
        "Dear Dana, your refund is on its way.",
    );
    let outcome = post(
        &stack.client,
        &format!("{}/v1/tools/send_email/call", stack.gateway.url),
        Some(&format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01")),
        json!({"arguments": {
            "to": to, "template_id": "refund_confirmation", "reference": "8812",
            "subject": subject, "body": body}}),
    )
    .await;
    assert_eq!(outcome["status"], "done", "{outcome}");
    let spans = receiver
        .wait_for(SPANS_WAIT, |spans| {
            spans.iter().any(|span| span.name == "settle")
        })
        .await;
    let call_span = one(&spans, "call");
    // The key is there only as its hash (the reference `8812` is part of the key).
    assert!(call_span.attribute("intentgate.key_hash").is_some());
    assert_eq!(call_span.attribute("intentgate.key"), None);
    for span in &spans {
        assert_no_argument_in(
            span,
            &[
                to,
                "dana.customer",
                subject,
                body,
                "refund_confirmation",
                "8812",
            ],
        );
    }
}

#[tokio::test]
async fn the_configs_telemetry_section_names_the_collector_when_no_variable_does() {
    let receiver = Receiver::start().await;
    let folder = tempfile::tempdir().unwrap();
    let mock = mock_provider();
    let section = format!(
        "\ntelemetry:\n  endpoint: {}\n  service_name: from-the-config\n  headers: {{x-team: \"${{TRACES_TEAM:-payments}}\"}}\n",
        receiver.url
    );
    let config = support::example_config(folder.path(), |text| format!("{text}{section}"));
    let ledger = folder.path().join("ledger.db");
    let gateway = serve_with_stderr(
        config.to_str().unwrap(),
        ledger.to_str().unwrap(),
        &[("INTENTGATE_MOCK_URL", &mock.url)],
        Stdio::null(),
    );
    let outcome = call(&support::client(), &gateway.url, None).await;
    assert_eq!(outcome["status"], "done", "{outcome}");
    let spans = receiver
        .wait_for(SPANS_WAIT, |spans| {
            spans.iter().any(|span| span.name == "call")
        })
        .await;
    assert_eq!(one(&spans, "call").service, "from-the-config");
}

#[tokio::test]
async fn an_mcp_call_over_http_continues_the_trace_of_its_traceparent_header() {
    let receiver = Receiver::start().await;
    let stack = traced(&receiver, 10_000);
    let request = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "refund_order", "arguments": refund()}});
    let response = stack
        .client
        .post(format!("{}/mcp", stack.gateway.url))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .header("traceparent", format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01"))
        .body(request.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let text = response.text().await.unwrap();
    assert!(text.contains("\"done\""), "{text}");
    let spans = receiver
        .wait_for(SPANS_WAIT, |spans| {
            spans.iter().any(|span| span.name == "call")
        })
        .await;
    let server = one(&spans, "tools/call");
    assert_eq!(server.trace_id, CALLER_TRACE);
    assert_eq!(server.parent_span_id, CALLER_SPAN);
    assert_eq!(one(&spans, "call").parent_span_id, server.span_id);
}

#[tokio::test]
async fn an_approval_is_a_span_with_its_decision_over_the_execution_it_starts() {
    const AGENT_KEY: &str = "agent-key-0123456789abcdef0123456789abcdef";
    const APPROVER_KEY: &str = "approver-key-0123456789abcdef0123456789abcd";
    let receiver = Receiver::start().await;
    let folder = tempfile::tempdir().unwrap();
    let mock = mock_provider();
    let config = support::example_config(folder.path(), |text| {
        let held = text.replacen(
            "    key: \"refund:{order_id}:{amount:.2}\"\n",
            "    key: \"refund:{order_id}:{amount:.2}\"\n    approval: {}\n",
            1,
        );
        support::with_api_keys(
            &held,
            &[
                ("agent", AGENT_KEY, "acme", "call"),
                ("approver", APPROVER_KEY, "acme", "approve"),
            ],
        )
    });
    let ledger = folder.path().join("ledger.db");
    let gateway = serve_with_stderr(
        config.to_str().unwrap(),
        ledger.to_str().unwrap(),
        &[
            ("INTENTGATE_MOCK_URL", &mock.url),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.url),
            (
                "INTENTGATE_ADMIN_TOKEN",
                "admin-token-0123456789abcdef0123456789abcdef",
            ),
        ],
        Stdio::null(),
    );
    let client = support::client();
    let held: Value = client
        .post(format!("{}/v1/tools/refund_order/call", gateway.url))
        .bearer_auth(AGENT_KEY)
        .json(&json!({"arguments": refund()}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(held["status"], "awaiting_approval", "{held}");
    let open: Value = client
        .get(format!("{}/v1/admin/approvals", gateway.url))
        .bearer_auth(APPROVER_KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = open["approvals"][0]["intent_id"].as_i64().unwrap();
    let approved: Value = client
        .post(format!("{}/v1/admin/approvals/{id}/approve", gateway.url))
        .bearer_auth(APPROVER_KEY)
        .json(&json!({"reason": "checked"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(approved["outcome"]["status"], "done", "{approved}");

    let spans = receiver
        .wait_for(SPANS_WAIT, |spans| {
            !named(spans, "approval").is_empty() && !named(spans, "upstream.request").is_empty()
        })
        .await;
    let approval = one(&spans, "approval");
    assert_eq!(
        approval.attribute("intentgate.approval.decision"),
        Some("approved")
    );
    assert_eq!(
        approval.attribute("intentgate.approval.actor"),
        Some("approver")
    );
    let request = one(&spans, "upstream.request");
    assert_eq!(
        request.trace_id, approval.trace_id,
        "the execution the approval started is in the approval's trace"
    );
    // The held call's own span says it was held.
    let call = one(&spans, "call");
    assert_eq!(
        call.attribute("intentgate.status"),
        Some("awaiting_approval")
    );
    assert_eq!(call.attribute("intentgate.decision"), Some("held"));
}
