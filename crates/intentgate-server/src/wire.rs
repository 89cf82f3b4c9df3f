//! The bodies the HTTP API sends and reads, as types: what is serialised here is a promise to
//! callers, and the OpenAPI document (`openapi.rs`) is generated from these same types.
//!
//! The engine's types (`CallOutcome`, `IntentRecord`, the core's enums) carry no schema: the
//! core depends on no schema library. The bodies here mirror them field for field, and the
//! enums are published with their values taken from the core's own lists, so a status added
//! there appears in the document without anyone writing it down.

use intentgate_core::{
    CallStatus, Effect, Executor, IntentStatus, Misconfiguration, OutcomeReason, ResendStop,
    ToolDefinition,
};
use intentgate_gate::{CallOutcome, DegradedUpstream};
use intentgate_ledger::IntentRecord;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};

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

/// What a call did: always a 200, whatever the status; the status and message tell the
/// model what happened and what to do next. The fields serialise in the gate's order
/// (`intentgate_gate::CallOutcome`): `status` first, then `reason` and `message`, then what
/// the call returned.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Outcome {
    #[schema(schema_with = call_status_schema)]
    pub status: CallStatus,
    /// Why it ended so, where the status alone would mislead: `misconfigured` (a
    /// `not_executed` that trying again won't fix until a person fixes the gateway), or
    /// `missing_intent_id` (an `invalid_arguments` because the tool's key uses the
    /// application's intent id, header `Intent-Id`, and the call sent none: nothing was
    /// done, and only the application can fix it).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = outcome_reason_schema)]
    pub reason: Option<OutcomeReason>,
    /// What to do next, for the model.
    pub message: String,
    /// The provider's result (done, already_done), its rejection (rejected), or the data
    /// read: any JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Value>)]
    pub result: Option<Value>,
    /// The provider's id for the effect.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external_id: Option<String>,
    /// For `conflict`: the arguments that differ from the stored intent.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub differing_fields: Vec<String>,
    /// For `invalid_arguments`: what is wrong, one entry per problem.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
    pub tool: String,
    /// The intent's key (side-effecting tools).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intent_key: Option<String>,
}

impl From<&CallOutcome> for Outcome {
    fn from(outcome: &CallOutcome) -> Outcome {
        Outcome {
            status: outcome.status,
            reason: outcome.reason,
            message: outcome.message.clone(),
            tool: outcome.tool.clone(),
            intent_key: outcome.intent_key.clone(),
            result: outcome.result.clone(),
            external_id: outcome.external_id.clone(),
            differing_fields: outcome.differing_fields.clone(),
            errors: outcome.errors.clone(),
        }
    }
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

/// A string schema whose values are `values`.
fn string_enum(values: impl IntoIterator<Item = &'static str>, description: &str) -> Schema {
    Schema::Object(
        ObjectBuilder::new()
            .schema_type(Type::String)
            .enum_values(Some(values))
            .description(Some(description))
            .build(),
    )
}

fn call_status_schema() -> impl Into<RefOr<Schema>> {
    string_enum(
        CallStatus::ALL.iter().map(|status| status.as_str()),
        "What happened, for the model.",
    )
}

fn outcome_reason_schema() -> impl Into<RefOr<Schema>> {
    string_enum(
        OutcomeReason::ALL.iter().map(|reason| reason.as_str()),
        "Why the call ended with its status, where the status alone would mislead.",
    )
}

fn resend_stop_schema() -> impl Into<RefOr<Schema>> {
    string_enum(
        ResendStop::ALL.map(ResendStop::as_str),
        "Why same-key re-sends of the intent stopped for good.",
    )
}

fn misconfiguration_schema() -> impl Into<RefOr<Schema>> {
    string_enum(
        Misconfiguration::ALL.iter().map(|kind| kind.as_str()),
        "Which of the operator's errors it was.",
    )
}

fn intent_status_schema() -> impl Into<RefOr<Schema>> {
    string_enum(
        IntentStatus::ALL.iter().map(|status| status.as_str()),
        "Where the intent is in its life.",
    )
}

fn effect_schema() -> impl Into<RefOr<Schema>> {
    string_enum(
        [Effect::Read, Effect::Idempotent, Effect::SideEffect].map(Effect::as_str),
        "What calling the tool does to the world.",
    )
}

fn executor_schema() -> impl Into<RefOr<Schema>> {
    string_enum(
        [Executor::Gateway, Executor::Client].map(Executor::as_str),
        "Who performs the tool.",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_outcome_body_serialises_exactly_as_the_gates_outcome() {
        let full = CallOutcome {
            status: CallStatus::Conflict,
            reason: Some(OutcomeReason::Misconfigured),
            message: "m".into(),
            tool: "refund_order".into(),
            intent_key: Some("refund:1:49.00".into()),
            result: Some(serde_json::json!({"id": "re_1", "amount": 49.00})),
            external_id: Some("re_1".into()),
            differing_fields: vec!["amount".into()],
            errors: vec!["bad".into()],
        };
        let bare = CallOutcome {
            status: CallStatus::Done,
            reason: None,
            message: "m".into(),
            tool: "get_order".into(),
            intent_key: None,
            result: None,
            external_id: None,
            differing_fields: Vec::new(),
            errors: Vec::new(),
        };
        for outcome in [full, bare] {
            assert_eq!(
                serde_json::to_value(Outcome::from(&outcome)).unwrap(),
                outcome.to_json()
            );
            // The same members in the same order, `status` first.
            let text = serde_json::to_string(&Outcome::from(&outcome)).unwrap();
            assert_eq!(text, outcome.to_json().to_string());
            assert!(text.starts_with(r#"{"status":"#), "{text}");
        }
    }
}
