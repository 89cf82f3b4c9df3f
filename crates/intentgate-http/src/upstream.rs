//! [`HttpUpstream`]: the gate's [`Upstream`] for tools whose effect is an HTTP request.
//!
//! Each tool's [`CallSpec`] is rendered into one request per attempt; what comes back is
//! sorted into the observation shapes of docs/design.md section 5 (a response, not sent, timeout,
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
use intentgate_core::{RequestFacts, ToolDefinition, UpstreamObservation};
use intentgate_gate::trace;
use intentgate_gate::{LookupOutcome, Upstream, UpstreamCall};
use reqwest::Client;
use serde_json::{Value, json};

use crate::error::{HttpError, check_pointer};
use crate::list::{RecordPager, list_records_with};
use crate::request::{
    Body, CompiledUpstream, Exchange, NOT_BUILT_STATUS, RESPONSE_BODY_BYTES_MAX, RequestParts,
    RequestTemplate, exchange, http_client,
};
use crate::spec::{CallSpec, ListSpec, LookupPages, LookupSpec, UpstreamSpec};
use crate::template::{Absent, GatewayValues, TemplateError, Values};
use crate::verify::{Intent, Proof, Tally, candidates};

/// The pointer to the provider's id when a spec names none.
pub const DEFAULT_EXTERNAL_ID_POINTER: &str = "/id";
/// Pages a listing lookup reads when its `pages` names no `max`: a payment's refunds or a
/// recipient's recent messages fit in a few pages of 100.
pub const LOOKUP_PAGES_DEFAULT: u32 = 5;
/// Most pages a listing lookup may read. Every page is a request inside the tool's timeout,
/// and a lookup that needs more has a filter too wide to prove anything quickly.
pub const LOOKUP_PAGES_MAX: u32 = 50;

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
            let request = lookup_template(tool, &self.call, lookup)?;
            request.check(argument_names, true)?;
            CompiledLookup::new(request, lookup)?;
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
    /// How a record is proved to be this intent's.
    proof: Proof,
    /// How a listing continues, if it does.
    pages: Option<CompiledPages>,
}

struct CompiledPages {
    /// The query parameter that carries the cursor.
    query: String,
    next: NextPage,
    max: u32,
}

/// Where a listing lookup's next cursor comes from.
enum NextPage {
    /// A pointer into the answer.
    Cursor(String),
    /// While the boolean at this pointer is true, the last record's id.
    AfterLast(String),
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
                    Some(CompiledLookup::new(request, spec)?)
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
        cursor: Option<(&str, &str)>,
    ) -> Result<Exchange, String> {
        let values = values_of(call);
        // Every request's upstream was found in `HttpUpstream::new`.
        let upstream = &self.upstreams[&request.upstream];
        let mut prepared = request
            .prepare(upstream, &values, idempotency_key)
            .map_err(|error| not_built_reason(&error, call.tool))?;
        if let Some((name, cursor)) = cursor {
            prepared.url.query_pairs_mut().append_pair(name, cursor);
        }
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
        self.execute_with_facts(call).await.0
    }

    /// Sends the tool's request once, and tells the gate its upstream's name, whether its path
    /// is a fixed route (so that a 404 means the route is wrong), and why a connection could
    /// not be made (connect, DNS, TLS).
    async fn execute_with_facts(
        &self,
        call: UpstreamCall<'_>,
    ) -> (UpstreamObservation, RequestFacts) {
        let Some(tool) = self.tools.get(&call.tool.name) else {
            let message = format!("tool `{}` has no HTTP request configured", call.tool.name);
            return (not_built(message), RequestFacts::default());
        };
        let mut facts = RequestFacts {
            upstream: Some(tool.call.upstream.clone()),
            fixed_route: tool.call.fixed_path,
            unreachable: None,
        };
        // Only side-effecting calls carry a key; reads go without the header.
        let observation = match self
            .send(&tool.call, &call, call.idempotency_key, None)
            .await
        {
            Err(message) => {
                tracing::warn!(tool = %call.tool.name, %message, "request not built; nothing was sent");
                not_built(message)
            }
            Ok(Exchange::Response {
                status,
                retry_after_ms,
                body,
                signals,
            }) => UpstreamObservation::Response {
                status,
                retry_after_ms,
                body: body.into_value(),
                signals,
            },
            Ok(Exchange::NotSent(not_sent)) => {
                facts.unreachable = not_sent.unreachable;
                UpstreamObservation::NotSent {
                    reason: not_sent.reason,
                }
            }
            Ok(Exchange::Timeout) => UpstreamObservation::Timeout,
            Ok(Exchange::Dropped(reason)) => UpstreamObservation::Dropped { reason },
        };
        (observation, facts)
    }

    /// Reads the lookup's answer (page by page for a listing) and judges every record
    /// against this intent (`verify.rs`): found only with a record that is proved to be its
    /// effect.
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
        if lookup.proof.uses_key() && call.idempotency_key.is_none() {
            return LookupOutcome::Failed(
                "the lookup proves records by their provider key, and this call has none"
                    .to_owned(),
            );
        }
        let mut tally = Tally::default();
        let mut cursor: Option<String> = None;
        let pages_max = lookup.pages.as_ref().map_or(1, |pages| pages.max);
        for page in 1..=pages_max {
            let cursor_query = lookup
                .pages
                .as_ref()
                .zip(cursor.as_deref())
                .map(|(pages, cursor)| (pages.query.as_str(), cursor));
            // A lookup performs nothing, so it carries no idempotency key header; its
            // templates still render `{idempotency_key}`.
            let body = match self.send(&lookup.request, &call, None, cursor_query).await {
                Err(message) => {
                    return LookupOutcome::Failed(format!(
                        "the lookup request could not be built: {message}"
                    ));
                }
                Ok(exchange) => match lookup.page_of(exchange) {
                    Ok(Some(body)) => body,
                    // A not-found status: the provider has nothing (more).
                    Ok(None) => break,
                    Err(reason) => return LookupOutcome::Failed(reason),
                },
            };
            tally.add(
                &lookup.proof,
                candidates(&body, &lookup.found),
                &Intent {
                    tool: &call.tool.name,
                    provider_key: call.idempotency_key,
                    arguments: call.arguments,
                },
            );
            if tally.ours.is_some() {
                break;
            }
            let next = match lookup.next_cursor(&body, cursor.as_deref()) {
                Ok(next) => next,
                Err(reason) => return LookupOutcome::Failed(reason),
            };
            match next {
                None => break,
                Some(_) if page == pages_max => {
                    return LookupOutcome::Failed(format!(
                        "the lookup read {pages_max} pages and the provider has more; the \
                         effect may be on a page not read: narrow the lookup's query (the \
                         payment, the recipient) or raise `pages.max`"
                    ));
                }
                Some(next) => cursor = Some(next),
            }
        }
        lookup.outcome(tally)
    }
}

impl CompiledLookup {
    /// Checks a lookup's pointers, its proof and its paging.
    fn new(request: RequestTemplate, spec: &LookupSpec) -> Result<CompiledLookup, HttpError> {
        let context = request.context.clone();
        check_pointer(&context, "found", &spec.found)?;
        let external_id = spec
            .external_id
            .clone()
            .unwrap_or_else(|| DEFAULT_EXTERNAL_ID_POINTER.to_owned());
        check_pointer(&context, "external_id", &external_id)?;
        if let Some(key) = &spec.key {
            check_pointer(&context, "key", key)?;
        }
        for (argument, field) in &spec.match_fields {
            check_pointer(&context, &format!("match.{argument}.record"), &field.record)?;
        }
        crate::verify::MatchFields::check(&spec.match_fields).map_err(|(argument, reason)| {
            HttpError::BadMinorUnits {
                context: context.clone(),
                field: format!("match.{argument}.minor_units"),
                reason,
            }
        })?;
        let proof = Proof::new(spec.key.as_deref(), &spec.match_fields)
            .ok_or_else(|| HttpError::UnprovenLookup(context.clone()))?;
        let pages = spec
            .pages
            .as_ref()
            .map(|pages| compile_pages(&context, pages))
            .transpose()?;
        Ok(CompiledLookup {
            request,
            found: spec.found.clone(),
            not_found_statuses: spec.not_found_statuses.clone(),
            external_id,
            proof,
            pages,
        })
    }

    /// The JSON body of one answer; `None` for a not-found status.
    fn page_of(&self, exchange: Exchange) -> Result<Option<Value>, String> {
        match exchange {
            Exchange::Response { status, .. } if self.not_found_statuses.contains(&status) => {
                Ok(None)
            }
            Exchange::Response {
                status: 200..=299,
                body: Body::Json(body),
                ..
            } => Ok(Some(body)),
            Exchange::Response {
                status: status @ 200..=299,
                ..
            } => Err(format!(
                "the lookup answered HTTP {status} with a body that is not JSON"
            )),
            Exchange::Response { status, .. } => Err(format!("the lookup answered HTTP {status}")),
            Exchange::NotSent(reason) => Err(format!("the lookup was not sent: {reason}")),
            Exchange::Timeout => Err("the lookup timed out".to_owned()),
            Exchange::Dropped(reason) => Err(format!("the lookup's connection broke: {reason}")),
        }
    }

    /// The cursor of the page after `body`, `None` after the last; an error for an answer
    /// that would page in a circle or that says it has more without saying where.
    fn next_cursor(&self, body: &Value, asked: Option<&str>) -> Result<Option<String>, String> {
        let Some(pages) = &self.pages else {
            return Ok(None);
        };
        let text = |value: Option<&Value>| match value {
            Some(Value::String(text)) if !text.is_empty() => Some(text.clone()),
            Some(Value::Number(number)) => Some(number.to_string()),
            _ => None,
        };
        let next = match &pages.next {
            NextPage::Cursor(pointer) => text(body.pointer(pointer)),
            NextPage::AfterLast(has_more) => {
                if body.pointer(has_more) != Some(&Value::Bool(true)) {
                    return Ok(None);
                }
                let last = candidates(body, &self.found).last().copied();
                let id = text(last.and_then(|record| record.pointer(&self.external_id)));
                Some(id.ok_or_else(|| {
                    format!(
                        "the lookup's answer says it has more at `{has_more}`, but its last \
                         record has no id at `{}` to continue after",
                        self.external_id
                    )
                })?)
            }
        };
        if next.is_some() && next.as_deref() == asked {
            return Err(
                "the provider answered the lookup with the cursor it was given; the listing \
                 would loop"
                    .to_owned(),
            );
        }
        Ok(next)
    }

    /// What the judged records add up to.
    fn outcome(&self, tally: Tally) -> LookupOutcome {
        let Some(found) = tally.ours else {
            return match tally.mismatch {
                Some(reason) => LookupOutcome::Mismatch(if tally.mismatches > 1 {
                    format!("{reason} (and {} more such records)", tally.mismatches - 1)
                } else {
                    reason
                }),
                None => LookupOutcome::NotFound,
            };
        };
        if tally.more_ours > 0 {
            tracing::warn!(request = %self.request.context, records = tally.more_ours + 1, "the provider holds more than one record proved to be this intent's effect: a duplicate, which reconciliation reports");
        }
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
            result: found,
        }
    }
}

fn compile_pages(context: &str, pages: &LookupPages) -> Result<CompiledPages, HttpError> {
    let bad = |reason: String| HttpError::BadLookupPages {
        context: context.to_owned(),
        reason,
    };
    let next = match (&pages.next_cursor, &pages.has_more) {
        (Some(pointer), None) => {
            check_pointer(context, "pages.next_cursor", pointer)?;
            NextPage::Cursor(pointer.clone())
        }
        (None, Some(pointer)) => {
            check_pointer(context, "pages.has_more", pointer)?;
            NextPage::AfterLast(pointer.clone())
        }
        _ => {
            return Err(bad(
                "give exactly one of `next_cursor` (a pointer to the next page's cursor) and \
                 `has_more` (a pointer to a boolean; the next page starts after the last \
                 record's id)"
                    .to_owned(),
            ));
        }
    };
    let max = pages.max.unwrap_or(LOOKUP_PAGES_DEFAULT);
    if !(1..=LOOKUP_PAGES_MAX).contains(&max) {
        return Err(bad(format!(
            "`max` is {max}; give 1 to {LOOKUP_PAGES_MAX} pages"
        )));
    }
    if pages.query.is_empty() {
        return Err(bad(
            "`query` is empty; name the query parameter that carries the cursor \
             (`starting_after`)"
                .to_owned(),
        ));
    }
    Ok(CompiledPages {
        query: pages.query.clone(),
        next,
        max,
    })
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
    UpstreamObservation::response(
        NOT_BUILT_STATUS,
        json!({
            "error": {"type": "request_not_built", "message": message, "sent": false}
        }),
    )
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
        body_format: call.body_format,
        absent: Absent::LeaveOut,
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
        body: lookup.body.as_ref(),
        body_format: lookup.body_format,
        absent: Absent::Refuse,
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
