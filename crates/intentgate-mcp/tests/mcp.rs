//! The MCP server in process, through the Rust SDK's own client over an in-memory pipe, in
//! front of a gate with a real SQLite ledger and the fake provider. The acceptance tests
//! with the Python SDK over the real transports are in `tests/python/`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use intentgate_core::{CallStatus, Effect, IntentStatus, ToolDefinition};
use intentgate_gate::{Gate, GateOptions, SystemClock};
use intentgate_ledger::{Durability, Ledger, SqliteLedger, SqliteOptions};
use intentgate_mcp::{INTENT_ID_META_KEY, McpOptions, McpService, ToolHints};
use intentgate_mock::{FakeProvider, FaultPlan};
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
    ToolDefinition::new(
        "refund_order",
        "Refund an order.",
        Effect::SideEffect,
        schema,
        Some("refund:{order_id}:{amount:.2}"),
        Duration::from_secs(2),
        2,
    )
    .unwrap()
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

fn get_order_tool() -> ToolDefinition {
    let schema = json!({"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]});
    ToolDefinition::new(
        "get_order",
        "Get an order.",
        Effect::Read,
        schema,
        None,
        Duration::from_secs(1),
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
    _folder: tempfile::TempDir,
    ledger: Arc<SqliteLedger>,
    provider: Arc<FakeProvider>,
    service: McpService,
}

impl Harness {
    fn new(plan: FaultPlan) -> Harness {
        let folder = tempfile::tempdir().unwrap();
        let ledger = Arc::new(
            SqliteLedger::open(
                folder.path().join("ledger.db"),
                SqliteOptions {
                    durability: Durability::Relaxed,
                    inline: false,
                },
            )
            .unwrap(),
        );
        let provider = Arc::new(FakeProvider::new(7, plan, Arc::new(SystemClock)));
        let gate = Gate::new(
            vec![
                refund_tool(),
                charge_tool(),
                get_order_tool(),
                set_status_tool(),
            ],
            ledger.clone(),
            provider.clone(),
            Arc::new(SystemClock),
            GateOptions::default(),
        )
        .unwrap();
        let hints = BTreeMap::from([(
            "refund_order".to_owned(),
            ToolHints {
                destructive: Some(true),
                open_world: Some(true),
            },
        )]);
        let service = McpService::new(Arc::new(gate), &hints, McpOptions::default());
        Harness {
            _folder: folder,
            ledger,
            provider,
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
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The client goes away with its call in flight.
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
