//! The handlers, one per route. Each carries its `#[utoipa::path]`, and `openapi.rs` lists
//! them: that list is both the router and the OpenAPI document. The problems they share are
//! built in `problem.rs`; the headers a call reads, in `idempotency_key.rs`.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use intentgate_core::{Principal, Scope, Tenant};
use intentgate_gate::trace;
use intentgate_gate::{CallContext, CallOutcome};
use serde::Deserialize;
use serde_json::Value;
use tracing::Instrument;
use utoipa::IntoParams;

use crate::idempotency_key::{self, CallHeaders};
use crate::problem::Problem;
use crate::wire::{CallRequest, Degraded, IntentView, Outcome, Readiness, ToolList, ToolView};
use crate::{AppState, body};

/// How long `/readyz` waits for the ledger to answer a read, and `/metrics` for its intent
/// counts: a healthy ledger answers in milliseconds, and a load balancer's probe or a
/// Prometheus scrape usually gives up after a few seconds.
pub const LEDGER_CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// Liveness: answers at once, touches nothing.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "health",
    responses((status = 200, description = "The process is up.", body = String,
               content_type = "text/plain", example = "ok")),
)]
pub(crate) async fn healthz() -> &'static str {
    "ok"
}

/// Ready when the ledger answers a cheap read in time: without it no call can be served.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "health",
    responses(
        (status = 200, description = "The ledger answered a read within 2 s. `degraded` lists the \
         tools whose requests to an upstream have all failed lately because the gateway is \
         misconfigured (a wrong credential, a route that does not exist, an upstream it can't \
         reach); the gateway stays ready, since its other tools work.", body = Readiness),
        (status = 503, description = "The ledger failed a read or did not answer in time, or \
         failed to record a call in the last 5 s with no call recorded since (a full disk fails \
         writes while reads still work)."),
    ),
)]
pub(crate) async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    let detail = match tokio::time::timeout(LEDGER_CHECK_TIMEOUT, state.gate.ledger().tool_flags())
        .await
    {
        Ok(Ok(_)) => match state.gate.recent_ledger_failure() {
            // Reads work, writes do not (a full disk): no new call can be recorded.
            Some(failure) => {
                tracing::warn!(error = %failure.error, "not ready: the ledger failed to record a call");
                "the intent ledger answers reads but failed to record a call (a write failed, \
                 as on a full disk; the log says why); calls are answered 503 with nothing \
                 executed until it records one again"
                    .to_owned()
            }
            None => {
                let degraded = state.gate.degraded_upstreams();
                return Json(Readiness {
                    ready: true,
                    degraded: degraded.iter().map(Degraded::from).collect(),
                })
                .into_response();
            }
        },
        Ok(Err(error)) => {
            tracing::warn!(%error, "not ready: the ledger failed a read");
            "the intent ledger failed a read; no call can be served until it answers".to_owned()
        }
        Err(_) => {
            tracing::warn!(
                timeout_ms = LEDGER_CHECK_TIMEOUT.as_millis() as u64,
                "not ready: the ledger did not answer in time"
            );
            format!(
                "the intent ledger did not answer a read within {} s; no call can be served until it does",
                LEDGER_CHECK_TIMEOUT.as_secs()
            )
        }
    };
    Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "ledger-unreachable",
        "The intent ledger is unreachable",
        detail,
    )
    .into_response()
}

/// The gate's metrics in the Prometheus text format, with `intentgate_intents` refreshed
/// from the ledger first. A ledger that fails or is slow only leaves that gauge as it was:
/// the other metrics are still worth scraping.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "health",
    responses((status = 200,
               description = "Prometheus text format 0.0.4: calls by tool and status, repeated \
                              calls, upstream and ledger latency, lease waits, intents by \
                              status, connections.",
               body = String, content_type = "text/plain; version=0.0.4")),
)]
pub(crate) async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let gate = &state.gate;
    match tokio::time::timeout(LEDGER_CHECK_TIMEOUT, gate.ledger().status_counts()).await {
        Ok(Ok(counts)) => gate.metrics().set_intent_counts(
            counts
                .into_iter()
                // Intents of tools no longer in the config would be series nobody bounds.
                .filter(|count| gate.tool(&count.tool).is_some())
                .map(|count| (count.tool, count.status.as_str().to_owned(), count.count)),
        ),
        Ok(Err(error)) => {
            tracing::warn!(%error, "metrics: could not count the intents; the gauge is stale")
        }
        Err(_) => tracing::warn!(
            timeout_ms = LEDGER_CHECK_TIMEOUT.as_millis() as u64,
            "metrics: counting the intents took too long; the gauge is stale"
        ),
    }
    let text = gate.metrics().encode();
    let mut response = text.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(prometheus_client::encoding::prometheus_text::CONTENT_TYPE),
    );
    response
}

/// This document: the HTTP API in OpenAPI 3.1. Served without a credential: it describes
/// the API, not the configured tools.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "api",
    responses((status = 200, description = "The OpenAPI 3.1 document of this API.",
               body = Object, content_type = "application/json")),
)]
pub(crate) async fn openapi_document(State(state): State<Arc<AppState>>) -> Response {
    let mut response = state.openapi_json.clone().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

pub(crate) async fn not_found() -> Problem {
    Problem::new(
        StatusCode::NOT_FOUND,
        "not-found",
        "No such route",
        "see GET /v1/tools for the tools this gateway serves",
    )
}

/// The caller's principal, which the edge inserted; its absence means the router is served
/// without its edge, and nothing is answered then.
fn principal(principal: Option<Extension<Principal>>) -> Result<Principal, Problem> {
    principal
        .map(|Extension(principal)| principal)
        .ok_or_else(|| {
            Problem::new(
                StatusCode::UNAUTHORIZED,
                "unauthenticated",
                "Credential required",
                "this gateway needs a credential: send `Authorization: Bearer <key or token>`",
            )
        })
}

/// The principal, if it has `scope`.
pub(crate) fn principal_with(
    principal_extension: Option<Extension<Principal>>,
    scope: Scope,
) -> Result<Principal, Problem> {
    let principal = principal(principal_extension)?;
    if principal.may(scope) {
        Ok(principal)
    } else {
        Err(Problem::missing_scope(&principal, scope))
    }
}

/// The tools, with the descriptions models should read, their input schemas and who
/// executes each.
#[utoipa::path(
    get,
    path = "/v1/tools",
    tag = "tools",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Every tool, sorted by name.", body = ToolList),
        (status = 401, description = "No valid credential."),
        (status = 403, description = "A foreign `Origin` or a non-loopback `Host`."),
    ),
)]
pub(crate) async fn list_tools(
    State(state): State<Arc<AppState>>,
    caller: Option<Extension<Principal>>,
) -> Result<Json<ToolList>, Problem> {
    principal(caller)?;
    let tools = state.gate.tools().into_iter().map(ToolView::of).collect();
    Ok(Json(ToolList { tools }))
}

/// Calls a tool through the gate. Whatever the outcome (`done`, `pending_unknown`,
/// `conflict`, ...) the answer is a 200 with the outcome object: the status tells the model
/// what happened.
#[utoipa::path(
    post,
    path = "/v1/tools/{name}/call",
    tag = "tools",
    security(("bearer" = [])),
    params(
        ("name" = String, Path, description = "The tool's name, as `GET /v1/tools` lists it."),
        CallHeaders,
    ),
    request_body(content = CallRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The call's outcome, whatever it was.", body = Outcome),
        (status = 400, description = "Malformed JSON, an unreadable header, a malformed \
                                      `Idempotency-Key`, one missing where required, or one \
                                      that disagrees with the `Intent-Id`."),
        (status = 401, description = "No valid credential."),
        (status = 403, description = "No `call` scope, a foreign `Origin` or a non-loopback \
                                      `Host`."),
        (status = 404, description = "No such tool."),
        (status = 413, description = "The body is over `gateway.body_limit_bytes`."),
        (status = 415, description = "The body is not `application/json`."),
        (status = 422, description = "The body is not `{\"arguments\": {...}}`, or another \
                                      payload was sent under the same `Idempotency-Key`."),
        (status = 503, description = "At the concurrency limit, or the ledger is unavailable; \
                                      nothing was executed. `Retry-After` says when to retry."),
    ),
)]
pub(crate) async fn call_tool(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    caller: Option<Extension<Principal>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let caller = match principal_with(caller, Scope::Call) {
        Ok(caller) => caller,
        Err(problem) => return problem.into_response(),
    };
    // The HTTP server span of the call, under the caller's `traceparent` when it sent one;
    // none when traces are off.
    let span = intentgate_gate::phase!(
        "POST /v1/tools/{name}/call",
        otel.kind = "server",
        http.request.method = "POST",
        http.route = "/v1/tools/{name}/call",
        url.scheme = "http",
        http.response.status_code = tracing::field::Empty
    );
    adopt_callers_trace(&span, &headers);
    let response = match call_tool_inner(state, name, caller, headers, body)
        .instrument(span.clone())
        .await
    {
        Ok(response) => response,
        Err(problem) => problem.into_response(),
    };
    span.record("http.response.status_code", response.status().as_u16());
    response
}

/// Makes the caller's span the parent of `span` (an HTTP server span) when traces are on and
/// the request carries a valid `traceparent` (with its `tracestate`).
pub(crate) fn adopt_callers_trace(span: &tracing::Span, headers: &HeaderMap) {
    if trace::enabled() {
        let text = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
        trace::adopt_parent(span, text(trace::TRACEPARENT), text(trace::TRACESTATE));
    }
}

/// The shape of a call's body, as problems name it.
const CALL_SHAPE: &str = "{\"arguments\": {...}}";

async fn call_tool_inner(
    state: Arc<AppState>,
    name: String,
    caller: Principal,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Problem> {
    let body = body::read(
        body,
        state.options.body_limit_bytes,
        "tool arguments should be small",
    )?;
    let Some(tool) = state.gate.tool(&name) else {
        return Err(Problem::unknown_tool(&name));
    };
    // Checked on every tool, so a client's malformed key is caught whatever it calls; only
    // a side effect has an intent for it to name.
    let keys = idempotency_key::call_keys(
        &headers,
        tool,
        state.options.idempotency_key_required.contains(&name),
    )?;
    // Read as the documented `CallRequest`: an unknown field is refused, not ignored.
    let request: CallRequest = body::parse(&body, CALL_SHAPE)?;
    let context = CallContext {
        tenant: caller.tenant.as_str().to_owned(),
        intent_id: keys.intent_id,
        explicit_key: keys.caller_key,
        caller: caller.subject.clone(),
    };
    let outcome = run_call(&state, name, request.arguments, context).await?;
    Ok(Json(Outcome::from(outcome)).into_response())
}

/// Runs the call so that a client going away can't cancel it ([`AppState::in_task`]). The
/// gate's refusals are problems.
async fn run_call(
    state: &AppState,
    name: String,
    arguments: Value,
    context: CallContext,
) -> Result<CallOutcome, Problem> {
    let gate = state.gate.clone();
    let outcome = state
        .in_task(Box::pin(async move {
            gate.call(&name, arguments, &context).await
        }))
        .await?;
    // The Idempotency-Key naming another intent is the draft's 422, not an outcome.
    Ok(outcome?)
}

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct IntentQuery {
    /// Another tenant's intent: for `admin` credentials only.
    tenant: Option<String>,
}

/// An intent of the caller's tenant, as the ledger holds it (scope `intents:read`).
#[utoipa::path(
    get,
    // `{*key}`: the rest of the path, since a key may hold `/`. The document writes it `{key}`.
    path = "/v1/intents/{tool}/{*key}",
    tag = "intents",
    security(("bearer" = [])),
    params(
        ("tool" = String, Path, description = "The tool's name."),
        ("key" = String, Path, description = "The intent key, URL-encoded; the rest of the path."),
        IntentQuery,
    ),
    responses(
        (status = 200, description = "The intent.", body = IntentView),
        (status = 400, description = "An unknown query parameter or an invalid tenant."),
        (status = 401, description = "No valid credential."),
        (status = 403, description = "No `intents:read` scope (or `admin`, for `tenant`), a \
                                      foreign `Origin` or a non-loopback `Host`."),
        (status = 404, description = "No such intent in the tenant."),
        (status = 503, description = "The ledger is unavailable."),
    ),
)]
pub(crate) async fn get_intent(
    State(state): State<Arc<AppState>>,
    Path((tool, key)): Path<(String, String)>,
    caller: Option<Extension<Principal>>,
    query: Result<Query<IntentQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    match get_intent_inner(state, tool, key, caller, query).await {
        Ok(response) => response,
        Err(problem) => problem.into_response(),
    }
}

async fn get_intent_inner(
    state: Arc<AppState>,
    tool: String,
    key: String,
    caller: Option<Extension<Principal>>,
    query: Result<Query<IntentQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, Problem> {
    let caller = principal_with(caller, Scope::IntentsRead)?;
    let Query(query) = query.map_err(|rejection| {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "bad-query",
            "Bad query",
            format!(
                "{}; the one parameter is `tenant` (admin only)",
                rejection.body_text()
            ),
        )
    })?;
    let tenant = match query.tenant {
        None => caller.tenant.clone(),
        Some(named) => {
            if !caller.may(Scope::Admin) {
                return Err(Problem::missing_scope(&caller, Scope::Admin));
            }
            Tenant::parse(&named).map_err(|error| {
                Problem::new(
                    StatusCode::BAD_REQUEST,
                    "bad-tenant",
                    "Invalid tenant",
                    error.to_string(),
                )
            })?
        }
    };
    match state.gate.ledger().get(tenant.as_str(), &tool, &key).await {
        Ok(Some(intent)) => Ok(Json(IntentView::from(&intent)).into_response()),
        Ok(None) => Err(Problem::new(
            StatusCode::NOT_FOUND,
            "unknown-intent",
            "No such intent",
            format!("no intent for tool `{tool}` with key `{key}` (tenant `{tenant}`)"),
        )),
        Err(error) => {
            tracing::error!(%error, "ledger read failed");
            Err(Problem::ledger_unavailable("the intent could not be read"))
        }
    }
}
