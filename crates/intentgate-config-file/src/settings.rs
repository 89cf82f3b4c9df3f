//! The sections of the config file that a loaded config keeps as written: the gateway's
//! settings, reconciliation, resolution, telemetry, owners and duplicate-call alert rules.
//! intentgate-config checks their values; their shape is here.
//!
//! A ledger URL and an owner's webhook can hold credentials, so their `Debug` prints them
//! through [`RedactedUrl`].

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::redact::{Redacted, RedactedUrl};

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
    // Held here as written; the loaded key is intentgate-config's `LoadedConfig::hash_key`.
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
