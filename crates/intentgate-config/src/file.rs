//! The config file as written: the types serde reads and the JSON Schema is derived from.
//!
//! Field names here are a promise to users. Every struct refuses unknown fields, so a
//! misspelt field is an error rather than a silently ignored setting. These types differ
//! from the public [`Config`](crate::Config) in one way: a tool's `effect` is read as
//! optional, so that a tool without one is reported by name, alongside the file's other
//! errors, instead of stopping the parse. The published schema still marks it required.

use std::collections::BTreeMap;

use intentgate_core::{CallStatus, Effect, Executor};
use intentgate_http::spec::{CallSpec, ListSpec, LookupSpec, UpstreamSpec};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::Deserialize;
use serde_json::Value;

use crate::auth::AuthFile;
use crate::config::{
    AlertRule, GatewayConfig, IdempotencyKeyHeader, OwnerConfig, ReconcileConfig, ResolutionConfig,
};

/// An intentgate config: the gateway's settings, the upstream APIs its tools call, the
/// owners who hear about problems, and the tools.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename = "Config")]
#[schemars(title = "intentgate config")]
pub(crate) struct ConfigFile {
    /// Settings of the gateway process; every field has a default.
    #[serde(default)]
    pub gateway: GatewayConfig,
    /// Who may call the gateway and which tenant each caller is: `none` (the default: one
    /// tenant, `gateway.tenant`, and only on loopback listeners), or `api_keys`, `jwt`
    /// and/or `trusted_proxy`.
    #[serde(default)]
    pub auth: AuthFile,
    /// Upstream APIs by name. `base_url` and `headers` values may use `${NAME}` and
    /// `${NAME:-default}` references to environment variables (for secrets).
    #[serde(default)]
    pub upstreams: BTreeMap<String, UpstreamSpec>,
    /// Who decides about each tool's reconciliation mismatches and duplicate-call alerts,
    /// by name.
    #[serde(default)]
    pub owners: BTreeMap<String, OwnerConfig>,
    /// Reconciliation of the ledger with the providers inside `serve`; every field has a
    /// default (hourly, over the last hour).
    #[serde(default)]
    pub reconcile: ReconcileConfig,
    /// How `unknown` intents are driven to an answer once the provider is healthy again:
    /// lookups and same-key re-sends with exponential backoff; every field has a default
    /// (1 s doubling to 5 minutes, 50 re-sends a second per tool).
    #[serde(default)]
    pub resolution: ResolutionConfig,
    /// The tools agents may call through the gateway.
    pub tools: Vec<ToolFile>,
}

/// A tool: what it does to the world (`effect`), its arguments, its intent key, and the
/// HTTP requests that perform it, find its effect afterwards and list its effects; or, for a
/// side effect the caller's own code performs (`executor: client`), none of those requests.
#[derive(Deserialize, JsonSchema)]
// The name appears in parser errors ("expected struct Tool").
#[serde(deny_unknown_fields, rename = "Tool")]
#[schemars(extend("allOf" = [
    {
        "if": {"properties": {"executor": {"const": "client"}}, "required": ["executor"]},
        "then": {
            "properties": {"effect": {"const": "side_effect"}},
            "not": {"anyOf": [
                {"required": ["call"]}, {"required": ["lookup"]}, {"required": ["list"]}
            ]}
        },
        "else": {
            "required": ["call"],
            "not": {"required": ["key_window_hours"]}
        }
    }
]))]
pub(crate) struct ToolFile {
    /// The name models call it by: letters, digits, `_`, `-` or `.`.
    pub name: String,
    /// What the tool does, for the model. For a side-effecting tool the gateway appends
    /// "Safe to call once per ... Repeated calls return the original result."
    pub description: String,
    /// What calling the tool does to the world, and so how the gateway may retry it.
    /// Required: a tool without an effect is refused.
    #[schemars(required, with = "EffectName")]
    pub effect: Option<Effect>,
    /// Who performs the tool: `gateway` (the default: the gateway sends `call`) or `client`
    /// (the caller's own code, through the intent API `POST /v1/tools/{name}/intents`; side
    /// effects only, with no `call`, `lookup` or `list`).
    #[serde(default)]
    #[schemars(with = "ExecutorName")]
    pub executor: Executor,
    /// Whether MCP `tools/list` shows the tool: `listed` (the default for gateway tools) or
    /// `hidden` (the default for client tools, which an MCP client can't execute).
    pub mcp: Option<McpListing>,
    /// Client tools only: how long the caller's provider stores and replays its answer per
    /// idempotency key, in hours (Stripe: 24). Inside that window, less an hour's margin, an
    /// intent whose outcome is unknown and whose lookup found nothing may be granted
    /// `execute` again with the same provider key. A gateway tool's window comes from its
    /// upstream.
    pub key_window_hours: Option<u32>,
    /// The entry of `owners` that hears about this tool's mismatches and alerts.
    pub owner: Option<String>,
    /// What one intent is "once per" in the published description ("order"); defaults to
    /// the key's first argument without `_id`.
    pub once_per: Option<String>,
    /// JSON Schema of the arguments; its top-level `properties` are the names that the key
    /// and the request templates may use.
    #[schemars(schema_with = "object_schema")]
    pub input_schema: Value,
    /// The intent key template, required for side effects and refused for others:
    /// `refund:{order_id}:{amount:.2}`. It may use only arguments and `{intent_id}`.
    pub key: Option<String>,
    /// Upper bound on one upstream request, in milliseconds. Take it from the real API's
    /// p99 latency, not from a mock's.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Bounded retries: of any failure for reads and idempotent tools; of failures known
    /// not to have been processed (429, 503 with Retry-After, not sent) for side effects.
    #[serde(default = "default_retry_budget")]
    pub retry_budget: u32,
    /// A rejected intent may start a new attempt later (a declined card may pass tomorrow).
    #[serde(default)]
    pub retry_rejected: bool,
    /// Whether calls over HTTP must carry an `Idempotency-Key` header: `optional` (the
    /// default) or `required` (side effects only). A call's header, when sent, is the
    /// intent key instead of the one `key` renders (scoped to the tenant and the tool, like
    /// every key); a call without it uses `key`. Reads and idempotent tools ignore the header.
    /// For a client tool it applies to `POST /v1/tools/{name}/intents`.
    #[serde(default)]
    pub idempotency_key: IdempotencyKeyHeader,
    /// MCP `destructiveHint`: the effect destroys or overwrites something.
    pub destructive: Option<bool>,
    /// MCP `openWorldHint`: the tool reaches outside the organisation (a provider, email).
    pub open_world: Option<bool>,
    /// Instructions to the model by call status, replacing the defaults. `{tool}` and
    /// `{details}` are filled in.
    #[serde(default)]
    #[schemars(schema_with = "messages_schema")]
    pub messages: BTreeMap<String, String>,
    /// The request that performs the tool. Required for gateway tools; a client tool has
    /// none (the caller's code performs it).
    pub call: Option<CallSpec>,
    /// A read-only request that finds the effect after an ambiguous failure (side effects
    /// the gateway executes).
    pub lookup: Option<LookupSpec>,
    /// How to list the provider's records of this tool's effects, for reconciliation
    /// (gateway tools).
    pub list: Option<ListSpec>,
    /// Duplicate-call alert rules (side effects only). Absent: one intent repeated 5 times
    /// within 60 s, or 50 repeats of the tool within 60 s; `[]` turns alerts off.
    pub alerts: Option<Vec<AlertRule>>,
}

/// Ten seconds: the p99 of a payment provider's write endpoints is a few seconds.
pub(crate) const TIMEOUT_MS_DEFAULT: u64 = 10_000;
/// Two retries: enough to ride out a blip without stacking on the other retrying layers.
pub(crate) const RETRY_BUDGET_DEFAULT: u32 = 2;

fn default_timeout_ms() -> u64 {
    TIMEOUT_MS_DEFAULT
}

fn default_retry_budget() -> u32 {
    RETRY_BUDGET_DEFAULT
}

/// How `effect` is published (the core's `Effect` has no schema: the core depends on no
/// schema library).
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(rename = "Effect")]
#[allow(dead_code)]
enum EffectName {
    /// Changes nothing (get_order). Retried freely on failure, bounded, with backoff.
    Read,
    /// Repeating it with the same arguments changes nothing more (set_ticket_status).
    /// Retried with exactly the same arguments, bounded.
    Idempotent,
    /// Each execution acts (refund_order, charge_card, send_email). Goes through the intent
    /// ledger and is never retried blindly.
    SideEffect,
}

/// How `executor` is published (the core's `Executor` has no schema).
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(rename = "Executor")]
#[allow(dead_code)]
enum ExecutorName {
    /// The gateway sends the tool's `call` itself.
    Gateway,
    /// The caller's own code performs the effect under the gateway's ledger and leases,
    /// through the intent API (`POST /v1/tools/{name}/intents`). Side effects only.
    Client,
}

/// Whether MCP `tools/list` shows a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum McpListing {
    /// Listed, and callable by MCP clients (a client tool's call is still refused, with a
    /// message naming the intent API).
    Listed,
    /// Not listed over MCP; still listed by `GET /v1/tools`.
    Hidden,
}

fn object_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "description": "A JSON Schema (draft 2020-12) with \"type\": \"object\".",
        "required": ["type"],
        "properties": {"type": {"const": "object"}}
    })
}

/// An object whose keys are call statuses, each with its default message.
fn messages_schema(_: &mut SchemaGenerator) -> Schema {
    let properties: serde_json::Map<String, Value> = CallStatus::ALL
        .iter()
        .map(|status| {
            let description = format!("Default: {}", status.default_message());
            (
                status.as_str().to_owned(),
                serde_json::json!({"type": "string", "description": description}),
            )
        })
        .collect();
    json_schema!({
        "type": "object",
        "properties": properties,
        "additionalProperties": false
    })
}

/// The published JSON Schema (draft 2020-12) of the config file.
pub(crate) fn schema() -> Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12().into_generator();
    generator.into_root_schema_for::<ConfigFile>().to_value()
}
