//! The loaded config, as the CLI and the server use it: checked, with `${NAME}` references
//! resolved, and without source positions (except one line per tool, for reports).
//!
//! Resolved values can be secrets (an `Authorization` header, a URL with a token in it), so
//! the types that hold them implement `Debug` by hand: header values print as `<redacted>`
//! and URLs as their origin only. None of these types implements `Serialize`, so a loaded
//! config can't be written back out with its secrets by accident.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;

use intentgate_core::{Effect, Executor, Messages};
use intentgate_http::spec::{CallSpec, ListRecords, ListSpec, LookupSpec, UpstreamSpec};
use intentgate_mcp_upstream::{McpList, McpServer, McpTool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::auth::AuthConfig;

/// A checked config file.
#[derive(Clone, PartialEq)]
pub struct Config {
    pub gateway: GatewayConfig,
    /// Who may call and which tenant each caller is.
    pub auth: AuthConfig,
    /// HTTP upstreams by name, with `${NAME}` references in `base_url` and `headers` resolved.
    pub upstreams: BTreeMap<String, UpstreamSpec>,
    /// MCP upstreams (`kind: mcp`) by name, with their references resolved.
    pub mcp_upstreams: BTreeMap<String, McpUpstreamConfig>,
    /// MCP upstreams whose every tool is exposed, in file order.
    pub imports: Vec<ImportConfig>,
    /// Who is told about each tool's mismatches and alerts, by name.
    pub owners: BTreeMap<String, OwnerConfig>,
    /// When and over what window `serve` reconciles the ledger with the providers.
    pub reconcile: ReconcileConfig,
    /// How `unknown` intents are driven to an answer: the same-key re-send backoff.
    pub resolution: ResolutionConfig,
    /// The tools, in file order.
    pub tools: Vec<ToolConfig>,
}

impl Config {
    /// The requests of every tool the gateway executes, as the HTTP upstream takes them
    /// (`HttpUpstream::new`). Client-executed tools are left out: the gateway never sends
    /// them, so they have no request to build.
    pub fn http_tools(&self) -> BTreeMap<String, intentgate_http::HttpTool> {
        self.tools
            .iter()
            .filter_map(|tool| {
                let call = tool.call.clone()?;
                let http_tool = intentgate_http::HttpTool {
                    call,
                    lookup: tool.lookup.clone(),
                };
                Some((tool.name.clone(), http_tool))
            })
            .collect()
    }

    /// The MCP calls of every tool that calls an MCP upstream, by upstream name, then by
    /// tool name (as `McpUpstream::new` takes them).
    pub fn mcp_tools(&self) -> BTreeMap<String, BTreeMap<String, McpTool>> {
        let mut by_upstream: BTreeMap<String, BTreeMap<String, McpTool>> = BTreeMap::new();
        for tool in &self.tools {
            if let Some(mcp) = &tool.mcp {
                by_upstream
                    .entry(mcp.upstream.clone())
                    .or_default()
                    .insert(tool.name.clone(), mcp.tool.clone());
            }
        }
        by_upstream
    }
}

/// An MCP server the gateway's tools call (`kind: mcp`).
#[derive(Clone, PartialEq)]
pub struct McpUpstreamConfig {
    /// How to reach it and how long a call may take; its `Debug` names secrets' keys only.
    pub server: McpServer,
    /// Whether its tools replay their first answer per idempotency key (the key goes on to
    /// a provider that does), which allows same-key re-sends of an unknown intent.
    pub honours_idempotency_keys: bool,
    /// How long that provider keeps a key, in hours.
    pub key_window_hours: u32,
}

impl fmt::Debug for McpUpstreamConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpUpstreamConfig")
            .field("server", &self.server)
            .field("honours_idempotency_keys", &self.honours_idempotency_keys)
            .field("key_window_hours", &self.key_window_hours)
            .finish()
    }
}

/// Every tool of an MCP upstream, exposed (`imports:`).
#[derive(Debug, Clone, PartialEq)]
pub struct ImportConfig {
    /// The `kind: mcp` upstream.
    pub upstream: String,
    /// Put before each exposed tool's name.
    pub prefix: String,
    /// The effect of upstream tools not marked `readOnlyHint: true` (`read` or `idempotent`).
    pub effects: BTreeMap<String, Effect>,
    /// Upstream tools not exposed.
    pub exclude: Vec<String>,
    /// The line of the config file where the import starts.
    pub line: u64,
}

/// How a tool calls an MCP upstream: the upstream's name, the call and its lookup.
#[derive(Debug, Clone, PartialEq)]
pub struct McpToolConfig {
    /// The `kind: mcp` entry of `upstreams`.
    pub upstream: String,
    /// The `tools/call` that performs the tool and the one that finds its effect.
    pub tool: McpTool,
    /// Set on tools an import exposed: what the upstream lists for the tool (its title and
    /// output schema are published with it).
    pub imported: Option<UpstreamToolInfo>,
    /// The tool of the same server that lists the tool's effects, for reconciliation.
    pub list: Option<McpList>,
}

/// What an MCP upstream's `tools/list` says about one tool, as far as the gateway uses it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UpstreamToolInfo {
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub input_schema: Value,
    pub output_schema: Option<Value>,
    pub read_only: Option<bool>,
    pub destructive: Option<bool>,
    pub idempotent: Option<bool>,
    pub open_world: Option<bool>,
}

/// Settings of the gateway process. Every field has a default.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct GatewayConfig {
    /// Address and port the HTTP API and MCP over HTTP listen on.
    pub listen: SocketAddr,
    /// The intent ledger: a SQLite file path, or a `postgres://` URL of a PostgreSQL database
    /// that every replica shares. A relative path is read from the config file's folder,
    /// wherever the gateway is started (once loaded from a file, this holds it absolute).
    pub ledger: String,
    /// What the write before each upstream call promises: `strict` (on disk, survives a power
    /// loss) or `relaxed` (survives a crash of the process; the provider's key window is the
    /// backstop).
    pub durability: DurabilityMode,
    /// The one tenant of `auth: none`, and of `intentgate mcp` on stdio. With any other
    /// `auth`, a caller's tenant comes from its credential.
    pub tenant: String,
    /// Web origins (`https://console.example.com`) whose requests are accepted; a request
    /// that carries any other `Origin` header is refused, so a web page can't act through
    /// the gateway.
    pub allowed_origins: Vec<String>,
    /// Reverse proxies in front of the gateway, as addresses or networks (`10.0.0.7`,
    /// `10.1.0.0/16`): a request from one of them is counted under the client its
    /// `X-Forwarded-For` names (the rightmost hop that is not a listed proxy) where a client
    /// address is counted (wrong admin tokens). Empty: the socket's peer is counted.
    pub trusted_proxies: Vec<String>,
    /// How long intents are kept, in days: far longer than providers keep idempotency keys
    /// (Stripe: 24 hours), so a late retry is still caught.
    pub retention_days: u32,
    /// Largest HTTP request body accepted, in bytes.
    pub body_limit_bytes: u64,
    /// Most requests served at once.
    pub concurrency_limit: u32,
    /// How long a shutdown waits for calls in flight, in milliseconds.
    pub shutdown_grace_ms: u64,
    /// How long a client has to send a whole request head, in milliseconds, counted from the
    /// moment the server waits for a request; a connection that hasn't sent it (a slow or
    /// half-open client) is closed.
    pub header_read_timeout_ms: u64,
    /// How long a client has to send a whole request body once its head is in, in
    /// milliseconds; a request whose body stalls or trickles is answered 408 and its
    /// connection closed. The default, 10000, is room for a 1 MiB body at 100 KiB/s.
    pub body_read_timeout_ms: u64,
    /// How long a kept-alive connection may carry no request before it is closed, in
    /// milliseconds.
    pub idle_timeout_ms: u64,
    /// Most HTTP connections open at once. One more closes the connection that has waited
    /// longest for its client (a request head, a body, or the next request); when every
    /// connection is handling a request it is answered 503 and closed. Must fit under the
    /// process's open-file limit, which `serve` raises to its hard limit at startup.
    pub connection_limit: u32,
    /// Most HTTP connections open at once from one client address, chosen among the same
    /// way at the limit; by default a quarter of `connection_limit`. Behind a reverse proxy
    /// every caller shares the proxy's address: raise it to `connection_limit` there.
    pub connection_limit_per_address: Option<u32>,
    /// The secret key of the hashes the ledger keeps of `sensitive: true` arguments, as a
    /// reference to the environment: `${INTENTGATE_HASH_KEY}` (at least 32 bytes, e.g.
    /// `openssl rand -hex 32`). Required when a tool has a sensitive argument. Keep it for as
    /// long as intents are kept: stored hashes are only comparable under the same key.
    // Held here as written; the loaded key is `LoadedConfig::hash_key`.
    pub hash_key: Option<String>,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            ledger: "intentgate.db".to_owned(),
            durability: DurabilityMode::Strict,
            tenant: "default".to_owned(),
            allowed_origins: Vec::new(),
            trusted_proxies: Vec::new(),
            retention_days: 30,
            body_limit_bytes: 1024 * 1024,
            concurrency_limit: 256,
            shutdown_grace_ms: 30_000,
            header_read_timeout_ms: 10_000,
            body_read_timeout_ms: 10_000,
            idle_timeout_ms: 60_000,
            connection_limit: 4096,
            connection_limit_per_address: None,
            hash_key: None,
        }
    }
}

impl fmt::Debug for GatewayConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GatewayConfig")
            .field("listen", &self.listen)
            // A ledger URL (postgres://user:password@...) would carry a password.
            .field("ledger", &RedactedUrl(&self.ledger))
            .field("durability", &self.durability)
            .field("tenant", &self.tenant)
            .field("allowed_origins", &self.allowed_origins)
            .field("trusted_proxies", &self.trusted_proxies)
            .field("retention_days", &self.retention_days)
            .field("body_limit_bytes", &self.body_limit_bytes)
            .field("concurrency_limit", &self.concurrency_limit)
            .field("shutdown_grace_ms", &self.shutdown_grace_ms)
            .field("header_read_timeout_ms", &self.header_read_timeout_ms)
            .field("body_read_timeout_ms", &self.body_read_timeout_ms)
            .field("idle_timeout_ms", &self.idle_timeout_ms)
            .field("connection_limit", &self.connection_limit)
            .field(
                "connection_limit_per_address",
                &self.connection_limit_per_address,
            )
            // As written it is a reference, but a `${NAME:-default}` would hold a key.
            .field("hash_key", &self.hash_key.as_ref().map(|_| Redacted))
            .finish()
    }
}

/// How durable the ledger's write before each upstream call is (the runtime turns it into
/// the ledger's `Durability`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DurabilityMode {
    /// The write before the upstream call is on disk (fsync) before the request leaves.
    #[default]
    Strict,
    /// No fsync: survives a crash of the process, not a power loss.
    Relaxed,
}

/// Whether a side-effecting tool's HTTP calls must carry an `Idempotency-Key` header
/// (`POST /v1/tools/{name}/call`). With the header, its value is the intent key instead of
/// the one the tool's `key` template renders; without it the template's key is used, unless
/// the header is required.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum IdempotencyKeyHeader {
    /// A call may send the header; one without it gets the template's key.
    #[default]
    Optional,
    /// A call without the header is refused (400): for callers that must choose their own
    /// key, such as clients that already send one per logical operation. Side effects only:
    /// reads and idempotent tools record no intent and ignore the header.
    Required,
}

/// Reconciliation inside `intentgate serve` (docs/design.md section 8). `intentgate reconcile` takes
/// its window from the command line and the grace and settle times from here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ReconcileConfig {
    /// How often `serve` reconciles, in seconds; 0 turns the job off.
    pub every_seconds: u32,
    /// How far back each run looks, in seconds. At least `every_seconds`, so that no effect
    /// falls between two runs.
    pub window_seconds: u32,
    /// How long an `unknown` intent with no provider record may wait for the sweeper's
    /// lookups before it is routed to its owner, in seconds.
    pub unknown_grace_seconds: u32,
    /// The newest seconds left out of a run: calls still being written, and provider
    /// records not yet listed.
    pub settle_seconds: u32,
}

impl Default for ReconcileConfig {
    fn default() -> Self {
        ReconcileConfig {
            every_seconds: 3600,
            window_seconds: 3600,
            unknown_grace_seconds: 900,
            settle_seconds: 5,
        }
    }
}

/// How an `unknown` intent is driven to an answer (docs/design.md section 5): after each attempt that
/// ended without one, a pause, then a lookup and, inside the provider's key window, the same
/// request again with the same idempotency key. The pause starts at `backoff_initial_ms` and
/// doubles per attempt up to `backoff_max_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ResolutionConfig {
    /// Pause after an intent's first unknown attempt before its next lookup and re-send, in
    /// milliseconds.
    pub backoff_initial_ms: u64,
    /// Longest pause between two steps of one intent, in milliseconds.
    pub backoff_max_ms: u64,
    /// Most same-key re-sends one gateway process starts per second for one tool; 0 turns
    /// re-sends off (unknown intents are then only looked up).
    pub resends_per_second: u32,
}

impl Default for ResolutionConfig {
    fn default() -> Self {
        ResolutionConfig {
            backoff_initial_ms: 1_000,
            backoff_max_ms: 5 * 60 * 1_000,
            resends_per_second: 50,
        }
    }
}

/// Traces of calls exported over OTLP (HTTP, protobuf) to a collector. Off unless an
/// endpoint is given here or in `OTEL_EXPORTER_OTLP_ENDPOINT` /
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`; the standard `OTEL_*` variables override these
/// fields.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// The collector's OTLP/HTTP base URL, such as `http://127.0.0.1:4318`; spans go to its
    /// `/v1/traces`.
    pub endpoint: Option<String>,
    /// Headers sent with every export (an API key); values may use `${NAME}` references to
    /// environment variables, for secrets.
    pub headers: BTreeMap<String, String>,
    /// The `service.name` of the exported spans; `intentgate` when unset.
    pub service_name: Option<String>,
}

/// What a duplicate-call alert rule counts repeated calls over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AlertScope {
    /// Repeated calls of one intent (one refund asked for again and again).
    Intent,
    /// Repeated calls of every intent of the tool together (a retry storm).
    Tool,
}

impl AlertScope {
    pub fn as_str(self) -> &'static str {
        match self {
            AlertScope::Intent => "intent",
            AlertScope::Tool => "tool",
        }
    }
}

/// A duplicate-call alert rule of a side-effecting tool: fires a webhook, a log line and a
/// metric when `threshold` repeated calls arrive within `window_seconds`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AlertRule {
    /// The rule's name in alerts and metrics; defaults to `repeats-per-{per}`.
    #[serde(default)]
    pub name: Option<String>,
    /// Count per intent, or across the tool.
    pub per: AlertScope,
    /// Repeated calls within the window that fire the alert (at least 1).
    pub threshold: u32,
    /// The sliding window, in seconds (1 to 86400).
    pub window_seconds: u32,
    /// Also switch the tool off (kill switch) when the rule fires.
    #[serde(default)]
    pub disable_tool: bool,
}

impl AlertRule {
    /// The rule's name: the configured one, or `repeats-per-intent` / `repeats-per-tool`.
    pub fn name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("repeats-per-{}", self.per.as_str()))
    }

    /// The rules a side-effecting tool gets when its config names none: one intent asked
    /// for 5 more times within a minute (the incident's agents asked up to 18 times), or 50
    /// repeats of the tool within a minute.
    pub fn defaults() -> Vec<AlertRule> {
        vec![
            AlertRule {
                name: None,
                per: AlertScope::Intent,
                threshold: 5,
                window_seconds: 60,
                disable_tool: false,
            },
            AlertRule {
                name: None,
                per: AlertScope::Tool,
                threshold: 50,
                window_seconds: 60,
                disable_tool: false,
            },
        ]
    }
}

/// Someone who decides about a tool's reconciliation mismatches and duplicate-call alerts.
#[derive(Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OwnerConfig {
    /// An http or https URL that receives each mismatch and alert as a JSON POST.
    pub webhook: Option<String>,
    /// Also write each mismatch and alert to the gateway's log.
    #[serde(default = "log_by_default")]
    pub log: bool,
}

/// A log line is the one route that always works, so an owner gets one unless it opts out.
fn log_by_default() -> bool {
    true
}

impl fmt::Debug for OwnerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnerConfig")
            // Chat webhooks (Slack, Teams) carry their credential in the path.
            .field("webhook", &self.webhook.as_deref().map(RedactedUrl))
            .field("log", &self.log)
            .finish()
    }
}

/// One tool, as configured (the engine's checked form is
/// [`ToolDefinition`](intentgate_core::ToolDefinition), in [`LoadedConfig`](crate::LoadedConfig)).
#[derive(Clone, PartialEq)]
pub struct ToolConfig {
    pub name: String,
    pub description: String,
    pub effect: Effect,
    /// Who performs the tool: the gateway (with `call`), or the caller's own code through
    /// the intent API (no `call`, `lookup` or `list`).
    pub executor: Executor,
    /// Whether MCP `tools/list` shows the tool (`mcp: listed | hidden`).
    pub listed_over_mcp: bool,
    /// A client tool's provider key window in hours, as written (`None` on gateway tools,
    /// whose window comes from their upstream).
    pub key_window_hours: Option<u32>,
    pub owner: Option<String>,
    pub once_per: Option<String>,
    pub input_schema: Value,
    pub key: Option<String>,
    pub timeout_ms: u64,
    pub retry_budget: u32,
    pub retry_rejected: bool,
    /// Whether HTTP calls must carry an `Idempotency-Key` header.
    pub idempotency_key: IdempotencyKeyHeader,
    /// MCP `destructiveHint`.
    pub destructive: Option<bool>,
    /// MCP `openWorldHint`.
    pub open_world: Option<bool>,
    pub messages: Messages,
    /// The HTTP request that performs the tool, with `${NAME}` references in headers
    /// resolved. A gateway tool has this or `mcp`; a client tool neither.
    pub call: Option<CallSpec>,
    /// The MCP upstream tool that performs the tool, and its lookup.
    pub mcp: Option<McpToolConfig>,
    pub lookup: Option<LookupSpec>,
    pub list: Option<ListSpec>,
    /// Duplicate-call alert rules (side effects only; the defaults when the file names none).
    pub alerts: Vec<AlertRule>,
    /// The line of the config file where the tool starts, for reports that point at it.
    pub line: u64,
}

impl ToolConfig {
    /// How reconciliation reads the tool's provider records, whether its `list` is an HTTP
    /// request or a tool of its MCP upstream; `None` when it has no list.
    pub fn list_records(&self) -> Option<ListRecords> {
        match &self.mcp {
            Some(mcp) => mcp.list.as_ref().map(|list| list.records.clone()),
            None => self.list.as_ref().map(ListSpec::records),
        }
    }
}

impl fmt::Debug for ToolConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolConfig")
            .field("name", &self.name)
            .field("description", &self.description)
            .field("effect", &self.effect)
            .field("executor", &self.executor)
            .field("listed_over_mcp", &self.listed_over_mcp)
            .field("key_window_hours", &self.key_window_hours)
            .field("owner", &self.owner)
            .field("once_per", &self.once_per)
            .field("input_schema", &self.input_schema)
            .field("key", &self.key)
            .field("timeout_ms", &self.timeout_ms)
            .field("retry_budget", &self.retry_budget)
            .field("retry_rejected", &self.retry_rejected)
            .field("idempotency_key", &self.idempotency_key)
            .field("destructive", &self.destructive)
            .field("open_world", &self.open_world)
            .field("messages", &self.messages)
            .field("call", &self.call.as_ref().map(RedactedCall))
            .field("mcp", &self.mcp)
            .field("lookup", &self.lookup.as_ref().map(RedactedLookup))
            .field("list", &self.list.as_ref().map(RedactedList))
            .field("alerts", &self.alerts)
            .field("line", &self.line)
            .finish()
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let upstreams: BTreeMap<&String, RedactedUpstream<'_>> = self
            .upstreams
            .iter()
            .map(|(name, upstream)| (name, RedactedUpstream(upstream)))
            .collect();
        f.debug_struct("Config")
            .field("gateway", &self.gateway)
            .field("auth", &self.auth)
            .field("upstreams", &upstreams)
            .field("mcp_upstreams", &self.mcp_upstreams)
            .field("imports", &self.imports)
            .field("owners", &self.owners)
            .field("reconcile", &self.reconcile)
            .field("resolution", &self.resolution)
            .field("tools", &self.tools)
            .finish()
    }
}

/// Prints `<redacted>`.
struct Redacted;

impl fmt::Debug for Redacted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Header names with every value redacted: headers are where credentials go.
struct RedactedHeaders<'a>(&'a BTreeMap<String, String>);

impl fmt::Debug for RedactedHeaders<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.keys().map(|name| (name, Redacted)))
            .finish()
    }
}

/// A URL as its origin (`https://api.example.com:443`): user info, path and query can hold
/// credentials (`https://user:pw@...`, `/services/T0/B0/token`, `?key=...`). Text that is
/// not a URL (a SQLite path) prints as written.
struct RedactedUrl<'a>(&'a str);

impl fmt::Debug for RedactedUrl<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.0.contains("://") {
            return write!(f, "{:?}", self.0);
        }
        match reqwest::Url::parse(self.0) {
            Ok(url) if url.has_host() => {
                let mut origin = format!("{}://{}", url.scheme(), url.host_str().unwrap_or(""));
                if let Some(port) = url.port() {
                    origin.push_str(&format!(":{port}"));
                }
                let bare = url.username().is_empty()
                    && url.password().is_none()
                    && matches!(url.path(), "" | "/")
                    && url.query().is_none()
                    && url.fragment().is_none();
                if bare {
                    write!(f, "{origin:?}")
                } else {
                    write!(f, "\"{origin}/<redacted>\"")
                }
            }
            _ => f.write_str("<redacted>"),
        }
    }
}

struct RedactedUpstream<'a>(&'a UpstreamSpec);

impl fmt::Debug for RedactedUpstream<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let upstream = self.0;
        f.debug_struct("UpstreamSpec")
            .field("base_url", &RedactedUrl(&upstream.base_url))
            .field("headers", &RedactedHeaders(&upstream.headers))
            .field("idempotency_header", &upstream.idempotency_header)
            .field(
                "honours_idempotency_keys",
                &upstream.honours_idempotency_keys,
            )
            .field("key_window_hours", &upstream.key_window_hours)
            .field("retry_after_cap_ms", &upstream.retry_after_cap_ms)
            .finish()
    }
}

struct RedactedCall<'a>(&'a CallSpec);

impl fmt::Debug for RedactedCall<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let call = self.0;
        f.debug_struct("CallSpec")
            .field("upstream", &call.upstream)
            .field("method", &call.method)
            .field("path", &call.path)
            .field("query", &call.query)
            .field("headers", &RedactedHeaders(&call.headers))
            .field("body", &call.body)
            .field("result", &call.result)
            .finish()
    }
}

struct RedactedLookup<'a>(&'a LookupSpec);

impl fmt::Debug for RedactedLookup<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lookup = self.0;
        f.debug_struct("LookupSpec")
            .field("upstream", &lookup.upstream)
            .field("method", &lookup.method)
            .field("path", &lookup.path)
            .field("query", &lookup.query)
            .field("headers", &RedactedHeaders(&lookup.headers))
            .field("found", &lookup.found)
            .field("not_found_statuses", &lookup.not_found_statuses)
            .field("external_id", &lookup.external_id)
            .field("key", &lookup.key)
            .field("match_fields", &lookup.match_fields)
            .field("pages", &lookup.pages)
            .finish()
    }
}

struct RedactedList<'a>(&'a ListSpec);

impl fmt::Debug for RedactedList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = self.0;
        f.debug_struct("ListSpec")
            .field("upstream", &list.upstream)
            .field("path", &list.path)
            .field("query", &list.query)
            .field("headers", &RedactedHeaders(&list.headers))
            .field("items", &list.items)
            .field("next_cursor", &list.next_cursor)
            .field("has_more", &list.has_more)
            .field("limit_max", &list.limit_max)
            .field("fields", &list.fields)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_print_as_their_origin() {
        let debug = |url: &str| format!("{:?}", RedactedUrl(url));
        assert_eq!(debug("http://127.0.0.1:8090"), "\"http://127.0.0.1:8090\"");
        assert_eq!(
            debug("https://user:pw@api.example.com/v1?key=k"),
            "\"https://api.example.com/<redacted>\""
        );
        assert_eq!(
            debug("https://hooks.slack.com/services/T0/B0/token"),
            "\"https://hooks.slack.com/<redacted>\""
        );
        assert_eq!(debug("intentgate.db"), "\"intentgate.db\"");
        assert_eq!(debug("postgres://u:p@db/x"), "\"postgres://db/<redacted>\"");
    }
}
