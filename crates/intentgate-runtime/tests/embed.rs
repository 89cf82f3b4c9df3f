//! A gateway embedded in a Rust program from a config file, as the crate documentation shows:
//! opened over a SQLite ledger, bound to a loopback port, called over real HTTP with the mock
//! payments provider as its upstream, and stopped by its shutdown future; registered in the
//! ledger as a running process while it serves, heartbeating, and marked stopped after.

mod common;

use common::open_example;
use intentgate_mock::{HttpFaultPlan, MockOptions, MockProvider, MockServer};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedded_gateway_serves_a_call_over_http_once() {
    let provider = MockProvider::new(MockOptions::new(HttpFaultPlan::quiet())).unwrap();
    let mock = MockServer::start(provider.clone()).await.unwrap();
    let folder = tempfile::tempdir().unwrap();
    let gateway = open_example(folder.path(), &mock.url(), None).await;
    assert_eq!(gateway.gate().tools().len(), gateway.config().tools.len());
    // The client-executed refund is in the gate, as the config describes it, with no
    // request for the HTTP upstream to build.
    let sdk = gateway
        .gate()
        .tool("refund_order_sdk")
        .expect("the client tool");
    assert_eq!(sdk.executor, intentgate_core::Executor::Client);
    assert!(!sdk.listed_over_mcp);
    assert_eq!(
        sdk.resend_window,
        Some(std::time::Duration::from_secs(23 * 60 * 60)),
        "24 hours less the margin"
    );
    let refund = gateway.gate().tool("refund_order").unwrap();
    assert_eq!(refund.executor, intentgate_core::Executor::Gateway);
    assert!(refund.listed_over_mcp);
    let ledger = gateway.ledger().clone();
    let instance = gateway.gate().options().instance.clone();
    let registered = ledger
        .process(&instance)
        .await
        .unwrap()
        .expect("registered");
    assert_eq!(registered.pid, std::process::id());
    assert_eq!(registered.ended, None);
    assert_eq!(
        registered.silent_after_ms,
        intentgate_runtime::SILENT_AFTER.as_millis() as i64
    );
    let server = gateway.bind().await.unwrap();
    let address = server.local_addr();
    assert!(
        address.ip().is_loopback() && address.port() != 0,
        "{address}"
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(server.run(async {
        let _ = stopped.await;
    }));

    let client = reqwest::Client::new();
    let refund = json!({"order_id": "ord_embed", "amount": 12.5, "reason": "duplicate"});
    // The call, then its repeat, answered from the ledger.
    for expected in ["done", "already_done"] {
        let response = client
            .post(format!("http://{address}/v1/tools/refund_order/call"))
            .json(&json!({ "arguments": refund }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["status"], expected, "{answer}");
    }
    assert_eq!(provider.effects().len(), 1, "one refund at the provider");

    // While it serves, it heartbeats (generously bounded: a heartbeat a second).
    let heartbeaten = async {
        loop {
            let process = ledger.process(&instance).await.unwrap().unwrap();
            if process.heartbeat_ms > registered.heartbeat_ms {
                return process;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(30), heartbeaten)
        .await
        .expect("a heartbeat within 30 s");

    stop.send(()).unwrap();
    running.await.unwrap().unwrap();
    let stopped = ledger.process(&instance).await.unwrap().unwrap();
    assert_eq!(stopped.ended, Some(intentgate_ledger::ProcessEnd::Stopped));
    assert!(
        client
            .get(format!("http://{address}/healthz"))
            .send()
            .await
            .is_err(),
        "a stopped gateway no longer listens"
    );
}
