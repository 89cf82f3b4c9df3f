//! Helpers shared by the HTTP upstream's tests: a real axum server on a loopback port, what
//! it saw, and tools and specs built the way a config would build them.

#![allow(dead_code)] // Each test file uses its own subset.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::HeaderMap;
use intentgate_core::{Effect, ToolDefinition};
use intentgate_gate::UpstreamCall;
use intentgate_http::spec::{CallSpec, LookupSpec, UpstreamSpec};
use intentgate_http::{HttpTool, HttpUpstream};
use serde_json::{Value, json};

/// The secret the upstream sends; it must never show up in an error or a log.
pub const SECRET: &str = "sk_test_never_shown";

/// Serves `router` on 127.0.0.1 with a port chosen by the system; returns its base URL.
pub async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    format!("http://{address}")
}

/// A port nothing listens on: bound, then released.
pub fn closed_port_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{address}")
}

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    /// The path exactly as it arrived (still percent-encoded).
    pub raw_path: String,
    pub query: Option<String>,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

/// What a test server saw, shared with its handlers.
#[derive(Debug, Clone, Default)]
pub struct Recorder(Arc<Mutex<Vec<Seen>>>);

impl Recorder {
    pub async fn record(&self, request: axum::extract::Request) -> Seen {
        let (parts, body) = request.into_parts();
        let body = axum::body::to_bytes(body, 1024 * 1024).await.unwrap();
        let seen = Seen {
            method: parts.method.to_string(),
            raw_path: parts.uri.path().to_owned(),
            query: parts.uri.query().map(str::to_owned),
            headers: parts.headers,
            body: body.to_vec(),
        };
        self.0.lock().unwrap().push(seen.clone());
        seen
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.0.lock().unwrap().clone()
    }
}

/// The upstream `payments` at `base_url`, with a secret header.
pub fn payments(base_url: &str) -> BTreeMap<String, UpstreamSpec> {
    let spec: UpstreamSpec = serde_json::from_value(json!({
        "base_url": base_url,
        "headers": {"Authorization": format!("Bearer {SECRET}")},
    }))
    .unwrap();
    BTreeMap::from([("payments".to_owned(), spec)])
}

pub fn call_spec(spec: Value) -> CallSpec {
    serde_json::from_value(spec).unwrap()
}

pub fn lookup_spec(spec: Value) -> LookupSpec {
    serde_json::from_value(spec).unwrap()
}

/// An upstream with one tool.
pub fn upstream_with(
    base_url: &str,
    tool: &str,
    call: CallSpec,
    lookup: Option<LookupSpec>,
) -> HttpUpstream {
    let tools = BTreeMap::from([(tool.to_owned(), HttpTool { call, lookup })]);
    HttpUpstream::new(payments(base_url), tools).unwrap()
}

/// A tool definition whose arguments are `order_id`, `amount`, `count`, `note`, `customer`.
pub fn definition(name: &str, effect: Effect, timeout: Duration) -> ToolDefinition {
    let schema = json!({
        "type": "object",
        "properties": {
            "order_id": {"type": "string"},
            "amount": {"type": ["number", "string"]},
            "count": {"type": "integer"},
            "note": {"type": "string"},
            "customer": {"type": "object"},
        },
    });
    let key = (effect == Effect::SideEffect).then_some("refund:{order_id}");
    ToolDefinition::new(name, "test tool", effect, schema, key, timeout, 0).unwrap()
}

/// A call of `tool`: side-effecting calls carry an idempotency key and an intent key.
pub fn call<'a>(tool: &'a ToolDefinition, arguments: &'a Value) -> UpstreamCall<'a> {
    let side_effect = tool.effect == Effect::SideEffect;
    UpstreamCall {
        tool,
        arguments,
        idempotency_key: side_effect.then_some("refund_order:refund:8812"),
        intent_key: side_effect.then_some("refund:8812"),
        intent_id: None,
        attempt: u32::from(side_effect),
        timeout: tool.timeout,
    }
}

pub const TIMEOUT: Duration = Duration::from_secs(10);
