//! The bodies the HTTP API sends and reads, as types: what is serialised here is a promise to
//! callers, and the OpenAPI document (`openapi.rs`) is generated from these same types.
//!
//! The engine's types (`IntentRecord`, the core's enums) carry no schema: the core depends on
//! no schema library. The bodies here mirror them field for field, and the enums are
//! published with their values taken from the core's own lists (`intentgate_wire::schema`),
//! so a status added there appears in the document without anyone writing it down. The
//! outcome of a call is `intentgate_wire::Outcome`, shared with MCP.

use intentgate_core::{
    Effect, Executor, IntentStatus, Misconfiguration, ResendStop, ToolDefinition,
};
use intentgate_gate::DegradedUpstream;
use intentgate_ledger::IntentRecord;
/// What a call did, the one outcome type of the edge: the HTTP API answers it, MCP returns
/// it, and both publish its schema.
pub use intentgate_wire::Outcome;
use intentgate_wire::schema::{
    effect_schema, executor_schema, intent_status_schema, misconfiguration_schema,
    resend_stop_schema,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// An error, as `application/problem+json` (RFC 9457).
#[derive(Debug, Serialize, ToSchema)]
pub struct ProblemBody {
    /// `urn:intentgate:problem:<kind>`, e.g. `urn:intentgate:problem:unknown-tool`.
    #[serde(rename = "type")]
    pub kind: String,
    /// A short summary of the kind of problem.
    pub title: String,
    /// The HTTP status, repeated.
    pub status: u16,
    /// What is wrong with this request and what to change.
    pub detail: String,
}

/// `GET /readyz`: the ledger answered a read in time.
#[derive(Debug, Serialize, ToSchema)]
pub struct Readiness {
    /// Always `true` in a 200; a gateway that is not ready answers 503 with a problem.
    pub ready: bool,
    /// The tools whose requests to an upstream have all failed since `since_ms` because the
    /// gateway is misconfigured (a wrong credential, a route that does not exist, an upstream
    /// it can't reach); absent when there are none. The gateway stays ready: its other tools
    /// work, and a load balancer that took every replica out would stop them too. A request
    /// answered as configured clears its entry.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub degraded: Vec<Degraded>,
}

/// One tool and upstream in [`Readiness::degraded`].
#[derive(Debug, Serialize, ToSchema)]
pub struct Degraded {
    /// The upstream's name in the config (`unnamed` for an upstream that has none).
    pub upstream: String,
    pub tool: String,
    /// The latest failure's kind.
    #[schema(schema_with = misconfiguration_schema)]
    pub kind: Misconfiguration,
    /// The status the upstream answered; absent when the request could not be sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// What the gateway saw (`HTTP 401`, or the transport's reason), never a URL or header.
    pub cause: String,
    /// The first failure since a request was last answered as configured (milliseconds since
    /// the Unix epoch).
    pub since_ms: i64,
    /// The latest failure (milliseconds since the Unix epoch).
    pub last_ms: i64,
    /// Failed requests since `since_ms`.
    pub failures: u64,
}

impl From<&DegradedUpstream> for Degraded {
    fn from(degraded: &DegradedUpstream) -> Degraded {
        Degraded {
            upstream: degraded.upstream.clone(),
            tool: degraded.tool.clone(),
            kind: degraded.kind,
            status: degraded.status,
            cause: degraded.cause.clone(),
            since_ms: degraded.since_ms,
            last_ms: degraded.last_ms,
            failures: degraded.failures,
        }
    }
}

/// `GET /v1/tools`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ToolList {
    /// Every tool, sorted by name.
    pub tools: Vec<ToolView>,
}

/// One tool as callers see it.
#[derive(Debug, Serialize, ToSchema)]
pub struct ToolView {
    pub name: String,
    /// The description models should read: for a side effect it ends with the sentence that
    /// one call per intent is enough, after, for a tool that needs the application's intent
    /// id, the sentence that says so.
    pub description: String,
    /// What calling the tool does to the world.
    #[schema(schema_with = effect_schema)]
    pub effect: Effect,
    /// Who performs it: `gateway` (call it with `POST /v1/tools/{name}/call`) or `client`
    /// (the caller's own code, through `POST /v1/tools/{name}/intents`).
    #[schema(schema_with = executor_schema)]
    pub executor: Executor,
    /// True when the tool's key uses `{intent_id}`: every call must carry the application's
    /// intent id (header `Intent-Id`, or `Idempotency-Key`), and one without it does nothing
    /// (`invalid_arguments`, reason `missing_intent_id`).
    pub needs_intent_id: bool,
    /// The JSON Schema of the arguments.
    #[schema(value_type = Object)]
    pub input_schema: Value,
}

impl ToolView {
    pub fn of(tool: &ToolDefinition) -> ToolView {
        ToolView {
            name: tool.name.clone(),
            description: tool.published_description(),
            effect: tool.effect,
            executor: tool.executor,
            needs_intent_id: tool.needs_intent_id(),
            input_schema: tool.input_schema.clone(),
        }
    }
}

/// The body of `POST /v1/tools/{name}/call`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CallRequest {
    /// The tool's arguments, as its input schema describes them. Numbers are read as their
    /// text, never through a float.
    #[schema(value_type = Object)]
    pub arguments: Value,
}

/// An intent as `GET /v1/intents/{tool}/{key}` shows it: no lease owners (internal).
#[derive(Debug, Serialize, ToSchema)]
pub struct IntentView {
    pub tenant: String,
    pub tool: String,
    pub key: String,
    #[schema(schema_with = intent_status_schema)]
    pub status: IntentStatus,
    /// The arguments as stored (sensitive ones as keyed hashes).
    #[schema(value_type = Object)]
    pub arguments: Value,
    /// Attempts made at the provider.
    pub attempts: u32,
    /// What repeats are shown: any JSON, or null.
    #[schema(value_type = Option<Value>)]
    pub result: Option<Value>,
    pub external_id: Option<String>,
    /// Who settled it, when not the call itself (`lookup`, `reconciliation`, an operator).
    pub resolved_by: Option<String>,
    /// Why same-key re-sends of the intent stopped for good, when they did: the provider
    /// answers its key the same way every time, so only lookups (and reconciliation, or a
    /// person) can settle it. Absent while re-sends may still happen.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = resend_stop_schema)]
    pub resend_stopped: Option<ResendStop>,
    /// Calls of this intent, the first one included.
    pub call_count: u64,
    /// Milliseconds since the Unix epoch.
    pub first_seen_ms: i64,
    /// Milliseconds since the Unix epoch.
    pub last_seen_ms: i64,
}

impl From<&IntentRecord> for IntentView {
    fn from(intent: &IntentRecord) -> IntentView {
        IntentView {
            tenant: intent.tenant.clone(),
            tool: intent.tool.clone(),
            key: intent.key.clone(),
            status: intent.status,
            arguments: intent.arguments.clone(),
            attempts: intent.attempt,
            result: intent.result.clone(),
            external_id: intent.external_id.clone(),
            resolved_by: intent.resolved_by.clone(),
            resend_stopped: intent.resend_stopped,
            call_count: intent.call_count,
            first_seen_ms: intent.first_seen_ms,
            last_seen_ms: intent.last_seen_ms,
        }
    }
}
