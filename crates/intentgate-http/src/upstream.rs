//! [`HttpUpstream`]: the gate's [`Upstream`] for tools whose effect is an HTTP request.
//!
//! Each tool's [`CallSpec`] is rendered into one request per attempt; what comes back is
//! sorted into the observation shapes of SPEC section 5 (a response, not sent, timeout,
//! dropped), and the gate classifies those. The [`LookupSpec`] finds an effect afterwards with
//! a read-only request. Everything is parsed and checked when the upstream is built, so a
//! call can only fail on its arguments, never on the config.
//!
//! A request that can't be built from a call's arguments (a missing argument, a header value
//! with a line break, a path value `..`) is never sent. [`Upstream::check`] renders the request
//! without sending it, so the gate refuses such a call as `invalid_arguments` before anything
//! is recorded, with a message that names the argument. Should `execute` still meet one (a
//! caller that skipped the check), it answers as if the provider had refused it, with status
//! [`NOT_BUILT_STATUS`] and a body
//! `{"error": {"type": "request_not_built", "message": ..., "sent": false}}`, which the gate
//! classifies as rejected: a definite "nothing happened", never an ambiguous outcome.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Instant;

use async_trait::async_trait;
use intentgate_core::limits::EXTERNAL_ID_LENGTH_MAX;
use intentgate_core::{ToolDefinition, UpstreamObservation};
use intentgate_gate::trace;
use intentgate_gate::{LookupOutcome, Upstream, UpstreamCall};
use reqwest::Client;
use serde_json::{Value, json};

use crate::error::HttpError;
use crate::list::{RecordPager, list_records_with};
use crate::request::{
    Body, CompiledUpstream, Exchange, NOT_BUILT_STATUS, RESPONSE_BODY_BYTES_MAX, RequestParts,
    RequestTemplate, exchange, http_client,
};
use crate::spec::{CallSpec, ListSpec, LookupSpec, UpstreamSpec};
use crate::template::{GatewayValues, TemplateError, Values};

/// The pointer to the provider's id when a spec names none.
pub const DEFAULT_EXTERNAL_ID_POINTER: &str = "/id";

/// How one tool maps onto HTTP: the request that performs it and, for side effects, the
/// request that finds its effect afterwards.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpTool {
    pub call: CallSpec,
    pub lookup: Option<LookupSpec>,
}

impl HttpTool {
    /// The JSON pointer to the provider's id in a success body. The config loader sets the
    /// tool definition's `external_id_pointer` to it, since the gate reads the id itself.
    pub fn external_id_pointer(&self) -> &str {
        self.call
            .result
            .external_id
            .as_deref()
            .unwrap_or(DEFAULT_EXTERNAL_ID_POINTER)
    }

    /// Checks every template of the tool when the config is loaded: syntax, and that each
    /// placeholder names one of `argument_names` (the top-level properties of the tool's
    /// input schema) or a gateway value. Upstream names are checked by [`HttpUpstream::new`].
    pub fn check(&self, tool: &str, argument_names: &[&str]) -> Result<(), HttpError> {
        let call = call_template(tool, &self.call)?;
        call.check(argument_names, true)?;
        if let Some(lookup) = &self.lookup {
            lookup_template(tool, &self.call, lookup)?.check(argument_names, true)?;
        }
        Ok(())
    }

    /// True when the request that performs the tool uses the application's intent id
    /// (`{intent_id}` in its path, query, headers or body): such a request can't be built
    /// the same way again without the id. A request that can't be parsed counts as using it.
    pub fn call_uses_intent_id(&self, tool: &str) -> bool {
        call_template(tool, &self.call).map_or(true, |call| call.uses_intent_id())
    }
}

/// Performs tools' effects over HTTP and finds them afterwards. Cheap to share; one pooled
/// client serves every tool.
pub struct HttpUpstream {
    client: Client,
    upstreams: BTreeMap<String, CompiledUpstream>,
    tools: BTreeMap<String, CompiledTool>,
}

struct CompiledTool {
    call: RequestTemplate,
    /// The part of a success body the model sees (`ResultSpec::pointer`).
    result_pointer: Option<String>,
    lookup: Option<CompiledLookup>,
}

struct CompiledLookup {
    request: RequestTemplate,
    found: String,
    not_found_statuses: Vec<u16>,
    external_id: String,
}

impl fmt::Debug for HttpUpstream {
    /// Names only: base URLs and headers may hold secrets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpUpstream")
            .field("upstreams", &self.upstreams.keys().collect::<Vec<_>>())
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl HttpUpstream {
    /// Builds the upstream: parses every base URL, header and template, and checks that every
    /// tool and lookup names a configured upstream.
    pub fn new(
        upstreams: BTreeMap<String, UpstreamSpec>,
        tools: BTreeMap<String, HttpTool>,
    ) -> Result<HttpUpstream, HttpError> {
        let upstreams = upstreams
            .iter()
            .map(|(name, spec)| Ok((name.clone(), CompiledUpstream::new(name, spec)?)))
            .collect::<Result<BTreeMap<_, _>, HttpError>>()?;
        let mut compiled = BTreeMap::new();
        for (name, tool) in &tools {
            let call = call_template(name, &tool.call)?;
            known_upstream(&upstreams, &call)?;
            if let Some(pointer) = &tool.call.result.external_id {
                check_pointer(&call.context, "result.external_id", pointer)?;
            }
            if let Some(pointer) = &tool.call.result.pointer {
                check_pointer(&call.context, "result.pointer", pointer)?;
            }
            let lookup = match &tool.lookup {
                None => None,
                Some(spec) => {
                    let request = lookup_template(name, &tool.call, spec)?;
                    known_upstream(&upstreams, &request)?;
                    check_pointer(&request.context, "found", &spec.found)?;
                    let external_id = spec
                        .external_id
                        .clone()
                        .unwrap_or_else(|| DEFAULT_EXTERNAL_ID_POINTER.to_owned());
                    check_pointer(&request.context, "external_id", &external_id)?;
                    Some(CompiledLookup {
                        request,
                        found: spec.found.clone(),
                        not_found_statuses: spec.not_found_statuses.clone(),
                        external_id,
                    })
                }
            };
            compiled.insert(
                name.clone(),
                CompiledTool {
                    call,
                    result_pointer: tool.call.result.pointer.clone(),
                    lookup,
                },
            );
        }
        Ok(HttpUpstream {
            client: http_client()?,
            upstreams,
            tools: compiled,
        })
    }

    /// The part of a success body the model sees: `result.pointer` applied when the tool has
    /// one and the body has it; otherwise the whole body (an error body keeps its message).
    ///
    /// The gate stores the whole body, because it reads the external id from it with the
    /// tool definition's `external_id_pointer`; servers call this when they answer the model.
    pub fn result_view(&self, tool: &str, body: &Value) -> Value {
        self.tools
            .get(tool)
            .and_then(|tool| tool.result_pointer.as_deref())
            .and_then(|pointer| body.pointer(pointer))
            .unwrap_or(body)
            .clone()
    }

    /// The shared, pooled client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// A pager over the provider's records of `tool`'s effects between `since_ms`
    /// (inclusive) and `until_ms` (exclusive), `page_limit` records per page. The list's
    /// upstream defaults to the tool's.
    pub fn list_records(
        &self,
        tool: &str,
        spec: &ListSpec,
        since_ms: i64,
        until_ms: i64,
        page_limit: u32,
    ) -> Result<RecordPager, HttpError> {
        let upstream = match &spec.upstream {
            Some(upstream) => upstream.as_str(),
            None => {
                &self
                    .tools
                    .get(tool)
                    .ok_or_else(|| HttpError::UnknownTool(tool.to_owned()))?
                    .call
                    .upstream
            }
        };
        let compiled = self
            .upstreams
            .get(upstream)
            .ok_or_else(|| HttpError::UnknownUpstream {
                context: format!("the list of tool `{tool}`"),
                upstream: upstream.to_owned(),
            })?;
        list_records_with(
            &self.client,
            compiled.clone(),
            spec,
            since_ms,
            until_ms,
            page_limit,
        )
    }

    /// Renders and sends one request of `tool`. `Err` holds the answer for a request that
    /// could not be built.
    async fn send(
        &self,
        request: &RequestTemplate,
        call: &UpstreamCall<'_>,
        idempotency_key: Option<&str>,
    ) -> Result<Exchange, String> {
        let values = values_of(call);
        // Every request's upstream was found in `HttpUpstream::new`.
        let upstream = &self.upstreams[&request.upstream];
        let mut prepared = request
            .prepare(upstream, &values, idempotency_key)
            .map_err(|error| not_built_reason(&error, call.tool))?;
        if trace::enabled() {
            // The request's span (the gate's `upstream.request` or `lookup`) goes with it, so
            // a provider that traces links its span to the call's trace.
            let span = tracing::Span::current();
            if let Some(traceparent) = trace::traceparent_of(&span)
                && let Ok(value) = reqwest::header::HeaderValue::from_str(&traceparent)
            {
                prepared.headers.insert(trace::TRACEPARENT, value);
            }
            // The HTTP client conventions, without the URL: its path and query may hold
            // argument values and secrets.
            trace::set_attribute(&span, "http.request.method", prepared.method.to_string());
            if let Some(host) = prepared.url.host_str() {
                trace::set_attribute(&span, "server.address", host.to_owned());
            }
            if let Some(port) = prepared.url.port_or_known_default() {
                trace::set_attribute(&span, "server.port", i64::from(port));
            }
        }
        let started = Instant::now();
        let exchange = exchange(
            &self.client,
            prepared,
            call.timeout,
            RESPONSE_BODY_BYTES_MAX,
        )
        .await;
        let outcome = match &exchange {
            Exchange::Response { status, .. } => format!("HTTP {status}"),
            Exchange::NotSent(_) => "not sent".to_owned(),
            Exchange::Timeout => "timeout".to_owned(),
            Exchange::Dropped(_) => "dropped".to_owned(),
        };
        if let Exchange::Response { status, .. } = &exchange {
            trace::set_attribute(
                &tracing::Span::current(),
                "http.response.status_code",
                i64::from(*status),
            );
        }
        // The URL and headers are not logged: they may hold secrets.
        tracing::debug!(
            request = %request.context,
            method = %request.method,
            attempt = call.attempt,
            %outcome,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "upstream request"
        );
        Ok(exchange)
    }
}

#[async_trait]
impl Upstream for HttpUpstream {
    /// Renders the tool's request as `execute` would, without sending it.
    fn check(&self, call: UpstreamCall<'_>) -> Result<(), String> {
        // A tool without a request is a config problem, not the arguments': execute says so.
        let Some(tool) = self.tools.get(&call.tool.name) else {
            return Ok(());
        };
        let values = values_of(&call);
        let upstream = &self.upstreams[&tool.call.upstream];
        tool.call
            .prepare(upstream, &values, call.idempotency_key)
            .map(drop)
            .map_err(|error| not_built_reason(&error, call.tool))
    }

    async fn execute(&self, call: UpstreamCall<'_>) -> UpstreamObservation {
        let Some(tool) = self.tools.get(&call.tool.name) else {
            return not_built(format!(
                "tool `{}` has no HTTP request configured",
                call.tool.name
            ));
        };
        // Only side-effecting calls carry a key; reads go without the header.
        match self.send(&tool.call, &call, call.idempotency_key).await {
            Err(message) => {
                tracing::warn!(tool = %call.tool.name, %message, "request not built; nothing was sent");
                not_built(message)
            }
            Ok(Exchange::Response {
                status,
                retry_after_ms,
                body,
            }) => UpstreamObservation::Response {
                status,
                retry_after_ms,
                body: body.into_value(),
            },
            Ok(Exchange::NotSent(reason)) => UpstreamObservation::NotSent { reason },
            Ok(Exchange::Timeout) => UpstreamObservation::Timeout,
            Ok(Exchange::Dropped(reason)) => UpstreamObservation::Dropped { reason },
        }
    }

    async fn lookup(&self, call: UpstreamCall<'_>) -> LookupOutcome {
        let Some(tool) = self.tools.get(&call.tool.name) else {
            return LookupOutcome::Failed(format!(
                "tool `{}` has no HTTP request configured",
                call.tool.name
            ));
        };
        let Some(lookup) = &tool.lookup else {
            return LookupOutcome::Unsupported;
        };
        // A lookup performs nothing, so it carries no idempotency key.
        match self.send(&lookup.request, &call, None).await {
            Err(message) => {
                LookupOutcome::Failed(format!("the lookup request could not be built: {message}"))
            }
            Ok(Exchange::Response { status, .. })
                if lookup.not_found_statuses.contains(&status) =>
            {
                LookupOutcome::NotFound
            }
            Ok(Exchange::Response {
                status: 200..=299,
                body: Body::Json(body),
                ..
            }) => lookup.found_in(&body),
            Ok(Exchange::Response {
                status: status @ 200..=299,
                ..
            }) => LookupOutcome::Failed(format!(
                "the lookup answered HTTP {status} with a body that is not JSON"
            )),
            Ok(Exchange::Response { status, .. }) => {
                LookupOutcome::Failed(format!("the lookup answered HTTP {status}"))
            }
            Ok(Exchange::NotSent(reason)) => {
                LookupOutcome::Failed(format!("the lookup was not sent: {reason}"))
            }
            Ok(Exchange::Timeout) => LookupOutcome::Failed("the lookup timed out".to_owned()),
            Ok(Exchange::Dropped(reason)) => {
                LookupOutcome::Failed(format!("the lookup's connection broke: {reason}"))
            }
        }
    }
}

impl CompiledLookup {
    /// Absent, null, `[]` or `{}` at the `found` pointer means the provider has no such
    /// effect; anything else is the effect.
    fn found_in(&self, body: &Value) -> LookupOutcome {
        let found = match body.pointer(&self.found) {
            None | Some(Value::Null) => return LookupOutcome::NotFound,
            Some(Value::Array(items)) if items.is_empty() => return LookupOutcome::NotFound,
            Some(Value::Object(members)) if members.is_empty() => return LookupOutcome::NotFound,
            Some(found) => found,
        };
        let external_id = match found.pointer(&self.external_id) {
            Some(Value::String(id)) => Some(id.clone()),
            Some(Value::Number(id)) => Some(id.to_string()),
            _ => None,
        };
        // The ledger refuses a longer id; the effect is still found, just without it.
        let external_id = external_id.filter(|id| {
            let fits = id.len() <= EXTERNAL_ID_LENGTH_MAX;
            if !fits {
                tracing::warn!(request = %self.request.context, length = id.len(), "external id too long; not recorded");
            }
            fits
        });
        LookupOutcome::Found {
            external_id,
            result: found.clone(),
        }
    }
}

/// Everything the templates of `call`'s requests may refer to.
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

/// The answer for a request that was never sent because it could not be built.
/// Why a request could not be built, as the caller, the ledger (a rejection's stored answer)
/// and the log see it. A reason about a sensitive argument names the argument, never its
/// value (a decimal's reason quotes the value it could not place).
fn not_built_reason(error: &TemplateError, tool: &ToolDefinition) -> String {
    let sensitive = error.argument().is_some_and(|name| {
        let path: Vec<String> = name.split('.').map(str::to_owned).collect();
        tool.sensitive
            .iter()
            .any(|argument| argument.overlaps(&path))
    });
    match error.argument() {
        Some(name) if sensitive => format!(
            "argument `{name}` can't be placed in the request (its value is sensitive and not \
             repeated here); check it against the tool's input schema and the request's format"
        ),
        _ => error.to_string(),
    }
}

fn not_built(message: String) -> UpstreamObservation {
    UpstreamObservation::Response {
        status: NOT_BUILT_STATUS,
        retry_after_ms: None,
        body: json!({
            "error": {"type": "request_not_built", "message": message, "sent": false}
        }),
    }
}

fn call_template(tool: &str, call: &CallSpec) -> Result<RequestTemplate, HttpError> {
    RequestTemplate::new(RequestParts {
        context: format!("tool `{tool}` call"),
        upstream: &call.upstream,
        method: call.method,
        path: &call.path,
        query: &call.query,
        headers: &call.headers,
        body: call.body.as_ref(),
    })
}

fn lookup_template(
    tool: &str,
    call: &CallSpec,
    lookup: &LookupSpec,
) -> Result<RequestTemplate, HttpError> {
    RequestTemplate::new(RequestParts {
        context: format!("tool `{tool}` lookup"),
        upstream: lookup.upstream.as_deref().unwrap_or(&call.upstream),
        method: lookup.method,
        path: &lookup.path,
        query: &lookup.query,
        headers: &lookup.headers,
        body: None,
    })
}

fn known_upstream(
    upstreams: &BTreeMap<String, CompiledUpstream>,
    request: &RequestTemplate,
) -> Result<(), HttpError> {
    if upstreams.contains_key(&request.upstream) {
        Ok(())
    } else {
        Err(HttpError::UnknownUpstream {
            context: request.context.clone(),
            upstream: request.upstream.clone(),
        })
    }
}

/// A JSON pointer (RFC 6901) is empty or starts with `/`.
pub(crate) fn check_pointer(context: &str, field: &str, pointer: &str) -> Result<(), HttpError> {
    if pointer.is_empty() || pointer.starts_with('/') {
        Ok(())
    } else {
        Err(HttpError::BadPointer {
            context: context.to_owned(),
            field: field.to_owned(),
            pointer: pointer.to_owned(),
        })
    }
}
