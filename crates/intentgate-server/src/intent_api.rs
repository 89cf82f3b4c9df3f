//! The intent API: tools whose effect the caller's own code performs (`executor: client`),
//! as `docs/intent-api.md` lays down the wire contract.
//!
//! | route | scope | what it does |
//! |---|---|---|
//! | `POST /v1/tools/{name}/intents` | `call` | a grant: `answer`, `execute` or `look_up` ([`Gate::grant`](intentgate_gate::Gate::grant)) |
//! | `POST /v1/intents/{id}/settle` | `call` | records what the caller's code learned under its lease |
//! | `POST /v1/intents/{id}/renew` | `call` | extends the lease by the tool's lease duration |
//! | `GET /v1/intents/{id}` | `intents:read` | the intent, as `GET /v1/intents/{tool}/{key}` shows it |
//!
//! Bodies are handled as a call's are: the edge enforces the JSON content type, the body is
//! bounded, malformed JSON is 400 and a body of the wrong shape (a missing or an unknown
//! field) 422; grants and settles run in their own task holding a concurrency permit, so a
//! client that goes away never cancels one half-way through `begin` or `finish`. The tenant
//! is the principal's: another tenant's intent is not found (404), never refused as such.
//!
//! The request and response bodies are the serde structs below, the promise to clients; they
//! derive `ToSchema`, and the handlers carry their `#[utoipa::path]`, so the OpenAPI document
//! describes them from the same types (`openapi.rs` says how the routes by id are listed).

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use intentgate_core::{Executor, Principal, ResendStop, Scope};
use intentgate_gate::{CallContext, Grant, GrantedLease, SettleError, Settlement};
use intentgate_ledger::IntentId;
use intentgate_wire::schema::string_enum;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::Instrument;
use utoipa::ToSchema;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::Schema;

use crate::idempotency_key::{self, CallHeaders};
use crate::problem::Problem;
use crate::routes::{adopt_callers_trace, principal_with};
use crate::wire::{IntentView, Outcome};
use crate::{AppState, body};

/// The body of `POST /v1/tools/{name}/intents`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GrantRequest {
    /// The tool's arguments, as its input schema describes them and as for a call.
    #[schema(value_type = Object)]
    pub arguments: Value,
}

/// What a grant or a settle answers: nothing to run (`answer`), or a lease to run under
/// (`execute`, `look_up`), as the `action` field says.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum GrantResponse {
    /// Nothing to run: `outcome` is what `POST /v1/tools/{name}/call` would answer.
    Answer {
        /// The call's outcome, for the model.
        outcome: Outcome,
    },
    /// Run the effect once, sending `idempotency_key` to the provider.
    Execute(LeaseGrant),
    /// Check with the provider what an earlier attempt did; never execute.
    LookUp(LeaseGrant),
}

/// An `execute` or `look_up` grant.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct LeaseGrant {
    /// The intent's id, for `/v1/intents/{id}/renew`, `/settle` and `GET /v1/intents/{id}`.
    #[schema(value_type = i64)]
    pub intent_id: IntentId,
    /// The tool's name.
    pub tool: String,
    /// The intent's key: the tool's `key` template rendered, or the `Idempotency-Key`.
    pub intent_key: String,
    /// The idempotency key to send the provider.
    pub idempotency_key: String,
    /// The attempt this grant is, from 1.
    pub attempt: u32,
    /// The same request again for an intent whose first attempt's outcome is unknown.
    pub resend: bool,
    /// The lease the caller holds the intent under.
    pub lease: Lease,
}

/// A lease as the caller holds it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Lease {
    /// The secret that proves the lease: `igl_` and 64 hex digits.
    pub token: String,
    /// When the lease expires unless renewed, in Unix milliseconds.
    pub expires_at_ms: i64,
    /// How long the lease and each renewal last.
    pub duration_ms: i64,
}

/// The body of `POST /v1/intents/{id}/renew`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RenewRequest {
    /// The lease token of the grant.
    pub lease: String,
}

/// What a renewal answers: the same token, valid for another `duration_ms`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RenewResponse {
    /// The renewed lease.
    pub lease: Lease,
}

/// The body of `POST /v1/intents/{id}/settle`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SettleRequest {
    /// The lease token of the grant.
    pub lease: String,
    /// What the caller's code learned.
    pub outcome: SettleOutcome,
    /// `done`: what repeats are shown; `rejected`: the provider's refusal. Any JSON, at most
    /// 64 KiB.
    #[serde(default)]
    #[schema(value_type = Option<Value>)]
    pub result: Option<Value>,
    /// `done`: the provider's id of the effect.
    #[serde(default)]
    pub external_id: Option<String>,
    /// `rejected`, `not_executed`, `unknown`: why, for the event log and the model.
    #[serde(default)]
    pub reason: Option<String>,
    /// `unknown` on an `execute` grant: the provider will answer every same-key re-send the
    /// same way, so re-sends of the intent stop for good and only lookups are granted.
    /// `replayed_server_error` (a stored 5xx replayed, `Idempotent-Replayed: true`),
    /// `provider_says_no_retry` (a 5xx with `Stripe-Should-Retry: false`) or `key_reused`
    /// (400 `idempotency_error`: the key was first used with other parameters).
    #[serde(default)]
    #[schema(schema_with = resend_stop_schema)]
    pub resend_stop: Option<String>,
}

/// The words `resend_stop` takes, as the core lists them.
fn resend_stop_schema() -> impl Into<RefOr<Schema>> {
    string_enum(
        ResendStop::ALL.map(ResendStop::as_str),
        "Why same-key re-sends stop for good (`unknown` on an `execute` grant only).",
    )
}

/// What the caller's code learned: `done` (the effect exists), `rejected` (the provider
/// refused), `not_executed` (nothing reached the provider; `execute` grants only), `unknown`
/// (ambiguous, or a lookup failed), `not_found` (the lookup found no effect; `look_up`
/// grants only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SettleOutcome {
    Done,
    Rejected,
    NotExecuted,
    Unknown,
    NotFound,
}

impl SettleOutcome {
    fn as_str(self) -> &'static str {
        match self {
            SettleOutcome::Done => "done",
            SettleOutcome::Rejected => "rejected",
            SettleOutcome::NotExecuted => "not_executed",
            SettleOutcome::Unknown => "unknown",
            SettleOutcome::NotFound => "not_found",
        }
    }
}

impl SettleRequest {
    /// The settlement the gate records, or 422 for a field the outcome does not take.
    fn settlement(self) -> Result<(String, Settlement), Problem> {
        let outcome = self.outcome;
        let refuse = |field: &str, takes: &str| {
            Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "bad-settlement",
                "Field does not go with the outcome",
                format!(
                    "outcome `{}` takes no `{field}`; it takes {takes}",
                    outcome.as_str()
                ),
            )
        };
        let reason = |reason: Option<String>| reason.unwrap_or_default();
        let resend_stop = match self.resend_stop.as_deref() {
            None => None,
            Some(_) if outcome != SettleOutcome::Unknown => {
                let takes = match outcome {
                    SettleOutcome::Done => "`result` and `external_id`",
                    SettleOutcome::Rejected => "`reason` and `result`",
                    SettleOutcome::NotFound => "nothing but the lease",
                    _ => "a `reason`",
                };
                return Err(refuse("resend_stop", takes));
            }
            Some(word) => Some(word.parse::<ResendStop>().map_err(|_| {
                Problem::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "unknown-resend-stop",
                    "Unknown reason re-sends stop",
                    format!(
                        "`resend_stop` is `{word}`; it takes one of {}",
                        ResendStop::ALL.map(|stop| format!("`{stop}`")).join(", ")
                    ),
                )
            })?),
        };
        let settlement = match outcome {
            SettleOutcome::Done => {
                if self.reason.is_some() {
                    return Err(refuse("reason", "`result` and `external_id`"));
                }
                Settlement::Done {
                    result: self.result,
                    external_id: self.external_id,
                }
            }
            SettleOutcome::Rejected => {
                if self.external_id.is_some() {
                    return Err(refuse("external_id", "`reason` and `result`"));
                }
                Settlement::Rejected {
                    reason: reason(self.reason),
                    result: self.result,
                }
            }
            SettleOutcome::NotExecuted | SettleOutcome::Unknown | SettleOutcome::NotFound => {
                let takes = match outcome {
                    SettleOutcome::NotFound => "nothing but the lease",
                    SettleOutcome::Unknown => "a `reason` and a `resend_stop`",
                    _ => "a `reason`",
                };
                if self.result.is_some() {
                    return Err(refuse("result", takes));
                }
                if self.external_id.is_some() {
                    return Err(refuse("external_id", takes));
                }
                match outcome {
                    SettleOutcome::NotExecuted => Settlement::NotExecuted {
                        reason: reason(self.reason),
                    },
                    SettleOutcome::Unknown => Settlement::Unknown {
                        reason: reason(self.reason),
                        resend_stop,
                    },
                    _ if self.reason.is_some() => return Err(refuse("reason", takes)),
                    _ => Settlement::NotFound,
                }
            }
        };
        Ok((self.lease, settlement))
    }
}

impl From<Grant> for GrantResponse {
    fn from(grant: Grant) -> GrantResponse {
        match grant {
            Grant::Answer(outcome) => GrantResponse::Answer {
                outcome: Outcome::from(outcome),
            },
            Grant::Execute(lease) => GrantResponse::Execute(LeaseGrant::from(lease)),
            Grant::LookUp(lease) => GrantResponse::LookUp(LeaseGrant::from(lease)),
        }
    }
}

impl From<GrantedLease> for LeaseGrant {
    fn from(granted: GrantedLease) -> LeaseGrant {
        LeaseGrant {
            intent_id: granted.intent_id,
            tool: granted.tool.clone(),
            intent_key: granted.intent_key.clone(),
            idempotency_key: granted.provider_key.clone(),
            attempt: granted.attempt,
            resend: granted.resend,
            lease: Lease::from(&granted),
        }
    }
}

impl From<&GrantedLease> for Lease {
    fn from(granted: &GrantedLease) -> Lease {
        Lease {
            token: granted.token.as_str().to_owned(),
            expires_at_ms: granted.expires_at_ms,
            duration_ms: granted.duration_ms,
        }
    }
}

/// Asks for a grant on a client-executed tool: `answer` (nothing to run), `execute` (run the
/// effect once, under the lease) or `look_up` (check with the provider first).
#[utoipa::path(
    post,
    path = "/v1/tools/{name}/intents",
    tag = "intents",
    security(("bearer" = [])),
    params(
        ("name" = String, Path, description = "The tool's name: one with `executor: client`."),
        CallHeaders,
    ),
    request_body(content = GrantRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The grant: `answer`, `execute` or `look_up`.",
         body = GrantResponse),
        (status = 400, description = "Malformed JSON, an unreadable header, a malformed \
                                      `Idempotency-Key`, one missing where required, or one \
                                      that disagrees with the `Intent-Id`."),
        (status = 401, description = "No valid credential."),
        (status = 403, description = "No `call` scope, a foreign `Origin` or a non-loopback \
                                      `Host`."),
        (status = 404, description = "No such tool."),
        (status = 409, description = "`not-client-executed`: the gateway executes this tool; \
                                      call it with `POST /v1/tools/{name}/call`."),
        (status = 413, description = "The body is over `gateway.body_limit_bytes`."),
        (status = 415, description = "The body is not `application/json`."),
        (status = 422, description = "The body is not `{\"arguments\": {...}}`, or another \
                                      payload was sent under the same `Idempotency-Key`."),
        (status = 503, description = "At the concurrency limit, or the ledger is unavailable; \
                                      nothing was granted. `Retry-After` says when to retry."),
    ),
)]
pub(crate) async fn grant(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    caller: Option<Extension<Principal>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    // The HTTP server span of the grant, under the caller's `traceparent`; none when traces
    // are off.
    let span = intentgate_gate::phase!(
        "POST /v1/tools/{name}/intents",
        otel.kind = "server",
        http.request.method = "POST",
        http.route = "/v1/tools/{name}/intents",
        url.scheme = "http",
        http.response.status_code = tracing::field::Empty
    );
    adopt_callers_trace(&span, &headers);
    let response = respond(
        grant_inner(state, name, caller, headers, body)
            .instrument(span.clone())
            .await,
    );
    span.record("http.response.status_code", response.status().as_u16());
    response
}

async fn grant_inner(
    state: Arc<AppState>,
    name: String,
    caller: Option<Extension<Principal>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Problem> {
    let caller = principal_with(caller, Scope::Call)?;
    let body = read_body(&state, body)?;
    let Some(tool) = state.gate.tool(&name) else {
        return Err(Problem::unknown_tool(&name));
    };
    if tool.executor != Executor::Client {
        return Err(Problem::not_client_executed(&name));
    }
    let keys = idempotency_key::call_keys(
        &headers,
        tool,
        state.options.idempotency_key_required.contains(&name),
    )?;
    let request: GrantRequest = body::parse(&body, "{\"arguments\": {...}}")?;
    let context = CallContext {
        tenant: caller.tenant.as_str().to_owned(),
        intent_id: keys.intent_id,
        explicit_key: keys.caller_key,
        caller: caller.subject.clone(),
    };
    let gate = state.gate.clone();
    let granted = state
        .in_task(Box::pin(async move {
            gate.grant(&name, request.arguments, &context).await
        }))
        .await?;
    // The Idempotency-Key naming another intent is the draft's 422, as for a call.
    let grant = granted.map_err(|error| Problem::refused_by_gate(error, "grant", "granted"))?;
    Ok(Json(GrantResponse::from(grant)).into_response())
}

/// `POST /v1/intents/{id}/settle` and `POST /v1/intents/{id}/renew`, served as `POST
/// /v1/intents/{tool}/{*key}` since they share their path's shape with `GET
/// /v1/intents/{tool}/{key}` (see `openapi.rs`). Any other `POST` on that shape is a 405,
/// as the router answers a method a path does not take.
pub(crate) async fn act_on_intent(
    State(state): State<Arc<AppState>>,
    Path((id, action)): Path<(String, String)>,
    caller: Option<Extension<Principal>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match action.as_str() {
        "settle" => respond(settle(state, &id, caller, body).await),
        "renew" => respond(renew(state, &id, caller, body).await),
        _ => {
            let mut response = Problem::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method-not-allowed",
                "Method not allowed",
                "this path takes GET (an intent by tool and key); an intent is changed with \
                 POST /v1/intents/{id}/settle and POST /v1/intents/{id}/renew",
            )
            .into_response();
            response
                .headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET"));
            response
        }
    }
}

/// Records what the caller's code learned under its lease. The answer has a grant's shape:
/// usually `answer`, with what the model should read; after `not_found` inside the tool's key
/// window, a new `execute` grant (the re-send) to run at once.
#[utoipa::path(
    post,
    path = "/v1/intents/{id}/settle",
    tag = "intents",
    security(("bearer" = [])),
    params(("id" = i64, Path, description = "The intent's id, as the grant gave it.")),
    request_body(content = SettleRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Settled: `answer`, or a re-send's `execute` grant.",
         body = GrantResponse),
        (status = 400, description = "Malformed JSON."),
        (status = 401, description = "No valid credential."),
        (status = 403, description = "No `call` scope, a foreign `Origin` or a non-loopback \
                                      `Host`."),
        (status = 404, description = "`unknown-intent`: no intent of a client-executed tool \
                                      with this id in the caller's tenant."),
        (status = 409, description = "`lease-lost`: this lease does not hold the intent now \
                                      (expired, settled, or another caller's); nothing was \
                                      changed."),
        (status = 413, description = "The body is over `gateway.body_limit_bytes`."),
        (status = 415, description = "The body is not `application/json`."),
        (status = 422, description = "A body of the wrong shape (`invalid-body`), a field \
                                      the outcome does not take (`bad-settlement`), a \
                                      `resend_stop` that is not one of its words \
                                      (`unknown-resend-stop`), a `result` over 64 KiB \
                                      (`too-large`), or an outcome the grant does not allow \
                                      (`outcome-not-allowed`, e.g. `resend_stop` on a \
                                      `look_up` grant); nothing was changed."),
        (status = 503, description = "At the concurrency limit, or the ledger is unavailable. \
                                      `Retry-After` says when to retry."),
    ),
)]
pub(crate) async fn settle(
    state: Arc<AppState>,
    id: &str,
    caller: Option<Extension<Principal>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Problem> {
    let caller = principal_with(caller, Scope::Call)?;
    let id = intent_id(id)?;
    let body = read_body(&state, body)?;
    let request: SettleRequest =
        body::parse(&body, "{\"lease\": \"igl_...\", \"outcome\": \"done\"}")?;
    let (token, settlement) = request.settlement()?;
    let gate = state.gate.clone();
    let tenant = caller.tenant.as_str().to_owned();
    let settled = state
        .in_task(Box::pin(async move {
            gate.settle(&tenant, id, &token, settlement).await
        }))
        .await?;
    let grant = settled.map_err(|error| settle_problem(id, error))?;
    Ok(Json(GrantResponse::from(grant)).into_response())
}

/// Extends the lease by the tool's lease duration: the same token, valid for another
/// `duration_ms`.
#[utoipa::path(
    post,
    path = "/v1/intents/{id}/renew",
    tag = "intents",
    security(("bearer" = [])),
    params(("id" = i64, Path, description = "The intent's id, as the grant gave it.")),
    request_body(content = RenewRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The renewed lease.", body = RenewResponse),
        (status = 400, description = "Malformed JSON."),
        (status = 401, description = "No valid credential."),
        (status = 403, description = "No `call` scope, a foreign `Origin` or a non-loopback \
                                      `Host`."),
        (status = 404, description = "`unknown-intent`: no intent of a client-executed tool \
                                      with this id in the caller's tenant."),
        (status = 409, description = "`lease-lost`: this lease does not hold the intent now \
                                      (expired and taken, or settled); nothing was changed."),
        (status = 413, description = "The body is over `gateway.body_limit_bytes`."),
        (status = 415, description = "The body is not `application/json`."),
        (status = 422, description = "A body of the wrong shape (`invalid-body`)."),
        (status = 503, description = "At the concurrency limit, or the ledger is unavailable. \
                                      `Retry-After` says when to retry."),
    ),
)]
pub(crate) async fn renew(
    state: Arc<AppState>,
    id: &str,
    caller: Option<Extension<Principal>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Problem> {
    let caller = principal_with(caller, Scope::Call)?;
    let id = intent_id(id)?;
    let body = read_body(&state, body)?;
    let request: RenewRequest = body::parse(&body, "{\"lease\": \"igl_...\"}")?;
    let gate = state.gate.clone();
    let tenant = caller.tenant.as_str().to_owned();
    let renewed = state
        .in_task(Box::pin(async move {
            gate.renew(&tenant, id, &request.lease).await
        }))
        .await?;
    let granted = renewed.map_err(|error| settle_problem(id, error))?;
    let response = RenewResponse {
        lease: Lease::from(&granted),
    };
    Ok(Json(response).into_response())
}

/// An intent of the caller's tenant by its id (scope `intents:read`), as `GET
/// /v1/intents/{tool}/{key}` shows it.
// Served as `GET /v1/intents/{tool}`: see `openapi::routes`.
#[utoipa::path(
    get,
    path = "/v1/intents/{id}",
    tag = "intents",
    security(("bearer" = [])),
    params(("id" = i64, Path, description = "The intent's id, as a grant gave it.")),
    responses(
        (status = 200, description = "The intent.", body = IntentView),
        (status = 401, description = "No valid credential."),
        (status = 403, description = "No `intents:read` scope, a foreign `Origin` or a \
                                      non-loopback `Host`."),
        (status = 404, description = "`unknown-intent`: no intent with this id in the \
                                      caller's tenant (another tenant's is not found either)."),
        (status = 503, description = "The ledger is unavailable."),
    ),
)]
pub(crate) async fn get_intent_by_id(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    caller: Option<Extension<Principal>>,
) -> Response {
    respond(get_intent_by_id_inner(state, id, caller).await)
}

async fn get_intent_by_id_inner(
    state: Arc<AppState>,
    id: String,
    caller: Option<Extension<Principal>>,
) -> Result<Response, Problem> {
    let caller = principal_with(caller, Scope::IntentsRead)?;
    let id = intent_id(&id)?;
    match state.gate.ledger().get_by_id(id).await {
        Ok(Some(intent)) if intent.tenant == caller.tenant.as_str() => {
            Ok(Json(IntentView::from(&intent)).into_response())
        }
        Ok(_) => Err(unknown_intent(id)),
        Err(error) => {
            tracing::error!(%error, "ledger read failed");
            Err(Problem::ledger_unavailable("the intent could not be read"))
        }
    }
}

fn respond(result: Result<Response, Problem>) -> Response {
    result.unwrap_or_else(IntoResponse::into_response)
}

/// The body, or 413 over the limit (or the rejection's own problem).
fn read_body(state: &AppState, body: Result<Bytes, BytesRejection>) -> Result<Bytes, Problem> {
    body::read(
        body,
        state.options.body_limit_bytes,
        "intent API bodies should be small",
    )
}

/// An intent id from the path: one that is not a number names no intent.
fn intent_id(text: &str) -> Result<IntentId, Problem> {
    text.parse::<IntentId>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| {
            Problem::new(
                StatusCode::NOT_FOUND,
                "unknown-intent",
                "No such intent",
                format!("`{text}` is not an intent id: ids are the positive numbers grants answer"),
            )
        })
}

fn unknown_intent(id: IntentId) -> Problem {
    Problem::new(
        StatusCode::NOT_FOUND,
        "unknown-intent",
        "No such intent",
        format!("no intent {id} in your tenant"),
    )
}

/// The problem of a settle or renew that changed nothing.
fn settle_problem(id: IntentId, error: SettleError) -> Problem {
    match error {
        SettleError::NotFound(_) => Problem::new(
            StatusCode::NOT_FOUND,
            "unknown-intent",
            "No such intent",
            format!("no intent {id} of a client-executed tool in your tenant"),
        ),
        SettleError::LeaseLost(intent) => Problem::new(
            StatusCode::CONFLICT,
            "lease-lost",
            "Lease not held",
            format!(
                "this lease does not hold intent {id} now (it is `{}`): it expired, was settled, \
                 or another caller holds the intent; nothing was changed. Ask for a grant again \
                 to learn the answer",
                intent.status
            ),
        ),
        SettleError::NotAllowed { .. } => Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "outcome-not-allowed",
            "Outcome not allowed on this grant",
            format!("{error}; nothing was changed"),
        ),
        SettleError::TooLarge { .. } => Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "too-large",
            "Value too large",
            format!("{error}; nothing was changed"),
        ),
        SettleError::Ledger(error) => {
            tracing::error!(%error, intent = id, "the ledger failed during a settle or renew");
            Problem::ledger_unavailable("the lease may not have been recorded")
        }
        SettleError::Randomness(error) => {
            tracing::error!(%error, intent = id, "no randomness for a re-send grant");
            let mut problem =
                Problem::ledger_unavailable("the settle was recorded, but no re-send was granted");
            problem.kind = "unavailable";
            problem.title = "Try again";
            problem
        }
    }
}
