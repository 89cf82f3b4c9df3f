//! The loaded config, as the CLI and the server use it: checked, with `${NAME}` references
//! resolved, and without source positions (except one line per tool, for reports).
//!
//! Resolved values can be secrets (an `Authorization` header, a URL with a token in it), so
//! the types that hold them implement `Debug` by hand: header values print as `<redacted>`
//! and URLs as their origin only. None of these types implements `Serialize`, so a loaded
//! config can't be written back out with its secrets by accident.

use std::collections::BTreeMap;
use std::fmt;

use intentgate_config_file::redact::{RedactedHeaders, RedactedUrl};
use intentgate_config_file::{
    AlertRule, AuthConfig, GatewayConfig, IdempotencyKeyHeader, OwnerConfig, ReconcileConfig,
    ResolutionConfig,
};
use intentgate_core::{Effect, Executor, Messages};
use intentgate_http::spec::{CallSpec, ListRecords, ListSpec, LookupSpec, UpstreamSpec};
use intentgate_mcp_upstream::{McpList, McpServer, McpTool};
use serde_json::Value;

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
