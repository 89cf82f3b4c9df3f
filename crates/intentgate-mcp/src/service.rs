//! [`McpService`]: the MCP server handler over a [`Gate`], shared by both transports.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use intentgate_core::limits::INTENT_ID_LENGTH_MAX;
use intentgate_core::{Executor, Principal};
use intentgate_gate::trace;
use intentgate_gate::{CallContext, CallOutcome, Gate, GateError};
use intentgate_wire::Outcome;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, RequestMetaObject,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{Peer, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;
use tokio::sync::Semaphore;
use tracing::Instrument;

use crate::McpOptions;
use crate::flags::{FlagWatch, PeerRegistration};
use crate::tools::{ToolHints, listing, switched_off};

/// The `_meta` key of a `tools/call` request that carries the application's intent id
/// (docs/design.md section 4), for tools whose key uses `{intent_id}`: defined once, in the core, since
/// the description and the answer of such a tool name it too.
pub use intentgate_core::tool::INTENT_ID_META_KEY;
/// The protocol versions served, oldest first: 2026-07-28 (stateless, negotiated per
/// request or by `server/discover`) and, over the `initialize` handshake, 2025-11-25 and
/// 2025-06-18. 2025-06-18 is the oldest revision with structured tool output
/// (`outputSchema`, `structuredContent`), which the outcome object relies on; an older
/// client is offered 2025-11-25 and may disconnect.
pub const PROTOCOL_VERSIONS: &[ProtocolVersion] = &[
    ProtocolVersion::V_2025_06_18,
    ProtocolVersion::V_2025_11_25,
    ProtocolVersion::V_2026_07_28,
];
/// Longest wait of a call for one of the `concurrency_limit` slots. Beyond it the gateway
/// is overloaded: the caller gets an error that says nothing was executed.
pub const PERMIT_WAIT: Duration = Duration::from_secs(10);

/// What the server tells clients at connection time (models may read it).
const INSTRUCTIONS: &str = "Tools behind intentgate, a retry-safe gateway. Each call returns an \
object whose `status` says what happened and whose `message` says what to do next. A \
side-effecting tool acts at most once per intent: repeating a call returns the original \
result, so never call one again to check; follow the message. Applications pass their \
intent id in the request's _meta under \"intentgate/intent_id\"; a tool whose description says \
it needs one does nothing without it (status invalid_arguments, reason missing_intent_id), and \
calling it again can't help: tell the user instead.";

/// The MCP server: the gate's tools, listed and called. Cheap to clone (one `Arc`); the
/// Streamable HTTP transport makes one clone per request. It watches the kill-switch flags
/// in the ledger (`flags.rs`) until its last clone is dropped.
#[derive(Clone)]
pub struct McpService {
    inner: Arc<Inner>,
}

struct Inner {
    gate: Arc<Gate>,
    /// The published tools, sorted by name; built once. A switched-off tool is marked
    /// when listed.
    tools: Vec<Tool>,
    /// Which tools are switched off, and the peers to tell when that changes.
    flags: FlagWatch,
    options: McpOptions,
    /// One permit per running call: bounds concurrency, and [`McpService::drain`] waits
    /// for all of them.
    calls: Arc<Semaphore>,
}

impl McpService {
    /// The server for `gate`'s tools. `hints` holds the configured MCP hints by tool name;
    /// a tool without an entry publishes none.
    ///
    /// Call it inside a Tokio runtime: it starts the task that watches the kill-switch
    /// flags, which ends when the last clone of the service is dropped.
    pub fn new(
        gate: Arc<Gate>,
        hints: &BTreeMap<String, ToolHints>,
        options: McpOptions,
    ) -> McpService {
        assert!(
            options.concurrency_limit > 0,
            "the config check refuses a concurrency limit of 0"
        );
        let output_schema = Arc::new(intentgate_wire::outcome_schema());
        // A client-executed tool is listed only when its config asks (`mcp: listed`).
        let tools = gate
            .tools()
            .into_iter()
            .filter(|definition| definition.listed_over_mcp)
            .map(|definition| {
                let tool_hints = hints.get(&definition.name).cloned().unwrap_or_default();
                listing(definition, tool_hints, &output_schema)
            })
            .collect();
        let calls = Arc::new(Semaphore::new(options.concurrency_limit as usize));
        let flags = FlagWatch::start(gate.clone());
        McpService {
            inner: Arc::new(Inner {
                gate,
                tools,
                flags,
                options,
                calls,
            }),
        }
    }

    /// The tools as `tools/list` publishes them while none is switched off, sorted by name.
    pub fn tools(&self) -> &[Tool] {
        &self.inner.tools
    }

    /// The tools as `tools/list` publishes them now: a switched-off tool's description
    /// starts with [`SWITCHED_OFF_SENTENCE`](crate::SWITCHED_OFF_SENTENCE).
    pub async fn listed_tools(&self) -> Vec<Tool> {
        let off = self.inner.flags.switched_off().await;
        self.inner
            .tools
            .iter()
            .map(|tool| {
                if off.contains(tool.name.as_ref()) {
                    switched_off(tool)
                } else {
                    tool.clone()
                }
            })
            .collect()
    }

    /// Sends `notifications/tools/list_changed` to `peer` whenever a tool is switched off
    /// or on, until the registration is dropped. For a transport with a standing
    /// connection ([`serve_stdio`](crate::serve_stdio) registers its client); the stateless
    /// HTTP endpoint has none, and its clients see changes at their next `tools/list`.
    pub fn notify_tool_changes(&self, peer: Peer<RoleServer>) -> PeerRegistration {
        self.inner.flags.register(peer)
    }

    /// Waits, up to the shutdown grace period, for every running call to end. Returns how
    /// many were still running when the grace period ended (their intents stay `in_flight`
    /// in the ledger, where the lookup resolves them).
    pub async fn drain(&self) -> usize {
        let limit = self.inner.options.concurrency_limit;
        let drained = tokio::time::timeout(
            self.inner.options.shutdown_grace,
            self.inner.calls.acquire_many(limit),
        )
        .await;
        match drained {
            Ok(_) => 0,
            Err(_) => limit as usize - self.inner.calls.available_permits(),
        }
    }

    /// One `tools/call`: checks the request, then runs the gate call in its own task.
    async fn call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let name = request.name.into_owned();
        let Some(tool) = self.inner.gate.tool(&name) else {
            return Err(unknown_tool(&name));
        };
        // Listed or not, a client tool is never executed by the gateway: answered before
        // the gate is asked, so nothing is recorded.
        if tool.executor == Executor::Client {
            return Ok(client_executed(&name));
        }
        // The SDK moves the request's `_meta` into the context; read both, in case a
        // transport leaves it in place.
        let intent_id = match intent_id(&context.meta)? {
            Some(id) => Some(id),
            None => match request.meta.as_ref() {
                Some(meta) => intent_id(meta)?,
                None => None,
            },
        };
        // The MCP server span of the call, under the caller's context when it sent one:
        // `_meta.traceparent` (any transport, stdio included), else the HTTP request's
        // `traceparent` header (Streamable HTTP). None when traces are off.
        let span = intentgate_gate::phase!(
            "tools/call",
            otel.kind = "server",
            mcp.method.name = "tools/call",
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %name
        );
        if trace::enabled() {
            let (traceparent, tracestate) = trace_context(&context, request.meta.as_ref());
            trace::adopt_parent(&span, traceparent.as_deref(), tracestate.as_deref());
        }
        let context = CallContext {
            tenant: tenant(&context, &self.inner.options.tenant),
            intent_id,
            explicit_key: None,
            caller: caller(&context),
        };
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let permit = tokio::time::timeout(PERMIT_WAIT, self.inner.calls.clone().acquire_owned())
            .await
            .map_err(|_| {
                ErrorData::internal_error(
                    "the gateway is at its concurrency limit; nothing was executed, try again shortly",
                    None,
                )
            })?
            .expect("the call semaphore is never closed");
        // The call runs in its own task: a client that cancels the request or drops its
        // response stream stops waiting, but never turns an upstream call in flight into
        // a lost one. The intent keeps its state in the ledger either way. The gate's future
        // is boxed: it is several KiB, copied whole by every move of what holds it.
        let gate = self.inner.gate.clone();
        let task = tokio::spawn(
            async move {
                let outcome = Box::pin(gate.call(&name, arguments, &context)).await;
                drop(permit);
                outcome
            }
            .instrument(span),
        );
        let outcome = task.await.map_err(|error| {
            tracing::error!(%error, "bug: an MCP call task failed");
            ErrorData::internal_error("the call failed inside the gateway", None)
        })?;
        match outcome {
            Ok(outcome) => Ok(tool_result(&outcome)),
            Err(GateError::UnknownTool(name)) => Err(unknown_tool(&name)),
            Err(GateError::InvalidTenant(error)) => Err(ErrorData::invalid_params(
                format!("{error}; nothing was recorded or executed"),
                None,
            )),
            Err(GateError::Ledger(error)) => {
                tracing::error!(%error, "the ledger failed before the upstream call");
                Err(ErrorData::internal_error(
                    "the intent ledger is unavailable; nothing was executed, try again shortly",
                    None,
                ))
            }
            Err(error) => {
                tracing::error!(%error, "gate error");
                Err(ErrorData::internal_error(
                    "the call failed inside the gateway",
                    None,
                ))
            }
        }
    }
}

/// An outcome as a tool result: the object as `structuredContent` and as text (for
/// clients that read only text), `isError` where the model must act differently.
pub(crate) fn tool_result(outcome: &CallOutcome) -> CallToolResult {
    let object = Value::Object(Outcome::from(outcome).to_object());
    if outcome.status.needs_model_action() {
        CallToolResult::structured_error(object)
    } else {
        CallToolResult::structured(object)
    }
}

/// The answer to a `tools/call` of a client-executed tool: a tool result with `isError`, so
/// the model reads why, naming the route the application's own code uses instead.
pub(crate) fn client_executed(name: &str) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(format!(
        "`{name}` is executed by the application's own code, not by the gateway, so it can't \
         be called over MCP; nothing was recorded or executed. The application asks for a grant \
         with POST /v1/tools/{name}/intents (the intent API), performs the effect only when \
         granted, and settles what happened."
    ))])
}

fn unknown_tool(name: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!("no tool named `{name}`; tools/list lists the tools"),
        None,
    )
}

/// The application's intent id from a request's `_meta`: absent, or a non-empty string of
/// bounded length. Anything else is a malformed call.
fn intent_id(meta: &RequestMetaObject) -> Result<Option<String>, ErrorData> {
    match meta.get(INTENT_ID_META_KEY) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(id)) if !id.is_empty() && id.len() <= INTENT_ID_LENGTH_MAX => {
            Ok(Some(id.clone()))
        }
        Some(_) => Err(ErrorData::invalid_params(
            format!(
                "_meta \"{INTENT_ID_META_KEY}\" must be a string of 1 to {INTENT_ID_LENGTH_MAX} bytes, created once per intent by the application"
            ),
            None,
        )),
    }
}

/// The caller's W3C trace context of a `tools/call`: `traceparent` and `tracestate` from
/// the request's `_meta` (where the SDK leaves it in the context, or in the request), else
/// from the HTTP request's headers.
fn trace_context(
    context: &RequestContext<RoleServer>,
    request_meta: Option<&RequestMetaObject>,
) -> (Option<String>, Option<String>) {
    let from_meta = |meta: &RequestMetaObject| {
        let text = |key: &str| meta.get(key).and_then(Value::as_str).map(str::to_owned);
        text(trace::TRACEPARENT).map(|parent| (Some(parent), text(trace::TRACESTATE)))
    };
    if let Some(found) = from_meta(&context.meta).or_else(|| request_meta.and_then(from_meta)) {
        return found;
    }
    let Some(parts) = context.extensions.get::<axum::http::request::Parts>() else {
        return (None, None);
    };
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
    };
    (header(trace::TRACEPARENT), header(trace::TRACESTATE))
}

/// Who is calling over HTTP: the authenticated principal's subject; on stdio (one local
/// client, no credential) `stdio`.
fn caller(context: &RequestContext<RoleServer>) -> String {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Principal>())
        .map_or_else(|| "stdio".to_owned(), |principal| principal.subject.clone())
}

/// The tenant of a call: over Streamable HTTP the caller's principal, which the HTTP edge
/// decided from its credential; on stdio (no principal) the configured tenant, since the
/// process runs for the one agent that started it.
fn tenant(context: &RequestContext<RoleServer>, configured: &str) -> String {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Principal>())
        .map(|principal| principal.tenant.as_str().to_owned())
        .unwrap_or_else(|| configured.to_owned())
}

impl ServerHandler for McpService {
    fn get_info(&self) -> ServerConfig {
        // `listChanged`: switching a tool off or on changes what tools/list says.
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(
                Implementation::new("intentgate", env!("CARGO_PKG_VERSION"))
                    .with_title("intentgate: a retry-safe tool gateway"),
            )
            .with_instructions(INSTRUCTIONS)
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(PROTOCOL_VERSIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.listed_tools().await))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.inner
            .tools
            .iter()
            .find(|tool| tool.name == name)
            .cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.call(request, context)
            .await
            .map(CallToolResponse::from)
    }
}

#[cfg(test)]
mod tests {
    use intentgate_core::{CallStatus, Effect};

    use super::*;

    #[test]
    fn is_error_is_set_only_where_the_model_must_act_differently() {
        for status in CallStatus::ALL {
            let outcome = CallOutcome {
                status,
                reason: None,
                message: status.default_message(Effect::SideEffect).to_owned(),
                tool: "refund_order".to_owned(),
                intent_key: None,
                result: None,
                external_id: None,
                differing_fields: Vec::new(),
                errors: Vec::new(),
            };
            let result = tool_result(&outcome);
            let expected = matches!(
                status,
                CallStatus::Rejected
                    | CallStatus::Conflict
                    | CallStatus::InvalidArguments
                    | CallStatus::OverBudget
            );
            assert_eq!(result.is_error, Some(expected), "{status}");
            assert_eq!(result.structured_content, Some(outcome.to_json()));
            let text = result.content[0].as_text().unwrap();
            assert_eq!(
                serde_json::from_str::<Value>(&text.text).unwrap(),
                outcome.to_json()
            );
            // Both forms start with what happened.
            assert!(
                text.text
                    .starts_with(&format!(r#"{{"status":"{status}","message":"#)),
                "{}",
                text.text
            );
            let structured = serde_json::to_string(&result.structured_content).unwrap();
            assert!(structured.starts_with(r#"{"status":"#), "{structured}");
        }
    }

    #[test]
    fn an_intent_id_is_a_bounded_non_empty_string() {
        let meta = |value: Value| {
            let mut meta = RequestMetaObject::new();
            meta.insert(INTENT_ID_META_KEY.to_owned(), value);
            meta
        };
        assert_eq!(intent_id(&RequestMetaObject::new()).unwrap(), None);
        assert_eq!(intent_id(&meta(Value::Null)).unwrap(), None);
        assert_eq!(
            intent_id(&meta(Value::from("ci_1"))).unwrap().as_deref(),
            Some("ci_1")
        );
        let longest = "x".repeat(INTENT_ID_LENGTH_MAX);
        assert!(intent_id(&meta(Value::from(longest.clone()))).is_ok());
        for bad in [
            Value::from(""),
            Value::from(7),
            Value::from(longest + "x"),
            serde_json::json!({"id": "a"}),
        ] {
            assert!(intent_id(&meta(bad.clone())).is_err(), "{bad}");
        }
    }
}
