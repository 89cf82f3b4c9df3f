//! The HTTP API through a real server on a loopback port, with a real SQLite ledger and the
//! in-process fake provider as the upstream.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Server, client, refund_tool};
use intentgate_core::{IntentStatus, ToolDefinition};
use intentgate_ledger::Ledger;
use intentgate_mock::FaultPlan;
use intentgate_server::ServerOptions;
use intentgate_test_support::{client_tool, wait_until};
use serde_json::{Value, json};

async fn start(plan: FaultPlan, options: ServerOptions) -> Server {
    common::start(vec![refund_tool()], plan, options).await
}

impl Server {
    async fn call(&self, arguments: Value) -> (u16, String, Value) {
        self.post(
            "/v1/tools/refund_order/call",
            json!({ "arguments": arguments }).to_string(),
        )
        .await
    }

    async fn post(&self, path: &str, body: String) -> (u16, String, Value) {
        let response = self
            .client
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        read(response).await
    }
}

async fn read(response: reqwest::Response) -> (u16, String, Value) {
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let body = response.json().await.unwrap_or(Value::Null);
    (status, content_type, body)
}

#[tokio::test]
async fn a_call_is_done_once_and_its_repeat_is_already_done() {
    let server = start(FaultPlan::none(), ServerOptions::default()).await;
    let (status, _, first) = server.call(json!({"order_id": "8812", "amount": 49})).await;
    assert_eq!(status, 200);
    assert_eq!(first["status"], "done");
    assert_eq!(first["intent_key"], "refund:8812:49.00");
    let (_, _, again) = server
        .call(json!({"order_id": "8812", "amount": 49.0}))
        .await;
    assert_eq!(again["status"], "already_done");
    assert_eq!(again["external_id"], first["external_id"]);
    assert_eq!(server.provider.effect_count("refund:8812:49.00"), 1);

    // The repeat's call is counted in the background, after its answer.
    let mut intent = Value::Null;
    for _ in 0..200 {
        let url = format!("{}/v1/intents/refund_order/refund:8812:49.00", server.base);
        let (status, _, read_intent) = read(server.client.get(url).send().await.unwrap()).await;
        assert_eq!(status, 200);
        intent = read_intent;
        if intent["call_count"].as_u64() == Some(2) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        (intent["status"].as_str(), intent["call_count"].as_u64()),
        (Some("done"), Some(2))
    );
}

#[tokio::test]
async fn every_outcome_is_a_200_with_its_status() {
    let server = start(FaultPlan::none(), ServerOptions::default()).await;
    let (status, _, outcome) = server.call(json!({"order_id": "8812"})).await;
    assert_eq!(
        (status, outcome["status"].as_str()),
        (200, Some("invalid_arguments"))
    );
    assert!(outcome["errors"][0].as_str().unwrap().contains("amount"));
}

#[tokio::test]
async fn malformed_requests_are_problems_that_say_what_is_wrong() {
    let server = start(
        FaultPlan::none(),
        ServerOptions {
            body_limit_bytes: 1024,
            ..ServerOptions::default()
        },
    )
    .await;
    let cases = [
        (
            "/v1/tools/refund_everything/call",
            json!({"arguments": {}}).to_string(),
            404,
            "unknown-tool",
        ),
        (
            "/v1/tools/refund_order/call",
            "{not json".to_owned(),
            400,
            "malformed-json",
        ),
        (
            "/v1/tools/refund_order/call",
            json!({"args": {}}).to_string(),
            422,
            "invalid-body",
        ),
        (
            "/v1/tools/refund_order/call",
            json!([1, 2]).to_string(),
            422,
            "invalid-body",
        ),
        (
            "/v1/tools/refund_order/call",
            json!({"arguments": {"pad": "x".repeat(2048)}}).to_string(),
            413,
            "body-too-large",
        ),
        ("/v1/nothing", String::new(), 404, "not-found"),
    ];
    for (path, body, expected, kind) in cases {
        let (status, content_type, problem) = server.post(path, body).await;
        assert_eq!(status, expected, "{path} {problem}");
        assert_eq!(content_type, "application/problem+json", "{path}");
        assert_eq!(problem["type"], format!("urn:intentgate:problem:{kind}"));
        assert!(!problem["detail"].as_str().unwrap().is_empty());
    }
    assert_eq!(server.provider.requests(), 0);
    let response = server
        .client
        .get(format!(
            "{}/v1/intents/refund_order/refund:1:1.00",
            server.base
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(read(response).await.0, 404);
}

#[tokio::test]
async fn the_tool_list_publishes_the_once_per_intent_sentence() {
    let server = start(FaultPlan::none(), ServerOptions::default()).await;
    let response = server
        .client
        .get(format!("{}/v1/tools", server.base))
        .send()
        .await
        .unwrap();
    let (status, _, body) = read(response).await;
    assert_eq!(status, 200);
    let tool = &body["tools"][0];
    assert_eq!(tool["name"], "refund_order");
    assert_eq!(tool["effect"], "side_effect");
    assert!(
        tool["description"]
            .as_str()
            .unwrap()
            .ends_with("Repeated calls return the original result.")
    );
    assert_eq!(
        tool["input_schema"]["required"],
        json!(["order_id", "amount"])
    );
    assert_eq!(tool["executor"], "gateway");
}

#[tokio::test]
async fn the_tool_list_says_who_executes_each_tool() {
    // A client tool is listed over HTTP whether or not MCP lists it.
    let sdk = ToolDefinition {
        name: "refund_order_sdk".to_owned(),
        listed_over_mcp: false,
        ..client_tool(refund_tool())
    };
    let server = common::start(
        vec![refund_tool(), sdk],
        FaultPlan::none(),
        ServerOptions::default(),
    )
    .await;
    let response = server
        .client
        .get(format!("{}/v1/tools", server.base))
        .send()
        .await
        .unwrap();
    let (status, _, body) = read(response).await;
    assert_eq!(status, 200);
    let executors: Vec<(&str, &str)> = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| {
            (
                tool["name"].as_str().unwrap(),
                tool["executor"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        executors,
        [("refund_order", "gateway"), ("refund_order_sdk", "client")]
    );
}

#[tokio::test]
async fn a_client_that_disconnects_mid_call_does_not_lose_the_intent() {
    let slow = FaultPlan::slow(Duration::from_millis(500));
    let server = start(slow, ServerOptions::default()).await;
    let impatient = client(Some(Duration::from_millis(100)));
    let sent = impatient
        .post(format!("{}/v1/tools/refund_order/call", server.base))
        .json(&json!({"arguments": {"order_id": "7", "amount": 10}}))
        .send()
        .await;
    assert!(
        sent.is_err(),
        "the client gave up before the provider answered"
    );
    // The abandoned call runs to its end, 500 ms after it reached the provider.
    assert!(
        wait_until(Duration::from_secs(5), || async {
            server
                .ledger()
                .get("default", "refund_order", "refund:7:10.00")
                .await
                .unwrap()
                .is_some_and(|intent| intent.status == IntentStatus::Done)
        })
        .await,
        "the abandoned call was recorded"
    );
    let (_, _, again) = server.call(json!({"order_id": "7", "amount": 10})).await;
    assert_eq!(
        again["status"], "already_done",
        "the abandoned call finished and was recorded"
    );
    assert_eq!(server.provider.requests(), 1);
}

#[tokio::test]
async fn shutdown_lets_a_running_call_finish() {
    let slow = FaultPlan::slow(Duration::from_millis(300));
    let mut server = start(slow, ServerOptions::default()).await;
    let client = server.client.clone();
    let url = format!("{}/v1/tools/refund_order/call", server.base);
    let running = tokio::spawn(async move {
        let response = client
            .post(url)
            .json(&json!({"arguments": {"order_id": "9", "amount": 1}}))
            .send()
            .await
            .unwrap();
        read(response).await
    });
    // The call is in flight at the provider when the server is told to stop.
    assert!(
        wait_until(Duration::from_secs(5), || async {
            server.provider.requests() == 1
        })
        .await,
        "the call reached the provider"
    );
    server.stop.take().unwrap().send(()).unwrap();
    let (status, _, outcome) = running.await.unwrap();
    assert_eq!((status, outcome["status"].as_str()), (200, Some("done")));
    server.stopped.await.unwrap().unwrap();
    assert_eq!(server.provider.effect_count("refund:9:1.00"), 1);
}

#[tokio::test]
async fn calls_beyond_the_concurrency_limit_are_refused_before_anything_runs() {
    let slow = FaultPlan::slow(Duration::from_millis(400));
    let server = Arc::new(
        start(
            slow,
            ServerOptions {
                concurrency_limit: 1,
                ..ServerOptions::default()
            },
        )
        .await,
    );
    let first = {
        let server = server.clone();
        tokio::spawn(async move { server.call(json!({"order_id": "1", "amount": 1})).await })
    };
    // The first call holds the only slot: it is at the provider.
    assert!(
        wait_until(Duration::from_secs(5), || async {
            server.provider.requests() == 1
        })
        .await,
        "the first call reached the provider"
    );
    let response = server
        .client
        .post(format!("{}/v1/tools/refund_order/call", server.base))
        .json(&json!({"arguments": {"order_id": "2", "amount": 1}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 503);
    assert_eq!(response.headers()["retry-after"], "1");
    assert_eq!(first.await.unwrap().2["status"], "done");
    assert_eq!(server.provider.requests(), 1);
}
