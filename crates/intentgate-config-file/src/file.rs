//! The config file as written: the types serde reads and the JSON Schema is derived from.
//!
//! Field names here are a promise to users. Every struct refuses unknown fields, so a
//! misspelt field is an error rather than a silently ignored setting. A tool's `effect` is
//! read as optional, so that a tool without one is reported by name, alongside the file's
//! other errors, instead of stopping the parse (intentgate-config's checked `Config` always
//! has one). The published schema still marks it required.

use std::collections::BTreeMap;

use intentgate_core::{CallStatus, Effect, Executor};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::Deserialize;
use serde_json::Value;

use crate::auth::AuthFile;
use crate::request::{BodyFormat, ListFields, LookupPages, MatchField, Method, ResultSpec};
use crate::settings::{
    AlertRule, GatewayConfig, IdempotencyKeyHeader, OwnerConfig, ReconcileConfig, ResolutionConfig,
    TelemetryConfig,
};

/// An intentgate config: the gateway's settings, the upstream APIs its tools call, the
/// owners who hear about problems, and the tools.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename = "Config")]
#[schemars(title = "intentgate config")]
pub struct ConfigFile {
    /// Settings of the gateway process; every field has a default.
    #[serde(default)]
    pub gateway: GatewayConfig,
    /// Who may call the gateway and which tenant each caller is: `none` (the default: one
    /// tenant, `gateway.tenant`, and only on loopback listeners), or `api_keys`, `jwt`
    /// and/or `trusted_proxy`.
    #[serde(default)]
    pub auth: AuthFile,
    /// Upstreams by name: HTTP APIs (the default) and MCP servers (`kind: mcp`). `base_url`,
    /// `url`, `headers`, `command`, `args` and `env` values may use `${NAME}` and
    /// `${NAME:-default}` references to environment variables (for secrets).
    #[serde(default)]
    pub upstreams: BTreeMap<String, UpstreamFile>,
    /// MCP servers whose every tool is exposed: tools the server marks `readOnlyHint: true`
    /// pass through as reads; every other one must be classified here (`effects`), excluded,
    /// or called by an entry of `tools`, or the gateway refuses to start.
    #[serde(default)]
    pub imports: Vec<ImportFile>,
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
    #[serde(default)]
    pub tools: Vec<ToolFile>,
    /// Traces of calls sent to an OpenTelemetry collector (OTLP over HTTP); off unless an
    /// endpoint is set here or in the standard `OTEL_EXPORTER_OTLP_*` variables.
    // Read before logging starts, by `telemetry_section`; the checks leave it alone.
    #[serde(default)]
    pub telemetry: TelemetryConfig,
}

/// An upstream: an HTTP API (`kind: http`, the default: `base_url` and the HTTP fields) or an
/// MCP server (`kind: mcp`: `command` with `args` and `env` for a stdio server the gateway
/// starts and supervises, or `url` for a Streamable HTTP server).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename = "Upstream")]
#[schemars(extend("allOf" = [
    {
        "if": {"properties": {"kind": {"const": "mcp"}}, "required": ["kind"]},
        "then": {
            "oneOf": [{"required": ["command"]}, {"required": ["url"]}],
            "not": {"anyOf": [
                {"required": ["base_url"]}, {"required": ["idempotency_header"]},
                {"required": ["retry_after_cap_ms"]}
            ]}
        },
        "else": {
            "required": ["base_url"],
            "not": {"anyOf": [
                {"required": ["command"]}, {"required": ["args"]}, {"required": ["env"]},
                {"required": ["url"]}, {"required": ["timeout_ms"]}
            ]}
        }
    }
]))]
pub struct UpstreamFile {
    /// `http` (the default) or `mcp`.
    #[serde(default)]
    pub kind: UpstreamKind,
    /// HTTP: the base URL, e.g. `https://api.example.com`.
    pub base_url: Option<String>,
    /// Headers sent with every request (HTTP, and MCP over Streamable HTTP), e.g.
    /// `Authorization: Bearer ${PAYMENTS_API_KEY}`. Values are taken literally and never logged.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// HTTP: the header that carries the intent's idempotency key (default `Idempotency-Key`).
    pub idempotency_header: Option<String>,
    /// The upstream stores the first answer per idempotency key and replays it (Stripe-like),
    /// so the gateway may re-send an unknown intent with the same key inside the key window.
    /// For an MCP server: its tools pass the key they receive on to such a provider.
    #[serde(default)]
    pub honours_idempotency_keys: bool,
    /// How long the upstream remembers an idempotency key, in hours (default 24).
    pub key_window_hours: Option<u32>,
    /// HTTP: the longest `Retry-After` honoured, in milliseconds (default 5000).
    pub retry_after_cap_ms: Option<u64>,
    /// MCP over stdio: the program the gateway starts (found on `PATH`, or a path).
    pub command: Option<String>,
    /// MCP over stdio: the program's arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// MCP over stdio: environment variables added to the gateway's for the program.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// MCP over Streamable HTTP: the server's endpoint, e.g. `http://127.0.0.1:9000/mcp`.
    pub url: Option<String>,
    /// MCP: upper bound on one `tools/call`, in milliseconds (default 30000); a tool's
    /// `timeout_ms` bounds its own calls too, and the shorter wins.
    pub timeout_ms: Option<u64>,
}

/// What an upstream speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum UpstreamKind {
    /// An HTTP API, called with the request templates of each tool's `call`.
    #[default]
    Http,
    /// An MCP server, whose tools are called with `tools/call`.
    Mcp,
}

/// Every tool of an MCP upstream, exposed through the gateway.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename = "Import")]
pub struct ImportFile {
    /// The `kind: mcp` entry of `upstreams` whose tools are exposed.
    pub upstream: String,
    /// Put before every exposed tool's name (`memory_` exposes `read_graph` as
    /// `memory_read_graph`).
    #[serde(default)]
    pub prefix: String,
    /// The effect of each upstream tool that is not marked `readOnlyHint: true`: `read` or
    /// `idempotent`. A side effect needs an intent key and a lookup, so it is an entry of
    /// `tools` whose `call` names the upstream tool.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, EffectName>")]
    pub effects: BTreeMap<String, Effect>,
    /// Upstream tools not exposed at all.
    #[serde(default)]
    pub exclude: Vec<String>,
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
    },
    {
        "if": {
            "properties": {"effect": {"enum": ["read", "idempotent"]}},
            "required": ["effect"]
        },
        "then": {
            "properties": {"budgets": {"maxItems": 0}},
            "not": {"required": ["approval"]}
        }
    }
]))]
pub struct ToolFile {
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
    /// The request that performs the tool: an HTTP request (`method`, `path`, ...) or a
    /// `tools/call` of an MCP upstream's tool (`tool`, `arguments`). Required for gateway
    /// tools; a client tool has none (the caller's code performs it).
    pub call: Option<CallFile>,
    /// A read-only request that finds the effect after an ambiguous failure (side effects
    /// the gateway executes): an HTTP request, or a call of another tool of the same MCP
    /// upstream.
    pub lookup: Option<LookupFile>,
    /// How to list the provider's records of this tool's effects, for reconciliation
    /// (side effects the gateway executes): an HTTP request, or a call of another tool of
    /// the call's MCP upstream.
    pub list: Option<ListFile>,
    /// Duplicate-call alert rules (side effects only). Absent: one intent repeated 5 times
    /// within 60 s, or 50 repeats of the tool within 60 s; `[]` turns alerts off.
    pub alerts: Option<Vec<AlertRule>>,
    /// When a call needs a person's approval before anything is sent (side effects only):
    /// the call is held, and an approver who is not its caller decides. `approval: {}` holds
    /// every call.
    pub approval: Option<ApprovalFile>,
    /// Limits on how many intents, or how much, the tool may start per window (side effects
    /// only). A repeat of an intent never counts twice.
    #[serde(default)]
    #[schemars(length(max = 16))]
    pub budgets: Vec<BudgetFile>,
}

/// When a side-effecting tool's calls need a person's approval.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename = "Approval")]
pub struct ApprovalFile {
    /// A condition over the call's arguments (`amount > 100.00`, `currency in ["USD",
    /// "EUR"]`, joined with `and`, `or`, `not`); numbers compare as exact decimals. Absent:
    /// every call needs approval.
    pub when: Option<String>,
    /// Only these tenants' calls need approval; absent: every tenant's.
    #[schemars(length(min = 1))]
    pub tenants: Option<Vec<String>>,
    /// How long a held call waits for a decision before it ends `not_executed`: a whole
    /// number and a unit, `s`, `m`, `h` or `d` (`4h`); default 24h, at most 7d.
    #[schemars(regex(pattern = r"^[0-9]+[smhd]$"))]
    pub deadline: Option<String>,
}

/// A limit on how many intents, or how much, a tool may start per window. Windows are fixed
/// periods counted from the Unix epoch: an hourly budget starts again on the hour, UTC.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename = "Budget")]
pub struct BudgetFile {
    /// Named in answers, events and metrics: 1 to 64 lowercase letters, digits, `_` or `-`,
    /// unique within the tool (`per-order`).
    #[schemars(required, regex(pattern = r"^[a-z0-9_-]{1,64}$"))]
    pub name: Option<String>,
    /// What the budget is counted per: `tool` (every call), `tenant` (each tenant's calls) or
    /// `subject` (each value of `subject` within a tenant).
    #[schemars(required)]
    pub per: Option<BudgetPer>,
    /// With `per: subject` (and only then): a template of the arguments that name what is
    /// counted, as in a key (`"{order_id}"`, `"{customer.id}"`).
    pub subject: Option<String>,
    /// The window: a whole number and a unit, `s`, `m`, `h` or `d` (`1h`, `24h`), at most
    /// 31d.
    #[schemars(required, regex(pattern = r"^[0-9]+[smhd]$"))]
    pub window: Option<String>,
    /// At most this many intents per window. Give `count`, `amount`, or both.
    #[schemars(range(min = 1))]
    pub count: Option<u64>,
    /// At most this much per window, summed over the intents' `amount_argument`: an exact
    /// decimal, counted in the places it is written with (`"5000.00"` counts cents). Read as
    /// the text written, never through a float.
    // A string field: the YAML parser hands it a plain scalar's text (`5000.00` stays
    // `5000.00`), so a number is read exactly as written.
    // `default` keeps it optional in the schema, which `schema_with` alone would not.
    #[serde(default)]
    #[schemars(schema_with = "amount_schema")]
    pub amount: Option<String>,
    /// The top-level argument whose value is each call's amount (a number, or a string that
    /// spells one, in the input schema). Required with `amount`.
    pub amount_argument: Option<String>,
    /// What a call beyond the budget gets: `refuse` (the default: `over_budget`, nothing
    /// executed) or `approval` (held for a person's approval, as `approval` holds calls).
    #[serde(default)]
    pub beyond: BeyondName,
    /// With `beyond: approval`: how long a held call waits for a decision (default 24h, at
    /// most 7d).
    #[schemars(regex(pattern = r"^[0-9]+[smhd]$"))]
    pub deadline: Option<String>,
}

/// What a budget is counted per.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BudgetPer {
    /// Every call of the tool, whoever makes it.
    Tool,
    /// Each tenant's calls.
    Tenant,
    /// Each subject's calls within a tenant, the subject rendered from the arguments.
    Subject,
}

impl BudgetPer {
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetPer::Tool => "tool",
            BudgetPer::Tenant => "tenant",
            BudgetPer::Subject => "subject",
        }
    }
}

/// What a call beyond a budget gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(rename = "Beyond")]
pub enum BeyondName {
    /// Refused as `over_budget`; nothing is executed.
    #[default]
    Refuse,
    /// Held for a person's approval.
    Approval,
}

/// The request that performs a tool: an HTTP request (`method` and `path`) or, with `tool`,
/// a `tools/call` of an MCP upstream's tool.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename = "Call")]
#[schemars(extend("oneOf" = [
    {
        "required": ["upstream", "tool"],
        "not": {"anyOf": [
            {"required": ["method"]}, {"required": ["path"]}, {"required": ["query"]},
            {"required": ["headers"]}, {"required": ["body"]}, {"required": ["body_format"]}
        ]}
    },
    {
        "required": ["upstream", "method", "path"],
        "not": {"anyOf": [
            {"required": ["tool"]}, {"required": ["arguments"]},
            {"required": ["idempotency_key_argument"]}, {"required": ["not_processed"]}
        ]}
    }
]))]
pub struct CallFile {
    /// The name of an entry of `upstreams`.
    pub upstream: String,
    /// HTTP: the method.
    pub method: Option<Method>,
    /// HTTP: path template, appended to the upstream's base URL: `/v1/orders/{order_id}`.
    pub path: Option<String>,
    /// HTTP: query parameters; values are templates.
    #[serde(default)]
    pub query: BTreeMap<String, String>,
    /// HTTP: extra headers; values are templates.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// HTTP: body template (none for GET and DELETE), written as JSON whatever
    /// `body_format` says.
    pub body: Option<Value>,
    /// HTTP: how the body is sent: `json` (default) or `form` (`application/x-www-form-
    /// urlencoded` in Stripe's bracket notation: `metadata[intent_key]=...`, `expand[]=...`).
    #[serde(default)]
    pub body_format: BodyFormat,
    /// What to take from a successful answer.
    #[serde(default)]
    pub result: ResultSpec,
    /// MCP: the upstream tool's name.
    pub tool: Option<String>,
    /// MCP: the `arguments` template; absent sends the tool's arguments as they are. A string
    /// that is exactly one placeholder (`"{order_id}"`, `"{customer.id}"`) becomes that
    /// argument with its JSON type; `{intent_key}`, `{idempotency_key}` and `{intent_id}` are
    /// the gateway's values.
    pub arguments: Option<Value>,
    /// MCP: the argument that carries the provider idempotency key; absent sends it in the
    /// request's `_meta` as `idempotency_key`.
    pub idempotency_key_argument: Option<String>,
    /// MCP: texts of an `isError` result that mean the call was not processed (a rate
    /// limit, "try again"), compared case-insensitively; such a call may be retried with the
    /// same key. Any other `isError` result is a refusal.
    #[serde(default)]
    pub not_processed: Vec<String>,
}

/// A read-only request that finds a side effect without performing it: an HTTP request, or,
/// with `tool`, a call of another tool of the call's MCP upstream.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename = "Lookup")]
pub struct LookupFile {
    /// Defaults to the call's upstream.
    pub upstream: Option<String>,
    /// HTTP: the method (default GET).
    pub method: Option<Method>,
    /// HTTP: the path template.
    pub path: Option<String>,
    #[serde(default)]
    pub query: BTreeMap<String, String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// HTTP: body template of a POST lookup (a search); every placeholder must have a value.
    pub body: Option<Value>,
    /// HTTP: how the body is sent: `json` (default) or `form`, as for `call`.
    #[serde(default)]
    pub body_format: BodyFormat,
    /// JSON pointer to what the provider found: one record (an object) or the candidates
    /// (an array, `/data`); absent, null or an empty array or object there means not found.
    pub found: String,
    /// HTTP: statuses that mean "not found" rather than "the lookup failed" (default 404).
    pub not_found_statuses: Option<Vec<u16>>,
    /// JSON pointer, inside a record, to the provider's id (default `/id`).
    pub external_id: Option<String>,
    /// JSON pointer, inside a record, to the provider key the gateway sent with the effect
    /// (`{idempotency_key}`, scoped by tenant and tool): a record is this intent's effect only
    /// when it carries that key. Give `key`, `match`, or both.
    pub key: Option<String>,
    /// The business fields, by argument (`order_id`, `customer.id`), that a record must hold
    /// with exactly the intent's values (for a provider that keeps no key; decimals compared
    /// exactly).
    #[serde(default, rename = "match")]
    pub match_fields: BTreeMap<String, MatchField>,
    /// HTTP: how a listing continues past its first page (`query: starting_after` with
    /// `has_more: /has_more`, or with `next_cursor: /next_cursor`); absent reads one page.
    pub pages: Option<LookupPages>,
    /// MCP: the lookup tool's name on the upstream.
    pub tool: Option<String>,
    /// MCP: the lookup's `arguments` template, as for `call`.
    pub arguments: Option<Value>,
}

/// How to page through the provider's records of a tool's effects over a time window: an
/// HTTP request (`path`, `query`), or, with `tool`, a call of another tool of the call's MCP
/// upstream. Either way each answer is one page, read with the same pointers.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename = "List")]
#[schemars(extend("oneOf" = [
    {
        "required": ["tool"],
        "not": {"anyOf": [{"required": ["path"]}, {"required": ["query"]}, {"required": ["headers"]}, {"required": ["limit_max"]}]}
    },
    {
        "required": ["path"],
        "not": {"anyOf": [{"required": ["tool"]}, {"required": ["arguments"]}]}
    }
], "allOf" = [{"oneOf": [
    {"required": ["next_cursor"], "not": {"required": ["has_more"]}},
    {"required": ["has_more"], "not": {"required": ["next_cursor"]}}
]}]))]
pub struct ListFile {
    /// HTTP: defaults to the call's upstream. MCP: the call's upstream, always.
    pub upstream: Option<String>,
    /// HTTP: the path template.
    pub path: Option<String>,
    /// HTTP: query templates; may use `{since_ms}`, `{until_ms}` (Unix milliseconds),
    /// `{since_s}`, `{until_s}` (Unix seconds, since rounded down and until rounded up),
    /// `{cursor}` and `{limit}`. `{cursor}` must be there: it asks for the next page.
    #[serde(default)]
    pub query: BTreeMap<String, String>,
    /// HTTP: extra headers.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// MCP: the listing tool's name on the upstream.
    pub tool: Option<String>,
    /// MCP: the listing's `arguments` template; may use `{since_ms}`, `{until_ms}`,
    /// `{since_s}`, `{until_s}`, `{cursor}` and `{limit}` (a member that is exactly
    /// `"{cursor}"` is left out of the first page), and must use `{cursor}`. Absent sends
    /// `since_ms`, `until_ms`, `limit` and `cursor` as they are.
    pub arguments: Option<Value>,
    /// JSON pointer to the array of records in a page (`/data`).
    pub items: String,
    /// JSON pointer to the next page's cursor; absent, null or empty ends the listing. Give
    /// this or `has_more`.
    pub next_cursor: Option<String>,
    /// JSON pointer to a boolean that says another page follows (Stripe: `/has_more`); the
    /// next page's `{cursor}` is then the last record's id (`fields.external_id`). Give this
    /// or `next_cursor`.
    pub has_more: Option<String>,
    /// HTTP: the provider's largest page (Stripe: 100); `{limit}` is the smaller of the page
    /// size reconciliation asks for and this.
    #[schemars(range(min = 1))]
    pub limit_max: Option<u32>,
    /// Pointers inside one record.
    pub fields: ListFields,
    /// For a provider that keeps no metadata: the business fields that pair a record with an
    /// intent, by argument, in place of `fields.intent_key`.
    #[serde(default, rename = "match")]
    pub match_fields: BTreeMap<String, MatchField>,
}

/// Ten seconds: the p99 of a payment provider's write endpoints is a few seconds.
pub const TIMEOUT_MS_DEFAULT: u64 = 10_000;
/// Two retries: enough to ride out a blip without stacking on the other retrying layers.
pub const RETRY_BUDGET_DEFAULT: u32 = 2;

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
pub enum McpListing {
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

/// A budget's `amount`: an exact positive decimal, as a string (`"5000.00"`) or a number.
fn amount_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": ["string", "number"],
        "pattern": "^[0-9]+(\\.[0-9]+)?$",
        "exclusiveMinimum": 0
    })
}

/// An object whose keys are call statuses, each with its default messages: one per effect
/// where they differ.
fn messages_schema(_: &mut SchemaGenerator) -> Schema {
    let properties: serde_json::Map<String, Value> = CallStatus::ALL
        .iter()
        .map(|status| {
            let side_effect = status.default_message(Effect::SideEffect);
            let mut description = format!("Default: {side_effect}");
            for effect in [Effect::Read, Effect::Idempotent] {
                let message = status.default_message(effect);
                if message != side_effect {
                    description.push_str(&format!(
                        " For a tool with effect {}: {message}",
                        effect.as_str()
                    ));
                }
            }
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
pub fn schema() -> Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12().into_generator();
    generator.into_root_schema_for::<ConfigFile>().to_value()
}
