//! Inputs that must never move money, sent the way an attacker or a careless client would:
//! the real `intentgate serve` on the example config, in front of the real mock provider,
//! with request bodies written byte for byte (so every number arrives exactly as typed).
//! Each case must be `invalid_arguments` (never a 5xx, never a refund) with nothing at the
//! provider.

mod support;

use serde_json::{Value, json};
use support::{Stack, get_json};

/// The example config, with `send_email` also sending its reference in a header (as some
/// email APIs want a tracking header), so header rendering is exercised.
fn stack() -> Stack {
    support::stack(|text| {
        let call = "      path: /v1/emails\n      body:\n";
        assert!(text.contains(call), "the example's send_email call changed");
        text.replace(
            call,
            "      path: /v1/emails\n      headers: {X-Reference: \"ref {reference}\"}\n      body:\n",
        )
    })
}

impl Stack {
    /// Calls `tool` with a request body written as `arguments` (JSON text, sent as it is).
    async fn call_raw(&self, tool: &str, arguments: &str) -> Value {
        let response = self
            .client
            .post(format!("{}/v1/tools/{tool}/call", self.gateway.url))
            .header("content-type", "application/json")
            .body(format!(r#"{{"arguments": {arguments}}}"#))
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap();
        assert_eq!(status, 200, "{tool} {arguments}: {body}");
        body
    }

    /// Requests the provider has received, of any kind.
    async fn provider_requests(&self) -> u64 {
        get_json(&self.client, format!("{}/admin/stats", self.mock.url)).await["requests"]
            .as_u64()
            .unwrap()
    }
}

fn refused(outcome: &Value, quoted: &str) {
    assert_eq!(outcome["status"], "invalid_arguments", "{outcome}");
    let message = outcome["message"].as_str().unwrap();
    assert!(message.contains(quoted), "{quoted} not in {message}");
}

// Found by attack: amounts went through an f64. `49.9999999999999999` under `{amount:.2}`
// executed a refund of 50.00, `100000.0000000000001` passed `maximum: 100000`, the refusal of
// `49.0049999999999999` quoted `49.005`, and `1.5e-9223372036854775807` overflowed the decimal
// parser and was answered with a 500.
#[tokio::test]
async fn amounts_are_taken_as_sent_and_refused_rather_than_rounded() {
    let stack = stack();
    for (amount, quoted) in [
        (
            "49.9999999999999999",
            "`49.9999999999999999` has more than 2 decimal places",
        ),
        (
            "49.0049999999999999",
            "`49.0049999999999999` has more than 2 decimal places",
        ),
        (
            "100000.0000000000001",
            "100000.0000000000001 is greater than the maximum of 100000",
        ),
        ("1.5e-9223372036854775807", "is too close to zero"),
        ("\"1.5e-9223372036854775807\"", "is not of type \"number\""),
        ("1e99999999999999999999", "has an exponent beyond"),
    ] {
        let arguments =
            format!(r#"{{"order_id": "8812", "amount": {amount}, "reason": "duplicate"}}"#);
        let outcome = stack.call_raw("refund_order", &arguments).await;
        refused(&outcome, quoted);
        assert!(
            !outcome["message"].as_str().unwrap().contains("49.005`"),
            "{outcome}"
        );
    }
    assert_eq!(
        stack.provider_requests().await,
        0,
        "nothing reached the provider"
    );

    // An exact amount goes through, and the provider receives exactly it.
    let arguments = r#"{"order_id": "8812", "amount": 49.99, "reason": "duplicate"}"#;
    let outcome = stack.call_raw("refund_order", arguments).await;
    assert_eq!(outcome["status"], "done", "{outcome}");
    assert_eq!(outcome["intent_key"], "refund:8812:49.99");
    assert_eq!(outcome["result"]["amount"], "49.99", "{outcome}");
}

// The same amount over MCP's Streamable HTTP endpoint, as a raw JSON-RPC request with a
// numeric id: the SDK's message parsing must keep the number's text too.
#[tokio::test]
async fn amounts_sent_over_mcp_are_taken_as_sent() {
    let stack = stack();
    let request = r#"{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "refund_order",
        "arguments": {"order_id": "8812", "amount": 49.9999999999999999, "reason": "duplicate"}}}"#;
    let response = stack
        .client
        .post(format!("{}/mcp", stack.gateway.url))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .body(request)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let text = response.text().await.unwrap();
    // One JSON-RPC answer, as JSON or as the data of a server-sent event.
    let answer: Value = text
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .chain(std::iter::once(text.as_str()))
        .find_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .unwrap_or_else(|| panic!("no JSON-RPC answer in {text}"));
    assert_eq!(answer["id"], 7, "{answer}");
    let outcome = &answer["result"]["structuredContent"];
    refused(
        outcome,
        "`49.9999999999999999` has more than 2 decimal places",
    );
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert_eq!(
        stack.provider_requests().await,
        0,
        "nothing reached the provider"
    );
}

// Found by attack: `format: email` was not enforced, so these three addresses were sent to the
// provider, the last one with a Bcc header in it.
#[tokio::test]
async fn an_email_argument_must_be_an_email_address() {
    let stack = stack();
    for to in [
        r#""not-an-email""#,
        r#""""#,
        r#""a@example.com\r\nBcc: x@evil.com""#,
    ] {
        let arguments = format!(
            r#"{{"to": {to}, "template_id": "refund_confirmation", "reference": "8812",
                "subject": "Your refund", "body": "It went through."}}"#
        );
        let outcome = stack.call_raw("send_email", &arguments).await;
        refused(&outcome, "/to");
    }
    assert_eq!(
        stack.provider_requests().await,
        0,
        "nothing reached the provider"
    );
}

// A line break in a value that a header template renders could add a header to the request
// the provider receives. It is refused before anything is recorded, naming the argument.
#[tokio::test]
async fn a_line_break_headed_for_a_header_is_refused_and_nothing_is_sent() {
    let stack = stack();
    let arguments = r#"{"to": "ana@example.com", "template_id": "refund_confirmation",
        "reference": "8812\r\nX-Evil: 1", "subject": "Your refund", "body": "It went through."}"#;
    let outcome = stack.call_raw("send_email", arguments).await;
    refused(&outcome, "`reference` holds a line break");
    assert_eq!(
        stack.provider_requests().await,
        0,
        "nothing reached the provider"
    );

    // The same email with a clean reference is sent, once.
    let arguments = r#"{"to": "ana@example.com", "template_id": "refund_confirmation",
        "reference": "8812", "subject": "Your refund", "body": "It went through."}"#;
    let outcome = stack.call_raw("send_email", arguments).await;
    assert_eq!(outcome["status"], "done", "{outcome}");
    let again = stack.call_raw("send_email", arguments).await;
    assert_eq!(again["status"], "already_done", "{again}");
    let effects = get_json(&stack.client, format!("{}/admin/effects", stack.mock.url)).await;
    assert_eq!(effects["total"], json!(1), "{effects}");
}
