//! [`McpUpstream`]: the gate's [`Upstream`] for tools performed by `tools/call` on one MCP
//! server, and the mapping of what comes back onto [`UpstreamObservation`]s.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use intentgate_core::limits::EXTERNAL_ID_LENGTH_MAX;
use intentgate_core::{RequestFacts, Unreachable, UpstreamObservation};
use intentgate_gate::{LookupOutcome, Upstream, UpstreamCall};
use rmcp::ServiceError;
use rmcp::model::{CallToolRequestParams, CallToolResult, ErrorCode};
use rmcp::transport::streamable_http_client::StreamableHttpError;
use serde_json::{Map, Value, json};

use crate::connection::{McpConnection, State};
use crate::spec::{McpTool, McpToolCall};
use intentgate_http::template::{Absent, BodyTemplate, GatewayValues, TemplateError, Values};
use intentgate_http::verify::{Intent, Proof, Tally, candidates};

/// Status of a result with `isError` that is a refusal.
pub const REFUSED_STATUS: u16 = 422;
/// Status of a result with `isError` whose text matches a not-processed pattern.
pub const NOT_PROCESSED_STATUS: u16 = 429;
/// Status of a JSON-RPC error that proves the call was not accepted (-32601 method not found,
/// -32602 invalid params): like a rate limit, certainly not executed, so the gate's
/// classification is not processed and the intent ends `not_executed` once the tool's retries
/// are spent (each retry again certainly not executed).
pub const NOT_ACCEPTED_STATUS: u16 = 429;
/// Status of any other JSON-RPC error answered to a call.
pub const SERVER_ERROR_STATUS: u16 = 502;

/// Performs gate tools with `tools/call` on one MCP server and finds their effects with
/// another of its tools.
pub struct McpUpstream {
    connection: Arc<McpConnection>,
    tools: BTreeMap<String, McpTool>,
}

impl std::fmt::Debug for McpUpstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpUpstream")
            .field("connection", &self.connection)
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl McpUpstream {
    /// The upstream of the gate tools `tools` (keyed by the gate tool's name) on
    /// `connection`'s server. Each call is bounded by the server's timeout and the tool's,
    /// the shorter.
    pub fn new(connection: Arc<McpConnection>, tools: BTreeMap<String, McpTool>) -> McpUpstream {
        McpUpstream { connection, tools }
    }

    /// The connection, for its state and its listed tools.
    pub fn connection(&self) -> &Arc<McpConnection> {
        &self.connection
    }

    /// Sends one `tools/call`. `Err` is the observation of a call that got no result. With
    /// `wait`, a server that is down is waited for within the call's timeout (lookups: they
    /// perform nothing, and the moment after a crash is when the gate looks up); without,
    /// the call answers `NotSent` at once.
    async fn send(
        &self,
        spec: &McpToolCall,
        call: &UpstreamCall<'_>,
        idempotency_key: Option<&str>,
        wait: bool,
        absent: Absent,
    ) -> Result<CallToolResult, UpstreamObservation> {
        let params = request(spec, call, idempotency_key, absent)
            .map_err(|reason| UpstreamObservation::NotSent { reason })?;
        let timeout = self.connection.timeout().min(call.timeout);
        call_tool(&self.connection, params, timeout, wait).await
    }
}

/// Sends one `tools/call` on `connection` within `timeout`. `Err` is the observation of a call
/// that got no result. With `wait`, a server that is down is waited for within the timeout;
/// without, the call answers `NotSent` at once.
pub(crate) async fn call_tool(
    connection: &McpConnection,
    params: CallToolRequestParams,
    timeout: std::time::Duration,
    wait: bool,
) -> Result<CallToolResult, UpstreamObservation> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut state = connection.state();
    while wait && !is_open(&state) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(WAIT_POLL).await;
        state = connection.state();
    }
    let peer = match state {
        State::Up { peer, .. } if !peer.is_transport_closed() => peer,
        State::Up { .. } => {
            return Err(UpstreamObservation::NotSent {
                reason: format!("MCP server `{}` is restarting", connection.name()),
            });
        }
        State::Down { reason } => {
            return Err(UpstreamObservation::NotSent {
                reason: format!("MCP server `{}` is down ({reason})", connection.name()),
            });
        }
    };
    match tokio::time::timeout_at(deadline, peer.call_tool(params)).await {
        Err(_) => Err(UpstreamObservation::Timeout),
        Ok(Ok(result)) => Ok(result),
        Ok(Err(error)) => Err(observation_of_error(error)),
    }
}

#[async_trait]
impl Upstream for McpUpstream {
    /// Builds the call's `tools/call` request without sending it.
    fn check(&self, call: UpstreamCall<'_>) -> Result<(), String> {
        match self.tools.get(&call.tool.name) {
            None => Ok(()),
            Some(tool) => {
                request(&tool.call, &call, call.idempotency_key, Absent::LeaveOut).map(drop)
            }
        }
    }

    async fn execute(&self, call: UpstreamCall<'_>) -> UpstreamObservation {
        let Some(tool) = self.tools.get(&call.tool.name) else {
            return UpstreamObservation::Response {
                status: REFUSED_STATUS,
                retry_after_ms: None,
                signals: Default::default(),
                body: error_body(
                    "not_configured",
                    &format!("tool `{}` has no MCP call configured", call.tool.name),
                ),
            };
        };
        match self
            .send(
                &tool.call,
                &call,
                call.idempotency_key,
                false,
                Absent::LeaveOut,
            )
            .await
        {
            Ok(result) => observation_of_result(&tool.call, &result),
            Err(observation) => observation,
        }
    }

    /// [`Upstream::execute`], naming the MCP server as the call's upstream. A call not sent
    /// because the server's session is not open (the server is down, or its session is being
    /// reopened) is an unreachable upstream, which the operator hears about.
    async fn execute_with_facts(
        &self,
        call: UpstreamCall<'_>,
    ) -> (UpstreamObservation, RequestFacts) {
        let observation = self.execute(call).await;
        let down = matches!(observation, UpstreamObservation::NotSent { .. })
            && !is_open(&self.connection.state());
        let facts = RequestFacts {
            upstream: Some(self.connection.name().to_owned()),
            // Tools are called by name: there is no route that could be wrong.
            fixed_route: false,
            unreachable: down.then_some(Unreachable::Connect),
        };
        (observation, facts)
    }

    async fn lookup(&self, call: UpstreamCall<'_>) -> LookupOutcome {
        let Some(tool) = self.tools.get(&call.tool.name) else {
            return LookupOutcome::Failed(format!(
                "tool `{}` has no MCP call configured",
                call.tool.name
            ));
        };
        let Some(lookup) = &tool.lookup else {
            return LookupOutcome::Unsupported;
        };
        // A lookup waits for a server that is down; its arguments are its filter, so none
        // may be left out (a filter left out would widen the answer).
        let result = match self
            .send(&lookup.call, &call, None, true, Absent::Refuse)
            .await
        {
            Ok(result) => result,
            Err(observation) => {
                return LookupOutcome::Failed(format!("the lookup got no result: {observation:?}"));
            }
        };
        if result.is_error == Some(true) {
            return LookupOutcome::Failed(format!(
                "the lookup tool answered an error: {}",
                first_text(&result).unwrap_or_default()
            ));
        }
        let Some(proof) = Proof::new(lookup.key.as_deref(), &lookup.match_fields) else {
            return LookupOutcome::Failed(
                "the lookup has neither `key` nor `match`, so nothing it finds can be proved to \
                 be this intent's effect"
                    .to_owned(),
            );
        };
        if proof.uses_key() && call.idempotency_key.is_none() {
            return LookupOutcome::Failed(
                "the lookup proves records by their provider key, and this call has none"
                    .to_owned(),
            );
        }
        let value = result_value(&result);
        let mut tally = Tally::default();
        tally.add(
            &proof,
            candidates(&value, &lookup.found),
            &Intent {
                tool: &call.tool.name,
                provider_key: call.idempotency_key,
                arguments: call.arguments,
            },
        );
        let Some(found) = tally.ours else {
            return match tally.mismatch {
                Some(reason) => LookupOutcome::Mismatch(reason),
                None => LookupOutcome::NotFound,
            };
        };
        let pointer = lookup.external_id.as_deref().unwrap_or("/id");
        let external_id = match found.pointer(pointer) {
            Some(Value::String(id)) => Some(id.clone()),
            Some(Value::Number(id)) => Some(id.to_string()),
            _ => None,
        }
        .filter(|id| id.len() <= EXTERNAL_ID_LENGTH_MAX);
        LookupOutcome::Found {
            external_id,
            result: found,
        }
    }
}

/// How often a lookup looks again for a session while the server is down.
const WAIT_POLL: std::time::Duration = std::time::Duration::from_millis(50);

fn is_open(state: &State) -> bool {
    matches!(state, State::Up { peer, .. } if !peer.is_transport_closed())
}

/// The observation of a `tools/call` result: success is `200` with the result value;
/// `isError` is [`NOT_PROCESSED_STATUS`] when its text matches one of the call's
/// not-processed patterns, else [`REFUSED_STATUS`].
pub fn observation_of_result(spec: &McpToolCall, result: &CallToolResult) -> UpstreamObservation {
    if result.is_error != Some(true) {
        return UpstreamObservation::response(200, result_value(result));
    }
    let text = first_text(result).unwrap_or_default();
    let lower = text.to_lowercase();
    let not_processed = spec
        .not_processed
        .iter()
        .any(|pattern| !pattern.is_empty() && lower.contains(&pattern.to_lowercase()));
    let (status, kind) = if not_processed {
        (NOT_PROCESSED_STATUS, "not_processed")
    } else {
        (REFUSED_STATUS, "tool_error")
    };
    UpstreamObservation::response(status, error_body(kind, &text))
}

/// The observation of a call that ended in an rmcp error.
fn observation_of_error(error: ServiceError) -> UpstreamObservation {
    if never_connected(&error) {
        // A Streamable HTTP server that is not listening: the request never left.
        return UpstreamObservation::NotSent {
            reason: error.to_string(),
        };
    }
    match error {
        ServiceError::McpError(error)
            if error.code == ErrorCode::METHOD_NOT_FOUND
                || error.code == ErrorCode::INVALID_PARAMS =>
        {
            UpstreamObservation::Response {
                status: NOT_ACCEPTED_STATUS,
                retry_after_ms: None,
                signals: Default::default(),
                body: json!({"error": {
                    "type": "not_accepted",
                    "code": error.code.0,
                    "message": error.message,
                }}),
            }
        }
        ServiceError::McpError(error) => UpstreamObservation::Response {
            status: SERVER_ERROR_STATUS,
            retry_after_ms: None,
            signals: Default::default(),
            body: json!({"error": {
                "type": "server_error",
                "code": error.code.0,
                "message": error.message,
            }}),
        },
        ServiceError::Timeout { .. } => UpstreamObservation::Timeout,
        other => UpstreamObservation::Dropped {
            reason: other.to_string(),
        },
    }
}

/// True when the error says the HTTP connection could not be made (refused, unreachable),
/// so that nothing was sent. Any other transport error may come after the request left.
fn never_connected(error: &ServiceError) -> bool {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(error) = current {
        if let Some(StreamableHttpError::Client(client)) =
            error.downcast_ref::<StreamableHttpError<reqwest::Error>>()
        {
            return client.is_connect();
        }
        if let Some(client) = error.downcast_ref::<reqwest::Error>() {
            return client.is_connect();
        }
        current = error.source();
    }
    false
}

fn error_body(kind: &str, message: &str) -> Value {
    json!({"error": {"type": kind, "message": message}})
}

/// The value of a result: `structuredContent`, else the JSON in the first text block, else
/// that text as a string, else the content blocks as the server sent them (images,
/// resources), else `null`.
pub fn result_value(result: &CallToolResult) -> Value {
    if let Some(structured) = &result.structured_content {
        return structured.clone();
    }
    match first_text(result) {
        Some(text) => serde_json::from_str(&text).unwrap_or(Value::String(text)),
        None if result.content.is_empty() => Value::Null,
        None => serde_json::to_value(&result.content).unwrap_or(Value::Null),
    }
}

/// The text of the result's first text block.
pub(crate) fn first_text(result: &CallToolResult) -> Option<String> {
    result
        .content
        .iter()
        .find_map(|block| block.as_text().map(|text| text.text.clone()))
}

/// The `tools/call` parameters of `call` under `spec`.
fn request(
    spec: &McpToolCall,
    call: &UpstreamCall<'_>,
    idempotency_key: Option<&str>,
    absent: Absent,
) -> Result<CallToolRequestParams, String> {
    let rendered = match &spec.arguments {
        None => call.arguments.clone(),
        Some(template) => {
            render(template, &values_of(call), absent).map_err(|error| match absent {
                Absent::Refuse => {
                    format!("the lookup's arguments: {error}; a lookup never leaves a filter out")
                }
                Absent::LeaveOut => format!("the arguments of MCP tool `{}`: {error}", spec.tool),
            })?
        }
    };
    let mut arguments = match rendered {
        Value::Object(members) => members,
        Value::Null => Map::new(),
        _ => {
            return Err(format!(
                "the arguments of MCP tool `{}` are not an object",
                spec.tool
            ));
        }
    };
    let mut params = json!({"name": spec.tool});
    if let Some(key) = idempotency_key {
        match &spec.idempotency_key_argument {
            Some(argument) => {
                arguments.insert(argument.clone(), Value::String(key.to_owned()));
            }
            None => params["_meta"] = json!({"idempotency_key": key}),
        }
    }
    params["arguments"] = Value::Object(arguments);
    serde_json::from_value(params).map_err(|error| format!("building tools/call: {error}"))
}

/// Renders an `arguments` template with the renderer of HTTP request bodies, so a value is
/// written the same way everywhere: a string that is exactly one placeholder keeps the
/// value's JSON type (`{amount:minor(USD)}` an integer), any other string with placeholders
/// is text (`refund of {order_id}`, `{amount:.2}`), and a member whose placeholder has no
/// value is left out, or refused with [`Absent::Refuse`] (a lookup's filter).
pub(crate) fn render(
    template: &Value,
    values: &Values<'_>,
    absent: Absent,
) -> Result<Value, TemplateError> {
    BodyTemplate::parse(template)?.render_with(values, absent)
}

/// The values the templates of `call`'s requests may refer to.
fn values_of<'a>(call: &UpstreamCall<'a>) -> Values<'a> {
    Values {
        arguments: call.arguments,
        gateway: GatewayValues {
            intent_key: call.intent_key,
            idempotency_key: call.idempotency_key,
            intent_id: call.intent_id,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use intentgate_test_support::refund_tool;

    fn params(spec: &McpToolCall, arguments: &Value, key: Option<&str>) -> Value {
        let tool = refund_tool();
        let call = UpstreamCall::for_intent(&tool, arguments, "refund:8812:49.50", key, None, 0);
        serde_json::to_value(request(spec, &call, key, Absent::LeaveOut).unwrap()).unwrap()
    }

    #[test]
    fn a_whole_value_placeholder_keeps_the_arguments_json_type() {
        let spec = McpToolCall {
            arguments: Some(json!({
                "order": "{order_id}",
                "amount": "{amount}",
                "customer": "{customer.id}",
                "note": "refund of {order_id}",
                "cents": "{amount:minor(USD)}",
                "decimal": "{amount:.2}",
                "literal": "{{order_id}}",
                "intent": "{intent_key}",
                "missing": "{reason}",
                "list": ["{customer.id}", 7],
            })),
            ..McpToolCall::new("refund")
        };
        // Parsed from text: `json!` would read 49.50 as a float.
        let arguments: Value =
            serde_json::from_str(r#"{"order_id": "8812", "amount": 49.50, "customer": {"id": 3}}"#)
                .unwrap();
        let sent = params(&spec, &arguments, None);
        assert_eq!(
            sent["arguments"],
            json!({
                "order": "8812",
                // The number's text as the caller wrote it, never through a float.
                "amount": serde_json::from_str::<Value>("49.50").unwrap(),
                "customer": 3,
                // One renderer for every template: text, decimals and minor units as an
                // HTTP request writes them.
                "note": "refund of 8812",
                "cents": 4950,
                "decimal": "49.50",
                "literal": "{order_id}",
                "intent": "refund:8812:49.50",
                "list": [3, 7],
            })
        );
        assert_eq!(sent["arguments"]["amount"].to_string(), "49.50");
        assert!(sent.get("_meta").is_none());
    }

    #[test]
    fn arguments_the_renderer_cant_place_are_refused_naming_the_argument() {
        let tool = refund_tool();
        let arguments = json!({"order_id": "8812", "amount": "49.001"});
        let call = UpstreamCall::without_intent(&tool, &arguments);
        let spec = McpToolCall {
            arguments: Some(json!({"amount": "{amount:minor(USD)}"})),
            ..McpToolCall::new("refund")
        };
        let error = request(&spec, &call, None, Absent::LeaveOut).unwrap_err();
        assert!(
            error.contains("`amount`") && error.contains("rounded"),
            "{error}"
        );
        let spec = McpToolCall {
            arguments: Some(json!({"order": "{reason}"})),
            ..McpToolCall::new("refund")
        };
        let error = request(&spec, &call, None, Absent::Refuse).unwrap_err();
        assert!(
            error.contains("`reason`") && error.contains("never leaves a filter out"),
            "{error}"
        );
    }

    #[test]
    fn the_key_goes_to_the_named_argument_or_to_meta() {
        let arguments = json!({"order_id": "8812", "amount": 49});
        let in_argument = McpToolCall {
            idempotency_key_argument: Some("idempotency_key".into()),
            ..McpToolCall::new("refund")
        };
        let sent = params(&in_argument, &arguments, Some("ig_1"));
        assert_eq!(sent["arguments"]["idempotency_key"], "ig_1");
        assert!(sent.get("_meta").is_none());

        let sent = params(&McpToolCall::new("refund"), &arguments, Some("ig_1"));
        assert_eq!(sent["_meta"]["idempotency_key"], "ig_1");
        assert_eq!(sent["arguments"], arguments);

        // No key (a lookup, a read): nothing added.
        let sent = params(&in_argument, &arguments, None);
        assert_eq!(sent["arguments"], arguments);
        assert!(sent.get("_meta").is_none());
    }

    #[test]
    fn a_result_without_text_keeps_its_content_blocks() {
        let image: CallToolResult = serde_json::from_value(json!({
            "content": [{"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}]
        }))
        .unwrap();
        let value = result_value(&image);
        assert_eq!(value[0]["type"], "image", "{value}");
        assert_eq!(value[0]["data"], "iVBORw0KGgo=", "{value}");
        let text: CallToolResult = serde_json::from_value(json!({
            "content": [{"type": "text", "text": "{\"id\": \"re_1\"}"}]
        }))
        .unwrap();
        assert_eq!(result_value(&text), json!({"id": "re_1"}));
        let empty: CallToolResult = serde_json::from_value(json!({"content": []})).unwrap();
        assert_eq!(result_value(&empty), Value::Null);
    }

    #[test]
    fn arguments_that_are_not_an_object_are_not_sent() {
        let spec = McpToolCall {
            arguments: Some(json!("{order_id}")),
            ..McpToolCall::new("refund")
        };
        let tool = refund_tool();
        let arguments = json!({"order_id": "8812", "amount": 49});
        let call = UpstreamCall::without_intent(&tool, &arguments);
        let error = request(&spec, &call, None, Absent::LeaveOut).unwrap_err();
        assert!(error.contains("not an object"), "{error}");
    }
}
