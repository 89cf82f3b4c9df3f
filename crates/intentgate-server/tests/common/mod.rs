//! What the server's tests share: a real server on a loopback port, with a real SQLite ledger
//! in a temporary folder and the in-process fake provider as the upstream.

#![allow(dead_code)] // Each test file uses its own subset.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use intentgate_core::ToolDefinition;
use intentgate_ledger::SqliteLedger;
use intentgate_mock::{FakeProvider, FaultPlan};
use intentgate_server::ServerOptions;
pub use intentgate_test_support::http::client;
use intentgate_test_support::{Harness, HarnessOptions, refund_schema, refund_tool_with};
use serde_json::json;
use tokio::sync::oneshot;

pub struct Server {
    pub base: String,
    pub provider: Arc<FakeProvider>,
    pub ledger_path: PathBuf,
    pub stop: Option<oneshot::Sender<()>>,
    pub stopped: tokio::task::JoinHandle<std::io::Result<()>>,
    pub client: reqwest::Client,
    /// Keeps the ledger's folder.
    _fixture: Harness,
}

impl Server {
    /// The ledger the server writes.
    pub fn ledger(&self) -> &Arc<SqliteLedger> {
        &self._fixture.ledger
    }

    /// Stops the server and waits until it has.
    pub async fn stop(mut self) {
        self.stop.take().unwrap().send(()).unwrap();
        self.stopped.await.unwrap().unwrap();
    }
}

/// `refund_order` with a number amount and a 5 s timeout.
pub fn refund_tool() -> ToolDefinition {
    refund_tool_with(
        refund_schema(json!({"type": "number"})),
        Duration::from_secs(5),
    )
}

/// A server of `tools` with `options`, over a fresh ledger and a fake provider with `plan`.
pub async fn start(tools: Vec<ToolDefinition>, plan: FaultPlan, options: ServerOptions) -> Server {
    start_with(tools, plan, options, None).await
}

/// [`start`], with `extra` routes served beside the API (`intentgate_server::run_with`).
pub async fn start_with(
    tools: Vec<ToolDefinition>,
    plan: FaultPlan,
    options: ServerOptions,
    extra: Option<axum::Router>,
) -> Server {
    let fixture = Harness::build(HarnessOptions {
        plan,
        seed: 3,
        ..HarnessOptions::new(tools)
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped_signal) = oneshot::channel::<()>();
    let stopped = tokio::spawn(intentgate_server::run_with(
        listener,
        fixture.gate.clone(),
        options,
        extra,
        async {
            let _ = stopped_signal.await;
        },
    ));
    Server {
        base,
        provider: fixture.provider.clone(),
        ledger_path: fixture.ledger_path(),
        stop: Some(stop),
        stopped,
        client: client(None),
        _fixture: fixture,
    }
}
