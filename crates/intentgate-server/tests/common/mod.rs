//! What the server's tests share: a real server on a loopback port, with a real SQLite ledger
//! in a temporary folder and the in-process fake provider as the upstream.

#![allow(dead_code)] // Each test file uses its own subset.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use intentgate_core::{Effect, ToolDefinition};
use intentgate_gate::{Gate, GateOptions, SystemClock};
use intentgate_ledger::{Durability, SqliteLedger, SqliteOptions};
use intentgate_mock::{FakeProvider, FaultPlan};
use intentgate_server::ServerOptions;
use serde_json::json;
use tokio::sync::oneshot;

pub struct Server {
    pub base: String,
    pub provider: Arc<FakeProvider>,
    pub ledger_path: PathBuf,
    pub stop: Option<oneshot::Sender<()>>,
    pub stopped: tokio::task::JoinHandle<std::io::Result<()>>,
    pub client: reqwest::Client,
    _dir: tempfile::TempDir,
}

impl Server {
    /// Stops the server and waits until it has.
    pub async fn stop(mut self) {
        self.stop.take().unwrap().send(()).unwrap();
        self.stopped.await.unwrap().unwrap();
    }
}

pub fn refund_tool() -> ToolDefinition {
    let schema = json!({
        "type": "object",
        "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
        "required": ["order_id", "amount"],
        "additionalProperties": false
    });
    ToolDefinition::new(
        "refund_order",
        "Refund an order.",
        Effect::SideEffect,
        schema,
        Some("refund:{order_id}:{amount:.2}"),
        Duration::from_secs(5),
        2,
    )
    .unwrap()
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
    let dir = tempfile::tempdir().unwrap();
    let ledger_path = dir.path().join("ledger.db");
    let ledger = Arc::new(
        SqliteLedger::open(
            &ledger_path,
            SqliteOptions {
                durability: Durability::Relaxed,
                inline: false,
            },
        )
        .unwrap(),
    );
    let provider = Arc::new(FakeProvider::new(3, plan, Arc::new(SystemClock)));
    let gate = Arc::new(
        Gate::new(
            tools,
            ledger,
            provider.clone(),
            Arc::new(SystemClock),
            GateOptions::default(),
        )
        .unwrap(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped_signal) = oneshot::channel::<()>();
    let stopped = tokio::spawn(intentgate_server::run_with(
        listener,
        gate,
        options,
        extra,
        async {
            let _ = stopped_signal.await;
        },
    ));
    Server {
        base,
        provider,
        ledger_path,
        stop: Some(stop),
        stopped,
        client: client(None),
        _dir: dir,
    }
}

/// reqwest is built without a default TLS provider (the build stays small); plain HTTP still
/// needs one installed.
pub fn client(timeout: Option<Duration>) -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let builder = reqwest::Client::builder();
    let builder = match timeout {
        Some(timeout) => builder.timeout(timeout),
        None => builder,
    };
    builder.build().unwrap()
}
