//! The MCP server in process, through the Rust SDK's own client over an in-memory pipe, in
//! front of a gate with a real SQLite ledger and the fake provider. The acceptance tests
//! with the Python SDK over the real transports are in `tests/python/`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use intentgate_core::{CallStatus, Effect, IntentStatus, ToolDefinition};
use intentgate_gate::SystemClock;
use intentgate_ledger::{Ledger, SqliteLedger, SqliteOptions, ToolFlag};
use intentgate_mcp::{
    INTENT_ID_META_KEY, McpOptions, McpService, SWITCHED_OFF_SENTENCE, ToolHints,
};
use intentgate_mock::{FakeProvider, FaultPlan};
use intentgate_test_support::{
    HarnessOptions, TempLedger, client_tool, default_gate, get_order_tool, refund_tool_with,
    wait_until,
};
use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientRequest, ErrorCode, JsonObject,
    RequestMetaObject,
};
use rmcp::service::{PeerRequestOptions, RoleClient, RunningService, ServiceError};
use serde_json::{Value, json};

/// Bytes buffered in each direction of the in-memory pipe.
const PIPE_BYTES: usize = 64 * 1024;

fn refund_tool() -> ToolDefinition {
    let schema = json!({
        "type": "object",
        "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}, "reason": {"type": "string"}},
        "required": ["order_id", "amount"],
        "additionalProperties": false
    });
    refund_tool_with(schema, Duration::from_secs(2))
}

fn charge_tool() -> ToolDefinition {
    let schema = json!({
        "type": "object",
        "properties": {"customer_id": {"type": "string"}, "amount": {"type": "number"}},
        "required": ["customer_id", "amount"]
    });
    ToolDefinition::new(
        "charge_card",
        "Charge a card.",
        Effect::SideEffect,
        schema,
        Some("charge:{customer_id}:{amount:.2}:{intent_id}"),
        Duration::from_secs(2),
        2,
    )
    .unwrap()
}

fn set_status_tool() -> ToolDefinition {
    let schema = json!({"type": "object", "properties": {"status": {"type": "string"}}});
    ToolDefinition::new(
        "set_ticket_status",
        "Set a ticket's status.",
        Effect::Idempotent,
        schema,
        None,
        Duration::from_secs(1),
        2,
    )
    .unwrap()
}

struct Harness {
    /// Keeps the ledger's folder.
    _fixture: intentgate_test_support::Harness,
    ledger: Arc<SqliteLedger>,
    provider: Arc<FakeProvider>,
    service: McpService,
}

impl Harness {
    fn new(plan: FaultPlan) -> Harness {
        let fixture = intentgate_test_support::Harness::build(HarnessOptions {
            plan,
            ..HarnessOptions::new(vec![
                refund_tool(),
                charge_tool(),
                get_order_tool(Duration::from_secs(1)),
                set_status_tool(),
            ])
        });
        let hints = BTreeMap::from([(
            "refund_order".to_owned(),
            ToolHints {
                destructive: Some(true),
                open_world: Some(true),
                ..ToolHints::default()
            },
        )]);
        let service = McpService::new(fixture.gate.clone(), &hints, McpOptions::default());
        Harness {
            ledger: fixture.ledger.clone(),
            provider: fixture.provider.clone(),
            _fixture: fixture,
            service,
        }
    }

    /// A client connected to the service over an in-memory pipe.
    async fn connect(&self) -> RunningService<RoleClient, ()> {
        let (server_io, client_io) = tokio::io::duplex(PIPE_BYTES);
        let service = self.service.clone();
        tokio::spawn(async move {
            let running = service.serve(server_io).await.expect("the server starts");
            let _ = running.waiting().await;
        });
        ().serve(client_io).await.expect("the client connects")
    }
}

fn arguments(value: Value) -> JsonObject {
    match value {
        Value::Object(object) => object,
        _ => panic!("arguments are an object"),
    }
}

fn call(tool: &str, value: Value) -> CallToolRequestParams {
    CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments(value))
}

fn with_intent_id(mut params: CallToolRequestParams, intent_id: Value) -> CallToolRequestParams {
    let mut meta = RequestMetaObject::new();
    meta.insert(INTENT_ID_META_KEY.to_owned(), intent_id);
    params.meta = Some(meta);
    params
}

fn refund(order: &str) -> Value {
    json!({"order_id": order, "amount": 49, "reason": "duplicate"})
}

/// The outcome object of a result, checked to be the same as structured content and text.
fn outcome(result: &CallToolResult) -> Value {
    let structured = result
        .structured_content
        .clone()
        .expect("structured content");
    let text = result.content[0].as_text().expect("a text block");
    assert_eq!(
        serde_json::from_str::<Value>(&text.text).unwrap(),
        structured
    );
    structured
}

#[tokio::test]
async fn tools_are_listed_with_their_schemas_descriptions_and_annotations() {
    let h = Harness::new(FaultPlan::none());
    let client = h.connect().await;
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            "charge_card",
            "get_order",
            "refund_order",
            "set_ticket_status"
        ]
    );
    let tool = |name: &str| tools.iter().find(|tool| tool.name == name).unwrap();

    let refund = tool("refund_order");
    assert_eq!(
        refund.description.as_deref(),
        Some(
            "Refund an order. Safe to call once per order. Repeated calls return the original result."
        )
    );
    let annotations = refund.annotations.as_ref().unwrap();
    assert_eq!(
        (
            annotations.read_only_hint,
            annotations.idempotent_hint,
            annotations.destructive_hint,
            annotations.open_world_hint
        ),
        (Some(false), Some(true), Some(true), Some(true))
    );
    assert_eq!(
        Value::Object((*refund.input_schema).clone()),
        refund_tool().input_schema
    );

    let charge = tool("charge_card").annotations.clone().unwrap();
    assert_eq!(
        (charge.idempotent_hint, charge.destructive_hint),
        (Some(true), None),
        "hints not configured are left to the client's defaults"
    );
    let read = tool("get_order").annotations.clone().unwrap();
    assert_eq!(read.read_only_hint, Some(true));
    assert_eq!(
        tool("get_order").description.as_deref(),
        Some("Get an order.")
    );
    let update = tool("set_ticket_status").annotations.clone().unwrap();
    assert_eq!(
        (update.read_only_hint, update.idempotent_hint),
        (Some(false), Some(true))
    );
    for tool in &tools {
        let schema = tool.output_schema.as_ref().expect("an output schema");
        assert_eq!(schema["required"], json!(["status", "message", "tool"]));
    }
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn every_outcome_is_a_tool_result_that_matches_the_output_schema() {
    let h = Harness::new(FaultPlan::none());
    let client = h.connect().await;
    let tools = client.list_all_tools().await.unwrap();
    let schema = Value::Object((*tools[0].output_schema.clone().unwrap()).clone());
    let validator = jsonschema::validator_for(&schema).unwrap();

    let cases = [
        (call("refund_order", refund("1")), CallStatus::Done),
        (call("refund_order", refund("1")), CallStatus::AlreadyDone),
        (
            call(
                "refund_order",
                json!({"order_id": "1", "amount": 49, "reason": "damaged"}),
            ),
            CallStatus::Conflict,
        ),
        (
            call("refund_order", json!({"order_id": 7})),
            CallStatus::InvalidArguments,
        ),
        (
            call("charge_card", json!({"customer_id": "c", "amount": 5})),
            CallStatus::InvalidArguments,
        ),
        (
            call("get_order", json!({"order_id": "8812"})),
            CallStatus::Done,
        ),
    ];
    for (params, expected) in cases {
        let result = client.call_tool(params).await.unwrap();
        let outcome = outcome(&result);
        assert_eq!(outcome["status"], expected.as_str(), "{outcome}");
        assert_eq!(
            result.is_error,
            Some(expected.needs_model_action()),
            "{outcome}"
        );
        assert!(validator.is_valid(&outcome), "{outcome} against {schema}");
    }
    assert_eq!(h.provider.effect_count("refund:1:49.00"), 1);
    client.cancel().await.unwrap();
}

// Found by attack: numbers went through an f64 on their way to the key, so
// `49.9999999999999999` was refunded as 50.00. The JSON-RPC message parsing (untagged and
// flattened types in the SDK) must keep a number's text, and a numeric request id still work.
#[tokio::test]
async fn amounts_cross_json_rpc_with_their_text() {
    let h = Harness::new(FaultPlan::none());
    let client = h.connect().await;
    let arguments: Value = serde_json::from_str(
        r#"{"order_id": "1", "amount": 49.9999999999999999, "reason": "duplicate"}"#,
    )
    .unwrap();
    let result = client
        .call_tool(call("refund_order", arguments))
        .await
        .unwrap();
    let refused = outcome(&result);
    assert_eq!(refused["status"], "invalid_arguments", "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("`49.9999999999999999` has more than 2 decimal places"),
        "{refused}"
    );
    assert_eq!(h.provider.requests(), 0);

    let arguments: Value =
        serde_json::from_str(r#"{"order_id": "1", "amount": 49.990, "reason": "duplicate"}"#)
            .unwrap();
    let result = client
        .call_tool(call("refund_order", arguments))
        .await
        .unwrap();
    let done = outcome(&result);
    assert_eq!(done["status"], "done", "{done}");
    assert_eq!(done["intent_key"], "refund:1:49.99");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn unknown_tools_and_malformed_intent_ids_are_invalid_params_errors() {
    let h = Harness::new(FaultPlan::none());
    let client = h.connect().await;
    let error = client
        .call_tool(call("refund_everything", json!({})))
        .await
        .unwrap_err();
    let ServiceError::McpError(error) = error else {
        panic!("a JSON-RPC error, got {error:?}")
    };
    assert_eq!(error.code, ErrorCode::INVALID_PARAMS);
    assert!(error.message.contains("refund_everything"), "{error:?}");

    for bad in [json!(42), json!(""), json!("x".repeat(257))] {
        let params = with_intent_id(
            call("charge_card", json!({"customer_id": "c", "amount": 5})),
            bad.clone(),
        );
        let error = client.call_tool(params).await.unwrap_err();
        assert!(
            matches!(&error, ServiceError::McpError(error) if error.code == ErrorCode::INVALID_PARAMS),
            "{bad}: {error:?}"
        );
    }
    assert_eq!(h.provider.requests(), 0, "nothing was executed");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn the_application_intent_id_arrives_in_meta() {
    let h = Harness::new(FaultPlan::none());
    let client = h.connect().await;
    let charge = |id: &str| {
        with_intent_id(
            call("charge_card", json!({"customer_id": "c", "amount": 5})),
            json!(id),
        )
    };
    let first = outcome(&client.call_tool(charge("a")).await.unwrap());
    assert_eq!(first["intent_key"], "charge:c:5.00:a");
    assert_eq!(first["status"], "done");
    let again = outcome(&client.call_tool(charge("a")).await.unwrap());
    assert_eq!(again["status"], "already_done");
    let other = outcome(&client.call_tool(charge("b")).await.unwrap());
    assert_eq!(other["status"], "done");
    assert_eq!(
        (
            h.provider.effect_count("charge:c:5.00:a"),
            h.provider.effect_count("charge:c:5.00:b")
        ),
        (1, 1)
    );
    client.cancel().await.unwrap();
}

// Found by a new user: a call that lacked the application's intent id answered
// `invalid_arguments` with "fix the arguments and call again", which the model can't do, so
// it retried; and `charge_card` was listed with nothing saying it needs the id.
#[tokio::test]
async fn a_call_without_the_intent_id_says_so_and_every_repeat_gets_the_same_answer() {
    let h = Harness::new(FaultPlan::none());
    let client = h.connect().await;
    let tools = client.list_all_tools().await.unwrap();
    let description = |name: &str| {
        tools
            .iter()
            .find(|tool| tool.name == name)
            .and_then(|tool| tool.description.clone())
            .unwrap()
            .into_owned()
    };
    let charge_description = description("charge_card");
    assert!(
        charge_description.contains(&format!("MCP _meta \"{INTENT_ID_META_KEY}\"")),
        "{charge_description}"
    );
    assert!(
        charge_description.ends_with("Repeated calls return the original result."),
        "{charge_description}"
    );
    assert!(!description("refund_order").contains(INTENT_ID_META_KEY));

    // Wrong arguments too: the missing id is what the model must hear first.
    for arguments in [
        json!({"customer_id": "c", "amount": 5}),
        json!({"customer_id": 7}),
    ] {
        let mut answers = Vec::new();
        for _ in 0..3 {
            let result = client
                .call_tool(call("charge_card", arguments.clone()))
                .await
                .unwrap();
            assert_eq!(result.is_error, Some(true));
            answers.push(outcome(&result));
        }
        let first = &answers[0];
        assert_eq!(first["status"], "invalid_arguments", "{first}");
        assert_eq!(first["reason"], "missing_intent_id", "{first}");
        let message = first["message"].as_str().unwrap();
        assert!(message.contains("Do not retry charge_card"), "{message}");
        assert!(message.contains("tell the user"), "{message}");
        assert!(
            !message.to_lowercase().contains("fix the arguments"),
            "{message}"
        );
        let errors = first["errors"].to_string();
        assert!(errors.contains(INTENT_ID_META_KEY), "{errors}");
        let keys: Vec<&str> = first
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys[..3], ["status", "reason", "message"]);
        assert!(answers.iter().all(|answer| answer == first), "{answers:?}");
    }
    assert_eq!(h.provider.requests(), 0, "nothing was executed");
    assert!(
        h.ledger
            .intents(
                &Default::default(),
                intentgate_ledger::Order::Oldest,
                None,
                10
            )
            .await
            .unwrap()
            .is_empty(),
        "nothing was recorded"
    );
    client.cancel().await.unwrap();
}

// Found by a new user: over MCP `status` came after the whole `result`, since the outcome
// passed through a JSON object whose members were sorted by name. Read as bytes off the
// wire, not through a client's parser.
#[tokio::test]
async fn structured_content_starts_with_the_status_on_the_wire() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    let h = Harness::new(FaultPlan::none());
    let (server_io, client_io) = tokio::io::duplex(PIPE_BYTES);
    let service = h.service.clone();
    tokio::spawn(async move {
        let running = service.serve(server_io).await.expect("the server starts");
        let _ = running.waiting().await;
    });
    let (read, mut write) = tokio::io::split(client_io);
    let mut lines = BufReader::new(read).lines();
    let mut send = async |message: Value| {
        let mut line = message.to_string();
        line.push('\n');
        write.write_all(line.as_bytes()).await.unwrap();
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "bytes", "version": "1"}}}),
    )
    .await;
    let initialized = lines.next_line().await.unwrap().unwrap();
    assert!(initialized.contains("\"protocolVersion\""), "{initialized}");
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
    let calls = [
        (2, "refund_order", refund("1"), "done"),
        (3, "refund_order", refund("1"), "already_done"),
        (4, "get_order", json!({"order_id": "8812"}), "done"),
        (
            5,
            "charge_card",
            json!({"customer_id": "c", "amount": 5}),
            "invalid_arguments",
        ),
    ];
    for (id, tool, arguments, status) in calls {
        send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}}))
        .await;
        let answer = lines.next_line().await.unwrap().unwrap();
        let structured = answer
            .split_once(r#""structuredContent":"#)
            .unwrap_or_else(|| panic!("no structured content: {answer}"))
            .1;
        assert!(
            structured.starts_with(&format!(r#"{{"status":"{status}","#)),
            "{answer}"
        );
        // The text block models read holds the same JSON, in the same order.
        assert!(
            answer.contains(&format!(r#""text":"{{\"status\":\"{status}\","#)),
            "{answer}"
        );
        let parsed: Value = serde_json::from_str(&answer).unwrap();
        let keys: Vec<&str> = parsed["result"]["structuredContent"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let message_at = keys.iter().position(|key| *key == "message").unwrap();
        assert!(message_at <= 2, "{keys:?}");
        if let Some(result_at) = keys.iter().position(|key| *key == "result") {
            assert!(result_at > message_at, "{keys:?}");
        }
    }
}

// Regression guard for the cancellation rule: a client that gives up on a call (its request
// timeout sends notifications/cancelled) must not cancel the upstream call in flight, or
// the intent would be left in_flight and the re-issued call would find it unknown.
#[tokio::test]
async fn a_call_given_up_by_the_client_runs_to_its_end_and_a_reissued_call_gets_its_answer() {
    let mut plan = FaultPlan::none();
    plan.latency_min = Duration::from_millis(400);
    plan.latency_max = Duration::from_millis(400);
    let h = Harness::new(plan);
    let client = h.connect().await;
    let request =
        ClientRequest::CallToolRequest(CallToolRequest::new(call("refund_order", refund("slow"))));
    let handle = client
        .peer()
        .send_request_with_option(
            request,
            PeerRequestOptions::with_timeout(Duration::from_millis(50)),
        )
        .await
        .unwrap();
    let given_up = handle.await_response().await;
    assert!(
        matches!(given_up, Err(ServiceError::Timeout { .. })),
        "{given_up:?}"
    );

    let reissued = outcome(
        &client
            .call_tool(call("refund_order", refund("slow")))
            .await
            .unwrap(),
    );
    assert_eq!(reissued["status"], "already_done", "{reissued}");
    assert_eq!(h.provider.effect_count("refund:slow:49.00"), 1);
    let intent = h
        .ledger
        .get("default", "refund_order", "refund:slow:49.00")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(intent.status, IntentStatus::Done);
    assert_eq!(
        intent.external_id,
        reissued["external_id"].as_str().map(String::from)
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_client_that_disconnects_mid_call_leaves_a_settled_intent() {
    let mut plan = FaultPlan::none();
    plan.latency_min = Duration::from_millis(300);
    plan.latency_max = Duration::from_millis(300);
    let h = Harness::new(plan);
    let client = h.connect().await;
    let request =
        ClientRequest::CallToolRequest(CallToolRequest::new(call("refund_order", refund("gone"))));
    let handle = client
        .peer()
        .send_request_with_option(request, PeerRequestOptions::no_options())
        .await
        .unwrap();
    // The client goes away with its call in flight at the provider (300 ms from its answer).
    assert!(
        wait_until(Duration::from_secs(5), || async {
            h.provider.requests() == 1
        })
        .await,
        "the call reached the provider"
    );
    drop(handle);
    client.cancel().await.unwrap();
    assert_eq!(h.service.drain().await, 0, "the call ran to its end");
    let intent = h
        .ledger
        .get("default", "refund_order", "refund:gone:49.00")
        .await
        .unwrap()
        .expect("the intent is in the ledger");
    assert_eq!(intent.status, IntentStatus::Done);
    assert_eq!(h.provider.effect_count("refund:gone:49.00"), 1);
}

/// A client that counts `notifications/tools/list_changed`.
#[derive(Clone, Default)]
struct ListChanges {
    count: Arc<std::sync::atomic::AtomicUsize>,
    arrived: Arc<tokio::sync::Notify>,
}

impl rmcp::ClientHandler for ListChanges {
    async fn on_tool_list_changed(&self, _context: rmcp::service::NotificationContext<RoleClient>) {
        self.count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.arrived.notify_waiters();
    }
}

impl ListChanges {
    fn count(&self) -> usize {
        self.count.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waits (bounded: the service reads the flags every 500 ms) for `count` notifications.
    async fn wait_for(&self, count: usize) {
        tokio::time::timeout(Duration::from_secs(5), async {
            while self.count() < count {
                let arrived = self.arrived.notified();
                if self.count() >= count {
                    break;
                }
                let _ = tokio::time::timeout(Duration::from_millis(100), arrived).await;
            }
        })
        .await
        .expect("tools/list_changed arrives within 5 s");
    }
}

fn flag(tool: &str, enabled: bool) -> ToolFlag {
    ToolFlag {
        tool: tool.to_owned(),
        enabled,
        reason: "test".to_owned(),
        actor: "test".to_owned(),
        updated_ms: 1,
    }
}

#[tokio::test]
async fn a_tool_switched_off_in_the_ledger_is_marked_and_a_registered_client_is_told() {
    let h = Harness::new(FaultPlan::none());
    let (server_io, client_io) = tokio::io::duplex(PIPE_BYTES);
    let service = h.service.clone();
    tokio::spawn(async move {
        let running = service
            .clone()
            .serve(server_io)
            .await
            .expect("the server starts");
        let _registration = service.notify_tool_changes(running.peer().clone());
        let _ = running.waiting().await;
    });
    let changes = ListChanges::default();
    let client = changes
        .clone()
        .serve(client_io)
        .await
        .expect("the client connects");
    let info = client.peer_info().expect("the server's info");
    assert_eq!(
        info.capabilities
            .tools
            .as_ref()
            .and_then(|tools| tools.list_changed),
        Some(true)
    );
    let before = client.list_all_tools().await.unwrap();

    h.ledger
        .set_tool_flag(flag("refund_order", false))
        .await
        .unwrap();
    changes.wait_for(1).await;
    let after = client.list_all_tools().await.unwrap();
    for (was, is) in before.iter().zip(&after) {
        if is.name == "refund_order" {
            let description = is.description.as_deref().unwrap();
            assert_eq!(
                description,
                format!(
                    "{SWITCHED_OFF_SENTENCE} {}",
                    was.description.as_deref().unwrap()
                )
            );
            assert_eq!(is.annotations, was.annotations);
        } else {
            assert_eq!(is, was, "only the switched-off tool changes");
        }
    }
    let result = client
        .call_tool(call("refund_order", refund("off")))
        .await
        .unwrap();
    assert_eq!(outcome(&result)["status"], "disabled");
    assert_eq!(h.provider.effect_count("refund:off:49.00"), 0);

    // A flag for a tool this gateway does not serve changes nothing it publishes.
    h.ledger
        .set_tool_flag(flag("not_served", false))
        .await
        .unwrap();
    h.ledger
        .set_tool_flag(flag("refund_order", true))
        .await
        .unwrap();
    changes.wait_for(2).await;
    assert_eq!(client.list_all_tools().await.unwrap(), before);
    // Told it is back, the client's call runs at once. (It once got `disabled`: the watcher
    // published the change while the gate still trusted its cached flags.)
    let result = client
        .call_tool(call("refund_order", refund("on")))
        .await
        .unwrap();
    assert_eq!(outcome(&result)["status"], "done");
    tokio::time::sleep(intentgate_mcp::FLAG_POLL * 3).await;
    assert_eq!(
        changes.count(),
        2,
        "one notification per change, none for not_served"
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn the_flag_watcher_stops_when_the_service_is_dropped() {
    let TempLedger {
        dir: _dir, ledger, ..
    } = TempLedger::with_options(SqliteOptions::default());
    let provider = Arc::new(FakeProvider::new(
        7,
        FaultPlan::none(),
        Arc::new(SystemClock),
    ));
    let gate = Arc::new(default_gate(
        vec![refund_tool()],
        ledger,
        provider,
        Arc::new(SystemClock),
    ));
    let watched = Arc::downgrade(&gate);
    let service = McpService::new(gate, &BTreeMap::new(), McpOptions::default());
    let copy = service.clone();
    assert_eq!(service.listed_tools().await.len(), 1, "the first read came");
    drop(service);
    tokio::time::sleep(intentgate_mcp::FLAG_POLL).await;
    assert!(
        watched.upgrade().is_some(),
        "a clone still holds the service"
    );
    drop(copy);
    // The watcher task sees the last clone go at its next poll, and ends.
    wait_until(Duration::from_secs(5), || async {
        watched.upgrade().is_none()
    })
    .await;
    assert!(
        watched.upgrade().is_none(),
        "the watcher task ended and let go of the gate"
    );
}

/// `refund_order` named `name`, executed by the application's own code (`executor:
/// client`), listed over MCP or not.
fn client_refund_tool(name: &str, listed: bool) -> ToolDefinition {
    ToolDefinition {
        name: name.to_owned(),
        listed_over_mcp: listed,
        ..client_tool(refund_tool())
    }
}

#[tokio::test]
async fn client_executed_tools_are_listed_only_when_asked_and_never_called() {
    let fixture = intentgate_test_support::Harness::build(HarnessOptions::new(vec![
        refund_tool(),
        client_refund_tool("refund_order_sdk", false),
        client_refund_tool("refund_order_listed_sdk", true),
    ]));
    let service = McpService::new(
        fixture.gate.clone(),
        &BTreeMap::new(),
        McpOptions::default(),
    );
    let h = Harness {
        ledger: fixture.ledger.clone(),
        provider: fixture.provider.clone(),
        _fixture: fixture,
        service,
    };
    let client = h.connect().await;
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
    assert_eq!(names, ["refund_order", "refund_order_listed_sdk"]);

    // Listed or not, a call is a tool result with isError that names the intent API, and
    // the gate is never asked: nothing recorded, nothing sent.
    for name in ["refund_order_sdk", "refund_order_listed_sdk"] {
        let result = client.call_tool(call(name, refund("9"))).await.unwrap();
        assert_eq!(result.is_error, Some(true), "{result:?}");
        let text = &result.content[0].as_text().expect("a text block").text;
        assert!(
            text.contains(&format!("POST /v1/tools/{name}/intents")),
            "{text}"
        );
        assert!(text.contains("nothing was recorded or executed"), "{text}");
    }
    assert!(h.ledger.list(0, 10).await.unwrap().is_empty());
    assert_eq!(h.provider.effect_count("refund:9:49.00"), 0);
    // The gateway's own tool is still called as before.
    let result = client
        .call_tool(call("refund_order", refund("9")))
        .await
        .unwrap();
    assert_eq!(outcome(&result)["status"], "done");
    client.cancel().await.unwrap();
}
