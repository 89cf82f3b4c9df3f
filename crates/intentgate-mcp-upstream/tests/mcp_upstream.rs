//! `McpUpstream` against a real MCP server: `tests/python/refund_server.py`, run over stdio
//! with the official MCP Python SDK from the venv `.ci/run` makes (`target/mcp-python-venv`).
//! Without that venv the tests say they are skipped and why, except under `CI=true`, where
//! they fail.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use intentgate_core::outcome::Ambiguity;
use intentgate_core::{CallStatus, OutcomeClass, UpstreamObservation, classify};
use intentgate_gate::{LookupOutcome, SystemClock, Upstream, UpstreamCall};
use intentgate_http::spec::{ListFields, ListRecords};
use intentgate_mcp_upstream::{
    McpConnection, McpList, McpLookup, McpRecordPager, McpServer, McpTool, McpToolCall,
    McpTransport, McpUpstream,
};
use intentgate_test_support::mcp_python;
use intentgate_test_support::{CapturedLog, TempLedger};
use intentgate_test_support::{
    call, default_gate, get_order_tool, refund, refund_schema, refund_tool, refund_tool_with,
};
use serde_json::{Value, json};

/// A started refund server with its effects file.
struct Server {
    upstream: McpUpstream,
    state: tempfile::TempDir,
}

impl Server {
    /// The records of the server's effects, by idempotency key.
    fn effects(&self) -> BTreeMap<String, Value> {
        match std::fs::read_to_string(self.state.path().join("effects.json")) {
            Ok(text) => serde_json::from_str(&text).unwrap(),
            Err(_) => BTreeMap::new(),
        }
    }
}

fn refund_call() -> McpToolCall {
    McpToolCall {
        tool: "refund".into(),
        arguments: Some(json!({"order_id": "{order_id}", "amount": "{amount}"})),
        idempotency_key_argument: Some("idempotency_key".into()),
        not_processed: vec!["RATE LIMIT".into()],
    }
}

fn find_refund() -> McpLookup {
    McpLookup {
        call: McpToolCall {
            arguments: Some(json!({"order_id": "{order_id}"})),
            ..McpToolCall::new("find_refund")
        },
        found: "/refund".into(),
        external_id: None,
        key: Some("/idempotency_key".into()),
        match_fields: Default::default(),
    }
}

/// Starts the server with `refund_order` mapped onto `call` (and the `find_refund` lookup),
/// each call bounded by `timeout`.
async fn start(call: McpToolCall, timeout: Duration) -> Option<Server> {
    start_with(call, timeout, &[]).await
}

/// [`start`] with `env` added to the server's environment.
async fn start_with(call: McpToolCall, timeout: Duration, env: &[(&str, &str)]) -> Option<Server> {
    let python = mcp_python()?;
    let state = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/refund_server.py");
    let server = McpServer {
        name: "refunds".into(),
        transport: McpTransport::Stdio {
            command: python.display().to_string(),
            args: vec![script.display().to_string()],
            env: env
                .iter()
                .map(|(name, value)| (name.to_string(), value.to_string()))
                .chain([(
                    "REFUND_STATE".to_owned(),
                    state.path().join("effects.json").display().to_string(),
                )])
                .collect(),
        },
        timeout,
    };
    let connection = Arc::new(McpConnection::start(server).await.unwrap());
    let tools = BTreeMap::from([(
        "refund_order".to_owned(),
        McpTool {
            call,
            lookup: Some(find_refund()),
        },
    )]);
    Some(Server {
        upstream: McpUpstream::new(connection, tools),
        state,
    })
}

/// One execution of `refund_order` on `order` with the provider key `key`.
async fn execute(server: &Server, order: &str, key: &str) -> UpstreamObservation {
    let tool = refund_tool();
    let arguments = refund(order, json!(49.5));
    let intent_key = format!("refund:{order}:49.50");
    server
        .upstream
        .execute(UpstreamCall::for_intent(
            &tool,
            &arguments,
            &intent_key,
            Some(key),
            None,
            0,
        ))
        .await
}

/// The lookup of `refund_order` on `order` for the intent whose provider key is `key`: as the
/// gate makes it, with the key the record must carry.
async fn lookup(server: &Server, order: &str, key: &str) -> LookupOutcome {
    let tool = refund_tool();
    let arguments = refund(order, json!(49.5));
    let intent_key = format!("refund:{order}:49.50");
    server
        .upstream
        .lookup(UpstreamCall::for_intent(
            &tool,
            &arguments,
            &intent_key,
            Some(key),
            None,
            0,
        ))
        .await
}

fn status_of(observation: &UpstreamObservation) -> u16 {
    match observation {
        UpstreamObservation::Response { status, .. } => *status,
        other => panic!("not a response: {other:?}"),
    }
}

fn body_of(observation: &UpstreamObservation) -> &Value {
    match observation {
        UpstreamObservation::Response { body, .. } => body,
        other => panic!("not a response: {other:?}"),
    }
}

#[tokio::test]
async fn a_call_is_done_with_the_result_and_the_key_reaches_the_tool() {
    let Some(server) = start(refund_call(), Duration::from_secs(5)).await else {
        return;
    };
    let tools = server.upstream.connection().tools().unwrap();
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
    assert!(
        names.contains(&"refund") && names.contains(&"find_refund"),
        "{names:?}"
    );

    let observation = execute(&server, "8812", "ig_key_1").await;
    assert_eq!(
        classify(&observation),
        OutcomeClass::Done,
        "{observation:?}"
    );
    let body = body_of(&observation);
    assert_eq!(body["id"], "re_1");
    assert_eq!(body["order_id"], "8812");
    assert_eq!(body["amount"], "49.5");
    assert_eq!(body["idempotency_key"], "ig_key_1");

    // The same key again: the provider replays; one effect.
    let again = execute(&server, "8812", "ig_key_1").await;
    assert_eq!(body_of(&again)["id"], "re_1");
    assert_eq!(server.effects()["ig_key_1"]["effects"], 1);
}

#[tokio::test]
async fn the_key_goes_in_meta_when_no_argument_is_named() {
    let call = McpToolCall::new("refund_meta");
    let Some(server) = start(call, Duration::from_secs(5)).await else {
        return;
    };
    let observation = execute(&server, "8813", "ig_key_meta").await;
    assert_eq!(status_of(&observation), 200, "{observation:?}");
    assert_eq!(body_of(&observation)["idempotency_key"], "ig_key_meta");
    assert_eq!(server.effects()["ig_key_meta"]["effects"], 1);
}

#[tokio::test]
async fn is_error_is_a_refusal_unless_its_text_says_not_processed() {
    let Some(server) = start(refund_call(), Duration::from_secs(5)).await else {
        return;
    };
    let refused = execute(&server, "refuse-1", "k_refuse").await;
    assert_eq!(classify(&refused), OutcomeClass::Rejected, "{refused:?}");
    let message = body_of(&refused)["error"]["message"].as_str().unwrap();
    assert!(message.ends_with("card declined"), "{message}");

    let limited = execute(&server, "ratelimit-1", "k_limit").await;
    assert_eq!(
        classify(&limited),
        OutcomeClass::NotProcessed {
            retry_after_ms: None,
            retry: true,
        },
        "{limited:?}"
    );
    assert!(server.effects().is_empty());
}

#[tokio::test]
async fn a_call_the_server_does_not_accept_is_not_executed() {
    let unknown = McpToolCall {
        tool: "no_such_tool".into(),
        ..refund_call()
    };
    let Some(server) = start(unknown, Duration::from_secs(5)).await else {
        return;
    };
    // This SDK answers an unknown tool with an `isError` result.
    let observation = execute(&server, "8814", "k_unknown").await;
    assert_eq!(
        classify(&observation),
        OutcomeClass::Rejected,
        "{observation:?}"
    );
    drop(server);

    let Some(server) = start(refund_call(), Duration::from_secs(5)).await else {
        return;
    };
    // A JSON-RPC error -32602 (invalid params).
    let invalid = execute(&server, "invalid-1", "k_invalid").await;
    assert_eq!(status_of(&invalid), 429, "{invalid:?}");
    assert_eq!(body_of(&invalid)["error"]["type"], "not_accepted");
    assert_eq!(body_of(&invalid)["error"]["code"], -32602);
    assert_eq!(
        classify(&invalid),
        OutcomeClass::NotProcessed {
            retry_after_ms: None,
            retry: true,
        }
    );
    assert!(server.effects().is_empty());
}

#[tokio::test]
async fn a_slow_reply_past_the_timeout_is_ambiguous() {
    let Some(server) = start(refund_call(), Duration::from_millis(800)).await else {
        return;
    };
    let observation = execute(&server, "slow-1", "k_slow").await;
    assert_eq!(observation, UpstreamObservation::Timeout);
    assert_eq!(
        classify(&observation),
        OutcomeClass::Ambiguous {
            why: Ambiguity::Timeout
        }
    );
}

#[tokio::test]
async fn a_reply_lost_after_the_effect_is_ambiguous_and_the_server_restarted() {
    let Some(server) = start(refund_call(), Duration::from_secs(5)).await else {
        return;
    };
    let observation = execute(&server, "die-1", "k_die").await;
    assert!(
        matches!(observation, UpstreamObservation::Dropped { .. }),
        "{observation:?}"
    );
    assert_eq!(server.effects()["k_die"]["effects"], 1);

    assert!(
        server
            .upstream
            .connection()
            .wait_up(Duration::from_secs(30))
            .await
    );
    // The restart may publish its session a moment after the old one is seen closed.
    let mut next = execute(&server, "8815", "k_after").await;
    for _ in 0..100 {
        if !matches!(next, UpstreamObservation::NotSent { .. }) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        next = execute(&server, "8815", "k_after").await;
    }
    assert_eq!(classify(&next), OutcomeClass::Done, "{next:?}");
    assert_eq!(server.effects()["k_after"]["effects"], 1);
}

#[tokio::test]
async fn a_server_killed_mid_call_is_ambiguous_and_the_next_call_after_the_restart_works() {
    let Some(server) = start(refund_call(), Duration::from_secs(5)).await else {
        return;
    };
    let pid = std::fs::read_to_string(server.state.path().join("pid")).unwrap();
    let kill = async {
        // The slow call records its refund, then sleeps 3 s before answering.
        for _ in 0..500 {
            if server.effects().contains_key("k_killed") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let killed = std::process::Command::new("kill")
            .args(["-KILL", pid.trim()])
            .status()
            .unwrap();
        assert!(killed.success());
    };
    let (observation, ()) = tokio::join!(execute(&server, "slow-8850", "k_killed"), kill);
    assert!(
        matches!(observation, UpstreamObservation::Dropped { .. }),
        "{observation:?}"
    );
    assert_eq!(
        classify(&observation),
        OutcomeClass::Ambiguous {
            why: Ambiguity::Dropped
        }
    );
    assert!(
        server
            .upstream
            .connection()
            .wait_up(Duration::from_secs(30))
            .await
    );
    let mut next = execute(&server, "8851", "k_after_kill").await;
    for _ in 0..100 {
        if !matches!(next, UpstreamObservation::NotSent { .. }) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        next = execute(&server, "8851", "k_after_kill").await;
    }
    assert_eq!(classify(&next), OutcomeClass::Done, "{next:?}");
    let pid_after = std::fs::read_to_string(server.state.path().join("pid")).unwrap();
    assert_ne!(pid, pid_after, "the server was restarted");
}

#[tokio::test]
async fn calls_while_the_server_is_down_are_not_sent_and_its_stderr_is_logged() {
    let log = CapturedLog::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(log.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    // The test's runtime is one thread, so the server's stderr task logs here too.
    let _guard = tracing::subscriber::set_default(subscriber);
    let Some(server) = start_with(
        refund_call(),
        Duration::from_secs(1),
        &[("REFUND_STARTS_MAX", "1")],
    )
    .await
    else {
        return;
    };
    let dropped = execute(&server, "die-2", "k_die_2").await;
    assert!(
        matches!(dropped, UpstreamObservation::Dropped { .. }),
        "{dropped:?}"
    );
    // Every restart exits at once: the server stays down.
    let connection = server.upstream.connection();
    for _ in 0..200 {
        if !connection.is_up() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!connection.is_up());
    let observation = execute(&server, "8820", "k_down").await;
    assert!(
        matches!(observation, UpstreamObservation::NotSent { .. }),
        "{observation:?}"
    );
    assert_eq!(
        classify(&observation),
        OutcomeClass::NotProcessed {
            retry_after_ms: None,
            retry: true,
        }
    );
    // A lookup waits for the server within the timeout, then knows nothing.
    assert!(matches!(
        lookup(&server, "die-2", "k_die").await,
        LookupOutcome::Failed(_)
    ));
    assert!(!server.effects().contains_key("k_down"));

    // A refused start's stderr line (every restart is refused), its control character
    // escaped. Starting Python takes seconds on a loaded machine, so the wait is generous; it
    // ends as soon as a line is in. The other tests of this binary run beside this one
    // without a subscriber: if one of them logged the stderr line first, while this test's
    // subscriber was being registered, `tracing` may have cached that nobody listens to it.
    // Asking every callsite again lets the next restart's line through.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !log.text().contains(" refused \\u{7}") && tokio::time::Instant::now() < deadline {
        tracing::callsite::rebuild_interest_cache();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let text = log.text();
    assert!(text.contains(" refused \\u{7}"), "{text}");
    assert!(!text.contains('\u{7}'), "{text}");
}

#[tokio::test]
async fn a_streamable_http_server_is_called_with_the_configured_headers() {
    let Some(python) = mcp_python() else {
        return;
    };
    let state = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/refund_server.py");
    let mut process = tokio::process::Command::new(python)
        .arg(script)
        .env("REFUND_STATE", state.path().join("effects.json"))
        .env("REFUND_HTTP_PORT", port.to_string())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut listening = false;
    for _ in 0..1200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            listening = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(listening, "the HTTP server did not listen on {port}");
    let server = McpServer {
        name: "refunds-http".into(),
        transport: McpTransport::Http {
            url: format!("http://127.0.0.1:{port}/mcp"),
            headers: BTreeMap::from([("x-refund-token".to_owned(), "t0ken".to_owned())]),
        },
        timeout: Duration::from_secs(5),
    };
    let connection = Arc::new(McpConnection::start(server).await.unwrap());
    let header = McpTool {
        call: McpToolCall {
            arguments: Some(json!({"name": "x-refund-token"})),
            ..McpToolCall::new("request_header")
        },
        lookup: None,
    };
    let tools = BTreeMap::from([
        (
            "refund_order".to_owned(),
            McpTool {
                call: refund_call(),
                lookup: Some(find_refund()),
            },
        ),
        ("get_order".to_owned(), header),
    ]);
    let server = Server {
        upstream: McpUpstream::new(connection, tools),
        state,
    };

    let observation = execute(&server, "8830", "k_http").await;
    assert_eq!(
        classify(&observation),
        OutcomeClass::Done,
        "{observation:?}"
    );
    assert_eq!(body_of(&observation)["idempotency_key"], "k_http");
    assert!(matches!(
        lookup(&server, "8830", "k_http").await,
        LookupOutcome::Found { external_id: Some(id), .. } if id == "re_1"
    ));

    let read = get_order_tool(Duration::from_secs(5));
    let arguments = json!({"order_id": "8830"});
    let seen = server
        .upstream
        .execute(UpstreamCall::without_intent(&read, &arguments))
        .await;
    assert_eq!(body_of(&seen)["value"], "t0ken", "{seen:?}");

    // The server is gone and nothing listens on its port: a call can't be sent at all, so
    // it is not processed (retried, then not executed), never ambiguous.
    process.kill().await.unwrap();
    let observation = execute(&server, "8831", "k_http_down").await;
    assert!(
        matches!(observation, UpstreamObservation::NotSent { .. }),
        "{observation:?}"
    );
    assert!(
        matches!(classify(&observation), OutcomeClass::NotProcessed { .. }),
        "{observation:?}"
    );
}

#[tokio::test]
async fn a_lookup_finds_an_effect_or_says_not_found() {
    let Some(server) = start(refund_call(), Duration::from_secs(5)).await else {
        return;
    };
    assert_eq!(
        lookup(&server, "8816", "k_lookup").await,
        LookupOutcome::NotFound
    );
    execute(&server, "8816", "k_lookup").await;
    // Another intent's lookup of the same order finds the record and proves it is not its.
    assert_eq!(
        lookup(&server, "8816", "k_other").await,
        LookupOutcome::NotFound
    );
    match lookup(&server, "8816", "k_lookup").await {
        LookupOutcome::Found {
            external_id,
            result,
        } => {
            assert_eq!(external_id.as_deref(), Some("re_1"));
            assert_eq!(result["idempotency_key"], "k_lookup");
        }
        other => panic!("{other:?}"),
    }
}

/// The tool's timeout in the tests through a gate, which bounds the lookup that waits for the
/// restarted server: a Python server takes seconds to start on a loaded machine.
const GATE_TIMEOUT: Duration = Duration::from_secs(20);

fn gate_refund_tool() -> intentgate_core::ToolDefinition {
    refund_tool_with(
        refund_schema(json!({"type": ["number", "string"]})),
        GATE_TIMEOUT,
    )
}

#[tokio::test]
async fn the_gate_settles_a_refund_whose_server_died_after_committing_as_done() {
    let Some(server) = start(refund_call(), GATE_TIMEOUT).await else {
        return;
    };
    let ledger = TempLedger::new();
    let Server { upstream, state } = server;
    let gate = default_gate(
        vec![gate_refund_tool()],
        ledger.ledger.clone(),
        Arc::new(upstream),
        Arc::new(SystemClock),
    );
    let outcome = call(&gate, "refund_order", refund("die-8817", json!(49.5))).await;
    assert_eq!(outcome.status, CallStatus::Done, "{outcome:?}");
    assert_eq!(outcome.external_id.as_deref(), Some("re_1"));

    let effects: BTreeMap<String, Value> =
        serde_json::from_str(&std::fs::read_to_string(state.path().join("effects.json")).unwrap())
            .unwrap();
    assert_eq!(effects.len(), 1, "{effects:?}");
    let record = effects.values().next().unwrap();
    assert_eq!(record["effects"], 1);
    assert_eq!(record["order_id"], "die-8817");
}

#[tokio::test]
async fn through_the_gate_a_refusal_is_rejected_and_an_unaccepted_call_not_executed() {
    let Some(server) = start(refund_call(), GATE_TIMEOUT).await else {
        return;
    };
    let ledger = TempLedger::new();
    let Server { upstream, state } = server;
    let gate = default_gate(
        vec![gate_refund_tool()],
        ledger.ledger.clone(),
        Arc::new(upstream),
        Arc::new(SystemClock),
    );
    let refused = call(&gate, "refund_order", refund("refuse-8840", json!(49.5))).await;
    assert_eq!(refused.status, CallStatus::Rejected, "{refused:?}");
    let limited = call(&gate, "refund_order", refund("ratelimit-8841", json!(49.5))).await;
    assert_eq!(limited.status, CallStatus::NotExecuted, "{limited:?}");
    let invalid = call(&gate, "refund_order", refund("invalid-8842", json!(49.5))).await;
    assert_eq!(invalid.status, CallStatus::NotExecuted, "{invalid:?}");
    assert!(!state.path().join("effects.json").exists());
}

/// The listing of `list_refunds`, read with `items` at `items`.
fn list_refunds(arguments: Option<Value>, items: &str) -> McpList {
    McpList {
        call: McpToolCall {
            arguments,
            ..McpToolCall::new("list_refunds")
        },
        records: ListRecords {
            items: items.into(),
            next_cursor: Some("/next_cursor".into()),
            has_more: None,
            fields: ListFields {
                idempotency_key: Some("/idempotency_key".into()),
                intent_key: None,
                external_id: "/id".into(),
                amount: Some("/amount".into()),
                amount_argument: None,
                amount_minor_units: None,
                subject: Some("/order_id".into()),
            },
            match_fields: BTreeMap::new(),
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_pages_with_the_servers_cursor_and_a_bad_page_is_an_error() {
    let Some(server) = start_with(
        refund_call(),
        Duration::from_secs(5),
        &[("REFUND_PAGE_MAX", "2")],
    )
    .await
    else {
        return;
    };
    for (order, key) in [("ord_1", "k1"), ("ord_2", "k2"), ("ord_3", "k3")] {
        let observation = execute(&server, order, key).await;
        assert!(
            matches!(
                observation,
                UpstreamObservation::Response { status: 200, .. }
            ),
            "{observation:?}"
        );
    }
    let connection = server.upstream.connection().clone();
    let window = (0, i64::MAX);
    // No template: the four values as they are, the cursor once the server gave one.
    let mut pager = McpRecordPager::new(
        connection.clone(),
        list_refunds(None, "/refunds"),
        window.0,
        window.1,
        1000,
    )
    .unwrap();
    let mut pages = Vec::new();
    while let Some(page) = pager.next_page().await.unwrap() {
        pages.push(
            page.iter()
                .map(|record| record.subject.clone().unwrap())
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(pages, [vec!["ord_1", "ord_2"], vec!["ord_3"]]);
    assert_eq!(pager.next_page().await.unwrap(), None);

    // A template that never passes the cursor on: the server answers the first page again,
    // with the cursor the pager already holds, and the listing stops instead of going round.
    let stuck = list_refunds(
        Some(json!({"since_ms": "{since_ms}", "until_ms": "{until_ms}", "cursor": "0"})),
        "/refunds",
    );
    let mut pager =
        McpRecordPager::new(connection.clone(), stuck, window.0, window.1, 1000).unwrap();
    assert_eq!(pager.next_page().await.unwrap().unwrap().len(), 2);
    let error = pager.next_page().await.unwrap_err();
    assert!(error.contains("would loop"), "{error}");

    // A page without records where the config says, and a refusal of the call.
    let mut pager = McpRecordPager::new(
        connection.clone(),
        list_refunds(None, "/data"),
        window.0,
        window.1,
        1000,
    )
    .unwrap();
    let error = pager.next_page().await.unwrap_err();
    assert!(error.contains("no array of records at `/data`"), "{error}");
    let missing = list_refunds(Some(json!({"limit": "{limit}"})), "/refunds");
    let mut pager =
        McpRecordPager::new(connection.clone(), missing, window.0, window.1, 1000).unwrap();
    let error = pager.next_page().await.unwrap_err();
    assert!(
        error.contains("listing tool `list_refunds` answered an error"),
        "{error}"
    );
    // The page that failed is asked for again.
    assert!(pager.next_page().await.is_err());
    assert!(McpRecordPager::new(connection, list_refunds(None, "/refunds"), 0, 1, 0).is_err());
}
