//! The tools the tests call: `refund_order`, the side-effecting tool every layer is tested
//! with, `get_order`, a read beside it, `refund_order` held for approval, and any tool made
//! client-executed (`client_tool`).

use std::time::Duration;

use intentgate_core::policy::{ApprovalPolicy, ToolPolicies};
use intentgate_core::{Effect, Executor, ToolDefinition};
use serde_json::{Value, json};

/// The intent key of `refund_order`: the order and the amount to the cent, so a retry of the
/// same refund is the same intent whatever form the amount was written in.
pub const REFUND_KEY_TEMPLATE: &str = "refund:{order_id}:{amount:.2}";

/// The input schema of `refund_order`: an `order_id` string and an `amount` of the schema
/// `amount`, both required, nothing else.
pub fn refund_schema(amount: Value) -> Value {
    json!({
        "type": "object",
        "properties": {"order_id": {"type": "string"}, "amount": amount},
        "required": ["order_id", "amount"],
        "additionalProperties": false
    })
}

/// `refund_order` with a number or a string amount (some agents send one), a 2 s timeout
/// and 2 retries.
pub fn refund_tool() -> ToolDefinition {
    refund_tool_with(
        refund_schema(json!({"type": ["number", "string"]})),
        Duration::from_secs(2),
    )
}

/// `refund_order` with the input schema `schema` and `timeout`, its key
/// [`REFUND_KEY_TEMPLATE`] and 2 retries.
pub fn refund_tool_with(schema: Value, timeout: Duration) -> ToolDefinition {
    ToolDefinition::new(
        "refund_order",
        "Refund an order.",
        Effect::SideEffect,
        schema,
        Some(REFUND_KEY_TEMPLATE),
        timeout,
        2,
    )
    .unwrap()
}

/// `tool`, executed by the caller's own code through the intent API (`executor: client`):
/// the gateway keeps its intents, key and leases, and sends no request for it.
pub fn client_tool(tool: ToolDefinition) -> ToolDefinition {
    ToolDefinition {
        executor: Executor::Client,
        ..tool
    }
}

/// `refund_order` whose every refund waits for an approver, for `deadline` at most.
pub fn refund_needing_approval(deadline: Duration) -> ToolDefinition {
    ToolDefinition {
        policies: Some(ToolPolicies {
            approval: Some(ApprovalPolicy {
                when: None,
                tenants: None,
                deadline_ms: deadline.as_millis() as u64,
            }),
            budgets: vec![],
        }),
        ..refund_tool()
    }
}

/// `get_order`: a read of one order, with `timeout` and 2 retries.
pub fn get_order_tool(timeout: Duration) -> ToolDefinition {
    let schema = json!({"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]});
    ToolDefinition::new(
        "get_order",
        "Get an order.",
        Effect::Read,
        schema,
        None,
        timeout,
        2,
    )
    .unwrap()
}

/// `send_email`, keyed by recipient and reference, with the input schema `schema`, a 2 s
/// timeout and `retries`.
pub fn send_email_tool(schema: Value, retries: u32) -> ToolDefinition {
    ToolDefinition::new(
        "send_email",
        "Send an email.",
        Effect::SideEffect,
        schema,
        Some("email:{to}:{reference}"),
        Duration::from_secs(2),
        retries,
    )
    .unwrap()
}

/// The arguments of a refund of `amount` on `order`.
pub fn refund(order: &str, amount: Value) -> Value {
    json!({"order_id": order, "amount": amount})
}
